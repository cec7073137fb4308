"""The console in tmux on the lab: time to first full frame, and CPU while idle at 1 s refresh.

Baseline, measured in the same run on the same lab: ``watch -n1`` running
``ssh HOST nvidia-smi --query-gpu=...`` for each host (what operators do today).

- first full frame: from starting ``specconsole`` in a tmux pane until the captured pane
  shows GPU rows of both hosts, tokens/s and the training step;
- idle CPU: CPU seconds per minute of the console process (``/proc/PID/stat`` utime+stime)
  over the window, vs the ``watch`` processes including their ssh children (cutime+cstime).

Usage: .venv/bin/python bench/console_startup.py [--seconds 30]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _tools import compile_tree, cpu_s, missing, watch_loops_cpu  # bench/_tools.py (scripts run from bench/)

from specconsole.lab.parts.environment import Lab, LabOptions

#: A private tmux server for the whole run (never the user's), kept up by a "keep" session:
#: killing the last session of a server makes the next new-session race its shutdown.
TMUX = ["tmux", "-L", f"specconsole-bench-{os.getpid()}", "-f", "/dev/null"]


def tmux(*args: str) -> str:
    res = subprocess.run([*TMUX, *args], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"tmux {' '.join(args[:3])}: {res.stderr.strip()}")
    return res.stdout


def pane_pid(session: str) -> int:
    return int(tmux("display-message", "-p", "-t", session, "#{pane_pid}").strip())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    args = ap.parse_args()
    if missing("tmux"):
        return 2
    compile_tree()  # the console's bytecode, as an install has it
    tmp = Path(tempfile.mkdtemp(prefix="specconsole-bench-"))
    lab = Lab(tmp / "lab" / "state", LabOptions(sglang_startup_s=1.0, gpu_interval_s=1.0, sglang_interval_s=1.0))
    lab.up()
    exe = Path(sys.executable).parent / "specconsole"
    try:
        tmux("new-session", "-d", "-s", "keep", "sleep 86400")
        time.sleep(8)  # the trainer's first steps, SGLang loaded
        s = f"bench-console-{os.getpid()}"
        t0 = time.monotonic()
        tmux("new-session", "-d", "-s", s, "-x", "160", "-y", "48", f"exec {exe} --config {lab.config_path}")
        first = None
        while time.monotonic() - t0 < 60:
            screen = tmux("capture-pane", "-p", "-t", s)
            if screen.count("H200") >= 10 and re.search(r"tok/s", screen) and re.search(r"step [0-9,]+/", screen):
                first = time.monotonic() - t0
                break
            time.sleep(0.05)
        pid = pane_pid(s)
        time.sleep(3)
        c0 = cpu_s(pid)
        time.sleep(args.seconds)
        console = (cpu_s(pid) - c0) / (args.seconds / 60)
        tmux("kill-session", "-t", s)

        watch_first, watch = watch_loops_cpu(lab, tmux, args.seconds)
    finally:
        subprocess.run([*TMUX, "kill-server"], capture_output=True, check=False)
        lab.down()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'figure':46} {'console':>10} {'watch -n1 ssh':>14} {'ratio':>7}")
    print(f"{'first full frame, s (console: both hosts)':46} {first or float('nan'):10.2f} {watch_first:14.2f} "
          f"{'':>7}")
    print(f"{'CPU s per minute while idle, 1 s refresh':46} {console:10.2f} {watch:14.2f} "
          f"{watch / console if console else float('inf'):6.1f}x")
    print("\nthe console shows GPUs, SGLang, training and events for 2 hosts; the watch loops show GPU rows only.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
