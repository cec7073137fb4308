"""A rollout under load: N replicas (default 4) behind the real sglang-router, DFLASH window 16 -> 32.

Starts a lab with ``--replicas`` serving replicas whose simulated SGLang takes ``--startup``
seconds to load, keeps a bounded load generator sending requests through the router for the
whole rollout, runs the rollout (``deploy --hosts 'serve*'``'s code: canary first, out of the
router, drain, deploy, gate, back in), and prints:

- the total rollout time;
- per replica: its time (out of the router until back in), the server's own start-up inside it
  (the restart and the wait for /health) and the difference (what the rollout adds);
- requests sent / failed through the router (failed must be 0);
- the longest interval without a status line (the promise is <= 1 s).

Usage: .venv/bin/python bench/rollout.py [--replicas 4] [--startup 3] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path

from specconsole.actions.deploy.preflight import DeployRequest
from specconsole.actions.rollout import run as rollout
from specconsole.config import load_config
from specconsole.eval.suite import gate_prompts
from specconsole.hosts.ssh import SshHost
from specconsole.lab.parts import serve_replicas
from specconsole.lab.parts.environment import Lab, LabOptions
from specconsole.lab.testing.router_load import RouterLoad
from specconsole.steps import StepEvent


async def run(lab: Lab, window: int) -> tuple[rollout.RolloutOutcome, list[StepEvent], float]:
    config = load_config(lab.config_path)
    chosen = rollout.select(config, "serve*")
    opts = rollout.options(config, DeployRequest(draft_window=window, health_timeout_s=120), gate=None,
                           canary_wait_s=None, drain_timeout_s=None, operator="bench", gate_prompts=gate_prompts)
    hosts = [SshHost(c) for c in chosen]
    events: list[StepEvent] = []
    for h in hosts:
        await h.start()
    for h in hosts:
        assert await h.wait_connected(15)
    t0 = time.monotonic()
    try:
        out = await rollout.rollout([rollout.Replica(c, h) for c, h in zip(chosen, hosts, strict=True)], opts,
                                    events.append, asyncio.Event())
    finally:
        took = time.monotonic() - t0
        for h in hosts:
            await h.close()
    return out, events, took


def per_replica(events: list[StepEvent], name: str) -> tuple[float, float, float]:
    """(its whole part: preflight until back in the router; out of the router until back in; the
    server's own start-up: restart + wait for health)."""
    mine = [e for e in events if e.host == name]
    first = mine[0].at
    start = next(e.at for e in mine if e.kind == "step" and e.step == "leave the router")
    end = max(e.at for e in mine if e.step == "rejoin the router")
    steps = [e for e in mine if e.kind == "step"]
    server = 0.0
    for a, b in itertools.pairwise(steps):
        if a.step in ("restart", "wait for health"):
            server += b.at - a.at
    return end - first, end - start, server


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--startup", type=float, default=3.0, help="simulated SGLang load time, s")
    ap.add_argument("--concurrency", type=int, default=4, help="load generator clients")
    ap.add_argument("--router", choices=("sglang-router", "smg"), default="sglang-router",
                    help="the router in front of the replicas (smg: SGLang's current gateway)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sc-bench-rollout-") as tmp:
        lab = Lab(Path(tmp) / "lab", LabOptions(trainer=False, serve=args.replicas, sglang_startup_s=args.startup,
                                                sglang_load_rps=0, sglang_step_ms=2.0, router=args.router))
        t_lab = time.monotonic()
        lab.up()
        try:
            print(f"lab: {args.replicas} replicas behind {args.router} at {serve_replicas.router_url(lab)} "
                  f"(up in {time.monotonic() - t_lab:.1f}s; simulated start-up {args.startup:g}s)")
            with RouterLoad(serve_replicas.router_url(lab), concurrency=args.concurrency) as load:
                out, events, took = asyncio.run(run(lab, 32))
                stats = load.stop()
        finally:
            lab.down()
    ats = sorted(e.at for e in events)
    gap = max((b - a for a, b in itertools.pairwise(ats)), default=0.0)
    print(f"rollout: {out.message}")
    print(f"total rollout time:           {took:6.1f} s  ({args.replicas} replicas, baseline + gate included)")
    extra = []
    for r in out.replicas:
        whole, out_s, server = per_replica(events, r.name)
        extra.append(whole - server)
        print(f"  {r.name:8} {whole:5.1f} s (preflight to back in; out of the router {out_s:4.1f} s), server "
              f"start-up {server:4.1f} s, beyond it {whole - server:4.1f} s; gate "
              f"{r.figures.text() if r.figures else '-'}")
    print(f"time per replica beyond the server's start-up: median {statistics.median(extra):.1f} s, "
          f"max {max(extra):.1f} s")
    print(f"requests through the router:  sent {stats.sent}, failed {stats.failed}"
          + (f" (first: {stats.failures[0]})" if stats.failures else ""))
    print(f"longest interval without a status line: {gap:.2f} s ({len(events)} status lines)")
    return 0 if out.ok and stats.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
