"""Where the two-host demo's idle CPU goes: the TUI split into its redraw, its frame and the rest,
beside headless ``status --watch --json`` on the same lab (the data without a screen).

The demo lab (torchrun job, SGLang simulator, Python GPU double; as ``fleet_scale.py --demo``
runs it) is started once. Then, taking turns for ``--rounds`` rounds, over ``--duration`` s each:

- the TUI in tmux (``--size``), with two wrappers put in by ``python -c``: the CPU time of its
  event loop's thread inside ``ConsoleScreen.refresh_panes`` (the redraw: every pane's text, the
  alerts, the plots' history) and inside ``Screen._compositor_refresh`` (the frame: Textual renders
  the changed lines and writes them), read with ``time.thread_time``; written to a file once a
  second, read at the window's start and end;
- ``specconsole status --watch --json --interval 1`` (every source, one JSON line a second).

Per round: CPU-s/min of the TUI process (``/proc``), of which the redraw and the frame, the rest
(the sources, SSH, HTTP, Textual's messages, the driver's threads), and the headless console's.
The medians are printed, and what issue 34's demo bar (0.44 CPU-s/min here, 1/20 of two ``watch
-n1 ssh`` loops) leaves against the parts that every redraw a second needs.

Usage: .venv/bin/python bench/demo_split.py [--rounds 3] [--duration 30] [--size 200x50] [--sglang-s 1]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _tools import compile_tree, cpu_s, run_cpu_per_min

from specconsole.lab.parts.environment import Lab, LabOptions

TMUX = ["tmux", "-L", f"specconsole-demo-split-{os.getpid()}", "-f", "/dev/null"]
WARMUP_S = 8.0
BAR = 0.44

#: runs the console with the two timers in; their totals go to $SPLIT_FILE once a second
WRAPPED = """
import json, os, sys, threading, time
from textual.screen import Screen
from specconsole.ui.console.console_screen import ConsoleScreen
spent = {"redraw": 0.0, "frame": 0.0}
def timed(cls, name, key):
    orig = getattr(cls, name)
    def run(self, *args, **kwargs):
        t = time.thread_time()
        try:
            return orig(self, *args, **kwargs)
        finally:
            spent[key] += time.thread_time() - t
    setattr(cls, name, run)
timed(ConsoleScreen, "refresh_panes", "redraw")
timed(Screen, "_compositor_refresh", "frame")
def write():
    path = os.environ["SPLIT_FILE"]
    while True:
        time.sleep(1.0)
        with open(path + ".tmp", "w") as f:
            json.dump(spent, f)
        os.replace(path + ".tmp", path)
threading.Thread(target=write, daemon=True).start()
from specconsole.launch import main
sys.exit(main())
"""


def tmux(*args: str) -> str:
    return subprocess.run([*TMUX, *args], capture_output=True, text=True, check=False).stdout


def read_split(path: Path) -> dict[str, float]:
    for _ in range(30):
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            time.sleep(0.1)
    raise RuntimeError(f"no figures in {path}: did the console start?")


def tui_round(config: Path, tmp: Path, args: argparse.Namespace) -> tuple[float, float, float]:
    """(CPU-s/min of the process, of its redraw, of its frame) over the window."""
    split = tmp / f"split-{time.monotonic_ns()}.json"
    cols, rows = args.size.split("x")
    cmd = shlex.join([sys.executable, "-c", WRAPPED, "--config", str(config)])
    tmux("new-session", "-d", "-s", "tui", "-x", cols, "-y", rows, "-e", f"SPLIT_FILE={split}", f"exec {cmd}")
    pid = int(tmux("display-message", "-p", "-t", "tui", "#{pane_pid}").strip())
    try:
        time.sleep(WARMUP_S)
        s0, c0, w0 = read_split(split), cpu_s(pid), time.monotonic()
        time.sleep(args.duration)
        s1, c1, w1 = read_split(split), cpu_s(pid), time.monotonic()
        minutes = (w1 - w0) / 60
        return (c1 - c0) / minutes, (s1["redraw"] - s0["redraw"]) / minutes, (s1["frame"] - s0["frame"]) / minutes
    finally:
        tmux("send-keys", "-t", "tui", "q")
        time.sleep(1.5)
        tmux("kill-session", "-t", "tui")


def headless_round(config: Path, args: argparse.Namespace) -> float:
    return run_cpu_per_min([sys.executable, "-m", "specconsole", "status", "--watch", "--json", "--interval", "1",
                            "--config", str(config)], WARMUP_S, args.duration)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--size", default="200x50")
    ap.add_argument("--sglang-s", type=float, default=1.0, help="the demo's SGLang poll interval (its own: 1)")
    args = ap.parse_args()
    compile_tree()
    tmp = Path(tempfile.mkdtemp(prefix="specconsole-demo-split-"))
    lab = Lab(tmp / "demo", LabOptions(sglang_startup_s=1.0, gpu_interval_s=1.0, sglang_interval_s=args.sglang_s),
              say=lambda _m: None)
    tui: list[tuple[float, float, float]] = []
    headless: list[float] = []
    try:
        lab.up()
        time.sleep(8)  # the trainer's first steps, SGLang loaded
        tmux("new-session", "-d", "-s", "keep", "sleep 86400")
        for r in range(args.rounds):
            tui.append(tui_round(lab.config_path, tmp, args))
            headless.append(headless_round(lab.config_path, args))
            t, d, f = tui[-1]
            print(f"round {r + 1}: TUI {t:.2f} CPU-s/min (redraw {d:.2f}, frame {f:.2f}, rest {t - d - f:.2f}); "
                  f"headless {headless[-1]:.2f}", flush=True)
    finally:
        subprocess.run([*TMUX, "kill-server"], capture_output=True, check=False)
        lab.down()
    med = statistics.median
    t, d, f = (med(x[i] for x in tui) for i in range(3))
    h = med(headless)
    print(f"\ntwo-host demo idle, {args.size}, medians of {args.rounds} rounds of {args.duration:g} s (CPU-s/min):")
    print(f"  TUI {t:.2f} = redraw {d:.2f} + frame {f:.2f} + rest {t - d - f:.2f}")
    print(f"  headless status --watch --json (the same sources, no screen): {h:.2f}")
    print(f"  redraw + frame + headless = {d + f + h:.2f}; issue 34's bar: {BAR} "
          f"({(d + f + h) / BAR:.1f}x the bar before the rest is counted)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
