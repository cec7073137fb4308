"""What N hosts cost the console: the TUI and headless ``status --watch --json`` over SSH, and
the Prometheus path, each beside the two-host figure measured in the same run.

SSH hosts: the lab's two sshds (no trainer, no SGLang) serve N ``[[hosts]]`` entries, each its
own SSH connection running the GPU source only. Their ``nvidia-smi`` is a cheap bash stand-in
written by this bench (``--gpus`` fixed rows per ``-lms`` period, paced by ``read -t`` on a FIFO:
no process per line), so the hosts' side costs little and the figures are the console's.
A real fleet has one sshd per host, on its own CPU; here two sshds on this machine stand in for
N, so they are set up as N hosts would look to the console: ``MaxStartups 1024`` (the lab's 64
drops the handshakes beyond 64 at once, and the console retries them with backoff) and no
login-shell rc per session (``SHLVL=1``: bash then skips ``~/.bashrc``, whose ``pyenv init``
costs ~0.2 s per session, tens of CPU-s for 400 sessions at 200 hosts; ``--host-rc`` keeps it).
Prometheus (``--modes prom``): ``specconsole.lab.testing.prometheus_fleet`` (an exporter double + a real
``prometheus``) for ``--prom-n`` hosts, with the TUI and headless status reading through it;
skipped with a note when that module or the ``prometheus`` binary is not in this tree/machine.

Figures per run (the console is a child process; everything is read from ``/proc``):

- CPU-s/min: the console process's utime+stime over the window, per minute;
- RSS: the console's VmRSS at the end of the window (MiB);
- first: TUI: until the app painted a frame with every host complete (it writes
  ``SPECCONSOLE_FIRST_FRAME_FILE``), with the CPU-s the console and the lab's sshds (the
  synthetic hosts' side, which a real fleet spends on its own machines) used until then;
  headless: until the first JSON line with every host's GPU sample ok;
- p99 age: headless: receipt time of each JSON line minus each host's ``gpu.at`` (so a late line
  counts); TUI: the ages painted on screen, read with ``tmux capture-pane`` once a second (only
  what is visible; worst-first puts stale hosts on the visible rows): the fleet view's
  ``● 0.4s`` / ``STALE 3.1s`` / ``STALE 2m05s`` and the host panes' ``0.4s ago`` / ``5.4s old``;
- tick: headless: mean spacing of the JSON lines (``--interval``, 1 s);
- quit: from SIGINT (headless) / ``q`` (TUI) until the pid is gone.

``--demo`` first measures the two-host demo lab (torchrun job, SGLang simulator, Python GPU
double; all sources) idle in the TUI: the row "two-host demo idle CPU-s/min".
``--profile FILE`` runs each console (TUI and headless) under cProfile (its main thread: the event loop),
enabled by SIGUSR2 at the start of the window and dumped by SIGUSR1 at its end to
FILE.<mode>-<N> (``python -m pstats FILE.tui-200``); CPU figures then include cProfile's own cost.

The machine may be shared: CPU-s is the figure to compare, wall-clock ones move with the load
(the 1-minute load average is printed).

Usage: .venv/bin/python bench/fleet_scale.py [--n 50,200] [--duration S] [--modes tui,headless,prom]
       [--prom-n 200,1000] [--gpus 8] [--demo] [--profile FILE] [--size 200x50]
       [--src DIR (run the console from another source tree)]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from _tools import compile_tree, cpu_s, watch_loops_cpu  # bench/_tools.py (scripts run from bench/)

from specconsole.lab.parts.environment import Lab, LabOptions
from specconsole.lab.procs import descendants
from specconsole.lab.testing.synthetic_fleet import write_fleet_config, write_training_log

WARMUP_S = 3.0
TMUX = ["tmux", "-L", f"specconsole-fleet-bench-{os.getpid()}", "-f", "/dev/null"]
#: Ages on screen: the fleet view's ``● 0.4s`` / ``STALE 3.1s`` / ``STALE 2m05s`` (group 1), the
#: host panes' ``0.4s ago`` / ``5.4s old`` (group 2).
AGE = re.compile(r"(?:●|STALE) (\d+(?:\.\d+)?s|\d+m\d\ds)|(?<![\w.])(\d+(?:\.\d+)?)s (?:ago|old)\b")

# A cheap nvidia-smi: the console's -lms query streams, no process per line, and no fork at all
# (``printf -v``, not ``$(printf ...)``): 200 hosts' streams starting at once on this machine's
# two cores would otherwise fork 3,400 times, charged to the first frame.
CHEAP_SMI = r"""#!/bin/bash
# bench/fleet_scale.py's stand-in for nvidia-smi: one burst of rows per -lms period
ms=1000; apps=0; loop=0; a=("$@")
for ((i = 0; i < ${#a[@]}; i++)); do
  case ${a[i]} in --query-compute-apps*) apps=1;; -lms) ms=${a[i+1]}; loop=1;; esac
done
exec 4<>"__FIFO__"
printf -v t '%d.%03d' $((ms / 1000)) $((ms % 1000))  # printf -v, not $(...): no fork
if [ $apps = 1 ]; then  # no process on these GPUs: nothing printed, once or every period
  [ $loop = 1 ] || exit 0
  while :; do read -r -t 3600 -u 4 _; done
fi
u=()
for ((g = 0; g < __GPUS__; g++)); do printf -v 'u[g]' 'GPU-%08d-aaaa-bbbb-cccc-%012d' $g $g; done
while :; do  # readings move every period, as real ones do (bash builtins only)
  for ((g = 0; g < __GPUS__; g++)); do
    p=$((RANDOM % 400 + 100)).$((RANDOM % 90 + 10))
    echo "$g, ${u[g]}, NVIDIA H200, $((RANDOM % 100)), 12, 20480, 143771, $p, 700.00, 55, 1980, P0"
  done
  [ $loop = 1 ] || exit 0
  read -r -t "$t" -u 4 _
done
"""


# The console with its hosts' GPU source only (what the issue measured): every [[hosts]] entry
# needs a role table, so the training source is dropped from each monitor before it starts.
GPU_ONLY = (
    "import sys, specconsole.monitor as m\n"
    "build = m.HostMonitor._build_sources\n"
    "m.HostMonitor._build_sources = lambda self: {k: v for k, v in build(self).items() if k == 'gpu'}\n"
    "from specconsole.cli import main\n"
    "raise SystemExit(main(sys.argv[1:]))\n"
)


#: ``--profile``: cProfile of the main thread, on at SIGUSR2, dumped at SIGUSR1 (the console
#: leaves with os._exit on q, so the stats are written before that).
PROFILED = (
    "import cProfile, os, signal\n"
    "prof = cProfile.Profile()\n"
    "signal.signal(signal.SIGUSR2, lambda *_: prof.enable())\n"
    "signal.signal(signal.SIGUSR1, lambda *_: (prof.disable(), prof.dump_stats(os.environ['BENCH_PROFILE'])))\n"
)
MAIN = "import sys\nfrom specconsole.cli import main\nraise SystemExit(main(sys.argv[1:]))\n"


def console_argv(args: argparse.Namespace, sources: str | None = None, profiled: bool = False) -> list[str]:
    """How to start the console (``specconsole ARGS`` = this + ARGS)."""
    code = PROFILED if profiled else ""
    if (sources or args.sources) == "gpu":
        code += GPU_ONLY
    elif profiled:
        code += MAIN
    else:
        return [sys.executable, "-m", "specconsole"]
    return [sys.executable, "-c", code]


def age_s(match: re.Match[str]) -> float:
    """Seconds from an :data:`AGE` match (``2m05s``, ``3.1s``, ``0.4``)."""
    text = (match.group(1) or match.group(2)).removesuffix("s")
    if "m" in text:
        minutes, seconds = text.split("m")
        return int(minutes) * 60 + int(seconds)
    return float(text)


@dataclass
class Run:
    mode: str
    hosts: int
    cpu_s_min: float = float("nan")
    rss_mib: float = float("nan")
    first_s: float = float("nan")
    p99_age_s: float = float("nan")
    tick_s: float = float("nan")
    quit_s: float = float("nan")
    #: CPU-s until the first full frame: the console's, and the synthetic hosts' sshds' (TUI)
    first_cpu_s: float = float("nan")
    first_hosts_cpu_s: float = float("nan")
    note: str = ""
    ages: list[float] = field(default_factory=list)


def hosts_cpu(lab: Lab | None) -> float:
    """CPU-s of the lab's sshds so far: the live processes below them and what they reaped."""
    if lab is None:
        return float("nan")
    masters = [h.sshd_pid for h in lab.state.hosts.values() if h.sshd_pid]
    total = 0.0
    for pid in [*masters, *descendants(*masters)]:
        with contextlib.suppress(OSError, IndexError, ValueError):
            total += cpu_s(pid, children=True)
    return total


def proc_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def p99(values: list[float]) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def load() -> str:
    with contextlib.suppress(OSError):
        return Path("/proc/loadavg").read_text().split()[0]
    return "?"


def console_env(src: str | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, **(extra or {})}
    if src:
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def measure_window(pid: int, duration: float, during: Callable[[], None] | None = None) -> tuple[float, float]:
    """CPU-s/min and RSS of ``pid`` over ``duration`` s (``during`` called about once a second)."""
    c0, w0 = cpu_s(pid), time.monotonic()
    end = w0 + duration
    while time.monotonic() < end and alive(pid):
        time.sleep(min(1.0, max(0.0, end - time.monotonic())))
        if during is not None:
            during()
    c1, w1 = cpu_s(pid), time.monotonic()
    return (c1 - c0) / ((w1 - w0) / 60), proc_rss_mib(pid)


# ------------------------------------------------------------------------------ headless

def run_headless(config: Path, hosts: int, args: argparse.Namespace, mode: str = "headless") -> Run:
    r = Run(mode, hosts)
    profile = Path(f"{args.profile}.{mode}-{hosts}") if args.profile else None
    cmd = [*console_argv(args, profiled=profile is not None), "status", "--config", str(config), "--json",
           "--watch", "--interval", str(args.interval), "--timeout", str(args.settle)]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1 << 20,
                            env=console_env(args.src, {"BENCH_PROFILE": str(profile)} if profile else None))
    state: dict[str, Any] = {"first": None, "recording": False, "ticks": [], "lines": 0}

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            now, mono = time.time(), time.monotonic()
            state["lines"] += 1
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            gpus = [h.get("gpu") for h in doc.get("hosts", [])]
            ok = len(gpus) == hosts and all(g and g["value"]["state"] == "ok" for g in gpus)
            if ok and state["first"] is None:
                state["first"] = mono - t0
            if state["recording"]:
                state["ticks"].append(mono)
                r.ages.extend(now - datetime.fromisoformat(g["at"]).timestamp() for g in gpus if g)

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        deadline = t0 + args.settle
        while state["first"] is None and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        if state["first"] is None:
            r.note = f"no complete JSON within {args.settle:g} s ({state['lines']} lines)"
        r.first_s = state["first"] if state["first"] is not None else float("nan")
        time.sleep(WARMUP_S)
        if proc.poll() is not None:
            assert proc.stderr is not None
            r.note += f" exited {proc.returncode}: {proc.stderr.read().strip()[-300:]}"
            return r
        state["recording"] = True
        if profile is not None:
            os.kill(proc.pid, signal.SIGUSR2)
        r.cpu_s_min, r.rss_mib = measure_window(proc.pid, args.duration)
        if profile is not None:
            os.kill(proc.pid, signal.SIGUSR1)
            time.sleep(2)
            r.note += f" profile: {profile}"
        state["recording"] = False
        ticks = state["ticks"]
        if len(ticks) > 1:
            r.tick_s = (ticks[-1] - ticks[0]) / (len(ticks) - 1)
        r.p99_age_s = p99(r.ages)
        t1 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
            r.quit_s = time.monotonic() - t1
        except subprocess.TimeoutExpired:
            r.note += " still running 30 s after SIGINT (killed)"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        thread.join(5)
    return r


# ------------------------------------------------------------------------------------ TUI

def tmux(*args: str, check: bool = True) -> str:
    res = subprocess.run([*TMUX, *args], capture_output=True, text=True, check=False)
    if check and res.returncode != 0:
        raise RuntimeError(f"tmux {' '.join(args[:3])}: {res.stderr.strip()}")
    return res.stdout


def run_tui(config: Path, hosts: int, args: argparse.Namespace, mode: str = "tui",
            sources: str | None = None, lab: Lab | None = None) -> Run:
    r = Run(mode, hosts)
    if not shutil.which("tmux"):
        r.note = "skipped: needs tmux"
        return r
    run = config.parent
    frame = run / f"first-frame-{uuid.uuid4().hex[:6]}"
    session = f"{mode}{hosts}"
    exports = ["-e", f"SPECCONSOLE_FIRST_FRAME_FILE={frame}"]
    profile = Path(f"{args.profile}.{mode}-{hosts}") if args.profile else None
    if profile is not None:
        exports += ["-e", f"BENCH_PROFILE={profile}"]
    if args.src:
        exports += ["-e", f"PYTHONPATH={console_env(args.src)['PYTHONPATH']}"]
    cols, rows = args.size.split("x")
    hosts_cpu0 = hosts_cpu(lab)
    t0 = time.monotonic()
    tmux("new-session", "-d", "-s", session, "-x", cols, "-y", rows, *exports,
         f"exec {shlex.join(console_argv(args, sources, profile is not None))} --config {config}")
    pid = int(tmux("display-message", "-p", "-t", session, "#{pane_pid}").strip())
    try:
        deadline = t0 + args.settle
        while not frame.exists() and time.monotonic() < deadline and alive(pid):
            time.sleep(0.05)
        if frame.exists():
            r.first_s = time.monotonic() - t0
            r.first_cpu_s = cpu_s(pid)
            r.first_hosts_cpu_s = hosts_cpu(lab) - hosts_cpu0
        else:
            r.note = f"no full frame within {args.settle:g} s"
        time.sleep(WARMUP_S)

        def screen_ages() -> None:
            text = tmux("capture-pane", "-p", "-t", session, check=False)
            r.ages.extend(age_s(m) for m in AGE.finditer(text))

        if profile is not None:
            os.kill(pid, signal.SIGUSR2)
        r.cpu_s_min, r.rss_mib = measure_window(pid, args.duration, screen_ages)
        if profile is not None:
            os.kill(pid, signal.SIGUSR1)
            time.sleep(2)
            r.note += f" profile: {profile}"
        r.p99_age_s = p99(r.ages)
        if not r.ages:
            r.note += " (no ages on screen)"
        t1 = time.monotonic()
        tmux("send-keys", "-t", session, "q")
        while alive(pid) and time.monotonic() - t1 < 30:
            time.sleep(0.005)
        if alive(pid):
            r.note += " still running 30 s after q (killed)"
        else:
            r.quit_s = time.monotonic() - t1
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
        tmux("kill-session", "-t", session, check=False)
    return r


# ---------------------------------------------------------------------------- SSH fleet

def demo_run(tmp: Path, args: argparse.Namespace) -> list[Run]:
    """The two-host demo lab (torchrun job, SGLang simulator, Python GPU double) idle in the TUI,
    then, on the same lab and for as long, the baseline: a ``watch -n1 ssh HOST nvidia-smi`` loop
    per host (what the issue measured the console against: a figure of this machine's speed)."""
    demo = Lab(tmp / "demo", LabOptions(sglang_startup_s=1.0, gpu_interval_s=1.0, sglang_interval_s=args.demo_sglang_s),
               say=lambda _m: None)
    try:
        demo.up()
        time.sleep(8)  # the trainer's first steps, SGLang loaded
        console = run_tui(demo.config_path, 2, args, "demo-tui", sources="all")
        watch = Run("demo-watch", 2)
        watch.first_s, watch.cpu_s_min = watch_loops_cpu(demo, tmux, args.duration)
        watch.note = "2 x watch -n1 ssh HOST nvidia-smi --query-gpu=... (GPU rows only)"
        return [console, watch]
    finally:
        demo.down()


def ssh_lab(tmp: Path, gpus: int, host_rc: bool = False) -> Lab:
    lab = Lab(tmp / "lab", LabOptions(trainer=False, sglang=False), say=lambda _m: None)
    lab.up()
    fifo = tmp / "pace.fifo"
    os.mkfifo(fifo)
    script = CHEAP_SMI.replace("__FIFO__", str(fifo)).replace("__GPUS__", str(gpus))
    for name in ("train", "serve"):
        path = lab.root(name) / "bin" / "nvidia-smi"
        path.write_text(script)
        path.chmod(0o755)
        synthetic_fleet_sshd(lab, name, host_rc)
    return lab


def synthetic_fleet_sshd(lab: Lab, name: str, host_rc: bool) -> None:
    """Make one lab sshd stand in for N hosts' sshds (restarted on its port).

    A real fleet has one sshd per host, each with its own CPU; here two sshds on this machine
    serve all N hosts, so what a host spends would be charged to the console's machine:
    - ``MaxStartups``: the lab's 64 drops the connections beyond 64 unauthenticated at once
      (the console retries them with backoff), which one host's sshd never sees;
    - the login shell's rc files: bash sources ``~/.bashrc`` for every command sshd runs, and
      a ``pyenv init`` there costs ~0.2 s per session: 400 sessions at 200 hosts keep this
      machine's 2 cores busy for tens of seconds. The lab's ``SetEnv SHLVL=1`` makes bash skip
      it (it sources the rc only as a top-level shell); ``--host-rc`` takes that out.
    """
    cfg = lab.sshd_config(name)
    text = cfg.read_text().replace("MaxStartups 64", "MaxStartups 1024")
    if host_rc:
        text = text.replace(" SHLVL=1", "")
    cfg.write_text(text)
    lab.stop_sshd(name)
    lab.start_sshd(name)


def ssh_config(lab: Lab, tmp: Path, hosts: int, interval: float, frames: bool = True) -> Path:
    run = tmp / f"ssh-{hosts}-{uuid.uuid4().hex[:6]}"
    run.mkdir()
    return write_fleet_config(lab, run / "fleet.toml", hosts, log_path=write_training_log(tmp / "train.jsonl"),
                              audit_log=run / "audit.log", state_dir=run / "state",
                              gpu_interval_s=interval, gpu_frames=frames)


def prom_runs(tmp: Path, sizes: list[int], args: argparse.Namespace) -> list[Run]:
    """TUI and headless against Prometheus for each size (and 2), or one "skipped" row."""
    try:
        from specconsole.lab.testing import prometheus_fleet  # another part of issue 13; may not be in this tree
    except ImportError as err:
        return [Run("prom", 0, note=f"skipped: specconsole.lab.testing.prometheus_fleet is not in this tree ({err})")]
    binary = getattr(prometheus_fleet, "prometheus_binary", lambda: shutil.which("prometheus"))()
    if not binary:
        return [Run("prom", 0, note="skipped: prometheus is not installed (apt-get install prometheus)")]
    out: list[Run] = []
    for n in [2, *sizes]:
        work = tmp / f"prom-{n}"
        work.mkdir()
        try:
            plab = prometheus_fleet.start(work, hosts=n, gpus=args.gpus, scrape_interval_s=args.prom_scrape_s)
        except Exception as err:  # its API is another helper's; say what failed and go on
            out.append(emit(Run("prom", n, note=f"prometheus_fleet.start failed: {err}")))
            continue
        try:
            if hasattr(plab, "wait_scraped"):
                plab.wait_scraped(timeout=120)
            cfg = prometheus_fleet.write_console_config(work / "console.toml", plab, interval_s=args.prom_interval)
            for mode in ("tui", "headless"):
                if mode in args.prom_modes:
                    out.append(emit(run_tui(cfg, n, args, "prom-tui") if mode == "tui"
                                    else _renamed(run_headless(cfg, n, args), "prom-headless")))
        finally:
            plab.stop()
    return out


def _renamed(r: Run, mode: str) -> Run:
    r.mode = mode
    return r


# ------------------------------------------------------------------------------- output

def fmt(v: float, spec: str = "{:.2f}") -> str:
    return "n/a" if v != v else spec.format(v)


def first_cpu(r: Run) -> str:
    if r.first_cpu_s != r.first_cpu_s:
        return ""
    return f" (CPU-s until then: console {r.first_cpu_s:.2f}, hosts' sshds {fmt(r.first_hosts_cpu_s)})"


def emit(r: Run) -> Run:
    print(f"  {r.mode:>13} {r.hosts:>5} hosts: CPU {fmt(r.cpu_s_min)} s/min, RSS {fmt(r.rss_mib, '{:.0f}')} MiB, "
          f"first {fmt(r.first_s)} s{first_cpu(r)}, p99 age {fmt(r.p99_age_s)} s ({len(r.ages)} ages), "
          f"tick {fmt(r.tick_s, '{:.3f}')} s, "
          f"quit {fmt(r.quit_s)} s, load {load()}{' ' + r.note.strip() if r.note else ''}", flush=True)
    return r


def table(rows: list[Run]) -> None:
    base = {r.mode: r for r in rows if r.hosts == 2}
    figures = [("CPU-s/min", "cpu_s_min", "{:.2f}"), ("RSS MiB", "rss_mib", "{:.0f}"),
               ("first s", "first_s", "{:.2f}"), ("p99 age s", "p99_age_s", "{:.2f}"),
               ("tick s", "tick_s", "{:.3f}"), ("quit s", "quit_s", "{:.2f}")]
    print(f"\n{'mode':>13} {'hosts':>5} " + " ".join(f"{h:>20}" for h, _, _ in figures))
    for r in rows:
        if r.hosts == 0:
            print(f"{r.mode:>13}     -  {r.note}")
            continue
        b = base.get(r.mode)
        cells = []
        for _, key, spec in figures:
            v = fmt(getattr(r, key), spec)
            cells.append(f"{v} ({fmt(getattr(b, key), spec)})" if b is not None and r is not b else v)
        print(f"{r.mode:>13} {r.hosts:>5} " + " ".join(f"{c:>20}" for c in cells))
    print("(in brackets: the same figure at 2 hosts, this run)")
    demo, watch = (next((r for r in rows if r.mode == m), None) for m in ("demo-tui", "demo-watch"))
    if demo is not None:
        print(f"two-host demo idle CPU-s/min: {fmt(demo.cpu_s_min)}")
    if demo is not None and watch is not None:
        # issue 34's bar: 1/20 of the two watch loops measured on the same lab in the same run
        print(f"two watch -n1 ssh loops on the same lab: {fmt(watch.cpu_s_min)} CPU-s/min; console / loops = "
              f"{fmt(demo.cpu_s_min / watch.cpu_s_min, '{:.3f}')} (issue 34's bar: <= 0.050, "
              f"{fmt(watch.cpu_s_min / 20)} CPU-s/min here)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", default="50", help="SSH host counts, comma-separated (the issue: 50,200,400)")
    ap.add_argument("--modes", default="tui,headless,prom", help="any of tui, headless, prom")
    ap.add_argument("--prom-n", default="200", help="Prometheus host counts (the issue: 200,1000)")
    ap.add_argument("--prom-modes", default="tui,headless", help="what runs against Prometheus")
    ap.add_argument("--prom-scrape-s", type=float, default=5.0, help="Prometheus scrape interval")
    ap.add_argument("--prom-interval", type=float, default=5.0,
                    help="the console's [prometheus] interval_s (5: the default a config gets)")
    ap.add_argument("--duration", type=float, default=15.0, help="measurement window per run, s")
    ap.add_argument("--settle", type=float, default=120.0, help="max s to wait for the first full frame/JSON")
    ap.add_argument("--interval", type=float, default=1.0, help="GPU interval and --watch interval, s")
    ap.add_argument("--gpus", type=int, default=8, help="GPUs per synthetic host")
    ap.add_argument("--sources", choices=("gpu", "all"), default="gpu",
                    help="SSH hosts: GPU source only (as the issue measured) or also the training tail")
    ap.add_argument("--demo", action="store_true",
                    help="first the two-host demo lab (torchrun, SGLang simulator, Python GPU double) idle, TUI")
    ap.add_argument("--demo-sglang-s", type=float, default=1.0,
                    help="the demo's SGLang poll interval (the demo's own: 1; the product default: 2)")
    ap.add_argument("--frames", choices=("on", "off", "both"), default="on",
                    help="the SSH hosts' gpu.frames (both: each run without, then with)")
    ap.add_argument("--profile", help="cProfile each console (TUI, headless) over the window; stats to FILE.<mode>-<N>")
    ap.add_argument("--size", default="200x50", help="the TUI's terminal size, COLSxROWS")
    ap.add_argument("--host-rc", action="store_true",
                    help="SSH hosts: keep the login shell's rc files (~/.bashrc) for each session")
    ap.add_argument("--src", help="run the console from this source tree (PYTHONPATH), e.g. an old checkout")
    args = ap.parse_args()
    if not re.fullmatch(r"\d+x\d+", args.size):
        ap.error(f"--size {args.size}: expected COLSxROWS, e.g. 200x50")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    frames = {"on": [True], "off": [False], "both": [False, True]}[args.frames]
    sizes = [int(x) for x in args.n.split(",") if x.strip()]
    tmp = Path(tempfile.mkdtemp(prefix="specconsole-fleet-"))
    compile_tree(args.src)  # the console's bytecode, as an install has it
    print(f"bench: {os.cpu_count()} CPUs, load {load()}, window {args.duration:g} s, {args.gpus} GPUs/host, "
          f"{args.sources} source(s), console from {args.src or 'this tree'}", flush=True)
    rows: list[Run] = []
    lab: Lab | None = None
    try:
        if args.demo:
            tmux("new-session", "-d", "-s", "keep", "sleep 86400")
            rows.extend(emit(r) for r in demo_run(tmp, args))
        ssh_modes = [m for m in modes if m in ("tui", "headless")]
        if ssh_modes:
            lab = ssh_lab(tmp, args.gpus, args.host_rc)
            if "tui" in ssh_modes and not args.demo:
                tmux("new-session", "-d", "-s", "keep", "sleep 86400")
            for n in [2, *sizes]:
                for mode in ssh_modes:
                    for framed in frames:
                        name = mode + (("+frames" if framed else "+csv") if len(frames) > 1 else "")
                        cfg = ssh_config(lab, tmp, n, args.interval, framed)
                        rows.append(emit(run_headless(cfg, n, args, name) if mode == "headless"
                                         else run_tui(cfg, n, args, name, lab=lab)))
        if "prom" in modes:
            rows.extend(prom_runs(tmp, [int(x) for x in args.prom_n.split(",") if x.strip()], args))
    finally:
        subprocess.run([*TMUX, "kill-server"], capture_output=True, check=False)
        if lab is not None:
            lab.down()
        shutil.rmtree(tmp, ignore_errors=True)
    table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
