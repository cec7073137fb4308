"""A lab host: its folder (``hosts/NAME``), an OpenSSH ``sshd`` on its own loopback address, the
tools on its PATH (the nvidia-smi double, systemctl, journalctl, torchrun) and the GPUs the
nvidia-smi double shows (its scenario)."""

from __future__ import annotations

import contextlib
import json
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from specconsole.lab.doubles.models import LAB_CUDA_ENV, SERVE_GPUS, TRAIN_GPUS, lab_cuda
from specconsole.lab.files import write_file
from specconsole.lab.parts.keys import host_key
from specconsole.lab.parts.state import LabError, LabHost, LabState, Say, free_port
from specconsole.lab.procs import descendants, send_signal, spawn, wait_dead


def make_host(root: Path, name: str, address: str, keys: Path, scenario: Path, say: Say) -> LabHost:
    """Host ``name`` under ``root``: its host key, the operator's key (in ``keys``) authorized, an
    ``sshd_config`` for ``address`` on a free port, and its tools (nvidia-smi reads ``scenario``)."""
    for sub in ("bin", "etc", "ssh", "run", "logs"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    host_key(root, name, say)
    port = free_port(address)
    host = LabHost(name=name, address=address, port=port, root=str(root))
    (root / "ssh" / "authorized_keys").write_text((keys / "client_ed25519.pub").read_text())
    path = f"{root / 'bin'}:{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
    write_file(root / "ssh" / "sshd_config", "\n".join([
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
        f'{LAB_CUDA_ENV}="{lab_cuda(SERVE_GPUS if name.startswith("serve") else TRAIN_GPUS)}" '
        f'PYENV_REHASH_TIMEOUT=1 SHLVL=1',
        "",
    ]))
    _write_tools(root, scenario)
    return host


def _write_tools(root: Path, scenario_path: Path) -> None:
    py = shlex.quote(sys.executable)
    scenario = shlex.quote(str(scenario_path))
    write_file(root / "bin" / "nvidia-smi",
               f"#!/bin/sh\n# lab test double of nvidia-smi (no GPU on this machine)\n"
               f"NVIDIA_SMI_SCENARIO={scenario} exec {py} -m specconsole.lab.doubles.nvidia_smi \"$@\"\n", 0o755)
    q_root = shlex.quote(str(root))
    write_file(root / "bin" / "systemctl",
               f"#!/bin/sh\n# docker-systemctl-replacement rooted at this lab host's folder, with systemd's\n"
               f"# own `cat`/`show -p FragmentPath` output (see specconsole.lab.doubles.systemctl_shim)\n"
               f"exec {py} -m specconsole.lab.doubles.systemctl_shim {q_root} "
               f"{shlex.quote(_tool('systemctl3'))} \"$@\"\n",
               0o755)
    write_file(root / "bin" / "journalctl",
               f"#!/bin/sh\nexec {py} -m specconsole.lab.doubles.systemctl_shim --journal {q_root} "
               f"{shlex.quote(_tool('journalctl3'))} \"$@\"\n", 0o755)
    write_file(root / "bin" / "torchrun", f"#!/bin/sh\nexec {py} -m torch.distributed.run \"$@\"\n", 0o755)


def write_gpu_scenarios(train: Path, serve: Path, train_log: Path, serve_models: Path) -> None:
    """The nvidia-smi double's scenarios: H200s on both hosts, busy while this lab's training
    workers (writing ``train_log``) or its SGLang (serving from ``serve_models``) run."""
    train_scenario = {
        "driver": True,
        "gpus": [_gpu(i, "NVIDIA H200", 143771, 700.0, idle_util=0) for i in range(TRAIN_GPUS)],
        # this lab's own workers only (other labs may run on the same machine)
        "workload": {"cmdline_contains": str(train_log), "require_env": ["LOCAL_RANK"],
                     "memory_mib_per_process": 61000,
                     "utilization_pct": 97},
    }
    serve_scenario = {
        "driver": True,
        "gpus": [_gpu(i, "NVIDIA H200", 143771, 700.0, idle_util=0) for i in range(SERVE_GPUS)],
        "workload": {"cmdline_contains": f"{serve_models}/", "all_gpus": True,
                     "memory_mib_per_process": 118000,
                     "utilization_pct": 62},
    }
    for path, scenario in ((train, train_scenario), (serve, serve_scenario)):
        write_file(path, json.dumps(scenario, indent=2) + "\n")


def _gpu(index: int, name: str, total: int, limit: float, idle_util: int) -> dict[str, object]:
    return {
        "index": index, "name": name, "uuid": f"GPU-{index:08x}-lab0-4c1e-9d5a-{index:012x}",
        "memory_total_mib": total, "memory_used_mib": 4, "power_limit_w": limit, "power_draw_w": 74.0,
        "utilization_pct": idle_util, "memory_util_pct": 0, "temperature_c": 31,
        "sm_clock_mhz": 345, "pstate": "P0",
    }


def start_sshd(h: LabHost, root: Path, env: dict[str, str], state: LabState, say: Say) -> int:
    """Start host ``h``'s sshd (folder ``root``) and wait until it listens; its pid."""
    cfg = root / "ssh" / "sshd_config"
    log = root / "logs" / "sshd.log"
    pid_file = root / "run" / "sshd.pid"
    pid_file.unlink(missing_ok=True)
    check = subprocess.run([_sshd(), "-t", "-f", str(cfg)], capture_output=True, text=True)
    if check.returncode != 0:
        raise LabError(f"lab: sshd config {cfg} is invalid: {check.stderr.strip()}")
    # -D keeps sshd in the foreground of its own session, so its pid is ours to stop.
    proc = spawn([_sshd(), "-D", "-f", str(cfg), "-E", str(log)], env=env,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    h.sshd_pid = proc.pid
    state.remember(proc.pid)
    state.save()
    _wait_port(h.address, h.port, 10, f"sshd of {h.name}")
    say(f"{h.name}: sshd listening on {h.address}:{h.port} (pid {proc.pid})")
    return proc.pid


def stop_sshd(h: LabHost, state: LabState, say: Say) -> None:
    """Stop host ``h``'s sshd and every session it serves (the host 'goes away')."""
    if h.sshd_pid and state.ours(h.sshd_pid):
        for pid in descendants(h.sshd_pid):
            send_signal(pid, signal.SIGKILL)
        send_signal(h.sshd_pid, signal.SIGKILL)
        wait_dead([h.sshd_pid], 5)
        say(f"{h.name}: sshd stopped (pid {h.sshd_pid})")
    h.sshd_pid = None
    state.save()


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


def _wait_port(address: str, port: int, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((address, port), 0.5):
            return
        time.sleep(0.05)
    raise LabError(f"lab: {what} did not listen on {address}:{port} within {timeout:g}s; see its log")
