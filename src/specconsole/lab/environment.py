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

- ``nvidia-smi``: the test double :mod:`specconsole.lab.nvidia_smi` (this machine has no GPU),
  driven by ``etc/nvidia-smi.json``;
- ``systemctl``/``journalctl``: docker-systemctl-replacement (a real reimplementation of
  systemctl that needs no systemd) with ``--root`` set to the host's folder;
- ``sglang``: the SGLang-protocol simulator :mod:`specconsole.lab.sglang_sim`.

The training job is a real ``torchrun --nproc_per_node=2`` run of :mod:`specconsole.lab.trainer`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from specconsole import paths
from specconsole.errors import SpecConsoleError
from specconsole.lab import sglang_judge
from specconsole.lab.procs import alive, descendants, start_time
from specconsole.lab.sglang_versions import BASE_VERSION, VERSION_ENV, VERSIONS

Say = Callable[[str], None]

LAB_DIR_ENV = "SPECCONSOLE_LAB_DIR"
#: Set to the host's root folder in every process the lab starts (and in each SSH session).
LAB_ROOT_ENV = "SPECCONSOLE_LAB_ROOT"

TRAIN_GPUS = 8
SERVE_GPUS = 2
#: What the lab's CUDA double (``scripts/sglang_venv/specconsole_lab_cuda.py``) tells SGLang's
#: resolution about each host's GPUs: the same H200s the nvidia-smi double shows.
LAB_CUDA_ENV = "SPECCONSOLE_LAB_CUDA"
#: The socket of a warm SGLang judge the lab shares instead of starting its own (the test suite's).
JUDGE_ENV = "SPECCONSOLE_LAB_JUDGE"


def lab_cuda(gpus: int) -> str:
    return f"{gpus}:NVIDIA H200:143771:9.0"
TARGET_MODEL = "Qwen3-8B"
DRAFT_MODEL = "dflash-qwen3-8b-b16"
#: An EAGLE-3 draft head and a small model of the same family (STANDALONE's draft), for the
#: algorithms besides DFLASH that need a draft model of their own.
EAGLE_DRAFT_MODEL = "eagle3-qwen3-8b"
SMALL_MODEL = "Qwen3-0.6B"


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
    #: the lab's own warm SGLang judge (:mod:`specconsole.lab.sglang_judge`), when it started one
    judge_pid: int | None = None
    judge_socket: str = ""
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
    """How the lab is started; the defaults are the demo's."""

    train_address: str = "127.0.0.2"
    serve_address: str = "127.0.0.3"
    trainer: bool = True
    trainer_steps: int = 200_000
    trainer_step_seconds: float = 1.0
    trainer_steps_per_epoch: int = 33_000
    trainer_epochs: int = 6
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


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


def _write(path: Path, text: str, mode: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mode is not None:
        path.chmod(mode)


def _tool(name: str) -> str:
    """A console script installed beside this Python (the venv's bin), or on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if not found:
        raise LabError(f"lab: `{name}` not found; install the lab extras: pip install -e '.[lab]'")
    return found


def _sshd() -> str:
    for candidate in ("/usr/sbin/sshd", shutil.which("sshd") or ""):
        if candidate and Path(candidate).exists():
            return candidate
    raise LabError("lab: OpenSSH sshd not found; install it: apt-get install -y openssh-server")


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
    def unit_path(self) -> Path:
        return self.root("serve") / "etc" / "systemd" / "system" / "sglang.service"

    def scenario_path(self, host: str) -> Path:
        return self.root(host) / "etc" / "nvidia-smi.json"

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
        self._client_key()
        self._clear_previous_run()
        self.state = LabState(dir=str(self.dir), owner_pid=owner_pid)
        self.state.sglang_port = free_port("127.0.0.1")
        self.state.judge_socket = os.environ.get(JUDGE_ENV) or judge_socket_path(self.dir)
        for name, address in (("train", o.train_address), ("serve", o.serve_address)):
            self._make_host(name, address)
        self._write_known_hosts()
        if o.sglang:
            self.start_judge()
        self._scenarios()
        self._serve_files()
        self.state.save()
        for name in self.state.hosts:
            self.start_sshd(name)
        if o.trainer:
            self.start_trainer()
        if o.sglang:  # its first start waits for the judge, as a real SGLang's start waits for its imports
            self._systemctl("daemon-reload")
            self._systemctl("start", "sglang.service")
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
        self.stop_trainer()
        self.stop_judge()
        for name in list(self.state.hosts):
            self.stop_sshd(name)
        # what a crashed run left behind: only processes marked as this lab's (never another
        # lab's, even one whose folder name starts with this one's)
        _kill_marked([str(self.root(name)) for name in ("train", "serve")])
        self.state.started.clear()
        self.state.save()
        self.say(f"lab down in {time.monotonic() - t0:.1f}s")

    def _clear_previous_run(self) -> None:
        """A fresh lab starts from a clean unit: no drop-in (a deploy's ``zz-specconsole-deploy.conf``
        with an old ``--port``) or deploy work folder, no service status or journal, no training
        log or pid file of an earlier run in this folder."""
        unit, serve = self.unit_path, self.root("serve")
        leftovers = [unit.parent / f"{unit.name}.d", serve / "run" / f"{unit.name}.status",
                     serve / "var" / "log" / "journal", self.train_log, self.trainer_pid_file]
        for path in leftovers:
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
            else:
                continue
            self.say(f"removed {path} (left by an earlier run)")

    # -- keys ------------------------------------------------------------------------------------
    def _keygen(self, path: Path, comment: str) -> None:
        if path.exists():
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                       check=True, capture_output=True)
        self.say(f"generated key {path}")

    def _client_key(self) -> None:
        self._keygen(self.keys / "client_ed25519", "specconsole-lab-operator")

    def _write_known_hosts(self) -> None:
        lines = []
        for h in self.state.hosts.values():
            pub = (Path(h.root) / "ssh" / "ssh_host_ed25519_key.pub").read_text().split()
            lines.append(f"[{h.address}]:{h.port} {pub[0]} {pub[1]}")
        _write(self.keys / "known_hosts", "\n".join(lines) + "\n")

    # -- hosts -------------------------------------------------------------------------------------
    def _make_host(self, name: str, address: str) -> None:
        root = self.root(name)
        for sub in ("bin", "etc", "ssh", "run", "logs"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        self._keygen(root / "ssh" / "ssh_host_ed25519_key", f"lab-{name}-host")
        port = free_port(address)
        host = LabHost(name=name, address=address, port=port, root=str(root))
        self.state.hosts[name] = host
        (root / "ssh" / "authorized_keys").write_text((self.keys / "client_ed25519.pub").read_text())
        path = f"{root / 'bin'}:{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
        _write(root / "ssh" / "sshd_config", "\n".join([
            f"Port {port}",
            f"ListenAddress {address}",
            f"HostKey {root / 'ssh' / 'ssh_host_ed25519_key'}",
            f"AuthorizedKeysFile {root / 'ssh' / 'authorized_keys'}",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            "StrictModes no",
            "UsePAM no",
            "MaxSessions 64",
            "MaxStartups 64",
            "LogLevel VERBOSE",  # one "Starting session" line per remote command (bench counts them)
            f"PidFile {root / 'run' / 'sshd.pid'}",
            # SHLVL=1: bash skips ~/.bashrc for the commands sshd runs (a lab host is a clean
            # machine; on a pyenv user's machine that rc cost ~0.2 s per command), and
            # PYENV_REHASH_TIMEOUT: should it run `pyenv init` anyway, no command queues
            # behind pyenv's global rehash lock
            f'SetEnv PATH="{path}" SPECCONSOLE_LAB_HOST={name} SPECCONSOLE_LAB_ROOT="{root}" '
            f'{LAB_CUDA_ENV}="{lab_cuda(SERVE_GPUS if name == "serve" else TRAIN_GPUS)}" '
            f'PYENV_REHASH_TIMEOUT=1 SHLVL=1',
            "",
        ]))
        py = shlex.quote(sys.executable)
        scenario = shlex.quote(str(self.scenario_path(name)))
        _write(root / "bin" / "nvidia-smi",
               f"#!/bin/sh\n# lab test double of nvidia-smi (no GPU on this machine)\n"
               f"NVIDIA_SMI_SCENARIO={scenario} exec {py} -m specconsole.lab.nvidia_smi \"$@\"\n", 0o755)
        q_root = shlex.quote(str(root))
        _write(root / "bin" / "systemctl",
               f"#!/bin/sh\n# docker-systemctl-replacement rooted at this lab host's folder, with systemd's\n"
               f"# own `cat`/`show -p FragmentPath` output (see specconsole.lab.systemctl_shim)\n"
               f"exec {py} -m specconsole.lab.systemctl_shim {q_root} {shlex.quote(_tool('systemctl3'))} \"$@\"\n",
               0o755)
        _write(root / "bin" / "journalctl",
               f"#!/bin/sh\nexec {py} -m specconsole.lab.systemctl_shim --journal {q_root} "
               f"{shlex.quote(_tool('journalctl3'))} \"$@\"\n", 0o755)
        _write(root / "bin" / "sglang", self._sglang_launcher(), 0o755)
        _write(root / "opt" / "sglang" / "bin" / "python",
               f"#!{sys.executable}\n# The serving host's SGLang Python: .venv-sglang's, with a warm start for\n"
               f"# `python - ARGS` (see specconsole.lab.sglang_judge.python_main)\nimport os\nimport sys\n\n"
               f"from specconsole.lab.sglang_judge import SOCKET_ENV, python_main\n\n"
               f"os.environ.setdefault(SOCKET_ENV, {self.state.judge_socket!r})\n"
               f"sys.exit(python_main({(sglang_judge.sglang_python() or 'python3')!r}))\n", 0o755)
        _write(root / "bin" / "torchrun", f"#!/bin/sh\nexec {py} -m torch.distributed.run \"$@\"\n", 0o755)

    def _sglang_launcher(self) -> str:
        """The serving host's ``sglang``: the simulator, judged by real SGLang (:mod:`.sglang_judge`).

        For SGLang 0.5.23 it is a Python script run by ``.venv-sglang``'s Python, as a pip-installed
        ``sglang`` console script is: the deploy's host check finds real SGLang through its ``#!``
        line. The DDTree build is in no release, so real SGLang cannot be it: its launcher is a shell
        script, and the host check says it cannot run there (the built-in rules decide)."""
        py, sglang_py = sys.executable, sglang_judge.sglang_python() or "python3"
        env = {VERSION_ENV: self.options.sglang_version, sglang_judge.SOCKET_ENV: self.state.judge_socket,
               sglang_judge.PYTHON_ENV: sglang_py}
        if self.options.sglang_version == BASE_VERSION:
            return (f"#!{self.sglang_venv_python()}\n"
                    f"# SGLang-protocol simulator (SGLang's CUDA engine cannot run here); this interpreter is real\n"
                    f"# SGLang 0.5.23, which judges its command line (specconsole.lab.sglang_judge)\n"
                    f"import os\nimport sys\n\n"
                    f"os.environ.update({env!r})\n"
                    f"os.execv({py!r}, [{py!r}, '-m', 'specconsole.lab.sglang_sim', *sys.argv[1:]])\n")
        assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        return (f"#!/bin/sh\n# SGLang-protocol simulator of a DDTree build (sgl-project/sglang PR #29907, in no "
                f"release)\n{assigns} exec {shlex.quote(py)} -m specconsole.lab.sglang_sim \"$@\"\n")

    def sglang_venv_python(self) -> Path:
        """The serving host's SGLang virtualenv Python (``/opt/sglang/bin/python`` on a real host):
        real SGLang 0.5.23 (``.venv-sglang``), started warm for ``python - ARGS``."""
        return self.root("serve") / "opt" / "sglang" / "bin" / "python"

    def start_judge(self) -> None:
        """Start the lab's warm SGLang judge, unless it shares a running one (``$SPECCONSOLE_LAB_JUDGE``)."""
        sock = self.state.judge_socket
        if os.environ.get(JUDGE_ENV) == sock and Path(sock).exists():
            self.say(f"lab: sharing the SGLang judge on {sock}")
            return
        python = sglang_judge.sglang_python()
        if python is None:
            raise LabError(f"lab: {sglang_judge.missing_message()}")
        with contextlib.suppress(FileNotFoundError):
            Path(sock).unlink()
        log = open(self.dir / "logs" / "sglang-judge.log", "ab")  # noqa: SIM115 - the child keeps it
        env = {**self.env("serve"), **judge_env(self.dir / "hf-home")}
        proc = _spawn([python, sglang_judge.__file__, "serve", sock], stdout=log, stderr=log, env=env)
        log.close()
        self.state.judge_pid = proc.pid
        self.state.remember(proc.pid)
        self.say(f"lab: starting real SGLang 0.5.23's argument judge (pid {proc.pid}; it imports SGLang while the "
                 f"hosts start, and SGLang's first start waits for it)")

    def stop_judge(self) -> None:
        pid = self.state.judge_pid
        if pid and self.state.ours(pid):
            _signal(pid, signal.SIGTERM)
            _wait_dead([pid], 5)
        self.state.judge_pid = None
        if self.state.judge_socket and os.environ.get(JUDGE_ENV) != self.state.judge_socket:
            with contextlib.suppress(OSError):
                Path(self.state.judge_socket).unlink()

    def env(self, name: str) -> dict[str, str]:
        """The environment of what the lab starts for host ``name``: its marker (the same
        variable sshd's ``SetEnv`` gives every session) finds leftovers after a crash."""
        return {**os.environ, LAB_ROOT_ENV: str(self.root(name))}

    def sshd_config(self, name: str) -> Path:
        return self.root(name) / "ssh" / "sshd_config"

    def start_sshd(self, name: str) -> int:
        h = self.state.hosts[name]
        cfg = self.sshd_config(name)
        log = self.root(name) / "logs" / "sshd.log"
        pid_file = self.root(name) / "run" / "sshd.pid"
        pid_file.unlink(missing_ok=True)
        check = subprocess.run([_sshd(), "-t", "-f", str(cfg)], capture_output=True, text=True)
        if check.returncode != 0:
            raise LabError(f"lab: sshd config {cfg} is invalid: {check.stderr.strip()}")
        # -D keeps sshd in the foreground of its own session, so its pid is ours to stop.
        proc = _spawn([_sshd(), "-D", "-f", str(cfg), "-E", str(log)], env=self.env(name),
                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        h.sshd_pid = proc.pid
        self.state.remember(proc.pid)
        self.state.save()
        _wait_port(h.address, h.port, 10, f"sshd of {name}")
        self.say(f"{name}: sshd listening on {h.address}:{h.port} (pid {proc.pid})")
        return proc.pid

    def stop_sshd(self, name: str) -> None:
        """Stop a host's sshd and every session it serves (the host 'goes away')."""
        h = self.state.hosts[name]
        if h.sshd_pid and self.state.ours(h.sshd_pid):
            for pid in descendants(h.sshd_pid):
                _signal(pid, signal.SIGKILL)
            _signal(h.sshd_pid, signal.SIGKILL)
            _wait_dead([h.sshd_pid], 5)
            self.say(f"{name}: sshd stopped (pid {h.sshd_pid})")
        h.sshd_pid = None
        self.state.save()

    # -- GPUs ----------------------------------------------------------------------------------------
    def _scenarios(self) -> None:
        train = {
            "driver": True,
            "gpus": [_gpu(i, "NVIDIA H200", 143771, 700.0, idle_util=0) for i in range(TRAIN_GPUS)],
            # this lab's own workers only (other labs may run on the same machine)
            "workload": {"cmdline_contains": str(self.train_log), "require_env": ["LOCAL_RANK"],
                         "memory_mib_per_process": 61000,
                         "utilization_pct": 97},
        }
        serve = {
            "driver": True,
            "gpus": [_gpu(i, "NVIDIA H200", 143771, 700.0, idle_util=0) for i in range(SERVE_GPUS)],
            "workload": {"cmdline_contains": f"{self.root('serve') / 'models'}/", "all_gpus": True,
                         "memory_mib_per_process": 118000,
                         "utilization_pct": 62},
        }
        for name, scenario in (("train", train), ("serve", serve)):
            _write(self.scenario_path(name), json.dumps(scenario, indent=2) + "\n")

    # -- training ------------------------------------------------------------------------------------
    def start_trainer(self) -> int:
        o = self.options
        self.train_log.parent.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                "-m", "specconsole.lab.trainer", "--log-path", str(self.train_log),
                "--steps", str(o.trainer_steps), "--epochs", str(o.trainer_epochs),
                "--steps-per-epoch", str(o.trainer_steps_per_epoch),
                "--step-seconds", str(o.trainer_step_seconds)]
        env = {**self.env("train"), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        out = open(self.root("train") / "logs" / "torchrun.out", "ab")  # noqa: SIM115
        proc = _spawn(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                      env=env, cwd=self.root("train"))
        out.close()
        self.trainer_pid_file.write_text(f"{proc.pid}\n")
        self.state.trainer_pid = proc.pid
        self.state.remember(proc.pid)
        self.state.save()
        self.say(f"train: started torchrun --nproc_per_node=2 (launcher pid {proc.pid}), log {self.train_log}")
        return proc.pid

    def stop_trainer(self) -> None:
        pid = self.state.trainer_pid
        if pid and self.state.ours(pid):
            tree = [pid, *descendants(pid)]
            _signal(pid, signal.SIGTERM)
            if not _wait_dead(tree, 15):
                for p in tree:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(p, signal.SIGKILL)
                    _signal(p, signal.SIGKILL)
                _wait_dead(tree, 5)
            self.say(f"train: training job stopped (launcher pid {pid})")
        self.state.trainer_pid = None
        self.state.save()

    # -- serving ----------------------------------------------------------------------------------------
    def draft_model_dir(self) -> Path:
        return self.root("serve") / "models" / DRAFT_MODEL

    def target_model_dir(self) -> Path:
        return self.root("serve") / "models" / TARGET_MODEL

    def model_dir(self, name: str) -> Path:
        return self.root("serve") / "models" / name

    def _serve_files(self) -> None:
        write_target_model(self.target_model_dir())
        write_draft_model(self.draft_model_dir())
        _write(self.model_dir(EAGLE_DRAFT_MODEL) / "config.json", json.dumps({
            "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 4096,
            "num_hidden_layers": 1, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 12288,
            "vocab_size": 151936, "draft_vocab_size": 32000, "max_position_embeddings": 40960,
        }, indent=2) + "\n")
        write_target_model(self.model_dir(SMALL_MODEL), hidden_size=1024, num_hidden_layers=28,
                           num_attention_heads=16, intermediate_size=3072)
        self.write_unit()

    def sglang_args(self) -> list[str]:
        """The deployment the lab starts with: NEXTN with 4 draft tokens, as in the seed workflow."""
        return [
            "serve", "--model-path", str(self.target_model_dir()),
            "--host", "127.0.0.1", "--port", str(self.state.sglang_port),
            "--tp-size", str(SERVE_GPUS),
            "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
            "--enable-metrics",
        ]

    def write_unit(self) -> None:
        o = self.options
        serve_bin = self.root("serve") / "bin"
        exec_start = " \\\n    ".join(
            [shlex.quote(str(serve_bin / "sglang"))]
            + [" ".join(shlex.quote(a) for a in pair) for pair in _pairs(self.sglang_args())]
        )
        _write(self.unit_path, "\n".join([
            "[Unit]",
            "Description=SGLang server (specconsole lab: SGLang-protocol simulator)",
            "After=network-online.target",
            "",
            "[Service]",
            "Type=simple",
            f"Environment=SGLANG_SIM_STARTUP_S={o.sglang_startup_s:g}",
            f"Environment=SGLANG_SIM_LOAD={o.sglang_load_rps:g}",
            f"Environment=SGLANG_SIM_STEP_MS={o.sglang_step_ms:g}",
            *([f"Environment=SGLANG_SIM_STOP_S={o.sglang_stop_s:g}"] if o.sglang_stop_s else []),
            f"Environment=PATH={serve_bin}:/usr/local/bin:/usr/bin:/bin",
            f"ExecStart={exec_start}",
            f"Restart={o.sglang_restart}",
            "TimeoutStopSec=20",
            "",
            "[Install]",
            "WantedBy=multi-user.target",
            "",
        ]))

    def _systemctl(self, *args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.root("serve") / "bin" / "systemctl"), *args]
        self.say(f"serve: $ systemctl {' '.join(args)}")
        t0 = time.monotonic()
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=self.env("serve"))
        if check and res.returncode != 0:
            raise LabError(f"lab: `systemctl {' '.join(args)}` failed ({res.returncode}): {res.stderr.strip()[-300:]}")
        self.say(f"serve:   exit {res.returncode} in {time.monotonic() - t0:.1f}s")
        return res

    # -- the console's config for this lab ------------------------------------------------------------
    def write_config(self) -> Path:
        o, s = self.options, self.state
        t, v = s.hosts["train"], s.hosts["serve"]
        key = self.keys / "client_ed25519"
        text = f"""# specconsole config for the lab in {self.dir} (written by `specconsole lab up`)
{console_and_ssh(self, self.dir / "audit.log", self.dir / "console-state", connect_timeout_s=5)}
[[hosts]]
name = "train"
role = "train"
connect = "ssh"
host = {toml_str(t.address)}
port = {t.port}
user = "root"
identity_file = {toml_str(key)}

[hosts.gpu]
source = "nvidia-smi"
interval_s = {o.gpu_interval_s}

[hosts.training]
log_path = {toml_str(self.train_log)}
total_epochs = {o.trainer_epochs}
steps_per_epoch = {o.trainer_steps_per_epoch}
stall_warning_min = 2

[hosts.training.kill]
pid_file = {toml_str(self.trainer_pid_file)}
pattern = {toml_str(re.escape(f"specconsole.lab.trainer --log-path {self.train_log}"))}
grace_s = 30

[[hosts]]
name = "serve"
role = "serve"
connect = "ssh"
host = {toml_str(v.address)}
port = {v.port}
user = "root"
identity_file = {toml_str(key)}

[hosts.gpu]
source = "nvidia-smi"
interval_s = {o.gpu_interval_s}

[hosts.sglang]
unit = "sglang.service"
base_url = "http://127.0.0.1:{s.sglang_port}"
tunnel = {"true" if o.tunnel else "false"}
interval_s = {o.sglang_interval_s}
timeout_s = 3.0
draft_model_path = {toml_str(self.draft_model_dir())}
"""
        _write(self.config_path, text)
        return self.config_path


# ---------------------------------------------------------------------------------------------- helpers

def write_target_model(path: Path, **config: object) -> Path:
    """A target model folder as SGLang reads it before loading weights: Qwen3-8B's ``config.json``
    (``config`` overrides keys: a smaller model of the family)."""
    _write(path / "config.json", json.dumps({
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
        "num_hidden_layers": 36, "vocab_size": 151936, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 12288, "max_position_embeddings": 40960,
        "torch_dtype": "bfloat16", **config,
    }, indent=2) + "\n")
    return path


#: The Hugging Face model ids the lab's hub cache holds (:func:`write_hub_cache`).
HUB_MODELS = ("Qwen/Qwen3-8B",)


def write_hub_cache(hf_home: Path) -> Path:
    """A Hugging Face cache (``HF_HOME``) holding :data:`HUB_MODELS`' ``config.json``, as a download
    leaves it: with ``HF_HUB_OFFLINE=1`` real SGLang resolves ``--model-path Qwen/Qwen3-8B`` from it
    (this machine reaches no hub)."""
    revision = "0" * 40
    for model_id in HUB_MODELS:
        repo = hf_home / "hub" / f"models--{model_id.replace('/', '--')}"
        write_target_model(repo / "snapshots" / revision)
        _write(repo / "refs" / "main", revision)
    return hf_home


def write_draft_model(path: Path, block_size: int = 16) -> Path:
    """A DFlash draft model folder: its ``config.json`` (``block_size``, the DFlash settings)."""
    _write(path / "config.json", json.dumps({
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "block_size": block_size,
        "num_hidden_layers": 5, "hidden_size": 4096, "target_layer_ids": [1, 9, 17, 25, 33],
        "mask_token_id": 151669, "dflash_config": {"mask_token_id": 151669, "target_layer_ids": [1, 9, 17, 25, 33]},
    }, indent=2) + "\n")
    return path


def toml_str(value: object) -> str:
    return json.dumps(str(value))  # a TOML basic string


def console_and_ssh(lab: Lab, audit_log: Path, state_dir: Path, *, connect_timeout_s: float) -> str:
    """The ``[console]`` and ``[ssh]`` tables of a config for the lab's hosts (quick reconnects)."""
    return f"""[console]
refresh_s = 1.0
audit_log = {toml_str(audit_log)}
state_dir = {toml_str(state_dir)}

[ssh]
known_hosts = {toml_str(lab.keys / "known_hosts")}
keepalive_s = 5
connect_timeout_s = {connect_timeout_s:g}
backoff_initial_s = 0.5
backoff_max_s = 4
"""


def _pairs(args: list[str]) -> list[list[str]]:
    """Group ``serve --flag value --switch`` into lines for a readable ExecStart."""
    out: list[list[str]] = []
    for a in args:
        if a.startswith("--") or not out:
            out.append([a])
        else:
            out[-1].append(a)
    return out


def _gpu(index: int, name: str, total: int, limit: float, idle_util: int) -> dict[str, object]:
    return {
        "index": index, "name": name, "uuid": f"GPU-{index:08x}-lab0-4c1e-9d5a-{index:012x}",
        "memory_total_mib": total, "memory_used_mib": 4, "power_limit_w": limit, "power_draw_w": 74.0,
        "utilization_pct": idle_util, "memory_util_pct": 0, "temperature_c": 31,
        "sm_clock_mhz": 345, "pstate": "P0",
    }


def owner_alive(pid: int | None) -> bool:
    """Whether the process that started a lab still runs."""
    return alive(pid)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _wait_dead(pids: list[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return not any(alive(p) for p in pids)


#: What the lab starts; only these are ended by the crash clean-up (never a shell or tmux that
#: merely runs inside a lab host's SSH session).
LAB_PROGRAMS = ("sshd", "specconsole.lab.", "sglang_judge.py", "torch.distributed.run", "agent.py", "systemctl3",
                "tail -")


def judge_env(hf_home: Path) -> dict[str, str]:
    """The environment of a lab's SGLang judge: the serving host's GPUs (the CUDA double), no hub."""
    return {LAB_CUDA_ENV: lab_cuda(SERVE_GPUS), "HF_HUB_OFFLINE": "1", "HF_HOME": str(write_hub_cache(hf_home))}


def judge_socket_path(lab_dir: Path) -> str:
    """A short socket path for a lab's judge (a Unix socket's path is limited to 107 bytes)."""
    import hashlib

    digest = hashlib.sha256(str(lab_dir.resolve()).encode()).hexdigest()[:12]
    return f"/tmp/specconsole-judge-{digest}.sock"


def _spawn(argv: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
    """Start a lab daemon in its own session and reap it when it exits, so that a long-lived
    parent (``specconsole demo``, a test run) never keeps it as ``<defunct>``."""
    proc = subprocess.Popen(argv, start_new_session=True, **kwargs)  # type: ignore[call-overload]
    threading.Thread(target=proc.wait, name=f"reap-{proc.pid}", daemon=True).start()
    return proc  # type: ignore[no-any-return]


def _kill_marked(roots: list[str]) -> None:
    """SIGKILL the lab programs whose environment carries exactly one of ``roots`` as marker."""
    me = os.getpid()
    marks = {f"{LAB_ROOT_ENV}={r}".encode() for r in roots}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == me:
            continue
        with contextlib.suppress(OSError):
            if not marks & set((d / "environ").read_bytes().split(b"\0")):
                continue
            cmdline = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            if any(p in cmdline for p in LAB_PROGRAMS) and "pytest" not in cmdline:
                _signal(int(d.name), signal.SIGKILL)


def _wait_port(address: str, port: int, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((address, port), 0.5):
            return
        time.sleep(0.05)
    raise LabError(f"lab: {what} did not listen on {address}:{port} within {timeout:g}s; see its log")
