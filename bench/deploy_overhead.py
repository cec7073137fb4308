"""The deploy wizard's own overhead: total time minus the simulated SGLang server's start time.

Starts a lab whose SGLang simulator takes ``--startup`` seconds to load, then runs the full
wizard (preflight + supervised execute: lock, backup, write, daemon-reload, restart, health,
server_info, smoke test) NEXTN -> DFLASH window 16 and back, ``--rounds`` times, and prints
per step the time each took (from the step events), the total, and the overhead = total -
server start time. Overhead is what the operator waits for beyond SGLang's own loading.

Usage: .venv/bin/python bench/deploy_overhead.py [--startup 3] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from specconsole.actions.deploy.preflight import DeployRequest, execute, preflight
from specconsole.config import load_config
from specconsole.hosts.ssh import SshHost
from specconsole.lab.parts.environment import Lab, LabOptions
from specconsole.steps import StepEvent, Steps


async def one_deploy(lab: Lab, request: DeployRequest) -> tuple[float, float, dict[str, float]]:
    cfg = load_config(lab.config_path).host("serve")
    host = SshHost(cfg)
    events: list[StepEvent] = []
    t0 = time.monotonic()
    await host.start()
    assert await host.wait_connected(15)
    steps = Steps("deploy", events.append, host="serve")
    plan = await preflight(host, cfg, request, steps)
    outcome = await execute(host, plan, steps)
    total = time.monotonic() - t0
    await host.close()
    assert outcome.outcome == "deployed", outcome.message
    per_step: dict[str, float] = defaultdict(float)
    starts = [e for e in events if e.kind == "step"]
    for a, b in zip(starts, [*starts[1:], events[-1]], strict=False):
        per_step[a.step or a.message] += b.elapsed_s - a.elapsed_s
    # the server's own start: restart command until /health answered 200 (from the agent's events)
    restart = next(e for e in events if e.command and e.command.startswith("systemctl restart"))
    healthy = next(e for e in events if "/health answered 200" in e.message)
    restart_result = next(e for e in events if e.kind == "result" and e.command == restart.command)
    health_after = float(healthy.message.split("after ")[1].rstrip("s"))
    server_start = (restart_result.took_s or 0.0) + health_after
    return total, server_start, per_step


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--startup", type=float, default=3.0, help="simulated SGLang start-up time, s")
    ap.add_argument("--rounds", type=int, default=2, help="deploy pairs (there and back)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="specconsole-bench-"))
    lab = Lab(tmp / "lab" / "state", LabOptions(trainer=False, sglang_startup_s=args.startup, sglang_load_rps=0))
    lab.up()
    totals, starts, overheads = [], [], []
    steps_acc: dict[str, list[float]] = defaultdict(list)
    try:
        time.sleep(args.startup + 1)
        for _ in range(args.rounds):
            for req in (DeployRequest(algorithm="DFLASH", draft_window=16, health_timeout_s=120),
                        DeployRequest(algorithm="DFLASH", draft_window=32, health_timeout_s=120)):
                total, start, per_step = asyncio.run(one_deploy(lab, req))
                totals.append(total)
                starts.append(start)
                overheads.append(total - start)
                for k, v in per_step.items():
                    steps_acc[k].append(v)
    finally:
        lab.down()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"deploys: {len(totals)} (simulated start-up {args.startup:g}s)\n")
    print(f"{'step':28} {'median s':>9}")
    for k, v in steps_acc.items():
        print(f"{k:28} {statistics.median(v):9.2f}")
    print(f"\n{'total (connect to verified)':28} {statistics.median(totals):9.2f}")
    print(f"{'server start (restart->200)':28} {statistics.median(starts):9.2f}")
    print(f"{'wizard overhead':28} {statistics.median(overheads):9.2f}   "
          f"({statistics.median(overheads) / statistics.median(totals):.0%} of the total)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
