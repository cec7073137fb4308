"""What the alert engine costs per refresh: every shipped rule on N synthetic hosts (the tests'
sample train/serve pair, copied), one evaluation per simulated second, all rules healthy (the
common case: nothing fires). The console runs it on its UI thread once per ``refresh_s``.

Two cases: the same samples at every evaluation, and new samples every second whose values move
as a live host's do (``compositor_ab.moved``: GPU utilization and power, the training step and
tokens/s, SGLang's tokens/s, running requests and acceptance). The hosts are made once, before the
clock starts; only the evaluations are timed.

Usage: .venv/bin/python bench/alerts_engine.py [--hosts 200] [--ticks 50]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the tests' sample statuses
sys.path.insert(0, str(Path(__file__).resolve().parent))  # compositor_ab's moved()

from compositor_ab import moved

import sample_data as sd
from specconsole.alert_rules.rules import DEFAULT_RULES
from specconsole.alerts.engine import AlertEngine
from specconsole.base.events import EventLog


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, default=200)
    p.add_argument("--ticks", type=int, default=50)
    args = p.parse_args()
    base = sd.sample_statuses(sd.FROZEN_NOW)
    hosts = [replace(base[i % 2], name=f"{base[i % 2].name}-{i}") for i in range(args.hosts)]
    ticks = [sd.FROZEN_NOW + k for k in range(args.ticks)]
    cases = {"the same samples": [hosts] * args.ticks,
             "new samples every second": [[moved(h, k, now) for h in hosts] for k, now in enumerate(ticks)]}
    for case, statuses in cases.items():
        engine = AlertEngine(DEFAULT_RULES, EventLog(), baseline=lambda _s: 6.0)
        started, cpu = time.perf_counter(), time.process_time()
        for now, fleet in zip(ticks, statuses, strict=True):
            engine.evaluate(fleet, now)
        wall = (time.perf_counter() - started) / args.ticks
        used = (time.process_time() - cpu) / args.ticks
        print(f"{args.hosts} hosts x {len(DEFAULT_RULES)} rules, {case}: {wall * 1000:.1f} ms per evaluation "
              f"({used * 1000:.1f} ms CPU; at one a second {used * 100:.1f} % of a core)")


if __name__ == "__main__":
    main()
