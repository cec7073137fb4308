"""What the flight recorder costs, and how fast its readers are (issue 22), each beside a baseline
measured in the same run:

- cost: CPU-s per minute of fleet time for N synthetic hosts (default 200: 8 GPUs on the training
  hosts, 2 on the serving ones, as tests/fleet_sample.py), driven through real ``HostMonitor``
  publishers at the sources' rates (GPU 1 s, SGLang 2 s, training 5 s, every value changing) with
  one ``status --watch --json`` line a second: that is the baseline (the headless pipeline's
  in-process work; SSH and parsing are left out, so the real console costs more and the ratio here
  is an upper bound). With the recorder attached, the same plus its listeners and its flushes
  (every 0.5 s of fleet time: the writer thread's work, run inline on a fake clock). CPU is
  ``time.process_time`` (all threads of this process), so the figure does not move with the load;
- size: the recording's bytes per host-hour (from the cost run);
- replay start-up: one hour of N hosts recorded, then (a) opening it and the fleet at its middle
  (``specconsole replay FILE --at``'s work) and (b) the replay console's first frame with every
  host drawn, beside the live console's first frame on the same N statuses (Textual headless);
- ``--ssh N``: also the real thing, through bench/fleet_scale.py's SSH fleet (the lab's two sshds
  standing in for N hosts, a cheap nvidia-smi stand-in, GPU source only): headless ``status --watch
  --json`` for N hosts, CPU-s/min of the console process without and with ``--record FILE``;
- ``status --tmux``: wall time of ``specconsole status --tmux`` (median of 15 runs) beside
  ``python -c pass`` (the interpreter alone) and ``specconsole --version`` (the CLI's imports).

Usage: .venv/bin/python bench/recorder.py [--hosts 200] [--minutes 3] [--replay-minutes 60] [--ssh N]
       [--ssh-duration S] [--ssh-rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # sample_data, fleet_sample

from fleet_sample import fleet_config, fleet_statuses
from specconsole.base.samples import Sample
from specconsole.monitor import Fleet, HostStatus
from specconsole.recorder.recorder import Recorder
from specconsole.recorder.recording import Recording
from specconsole.status_watch import StatusJsonLines

T0 = 1_800_000_000.0
RATES = {"gpu": 1, "sglang": 2, "training": 5}


def variants(base: HostStatus, count: int = 60) -> dict[str, list[Any]]:
    """``count`` values of each of the host's samples, every one different (util, tok/s, step move)."""
    out: dict[str, list[Any]] = {}
    if base.gpu is not None:
        gpu = base.gpu.value
        out["gpu"] = [dataclasses.replace(gpu, gpus=tuple(dataclasses.replace(
            g, utilization_pct=50.0 + (k * 7 + g.index) % 40, power_draw_w=400.0 + k) for g in gpu.gpus))
            for k in range(count)]
    if base.sglang is not None and base.sglang.value.metrics is not None:
        out["sglang"] = [dataclasses.replace(base.sglang.value, metrics=dataclasses.replace(
            base.sglang.value.metrics, tokens_per_s=1800.0 + k)) for k in range(count)]
    if base.training is not None:
        out["training"] = [dataclasses.replace(base.training.value, step=12000 + k, state="running")
                           for k in range(count)]
    return out


def drive(hosts: int, seconds: int, recorder: Recorder | None, clock: list[float]) -> float:
    """``seconds`` of fleet time through the real publishers; CPU-s it took."""
    fleet = Fleet(fleet_config(hosts))
    bases = fleet_statuses(hosts, T0)
    values = [variants(b) for b in bases]
    publishers = [{kind: m._publisher(kind) for kind in vals}
                  for m, vals in zip(fleet.monitors.values(), values, strict=True)]
    lines = StatusJsonLines()
    if recorder is not None:
        recorder.attach(fleet)
    cpu0 = time.process_time()
    for k in range(seconds):
        now = T0 + k
        clock[0] = now
        for pubs, vals in zip(publishers, values, strict=True):
            for kind, publish in pubs.items():
                if k % RATES[kind] == 0:
                    publish(Sample(vals[kind][k % len(vals[kind])], now, float(RATES[kind])))
        lines.line(fleet.statuses(), now)
        if recorder is not None:
            recorder.flush()
            clock[0] = now + 0.5
            recorder.flush()
    return time.process_time() - cpu0


def cost(hosts: int, minutes: float, folder: Path) -> tuple[float, float, int]:
    seconds = int(minutes * 60)
    base = drive(hosts, seconds, None, [T0])
    clock = [T0]
    path = folder / "cost.screc"
    recorder = Recorder(path, clock=lambda: clock[0], state_file=folder / "tmux.json")
    with_rec = drive(hosts, seconds, recorder, clock)
    recorder.stop()
    return base / minutes, with_rec / minutes, path.stat().st_size


def record_hour(hosts: int, minutes: float, path: Path) -> float:
    clock = [T0]
    recorder = Recorder(path, clock=lambda: clock[0])
    cpu = drive(hosts, int(minutes * 60), recorder, clock)
    recorder.stop()
    return cpu


async def first_frame(app: Any, hosts: int) -> float:
    t0 = time.perf_counter()
    async with app.run_test(size=(200, 50)) as pilot:
        while app.first_full_frame_at is None:
            await pilot.pause(0.01)
        return float(time.perf_counter() - t0 + (app.first_full_frame_at - time.time()))


def startup(path: Path, hosts: int, minutes: float) -> tuple[float, float, float]:
    from specconsole.ui.console.app import ConsoleApp
    from specconsole.ui.console.provider import FixedStatuses
    from specconsole.ui.console.replay import ReplayApp, ReplayFleet, replay_config
    from specconsole.ui.style.themes import BUNDLED_DIR, load_themes

    t0 = time.perf_counter()
    recording = Recording(path)
    middle = recording.start + minutes * 30
    statuses = recording.state_at(middle).statuses()
    at_s = time.perf_counter() - t0
    assert len(statuses) == hosts
    state_dir = str(path.parent / "state")  # inside the run's temporary folder
    config = fleet_config(hosts, state_dir)
    live = ConsoleApp(config, fleet=FixedStatuses(statuses), clock=lambda: middle,
                      themes=load_themes([BUNDLED_DIR]))
    live_s = asyncio.run(first_frame(live, hosts))
    t0 = time.perf_counter()
    fleet = ReplayFleet(Recording(path), middle)
    fleet.paused = True
    cfg = dataclasses.replace(replay_config(fleet.state, str(path)), console=config.console)
    replay = ReplayApp(fleet, cfg, themes=load_themes([BUNDLED_DIR]))
    opened = time.perf_counter() - t0
    replay_s = opened + asyncio.run(first_frame(replay, hosts))
    return at_s, live_s, replay_s


def ssh_cost(hosts: int, duration: float, rounds: int) -> tuple[list[Any], list[Any], float]:
    """fleet_scale's headless run for ``hosts`` SSH hosts, without and with ``--record``, alternated
    ``rounds`` times (the machine may be shared: alternating spreads its load over both)."""
    import fleet_scale as fs

    tmp = Path(tempfile.mkdtemp(prefix="bench-rec-ssh-"))
    record = tmp / "ssh.screc"
    args = argparse.Namespace(sources="gpu", src=None, interval=1.0, settle=180.0, duration=duration,
                              profile=None)
    code = fs.GPU_ONLY.replace("main(sys.argv[1:])", f"main(sys.argv[1:2] + ['--record', {str(record)!r}] "
                               "+ sys.argv[2:])")
    lab = fs.ssh_lab(tmp, 8)
    plain = fs.console_argv
    base: list[Any] = []
    with_rec: list[Any] = []
    try:
        for _ in range(rounds):
            fs.console_argv = plain
            base.append(fs.run_headless(fs.ssh_config(lab, tmp, hosts, 1.0), hosts, args))
            fs.console_argv = lambda *_a, **_k: [sys.executable, "-c", code]
            record.unlink(missing_ok=True)
            with_rec.append(fs.run_headless(fs.ssh_config(lab, tmp, hosts, 1.0), hosts, args))
        recording = Recording(record)
        per_host_hour = record.stat().st_size / hosts / max(recording.end - recording.start, 1e-9) * 3600
    finally:
        fs.console_argv = plain
        lab.down()
        shutil.rmtree(tmp, ignore_errors=True)
    return base, with_rec, per_host_hour


def wall(cmd: list[str], runs: int = 15) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=False)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, default=200)
    p.add_argument("--minutes", type=float, default=3.0, help="fleet minutes for the cost figures")
    p.add_argument("--replay-minutes", type=float, default=60.0, help="fleet minutes recorded for the start-up")
    p.add_argument("--ssh", type=int, default=0, help="also N SSH hosts through bench/fleet_scale.py (headless)")
    p.add_argument("--ssh-duration", type=float, default=60.0, help="--ssh: measurement window, s")
    p.add_argument("--ssh-rounds", type=int, default=2, help="--ssh: runs without and with, alternated")
    args = p.parse_args()
    n = args.hosts
    print(f"recorder bench: {n} hosts; load average {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-rec-") as tmp:
        folder = Path(tmp)
        base, with_rec, size = cost(n, args.minutes, folder)
        print(f"cost      baseline {base:.3f} CPU-s/min · with the recorder {with_rec:.3f} CPU-s/min · "
              f"+{(with_rec / base - 1) * 100:.1f} % (goal <= 5 %)", flush=True)
        per_host_hour = size / n / (args.minutes / 60)
        print(f"size      {per_host_hour / 1024:.0f} KiB per host-hour ({size / 1024:.0f} KiB for {n} hosts x "
              f"{args.minutes:g} min)", flush=True)
        path = folder / "hour.screc"
        cpu = record_hour(n, args.replay_minutes, path)
        print(f"recorded  {args.replay_minutes:g} min of {n} hosts: {path.stat().st_size / 2**20:.1f} MiB, "
              f"{cpu:.1f} CPU-s to write", flush=True)
        at_s, live_s, replay_s = startup(path, n, args.replay_minutes)
        print(f"replay    open + fleet at the middle {at_s * 1000:.0f} ms (goal <= 1 s) · replay console first "
              f"frame {replay_s:.2f} s vs live console first frame {live_s:.2f} s on the same statuses "
              f"(x{replay_s / live_s:.2f})", flush=True)
        state = folder / "tmux.json"
        exe = str(Path(sys.executable).parent / "specconsole")
        tmux_s = wall([exe, "status", "--tmux", "--state", str(state)])
        bare_s = wall([sys.executable, "-c", "pass"])
        cli_s = wall([exe, "--version"], runs=5)
        print(f"tmux      status --tmux {tmux_s * 1000:.0f} ms (goal <= 50 ms) · python -c pass {bare_s * 1000:.0f} ms"
              f" · specconsole --version {cli_s * 1000:.0f} ms", flush=True)
    if args.ssh:
        base_runs, rec_runs, per_host_hour = ssh_cost(args.ssh, args.ssh_duration, args.ssh_rounds)
        base_cpu = statistics.median(r.cpu_s_min for r in base_runs)
        rec_cpu = statistics.median(r.cpu_s_min for r in rec_runs)
        each = ", ".join(f"{b.cpu_s_min:.2f}/{r.cpu_s_min:.2f}" for b, r in zip(base_runs, rec_runs, strict=True))
        notes = " ".join(r.note for r in [*base_runs, *rec_runs] if r.note)
        more = (rec_cpu / base_cpu - 1) * 100
        print(f"ssh       {args.ssh} SSH hosts, headless status --watch --json, median of {args.ssh_rounds}: "
              f"{base_cpu:.2f} CPU-s/min; with --record {rec_cpu:.2f} CPU-s/min: {more:+.1f} % (goal <= 5 %; "
              f"rounds without/with: {each}); {per_host_hour / 1024:.0f} KiB per host-hour {notes}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
