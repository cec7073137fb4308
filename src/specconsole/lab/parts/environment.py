"""The lab: two real SSH hosts on loopback, a real training job, SGLang under a real systemctl.

Layout under the lab folder (default ``~/.local/state/specconsole/lab``)::

    keys/client_ed25519[.pub]  the operator's key     keys/known_hosts  both hosts' keys
    hosts/train/               the training host's root: bin/ etc/ runs/ ssh/
    hosts/serve/               the serving host's root:  bin/ etc/systemd/system/ models/ ssh/
    lab.toml                   a console config for this lab
    state.json                 what was started (pids with their start times, ports), for ``lab down``

Each host is an OpenSSH ``sshd`` on its own loopback address (127.0.0.2, 127.0.0.3) with its
own host key. sshd's ``SetEnv`` puts the host's ``bin/`` first on PATH, so on that host the
console's plain ``nvidia-smi``, ``systemctl`` and ``journalctl`` reach the host's own tools:

- ``nvidia-smi``: the test double :mod:`specconsole.lab.doubles.nvidia_smi` (this machine has no GPU),
  driven by ``etc/nvidia-smi.json``;
- ``systemctl``/``journalctl``: docker-systemctl-replacement (a real reimplementation of
  systemctl that needs no systemd) with ``--root`` set to the host's folder;
- ``sglang``: the SGLang-protocol simulator :mod:`specconsole.lab.doubles.sglang_sim`.

The training job is a real ``torchrun --nproc_per_node=2`` run of :mod:`specconsole.lab.doubles.trainer`.

The parts, each in its own module of ``lab/parts/``, composed here by :class:`Lab`: :mod:`.state`
(options, ``state.json``), :mod:`.keys`, :mod:`.sshd_host` (a host's folder, sshd, tools, GPUs),
:mod:`.training_job`, :mod:`.serving_unit` (models, ``sglang``, ``sglang.service``, systemctl),
:mod:`.serve_replicas` (``--serve N`` and the router), :mod:`.judge` (the warm SGLang judge) and
:mod:`.console_config` (``lab.toml``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from specconsole.base import paths
from specconsole.base.pids import alive
from specconsole.lab.doubles import models
from specconsole.lab.doubles.models import (
    DRAFT_MODEL,
    EAGLE_DRAFT_MODEL,
    SMALL_MODEL,
    TARGET_MODEL,
    judge_env,
    write_draft_model,
    write_hub_cache,
    write_target_model,
)
from specconsole.lab.doubles.sglang_versions import VERSIONS
from specconsole.lab.files import toml_str
from specconsole.lab.parts import (
    console_config,
    judge,
    serve_replicas,
    serving_unit,
    slurm_cluster,
    sshd_host,
    training_job,
)
from specconsole.lab.parts.console_config import console_and_ssh
from specconsole.lab.parts.judge import JUDGE_ENV, judge_socket_path
from specconsole.lab.parts.keys import client_key, write_known_hosts
from specconsole.lab.parts.state import (
    LAB_DIR_ENV,
    LAB_ROOT_ENV,
    LabError,
    LabHost,
    LabOptions,
    LabState,
    Say,
    free_port,
)
from specconsole.lab.procs import send_signal

#: The lab's public names, wherever they are defined (tests and bench scripts import them from here).
__all__ = [
    "DRAFT_MODEL", "EAGLE_DRAFT_MODEL", "JUDGE_ENV", "LAB_DIR_ENV", "LAB_PROGRAMS", "LAB_ROOT_ENV", "SMALL_MODEL",
    "TARGET_MODEL", "Lab", "LabError", "LabHost", "LabOptions", "LabState", "console_and_ssh", "default_demo_dir",
    "default_lab_dir", "free_port", "judge_env", "lab_leftovers", "owner_alive", "running_lab", "toml_str",
    "write_draft_model", "write_hub_cache", "write_target_model",
]


def default_lab_dir() -> Path:
    return Path(os.environ.get(LAB_DIR_ENV) or paths.state_dir() / "lab").expanduser()


def default_demo_dir() -> Path:
    """Where ``specconsole demo`` keeps its lab (read at call time: XDG/HOME may change)."""
    return paths.state_dir() / "demo"


def running_lab() -> Lab | None:
    """The lab that runs in the default lab folder, else the demo's (``lab status`` and a
    config-less console find either), else None."""
    for lab_dir in dict.fromkeys((default_lab_dir(), default_demo_dir())):
        lab = Lab(lab_dir)
        if lab.is_running():
            return lab
    return None


class Lab:
    """Creates, starts and stops the lab. Every step is reported through ``say``."""

    def __init__(self, lab_dir: Path | str | None = None, options: LabOptions | None = None,
                 say: Say | None = None) -> None:
        self.dir = Path(lab_dir).expanduser() if lab_dir else default_lab_dir()
        self.options = options or LabOptions()
        if self.options.sglang_version not in VERSIONS:
            raise LabError(f"lab: SGLang version {self.options.sglang_version!r} is not simulated; "
                           f"use one of {', '.join(VERSIONS)}")
        self.say: Say = say or (lambda _msg: None)
        self.state = LabState.load(self.dir) or LabState(dir=str(self.dir))

    # -- paths ------------------------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        return self.dir / "lab.toml"

    @property
    def keys(self) -> Path:
        return self.dir / "keys"

    def root(self, host: str) -> Path:
        return self.dir / "hosts" / host

    @property
    def train_log(self) -> Path:
        return self.root("train") / "runs" / "dflash" / "train.jsonl"

    @property
    def trainer_pid_file(self) -> Path:
        return self.root("train") / "runs" / "dflash" / "torchrun.pid"

    @property
    def freeze_file(self) -> Path:
        """While this file exists the training job runs without progress (:meth:`freeze_training`)."""
        return self.root("train") / "runs" / "dflash" / "freeze"

    @property
    def unit_path(self) -> Path:
        return self.root("serve") / "etc" / "systemd" / "system" / "sglang.service"

    def scenario_path(self, host: str) -> Path:
        return self.root(host) / "etc" / "nvidia-smi.json"

    def sshd_config(self, name: str) -> Path:
        return self.root(name) / "ssh" / "sshd_config"

    def draft_model_dir(self) -> Path:
        return self.root("serve") / "models" / DRAFT_MODEL

    def target_model_dir(self) -> Path:
        return self.root("serve") / "models" / TARGET_MODEL

    def model_dir(self, name: str) -> Path:
        return self.root("serve") / "models" / name

    def sglang_venv_python(self) -> Path:
        """The serving host's SGLang virtualenv Python (``/opt/sglang/bin/python`` on a real host):
        real SGLang 0.5.23 (``.venv-sglang``), started warm for ``python - ARGS``."""
        return self.root("serve") / "opt" / "sglang" / "bin" / "python"

    def env(self, name: str) -> dict[str, str]:
        """The environment of what the lab starts for host ``name``: its marker (the same
        variable sshd's ``SetEnv`` gives every session) finds leftovers after a crash."""
        return {**os.environ, LAB_ROOT_ENV: str(self.root(name))}

    # -- lifecycle ----------------------------------------------------------------------------
    def is_running(self) -> bool:
        return any(self.state.ours(h.sshd_pid) for h in self.state.hosts.values())

    def up(self, owner_pid: int | None = None) -> LabState:
        """Create everything and start the hosts, the training job and SGLang."""
        if self.is_running():
            raise LabError(f"lab: already running in {self.dir}; stop it first: specconsole lab down --dir {self.dir}")
        t0 = time.monotonic()
        o = self.options
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "logs").mkdir(exist_ok=True)
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privilege-separation dir
        client_key(self.keys, self.say)
        self._clear_previous_run()
        self.state = LabState(dir=str(self.dir), owner_pid=owner_pid)
        self.state.sglang_port = free_port("127.0.0.1")
        self.state.judge_socket = os.environ.get(JUDGE_ENV) or judge_socket_path(self.dir)
        for name, address in (("train", o.train_address), ("serve", o.serve_address)):
            self._make_host(name, address)
        if o.serve > 1:
            serve_replicas.make_replicas(self)
        write_known_hosts(self.keys, self.state.hosts.values())
        if o.sglang:
            self.start_judge()
        sshd_host.write_gpu_scenarios(self.scenario_path("train"), self.scenario_path("serve"), self.train_log,
                                      self.root("serve") / "models")
        models.write_models(self.root("serve") / "models")
        self.write_unit()
        if o.serve > 1:
            serve_replicas.write_replica_units(self)
        self.state.save()
        for name in self.state.hosts:
            self.start_sshd(name)
        if o.slurm:  # issue 32: the training job is a Slurm job (sbatch) on the lab's cluster
            slurm_cluster.start(self)
        if o.trainer and o.slurm:
            slurm_cluster.submit_training(self)
        elif o.trainer:
            self.start_trainer()
        if o.sglang:  # its first start waits for the judge, as a real SGLang's start waits for its imports
            self._systemctl("daemon-reload")
            self._systemctl("start", "sglang.service", timeout=120)  # a cold judge on a loaded machine
        if o.sglang and o.serve > 1:
            serve_replicas.start_replicas(self)
            serve_replicas.start_router(self)
        self.write_config()
        self.state.save()
        self.say(f"lab up in {time.monotonic() - t0:.1f}s; config: {self.config_path}")
        return self.state

    def down(self) -> None:
        """Stop everything the lab started (also after a crash: pids are in state.json)."""
        t0 = time.monotonic()
        if "serve" in self.state.hosts and self.unit_path.exists():
            with contextlib.suppress(Exception):
                self._systemctl("stop", "sglang.service", check=False, timeout=20)
        serve_replicas.stop_router(self)
        serve_replicas.stop_replicas(self)
        slurm_cluster.stop(self)
        self.stop_trainer()
        self.stop_judge()
        for name in list(self.state.hosts):
            self.stop_sshd(name)
        # what a crashed run left behind: only processes marked as this lab's (never another
        # lab's, even one whose folder name starts with this one's)
        _kill_marked(self.marker_roots())
        self.state.started.clear()
        self.state.save()
        self.say(f"lab down in {time.monotonic() - t0:.1f}s")

    def marker_roots(self) -> list[str]:
        """The markers (host folders) of everything this lab starts: ``lab_leftovers(lab.marker_roots())``
        after :meth:`down` names what it leaked."""
        return [str(self.root(name)) for name in ("train", *serve_replicas.started_replicas(self))]

    def _clear_previous_run(self) -> None:
        """A fresh lab starts from a clean unit: no drop-in (a deploy's ``zz-specconsole-deploy.conf``
        with an old ``--port``) or deploy work folder, no service status or journal, no training
        log or pid file of an earlier run in this folder."""
        unit, serve = self.unit_path, self.root("serve")
        leftovers = [unit.parent / f"{unit.name}.d", serve / "run" / f"{unit.name}.status",
                     serve / "var" / "log" / "journal", self.train_log, self.trainer_pid_file, self.freeze_file]
        for path in leftovers:
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
            else:
                continue
            self.say(f"removed {path} (left by an earlier run)")

    def _make_host(self, name: str, address: str) -> None:
        """Host ``name``'s folder, sshd config and tools, with the SGLang it has installed."""
        root = self.root(name)
        self.state.hosts[name] = sshd_host.make_host(root, name, address, self.keys, self.scenario_path(name),
                                                     self.say)
        serving_unit.write_sglang_install(root, self.options.sglang_version, self.state.judge_socket,
                                          self.sglang_venv_python())

    # -- the parts: each one's module does the work -----------------------------------------------
    def start_sshd(self, name: str) -> int:
        return sshd_host.start_sshd(self.state.hosts[name], self.root(name), self.env(name), self.state, self.say)

    def stop_sshd(self, name: str) -> None:
        """Stop a host's sshd and every session it serves (the host 'goes away')."""
        sshd_host.stop_sshd(self.state.hosts[name], self.state, self.say)

    def start_judge(self) -> None:
        """Start the lab's warm SGLang judge, unless it shares a running one (``$SPECCONSOLE_LAB_JUDGE``)."""
        judge.start_judge(self.state, self.dir, self.env("serve"), self.say)

    def stop_judge(self) -> None:
        judge.stop_judge(self.state)

    def start_trainer(self) -> int:
        return training_job.start_trainer(self.options, self.root("train"), self.train_log, self.trainer_pid_file,
                                          self.env("train"), self.state, self.say, self.freeze_file)

    def stop_trainer(self) -> None:
        training_job.stop_trainer(self.state, self.say)

    def freeze_training(self) -> None:
        """The training job stops making progress and keeps running (a stalled job: its processes
        and GPUs stay, no new step is logged) until :meth:`thaw_training`."""
        self.freeze_file.parent.mkdir(parents=True, exist_ok=True)
        self.freeze_file.write_text("frozen by specconsole lab freeze-training\n")
        self.say(f"train: training frozen ({self.freeze_file} exists; thaw-training resumes it)")

    def thaw_training(self) -> None:
        """The frozen training job goes on from the step it stopped at."""
        self.freeze_file.unlink(missing_ok=True)
        self.say("train: training resumed")

    def sglang_args(self) -> list[str]:
        """The deployment the lab starts with: NEXTN with 4 draft tokens, as in the seed workflow."""
        return serving_unit.sglang_args(self.target_model_dir(), self.state.sglang_port)

    def write_unit(self) -> None:
        if self.options.serve > 1:  # every replica, serve too, starts on DFLASH window 16
            return
        serving_unit.write_unit(self.unit_path, self.root("serve") / "bin", self.sglang_args(), self.options)

    def _systemctl(self, *args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return serving_unit.systemctl(self.root("serve"), self.env("serve"), self.say, *args, check=check,
                                      timeout=timeout)

    def write_config(self) -> Path:
        return console_config.write_config(self)


def owner_alive(pid: int | None) -> bool:
    """Whether the process that started a lab still runs."""
    return alive(pid)


#: What the lab starts; only these are ended by the crash clean-up (never a shell or tmux that
#: merely runs inside a lab host's SSH session).
LAB_PROGRAMS = ("sshd", "specconsole.lab.", "sglang_judge.py", "torch.distributed.run", "agent.py", "systemctl3",
                "tail -", "sglang_router", "-m smg launch",
                # the routers retitle themselves (setproctitle): their /proc cmdline is only this
                "sglang::router", "smg::router")


def _marked(roots: list[str]) -> list[tuple[int, list[str]]]:
    """The live processes (pid, argv) whose environment carries exactly one of ``roots`` as marker."""
    me = os.getpid()
    marks = {f"{LAB_ROOT_ENV}={r}".encode() for r in roots}
    found: list[tuple[int, list[str]]] = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == me:
            continue
        with contextlib.suppress(OSError):
            if marks & set((d / "environ").read_bytes().split(b"\0")) and alive(int(d.name)):
                argv = (d / "cmdline").read_bytes().decode("utf-8", "replace").split("\0")
                found.append((int(d.name), [a for a in argv if a]))
    return found


def _is_pytest(argv: list[str]) -> bool:
    """Whether ``argv`` runs pytest itself (by its program, never by a path it names: a lab under
    pytest's tmp folder has ``pytest-of-USER`` in every one of its command lines)."""
    return bool(argv) and (Path(argv[0]).name.startswith(("pytest", "py.test"))
                           or argv[1:3] == ["-m", "pytest"])


def lab_leftovers(roots: list[str]) -> list[str]:
    """``PID COMMAND`` of every process still marked as one of ``roots``' (after :meth:`Lab.down`:
    none, or the lab leaked it)."""
    return [f"{pid} {' '.join(argv)[:200]}" for pid, argv in _marked(roots) if not _is_pytest(argv)]


def _kill_marked(roots: list[str]) -> None:
    """SIGKILL the lab programs whose environment carries exactly one of ``roots`` as marker.

    Pass after pass (at most 5) until one finds none: a program killed in a pass may have started
    another just before (a host's deploy agent restarting its unit, the systemctl double starting
    the simulator), which a single pass over /proc missed (a leaked replica simulator was seen).
    A program is told by what it runs, never by a path it names: the test labs live under pytest's
    ``pytest-of-USER`` folder, and a ``"pytest" not in cmdline`` guard here once spared every one of
    their programs (a crash-looping unit's systemctl double and its simulator outlived the lab)."""
    for _ in range(5):
        killed = 0
        for pid, argv in _marked(roots):
            cmdline = " ".join(argv)
            if any(p in cmdline for p in LAB_PROGRAMS) and not _is_pytest(argv):
                send_signal(pid, signal.SIGKILL)
                killed += 1
        if not killed:
            return
        time.sleep(0.05)
