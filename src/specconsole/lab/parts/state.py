"""What every part of the lab shares: how it is started (:class:`LabOptions`), what it started
(:class:`LabState`, kept in ``state.json``), :class:`LabError`, and :func:`free_port`. The hosts'
GPU counts are :mod:`specconsole.lab.doubles.models`', ``write_file`` is :mod:`specconsole.lab.files`'."""

from __future__ import annotations

import json
import random
import socket
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Protocol

from specconsole.base.errors import SpecConsoleError
from specconsole.base.pids import alive
from specconsole.lab.doubles.sglang_versions import BASE_VERSION
from specconsole.lab.procs import start_time

Say = Callable[[str], None]

LAB_DIR_ENV = "SPECCONSOLE_LAB_DIR"
#: Set to the host's root folder in every process the lab starts (and in each SSH session).
LAB_ROOT_ENV = "SPECCONSOLE_LAB_ROOT"

class LabError(SpecConsoleError):
    """The lab cannot start or stop; the message names the step and the fix."""


@dataclass
class LabHost:
    name: str
    address: str
    port: int
    root: str
    sshd_pid: int | None = None


@dataclass
class LabState:
    dir: str
    hosts: dict[str, LabHost] = field(default_factory=dict)
    sglang_port: int = 0
    trainer_pid: int | None = None
    #: the lab's own warm SGLang judge (:mod:`specconsole.lab.doubles.sglang_judge`), when it started one
    judge_pid: int | None = None
    judge_socket: str = ""
    #: ``--serve N``: replicas ``serve2`` .. ``serveN``'s SGLang ports (``serve``'s is sglang_port),
    #: and the sglang-router in front of all of them
    replica_ports: dict[str, int] = field(default_factory=dict)
    router_port: int = 0
    router_pid: int | None = None
    owner_pid: int | None = None  # the process that started the lab (a demo), if it should stop it
    #: pid -> its start time (clock ticks since boot, /proc/PID/stat field 22) for every process
    #: the lab started: ``lab down`` signals a pid only while its start time still matches
    started: dict[str, int] = field(default_factory=dict)

    def remember(self, pid: int) -> None:
        start = start_time(pid)
        if start is not None:
            self.started[str(pid)] = start

    def ours(self, pid: int | None) -> bool:
        """Whether ``pid`` is still the process the lab started (not a reused pid)."""
        if not pid or str(pid) not in self.started:
            return False
        return start_time(pid) == self.started[str(pid)] and alive(pid)

    def save(self) -> None:
        path = Path(self.dir) / "state.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)

    @classmethod
    def load(cls, lab_dir: Path) -> LabState | None:
        path = lab_dir / "state.json"
        if not path.exists():
            return None
        raw = json.loads(path.read_text())
        hosts = {k: LabHost(**v) for k, v in raw.pop("hosts", {}).items()}
        known = {f.name for f in fields(cls)}
        return cls(hosts=hosts, **{k: v for k, v in raw.items() if k in known})


@dataclass(frozen=True)
class LabOptions:
    """How the lab is started; the defaults are the demo's, but for its SGLang (``specconsole demo`` runs
    the DDTree build, :data:`~specconsole.lab.doubles.sglang_versions.DDTREE_VERSION`)."""

    train_address: str = "127.0.0.2"
    serve_address: str = "127.0.0.3"
    trainer: bool = True
    trainer_steps: int = 200_000
    trainer_step_seconds: float = 1.0
    trainer_steps_per_epoch: int = 33_000
    trainer_epochs: int = 6
    #: tokens per worker per step (the tiny model's CPU cost per step grows with it)
    trainer_batch_tokens: int = 2048
    sglang: bool = True
    sglang_startup_s: float = 3.0
    sglang_load_rps: float = 2.0
    sglang_step_ms: float = 8.0
    gpu_interval_s: float = 1.0
    sglang_interval_s: float = 1.0
    tunnel: bool = True
    #: a slow restart: SGLang takes this long to shut down on SIGTERM (deploy heartbeat tests)
    sglang_stop_s: float = 0.0
    #: the unit's Restart= (real units use on-failure; the lab's shim supervises it)
    sglang_restart: str = "no"
    #: which SGLang the serving host has installed: 0.5.23, or 0.5.24+ddtree (with DDTree)
    sglang_version: str = BASE_VERSION
    #: serving replicas: 1 is the lab's one ``serve`` host; N >= 2 adds ``serve2`` .. ``serveN`` and a
    #: real sglang-router in front of them (:mod:`specconsole.lab.parts.serve_replicas`), all on DFLASH window 16
    serve: int = 1
    #: the router in front of the replicas (``--serve N``): ``sglang-router`` (PyPI sglang-router 0.3.2) or
    #: ``smg`` (PyPI smg, SGLang's current gateway, the Shepherd Model Gateway)
    router: str = "sglang-router"
    #: a real Slurm cluster (:mod:`specconsole.lab.parts.slurm_cluster`); the training job is submitted to it
    slurm: bool = False



#: Listening ports come from here up to the kernel's ephemeral range (see :func:`free_port`).
PORTS_FROM = 20000
_handed_out: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(address: str = "127.0.0.1") -> int:
    """A TCP port nothing is bound to at ``address``, for a lab part to listen on.

    It is taken below the kernel's ephemeral range (``ip_local_port_range``), where no outgoing
    connection (the tests' HTTP load through the router, SSH sessions) can take it between this
    check and the listener's bind: a kernel-chosen port (``bind(0)``) could be, and a simulator
    then failed with "address already in use". A random start keeps concurrent labs (pytest-xdist
    workers) apart; one process never hands out a port twice."""
    low = _ephemeral_low()
    if low - PORTS_FROM >= 1000:
        pick = random.SystemRandom()
        for _ in range(500):
            port = pick.randrange(PORTS_FROM, low)
            if port in _handed_out:
                continue
            with socket.socket() as s:
                try:
                    s.bind((address, port))
                except OSError:
                    continue
            _handed_out.add(port)
            return port
    with socket.socket() as s:  # no room below the ephemeral range: the kernel's choice
        s.bind((address, 0))
        return int(s.getsockname()[1])


class LabView(Protocol):
    """What the parts that work across the lab's hosts (``serve_replicas``, ``console_config``)
    read of the lab: its folder, options and state, where things are, its environment and its
    voice. :class:`~specconsole.lab.parts.environment.Lab` is one; the parts do not import it."""

    dir: Path
    options: LabOptions
    state: LabState
    say: Say

    @property
    def config_path(self) -> Path: ...

    @property
    def keys(self) -> Path: ...

    @property
    def train_log(self) -> Path: ...

    @property
    def trainer_pid_file(self) -> Path: ...

    def root(self, host: str) -> Path: ...

    def scenario_path(self, host: str) -> Path: ...

    def draft_model_dir(self) -> Path: ...

    def sglang_venv_python(self) -> Path: ...

    def env(self, name: str) -> dict[str, str]: ...
