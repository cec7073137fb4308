"""The console's idle CPU against the floor of the stack it is built on (and, for the demo, the
baseline of issue 34's first bar).

Issue 34 asks the demo TUI for 1/20 of two ``watch -n1 ssh HOST nvidia-smi`` loops, and the console
at 200 SSH hosts for 5 CPU-s/min (TUI) and 3 (headless). This bench asks what those bars leave:
how little Textual + asyncssh + httpx can spend getting the same data from the same hosts and
showing it, with none of the console's code (bench/_floor_app.py: per host one SSH connection,
the console's two nvidia-smi streams under its frame filter, ``tail -F`` of the trainer's log,
SGLang's ``/metrics`` through an SSH tunnel every second; a Line-API widget that redraws only as
many rows a second as the console's screen changed, or a JSON line a second).

The lab is started once: the two-host demo (as ``fleet_scale.py --demo``), or with ``--fleet N``
fleet_scale.py's N synthetic SSH hosts (8 GPUs each, a training log each), where the console and
the floor read the GPU source only (``--sources gpu``, as fleet_scale.py measures the issue's
200-host figures; ``--sources all``: every source). Taking turns for ``--rounds`` rounds, over
``--duration`` s each after a warm-up:

- the console's TUI in tmux at ``--size`` (``specconsole --config LAB``), its rows that changed
  from one second to the next counted from ``capture-pane`` (a row that differs counts whole: the
  floor redraws full rows);
- the floor's TUI, redrawing that many rows a second (the console's median so far);
- ``specconsole status --watch --json --interval 1`` and the floor's ``--headless``;

then, for the demo, once, the two ``watch`` loops (bench/_tools.py). CPU-s/min from ``/proc`` (the
process's own). Printed: the medians, the console against the floor, and the bars.

Usage: .venv/bin/python bench/stack_floor.py [--rounds 3] [--duration 30] [--size 200x50] [--fleet N]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _tools import compile_tree, cpu_s, missing, run_cpu_per_min, watch_loops_cpu

from specconsole.formats.nvidia_smi import QUERY_APPS_FIELDS, QUERY_GPU_FIELDS
from specconsole.lab.parts.environment import Lab, LabOptions

TMUX = ["tmux", "-L", f"specconsole-stack-floor-{os.getpid()}", "-f", "/dev/null"]
FLOOR_APP = Path(__file__).resolve().parent / "_floor_app.py"
FIELDS = ["--gpu-fields", ",".join(QUERY_GPU_FIELDS), "--apps-fields", ",".join(QUERY_APPS_FIELDS)]
#: issue 34's bars at 200 hosts, CPU-s/min
FLEET_BARS = {"tui": 5.0, "headless": 3.0}


def tmux(*args: str) -> str:
    return subprocess.run([*TMUX, *args], capture_output=True, text=True, check=False).stdout


def changed_rows(before: str, after: str) -> int:
    old, new = before.splitlines(), after.splitlines()
    return sum(1 for i in range(max(len(old), len(new)))
               if (old[i] if i < len(old) else "") != (new[i] if i < len(new) else ""))


def tui(argv: list[str], args: argparse.Namespace) -> tuple[float, float, str]:
    """(CPU-s/min over the window, median rows changed a second, the last screen)."""
    cols, rows = args.size.split("x")
    tmux("new-session", "-d", "-s", "run", "-x", cols, "-y", rows, f"exec {shlex.join(argv)}")
    pid = int(tmux("display-message", "-p", "-t", "run", "#{pane_pid}").strip())
    try:
        time.sleep(args.warmup)
        c0, w0 = cpu_s(pid), time.monotonic()
        screens = [tmux("capture-pane", "-p", "-t", "run")]
        while time.monotonic() - w0 < args.duration:
            time.sleep(1.0)
            screens.append(tmux("capture-pane", "-p", "-t", "run"))
        used, minutes = cpu_s(pid) - c0, (time.monotonic() - w0) / 60
        changes = [changed_rows(a, b) for a, b in itertools.pairwise(screens)]
        return used / minutes, statistics.median(changes), screens[-1]
    finally:
        tmux("send-keys", "-t", "run", "q")
        time.sleep(1.5)
        tmux("kill-session", "-t", "run")


def headless(argv: list[str], args: argparse.Namespace, out: Path) -> tuple[float, str]:
    """(CPU-s/min over the window, the last JSON line it printed)."""
    with out.open("w") as f:
        cpu = run_cpu_per_min(argv, args.warmup, args.duration, f)
    lines = out.read_text().splitlines()
    return cpu, lines[-1] if lines else ""


def fleet_lab(tmp: Path, hosts: int) -> tuple[Lab, Path]:
    import fleet_scale  # bench/fleet_scale.py: its synthetic hosts

    lab = fleet_scale.ssh_lab(tmp, 8)
    return lab, fleet_scale.ssh_config(lab, tmp, hosts, 1.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--size", default="200x50")
    ap.add_argument("--fleet", type=int, default=0, help="N synthetic SSH hosts instead of the demo")
    ap.add_argument("--sources", choices=("gpu", "all"), default="",
                    help="what the console and the floor read (default: all for the demo; gpu for --fleet, "
                         "as issue 34's 200-host figures)")
    ap.add_argument("--warmup", type=float, default=0.0, help="s before each window (default 8; 25 with --fleet)")
    args = ap.parse_args()
    args.warmup = args.warmup or (25.0 if args.fleet else 8.0)
    args.sources = args.sources or ("gpu" if args.fleet else "all")
    if missing("tmux", "apt-get install tmux") or missing("watch", "apt-get install procps"):
        return 2
    compile_tree()
    tmp = Path(tempfile.mkdtemp(prefix="specconsole-stack-floor-"))
    figures: dict[str, list[float]] = {"console tui": [], "floor tui": [], "console headless": [],
                                       "floor headless": []}
    rows: list[float] = []
    loops = 0.0
    if args.fleet:
        lab, config = fleet_lab(tmp, args.fleet)
    else:
        lab = Lab(tmp / "demo", LabOptions(sglang_startup_s=1.0, gpu_interval_s=1.0, sglang_interval_s=1.0),
                  say=lambda _m: None)
        config = lab.config_path
    hosts = args.fleet or 2
    console = [sys.executable, "-m", "specconsole"]
    floor = [sys.executable, str(FLOOR_APP), "--config", str(config), *FIELDS]
    if args.sources == "gpu":
        import fleet_scale  # its console with the GPU source only

        console = fleet_scale.console_argv(args, "gpu")
        floor.append("--gpu-only")
    try:
        if not args.fleet:
            lab.up()
            time.sleep(8)  # the trainer's first steps, SGLang loaded
        tmux("new-session", "-d", "-s", "keep", "sleep 86400")
        for r in range(args.rounds):
            cpu, changed, _ = tui([*console, "--config", str(config)], args)
            figures["console tui"].append(cpu)
            rows.append(changed)
            n = round(statistics.median(rows))
            cpu, _, screen = tui([*floor, "--rows", str(n)], args)
            if "gpu 0" not in screen:
                print(f"the floor's TUI showed no GPU rows; its screen:\n{screen}", file=sys.stderr)
                return 1
            figures["floor tui"].append(cpu)
            cpu, line = headless([*console, "status", "--config", str(config), "--json", "--watch", "--interval",
                                  "1"], args, tmp / "console.jsonl")
            figures["console headless"].append(cpu)
            if len(json.loads(line or "{}").get("hosts", [])) != hosts:
                print(f"the console's status printed no line for its {hosts} hosts: {line[:300]}", file=sys.stderr)
                return 1
            cpu, line = headless([*floor, "--headless"], args, tmp / "floor.jsonl")
            figures["floor headless"].append(cpu)
            gpus = json.loads(line or "{}").get("gpus", {})
            if len(gpus) != hosts or any(not burst or any(len(c) != len(QUERY_GPU_FIELDS) for c in burst)
                                         for burst in gpus.values()):
                print(f"the floor's headless run has no whole GPU rows for its {hosts} hosts: {line[:300]}",
                      file=sys.stderr)
                return 1
            print(f"round {r + 1}: " + "; ".join(f"{k} {v[-1]:.2f}" for k, v in figures.items())
                  + f" CPU-s/min; the console's TUI changed {changed:g} rows a second", flush=True)
        if not args.fleet and args.sources == "all":
            _first, loops = watch_loops_cpu(lab, tmux, args.duration)
    finally:
        subprocess.run([*TMUX, "kill-server"], capture_output=True, check=False)
        lab.down()
    med = {k: statistics.median(v) for k, v in figures.items()}
    what = (f"{args.fleet} synthetic SSH hosts" if args.fleet else "two-host demo") + f", {args.sources} sources,"
    print(f"\n{what} idle, {args.size}, medians of {args.rounds} rounds of {args.duration:g} s (CPU-s/min):")
    for mode in ("tui", "headless"):
        c, f = med[f"console {mode}"], med[f"floor {mode}"]
        shown = f", {round(statistics.median(rows))} rows redrawn a second" if mode == "tui" else ", JSON a second"
        line = f"  {mode}: console {c:.2f}, the stack's floor{shown} {f:.2f}; console / floor {c / f:.2f}"
        bar = FLEET_BARS[mode] if args.fleet == 200 else (loops / 20 if mode == "tui" and loops else None)
        if bar is not None:
            line += f"; bar {bar:.2f}: {bar - f:+.2f} above the floor for all the console does beyond it"
        print(line)
    if loops:
        print(f"  two watch -n1 ssh HOST nvidia-smi loops: {loops:.2f} (the bar is 1/20 of them); "
              f"console TUI / loops {med['console tui'] / loops:.3f}, floor TUI / loops {med['floor tui'] / loops:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
