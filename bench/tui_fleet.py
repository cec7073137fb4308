"""The console (TUI) watching a synthetic fleet: CPU, first full frame, sample ages, quit time.

Starts the lab's two sshds (no trainer, no SGLang), writes a fleet config of N SSH hosts (each its
own connection with a ``tail -F`` training stream and an ``nvidia-smi -lms`` stream of the GPU
double at 1 Hz; :mod:`specconsole.lab.fleet`), runs the real ``specconsole`` in a tmux pane of
its own tmux server, and for each N measures:

- first full frame: from starting the console until every host has all its data on screen
  (the console marks it in ``SPECCONSOLE_FIRST_FRAME_FILE``);
- CPU-s/min: the console process's CPU time (``/proc/PID/stat`` utime+stime, all threads) over
  the window, after a settle period; the machine's load average is printed beside it;
- sample ages: the ages the fleet view shows (``● 0.4s``, ``STALE 3.1s``), read from the pane
  every 0.5 s over the window (worst first puts stale hosts on the visible rows), p50/p99/max;
- quit: from sending ``q`` until the console's pid is gone.

The lab's GPU double is a Python process per stream (two per host: 400 at 200 hosts, more CPU than
this machine has). Unless ``--python-gpu-double``, the hosts' ``nvidia-smi`` is replaced by a
``tail -F`` of two shared files that one writer thread appends a batch of readings to each
second (utilization varies, so cells change): the same lines, the same streams over SSH, and
nearly no CPU on the host side.

``--profile FILE`` runs the console under cProfile (main thread: the event loop) and writes
its stats for the window to FILE (``python -m pstats FILE``); the CPU figures then include
cProfile's own overhead.

Usage: .venv/bin/python bench/tui_fleet.py [--hosts 50,200] [--seconds 30] [--size 200x50]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from specconsole.lab.environment import Lab, LabOptions
from specconsole.lab.fleet import write_fleet_config, write_training_log
from specconsole.sources.gpu import QUERY_APPS_FIELDS, QUERY_GPU_FIELDS

EXE = Path(sys.executable).parent / "specconsole"
EXE_USED = [EXE]  # --exe: another build's specconsole (a baseline in the same run)
TMUX = ["tmux", "-L", f"specconsole-tui-bench-{os.getpid()}", "-f", "/dev/null"]
TICK = os.sysconf("SC_CLK_TCK")
AGE = re.compile(r"(?:●|STALE) (\d+(?:\.\d+)?s|\d+m\d\ds)")

#: Run under cProfile: the stats of the window are dumped on SIGUSR1 (the console os._exits on q).
PROFILED = """
import cProfile, os, signal, sys
from specconsole.cli import main
prof = cProfile.Profile()
signal.signal(signal.SIGUSR2, lambda *_: prof.enable())
signal.signal(signal.SIGUSR1, lambda *_: (prof.disable(), prof.dump_stats(os.environ["BENCH_PROFILE"])))
raise SystemExit(main(sys.argv[1:]))
"""

class CheapGpu(threading.Thread):
    """Appends one batch of query-gpu and query-compute-apps lines per second to shared files."""

    def __init__(self, lab: Lab, folder: Path) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.gpu, self.apps = folder / "gpu.csv", folder / "apps.csv"
        double = lab.root("train") / "bin" / "nvidia-smi"
        env = dict(os.environ, PATH=f"{double.parent}:{os.environ.get('PATH', '')}")
        self.gpu_lines = subprocess.run([str(double), f"--query-gpu={','.join(QUERY_GPU_FIELDS)}",
                                         "--format=csv,noheader,nounits"], capture_output=True, text=True,
                                        env=env, check=True).stdout.splitlines()
        self.apps_text = subprocess.run([str(double), f"--query-compute-apps={','.join(QUERY_APPS_FIELDS)}",
                                         "--format=csv,noheader,nounits"], capture_output=True, text=True,
                                        env=env, check=True).stdout
        self.gpu.touch()
        self.apps.touch()
        for name in lab.state.hosts:
            real = lab.root(name) / "bin" / "nvidia-smi"
            original = real.with_name("nvidia-smi.python")
            if not original.exists():
                real.rename(original)
            real.write_text(f"#!/bin/sh\ncase \"$*\" in\n"
                            f"  *--query-gpu=*-lms*) exec tail -n 0 -F {self.gpu} ;;\n"
                            f"  *--query-compute-apps=*-lms*) exec tail -n 0 -F {self.apps} ;;\n"
                            f"  *) exec {original} \"$@\" ;;\nesac\n")
            real.chmod(0o755)

    def run(self) -> None:
        tick = 0
        while not self.stop.wait(1.0 - time.time() % 1.0):
            tick += 1
            lines = []
            for i, line in enumerate(self.gpu_lines):
                fields = line.split(", ")
                if len(fields) > 3 and fields[3].strip().isdigit():
                    fields[3] = str((int(fields[3]) + 7 * tick + 13 * i) % 101)
                lines.append(", ".join(fields))
            with self.gpu.open("a") as f:
                f.write("\n".join(lines) + "\n")
            with self.apps.open("a") as f:
                f.write(self.apps_text)


def tmux(*args: str, check: bool = True) -> str:
    res = subprocess.run([*TMUX, *args], capture_output=True, text=True, check=False)
    if check and res.returncode != 0:
        raise RuntimeError(f"tmux {' '.join(args[:3])}: {res.stderr.strip()}")
    return res.stdout


def cpu_s(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def age_s(text: str) -> float:
    if "m" in text:
        m, s = text.rstrip("s").split("m")
        return int(m) * 60 + int(s)
    return float(text.rstrip("s"))


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def one(lab: Lab, tmp: Path, hosts: int, seconds: float, size: tuple[int, int], settle: float,
        profile: Path | None, config: Path | None = None) -> dict[str, float]:
    run = tmp / f"n{hosts}"
    run.mkdir()
    if config is None:
        config = write_fleet_config(lab, run / "fleet.toml", hosts, log_path=tmp / "train.jsonl",
                                    audit_log=run / "audit.log", state_dir=run / "state")
    frame = run / "first-frame"
    session = f"n{hosts}"
    if profile is not None:
        script = run / "profiled.py"
        script.write_text(PROFILED)
        command = f"exec {sys.executable} {script} --config {config}"
    else:
        command = f"exec {EXE_USED[0]} --config {config}"
    t0 = time.monotonic()
    tmux("new-session", "-d", "-s", session, "-x", str(size[0]), "-y", str(size[1]),
         "-e", f"SPECCONSOLE_FIRST_FRAME_FILE={frame}", "-e", f"BENCH_PROFILE={profile}", command)
    pid = int(tmux("display-message", "-p", "-t", session, "#{pane_pid}").strip())
    while not frame.exists() and time.monotonic() - t0 < 120 and alive(pid):
        time.sleep(0.05)
    first = time.monotonic() - t0 if frame.exists() else float("nan")
    time.sleep(settle)
    ages: list[float] = []
    load0 = os.getloadavg()[0]
    if profile is not None:
        os.kill(pid, signal.SIGUSR2)
    c0, w0 = cpu_s(pid), time.monotonic()
    while time.monotonic() - w0 < seconds:
        ages += [age_s(m) for m in AGE.findall(tmux("capture-pane", "-p", "-t", session))]
        time.sleep(0.5)
    c1, w1 = cpu_s(pid), time.monotonic()
    if profile is not None:
        os.kill(pid, signal.SIGUSR1)
        time.sleep(2)
    load1 = os.getloadavg()[0]
    t_q = time.monotonic()
    tmux("send-keys", "-t", session, "q")
    while alive(pid) and time.monotonic() - t_q < 30:
        time.sleep(0.005)
    quit_s = time.monotonic() - t_q
    if alive(pid):
        print(f"bench: the console did not leave on q; its screen:\n{tmux('capture-pane', '-p', '-t', session)}",
              flush=True)
        os.kill(pid, signal.SIGKILL)
    tmux("kill-session", "-t", session, check=False)
    return {"hosts": hosts, "cpu_s_per_min": (c1 - c0) / ((w1 - w0) / 60), "first_frame_s": first,
            "age_p50": statistics.median(ages) if ages else float("nan"), "age_p99": pct(ages, 0.99),
            "age_max": max(ages, default=float("nan")), "ages": len(ages), "quit_s": quit_s,
            "load": (load0 + load1) / 2}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="50,200")
    ap.add_argument("--seconds", type=float, default=30.0, help="measurement window per fleet size")
    ap.add_argument("--settle", type=float, default=5.0, help="seconds after the first full frame")
    ap.add_argument("--size", default="200x50", help="terminal size, COLSxROWS")
    ap.add_argument("--profile", type=Path, help="cProfile the console over the window; stats to this file")
    ap.add_argument("--python-gpu-double", action="store_true", help="keep the lab's Python nvidia-smi double")
    ap.add_argument("--demo", action="store_true",
                    help="also the two-host demo lab (torchrun job, SGLang simulator, Python GPU double), first")
    ap.add_argument("--exe", type=Path, help="the specconsole to run (default: this venv's)")
    args = ap.parse_args()
    if args.exe:
        EXE_USED[0] = args.exe
    if not shutil.which("tmux"):
        print("bench: needs tmux", file=sys.stderr)
        return 2
    size = tuple(int(x) for x in args.size.split("x"))
    tmp = Path(tempfile.mkdtemp(prefix="specconsole-tui-"))
    lab = Lab(tmp / "lab", LabOptions(trainer=False, sglang=False), say=lambda _m: None)
    lab.up()
    write_training_log(tmp / "train.jsonl")
    cheap = None if args.python_gpu_double else CheapGpu(lab, tmp)
    if cheap is not None:
        cheap.start()
    print(f"bench: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; window {args.seconds:g}s, "
          f"terminal {args.size}", flush=True)
    try:
        tmux("new-session", "-d", "-s", "keep", "sleep 86400")
        if args.demo:
            demo = Lab(tmp / "demo", LabOptions(sglang_startup_s=1.0, gpu_interval_s=1.0, sglang_interval_s=1.0),
                       say=lambda _m: None)
            try:
                demo.up()
                time.sleep(8)  # the trainer's first steps, SGLang loaded
                r = one(demo, tmp, 2, args.seconds, (size[0], size[1]), args.settle, args.profile,
                        config=demo.config_path)
            finally:
                demo.down()
            print(f" demo (2 hosts, all sources): {r['cpu_s_per_min']:6.2f} CPU-s/min idle (load {r['load']:.1f}), "
                  f"first full frame {r['first_frame_s']:5.1f} s, quit {r['quit_s']:.2f} s", flush=True)
        for n in (int(x) for x in args.hosts.split(",") if x):
            r = one(lab, tmp, n, args.seconds, (size[0], size[1]), args.settle, args.profile)
            print(f"{n:>5} hosts: {r['cpu_s_per_min']:6.2f} CPU-s/min (load {r['load']:.1f}), first full frame "
                  f"{r['first_frame_s']:5.1f} s, shown ages p50 {r['age_p50']:.1f} s p99 {r['age_p99']:.1f} s "
                  f"max {r['age_max']:.1f} s ({r['ages']:.0f} read), quit {r['quit_s']:.2f} s", flush=True)
    finally:
        if cheap is not None:
            cheap.stop.set()
        subprocess.run([*TMUX, "kill-server"], capture_output=True, check=False)
        lab.down()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
