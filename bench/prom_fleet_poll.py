"""The Prometheus path's cost in the console, without a UI: N hosts x G GPUs behind a real
Prometheus (lab.testing.prometheus_fleet), the console's Fleet reading them for D seconds.

    .venv/bin/python bench/prom_fleet_poll.py --hosts 200 1000 --gpus 8 --seconds 60

Prints per N: time to the first complete snapshot of every host, the console process's
CPU-s per minute (the exporter double and Prometheus run in their own processes and are not
counted), p99 sample age at 1 Hz reads, CPU per poll, RSS and the machine's load (Prometheus
answers slowly on a loaded machine: fewer polls, older samples).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from specconsole.config import load_config
from specconsole.lab.testing import prometheus_fleet
from specconsole.monitor import Fleet


async def measure(config_path: Path, seconds: float) -> dict[str, float]:
    config = load_config(config_path)
    t0 = time.monotonic()
    fleet = Fleet(config)
    await fleet.start()
    try:
        while True:
            st = fleet.statuses()
            if all(s.gpu is not None and s.gpu.value.ok for s in st):
                break
            if time.monotonic() - t0 > 60:
                raise SystemExit("no complete snapshot in 60 s")
            await asyncio.sleep(0.02)
        first = time.monotonic() - t0
        cpu0 = time.process_time()
        polls0 = fleet.prometheus.polls if fleet.prometheus else 0
        ages: list[float] = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            await asyncio.sleep(1.0)
            now = time.time()
            ages.extend(s.gpu.age(now) for s in fleet.statuses() if s.gpu is not None)
        cpu = time.process_time() - cpu0
        polls = (fleet.prometheus.polls if fleet.prometheus else 0) - polls0
    finally:
        await fleet.stop()
    ages.sort()
    return {"first_s": first, "cpu_s_per_min": cpu * 60 / seconds,
            "p99_age_s": ages[int(0.99 * (len(ages) - 1))] if ages else float("nan"),
            "median_age_s": statistics.median(ages) if ages else float("nan"),
            "polls": polls, "cpu_per_poll_s": cpu / polls if polls else float("nan"),
            "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--hosts", type=int, nargs="+", default=[200, 1000])
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--interval-s", type=float, default=5.0, help="[prometheus] interval_s")
    p.add_argument("--scrape-interval-s", type=float, default=5.0)
    a = p.parse_args()
    if prometheus_fleet.prometheus_binary() is None:
        print("prometheus is not installed (apt-get install prometheus)", file=sys.stderr)
        return 2
    for n in a.hosts:
        with tempfile.TemporaryDirectory(prefix="prom-bench-") as tmp:
            work = Path(tmp)
            lab = prometheus_fleet.start(work / "prom", hosts=n, gpus=a.gpus, sglang=True,
                                   scrape_interval_s=a.scrape_interval_s)
            try:
                lab.wait_scraped(120.0, 1)
                cfg = prometheus_fleet.write_console_config(work / "console.toml", lab,
                                                      interval_s=a.interval_s, history_s=3600)
                r = asyncio.run(measure(cfg, a.seconds))
            finally:
                lab.stop()
        print(f"prometheus path N={n} x {a.gpus} GPUs, interval {a.interval_s:g}s: "
              f"first complete snapshot {r['first_s']:.2f}s, console {r['cpu_s_per_min']:.2f} "
              f"CPU-s/min, sample age p99 {r['p99_age_s']:.2f}s (median {r['median_age_s']:.2f}s), "
              f"{r['polls']:.0f} polls ({r['cpu_per_poll_s']:.3f} CPU-s each), "
              f"RSS {r['rss_mib']:.0f} MiB, load average {os.getloadavg()[0]:.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
