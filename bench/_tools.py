"""What the bench scripts share: checking for the programs they drive, CPU time of a process, and the
``watch -n1 ssh ... nvidia-smi`` baseline."""

from __future__ import annotations

import compileall
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from specconsole.formats.nvidia_smi import QUERY_GPU_FIELDS
from specconsole.lab.parts.environment import Lab

TICK = os.sysconf("SC_CLK_TCK")


def compile_tree(src: str | Path | None = None) -> None:
    """Write the console's bytecode (``src``: another tree's package folder; default: this one's),
    as an installed package has it: under PYTHONDONTWRITEBYTECODE=1 an editable tree is compiled
    again at every start, which a start-up figure would then carry."""
    import specconsole

    compileall.compile_dir(str(src or Path(specconsole.__file__).parent), quiet=1)


def missing(tool: str, install: str = "") -> bool:
    """True, after saying so on stderr, when ``tool`` is not on PATH (``install``: how to get it)."""
    if shutil.which(tool):
        return False
    print(f"bench: needs {tool}" + (f" ({install})" if install else ""), file=sys.stderr)
    return True


def watch_loops_cpu(lab: Lab, tmux: Callable[..., str], seconds: float, settle_s: float = 3.0) -> tuple[float, float]:
    """What operators run today, on ``lab``: ``watch -n1 ssh HOST nvidia-smi --query-gpu=...`` in a
    tmux session per host. Returns (seconds until the first pane shows GPU rows, CPU-s per minute
    of the ``watch`` processes and their ssh children over ``seconds``)."""
    sessions = []
    try:
        for name, h in lab.state.hosts.items():
            ssh = (f"ssh -q -i {lab.keys / 'client_ed25519'} -o UserKnownHostsFile={lab.keys / 'known_hosts'} "
                   f"-o BatchMode=yes -p {h.port} root@{h.address} nvidia-smi "
                   f"--query-gpu={','.join(QUERY_GPU_FIELDS)} --format=csv,noheader,nounits")
            session = f"bench-watch-{name}-{os.getpid()}"
            tmux("new-session", "-d", "-s", session, "-x", "160", "-y", "48", f"exec watch -n1 {ssh}")
            sessions.append(session)
        t0 = time.monotonic()
        while "H200" not in tmux("capture-pane", "-p", "-t", sessions[0]) and time.monotonic() - t0 < 30:
            time.sleep(0.05)
        first = time.monotonic() - t0
        time.sleep(settle_s)
        pids = [int(tmux("display-message", "-p", "-t", s, "#{pane_pid}").strip()) for s in sessions]
        c0, w0 = sum(cpu_s(p, children=True) for p in pids), time.monotonic()
        time.sleep(seconds)
        used = sum(cpu_s(p, children=True) for p in pids) - c0
        return first, used / ((time.monotonic() - w0) / 60)
    finally:
        for s in sessions:
            tmux("kill-session", "-t", s)


def cpu_s(pid: int, children: bool = False) -> float:
    """CPU-s of ``pid`` (utime+stime), with its reaped children's (cutime+cstime) if asked."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(f[11]) + int(f[12]) + ((int(f[13]) + int(f[14])) if children else 0)
    return ticks / TICK


def run_cpu_per_min(argv: list[str], warmup_s: float, seconds: float, stdout: IO[Any] | int = subprocess.DEVNULL
                    ) -> float:
    """Start ``argv`` (its stdout to ``stdout``), let it warm up ``warmup_s``, and return the CPU-s per
    minute it uses over the next ``seconds``; it is stopped (:func:`stop`) either way."""
    proc = subprocess.Popen(argv, stdout=stdout, stderr=subprocess.DEVNULL)
    try:
        time.sleep(warmup_s)
        c0, w0 = cpu_s(proc.pid), time.monotonic()
        time.sleep(seconds)
        return (cpu_s(proc.pid) - c0) / ((time.monotonic() - w0) / 60)
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGINT, wait_s: float = 20.0) -> None:
    """Send ``sig`` to ``proc`` and wait ``wait_s`` for it to end; kill it after that."""
    proc.send_signal(sig)
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
