"""What watching the lab costs: specconsole's monitors vs the naive ``ssh host nvidia-smi`` loop.

Starts its own lab (two sshd hosts, torchrun job, SGLang simulator under systemctl), then for
the same window length measures, at a 1 s interval:

- console CPU seconds per host per minute (this process's CPU time, plus children's),
- remote processes spawned per minute in steady state (counted from the hosts' sshd logs:
  one "Starting session" line per remote command),
- time to first complete snapshot.

The naive approach is what ``watch -n1 ssh HOST nvidia-smi --query-gpu=...`` does: a new ssh
process (and a new remote session and nvidia-smi process) per sample per host. The console is
measured twice: GPU source only (the same data as the naive loop) and with all sources.

Usage: .venv/bin/python bench/status_overhead.py [--seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

from _tools import missing  # bench/_tools.py (scripts run from bench/)

from specconsole.config import Config, load_config
from specconsole.formats.nvidia_smi import QUERY_GPU_FIELDS
from specconsole.lab.parts.environment import Lab, LabOptions
from specconsole.monitor import Fleet

WARMUP_S = 3.0


def cpu_seconds() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def sessions(lab: Lab) -> int:
    total = 0
    for name in lab.state.hosts:
        log = lab.root(name) / "logs" / "sshd.log"
        if log.exists():
            total += log.read_text(errors="replace").count("Starting session:")
    return total


async def measure_console(config: Config, lab: Lab, seconds: float, only_gpu: bool) -> dict[str, float]:
    fleet = Fleet(config)
    if only_gpu:
        for m in fleet.monitors.values():
            m._sources = {k: v for k, v in m._sources.items() if k == "gpu"}
    t0 = time.monotonic()
    await fleet.start()
    statuses = await fleet.first_snapshot(30)
    first = time.monotonic() - t0
    assert all(s.complete for s in statuses), [(s.name, s.expected) for s in statuses]
    await asyncio.sleep(WARMUP_S)
    c0, s0, w0 = cpu_seconds(), sessions(lab), time.monotonic()
    await asyncio.sleep(seconds)
    c1, s1, w1 = cpu_seconds(), sessions(lab), time.monotonic()
    samples = sum(1 for s in fleet.statuses() if s.gpu is not None)
    await fleet.stop()
    minutes = (w1 - w0) / 60
    hosts = len(config.hosts)
    assert samples == hosts
    return {"cpu_s_per_host_min": (c1 - c0) / minutes / hosts,
            "remote_procs_per_min": (s1 - s0) / minutes, "first_snapshot_s": first}


async def naive_once(lab: Lab, name: str) -> None:
    h = lab.state.hosts[name]
    argv = ["ssh", "-q", "-i", str(lab.keys / "client_ed25519"),
            "-o", f"UserKnownHostsFile={lab.keys / 'known_hosts'}", "-o", "BatchMode=yes",
            "-p", str(h.port), f"root@{h.address}",
            "nvidia-smi", f"--query-gpu={','.join(QUERY_GPU_FIELDS)}", "--format=csv,noheader,nounits"]
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.DEVNULL)
    out, _ = await proc.communicate()
    assert proc.returncode == 0 and out.strip(), f"naive ssh to {name} failed"


async def measure_naive(lab: Lab, seconds: float) -> dict[str, float]:
    names = list(lab.state.hosts)
    t0 = time.monotonic()
    await asyncio.gather(*(naive_once(lab, n) for n in names))
    first = time.monotonic() - t0

    async def loop(name: str, until: float) -> None:
        while time.monotonic() < until:
            started = time.monotonic()
            await naive_once(lab, name)
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - started)))

    await asyncio.gather(*(loop(n, time.monotonic() + WARMUP_S) for n in names))
    c0, s0, w0 = cpu_seconds(), sessions(lab), time.monotonic()
    await asyncio.gather(*(loop(n, w0 + seconds) for n in names))
    c1, s1, w1 = cpu_seconds(), sessions(lab), time.monotonic()
    minutes = (w1 - w0) / 60
    return {"cpu_s_per_host_min": (c1 - c0) / minutes / len(names),
            "remote_procs_per_min": (s1 - s0) / minutes, "first_snapshot_s": first}


def ratio(naive: float, console: float) -> str:
    if console <= 0:
        return "inf (console: 0)" if naive > 0 else "n/a"
    return f"{naive / console:.1f}x"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="measurement window per approach")
    args = ap.parse_args()
    if missing("ssh", "the ssh client: apt-get install openssh-client"):
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="specconsole-bench-"))
    lab = Lab(tmp / "lab" / "state", LabOptions(trainer_step_seconds=1.0, sglang_startup_s=1.0,
                                                 gpu_interval_s=1.0, sglang_interval_s=1.0))
    print(f"bench: lab in {lab.dir}; window {args.seconds:g}s per approach, 1 s interval, "
          f"{os.cpu_count()} CPUs", flush=True)
    lab.up()
    try:
        config = load_config(lab.config_path)
        time.sleep(2)  # SGLang loading, first training lines
        naive = asyncio.run(measure_naive(lab, args.seconds))
        gpu = asyncio.run(measure_console(config, lab, args.seconds, only_gpu=True))
        full = asyncio.run(measure_console(config, lab, args.seconds, only_gpu=False))
    finally:
        lab.down()
        shutil.rmtree(tmp, ignore_errors=True)
    rows = [
        ("CPU s per host per minute", "cpu_s_per_host_min", "{:.2f}"),
        ("remote processes per minute (all hosts)", "remote_procs_per_min", "{:.1f}"),
        ("time to first complete snapshot, s", "first_snapshot_s", "{:.2f}"),
    ]
    print(f"\n{'figure':42} {'naive ssh loop':>15} {'console (GPU)':>14} {'ratio':>8} "
          f"{'console (all)':>14} {'ratio':>8}")
    for label, key, fmt in rows:
        n, g, f = naive[key], gpu[key], full[key]
        print(f"{label:42} {fmt.format(n):>15} {fmt.format(g):>14} {ratio(n, g):>8} "
              f"{fmt.format(f):>14} {ratio(n, f):>8}")
    print("\nratio = naive / console (higher is better for the console).")
    print("console (all) also watches SGLang over HTTP through an SSH tunnel and tails the training log.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
