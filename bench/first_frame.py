"""Time to the console's first full frame (and to ``status --json``) on the demo lab, this tree against another.

One demo lab (torchrun job, SGLang simulator, the Python GPU double; the lab's sources as the demo
has them); the console is started in a private tmux at 200x50 ``--runs`` times from each tree, the
two trees taking turns, and timed from the tmux command until it writes
``SPECCONSOLE_FIRST_FRAME_FILE`` (the frame holding real values for every host: GPU rows with their
process list, SGLang, the training step). Both trees' bytecode is compiled first, as an install
has it. Prints each tree's runs, their medians and the ratio this / base, and the same for the CPU
seconds the console had used by then (``/proc/PID/stat``, read as the frame's file appears). Then
``specconsole status --json`` (the headless first complete snapshot: every host's GPU rows with
their processes, SGLang, the training step and the job's state) ``--runs`` times from each tree,
taking turns, timed from start to exit.

Usage: .venv/bin/python bench/first_frame.py --base DIR [--runs 5]   (DIR: the other tree's src/, e.g.
a ``git worktree add /tmp/base REV`` checkout's)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _tools import compile_tree, cpu_s, missing  # bench/_tools.py (scripts run from bench/)

from specconsole.lab.parts.environment import Lab, LabOptions

TMUX = ["tmux", "-L", f"first-frame-{time.monotonic_ns()}"]
THIS = Path(__file__).resolve().parents[1] / "src"


def tmux(*args: str) -> str:
    return subprocess.run([*TMUX, *args], capture_output=True, text=True, check=False).stdout


def cpu_until_now(pid: int | None) -> float:
    """The CPU seconds process ``pid`` has used (:func:`_tools.cpu_s`); NaN when it is not known."""
    if pid is None:
        return float("nan")
    try:
        return cpu_s(pid)
    except (OSError, IndexError):
        return float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the other tree's src/ folder")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    if missing("tmux"):
        return 2
    trees = {"base": Path(args.base).resolve(), "this": THIS}
    for src in trees.values():
        compile_tree(src)
    tmp = Path(tempfile.mkdtemp(prefix="specconsole-first-frame-"))
    lab = Lab(tmp / "demo", LabOptions(sglang_startup_s=1.0, gpu_interval_s=1.0, sglang_interval_s=1.0),
              say=lambda _m: None)
    times: dict[str, list[float]] = {name: [] for name in trees}
    cpu: dict[str, list[float]] = {name: [] for name in trees}
    snapshot: dict[str, list[float]] = {name: [] for name in trees}
    try:
        lab.up()
        time.sleep(8)  # the trainer's first steps, SGLang loaded
        tmux("new-session", "-d", "-s", "keep", "sleep 86400")
        for i in range(2 * args.runs):
            name = list(trees)[i % 2]
            frame = tmp / f"frame-{i}"
            t0 = time.monotonic()
            tmux("new-session", "-d", "-s", f"c{i}", "-x", "200", "-y", "50",
                 "-e", f"SPECCONSOLE_FIRST_FRAME_FILE={frame}", "-e", f"PYTHONPATH={trees[name]}",
                 f"exec {sys.executable} -m specconsole --config {lab.config_path}")
            pid = None
            while not frame.exists() and time.monotonic() - t0 < 60:
                pid = pid or int(tmux("display", "-p", "-t", f"c{i}", "#{pane_pid}").strip() or 0) or None
                time.sleep(0.005)
            if not frame.exists():
                print(f"{name}: no full frame within 60 s", file=sys.stderr)
                return 1
            times[name].append(time.monotonic() - t0)
            cpu[name].append(cpu_until_now(pid))
            time.sleep(1.5)
            tmux("kill-session", "-t", f"c{i}")
            time.sleep(0.5)
        for i in range(2 * args.runs):  # the headless first snapshot, the trees taking turns again
            name = list(trees)[i % 2]
            t0 = time.monotonic()
            done = subprocess.run([sys.executable, "-m", "specconsole", "status", "--json", "--config",
                                   str(lab.config_path)], env={**os.environ, "PYTHONPATH": str(trees[name])},
                                  capture_output=True, text=True, check=False, timeout=120)
            if done.returncode != 0:
                print(f"{name}: status --json exited {done.returncode}: {done.stderr.strip()[-300:]}", file=sys.stderr)
                return 1
            snapshot[name].append(time.monotonic() - t0)
            time.sleep(0.5)
    finally:
        tmux("kill-server")
        lab.down()
    for name, runs in times.items():
        print(f"{name:>5}: first full frame median {statistics.median(runs):.3f} s "
              f"({', '.join(f'{t:.2f}' for t in runs)}), the console's CPU-s until then median "
              f"{statistics.median(cpu[name]):.3f} ({', '.join(f'{t:.2f}' for t in cpu[name])})  [{trees[name]}]")
    print(f"this / base = {statistics.median(times['this']) / statistics.median(times['base']):.2f} "
          f"(CPU-s {statistics.median(cpu['this']) / statistics.median(cpu['base']):.2f})")
    for name, runs in snapshot.items():
        print(f"{name:>5}: `status --json` (start to exit, its first complete snapshot) median "
              f"{statistics.median(runs):.3f} s ({', '.join(f'{t:.2f}' for t in runs)})")
    ratio = statistics.median(snapshot["this"]) / statistics.median(snapshot["base"])
    print(f"status --json this / base = {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
