"""CPU per line and per tick of headless ``status --watch --json`` at fleet scale, in-process and
independent of machine load (``time.process_time``): the parts bench/fleet_scale.py measures
end to end, isolated so that two source trees can be compared on a busy machine.

- ingest: N hosts' ``nvidia-smi --query-gpu`` streams (G GPUs each, one burst per period, the
  lines in memory) read by ``NvidiaSmiSource._consume_gpus`` all at once: CPU µs per line, and the
  tasks created while reading; with ``--frames``, the bursts as the host-side frame filter
  (``remote/smi_frames.py``, the measured tree's) sends them, each frame one read as one SSH
  packet brings it, read with ``gpu.frames`` on;
- json: one ``--watch --json`` line for N hosts with G GPUs each, every host's GPU sample new
  (the 1 Hz steady state) and none new: CPU ms per line.

Runs whatever ``specconsole`` is importable: compare trees with
``PYTHONPATH=/path/to/old/src .venv/bin/python bench/headless_cost.py`` (a tree without
``specconsole.status_watch`` is measured with its ``json.dumps(status_json(...))``, one without
``specconsole.lab.testing.smi_stream``, the nvidia-smi stream double, with this checkout's copy).

Usage: .venv/bin/python bench/headless_cost.py [--hosts 400] [--gpus 8] [--bursts 20] [--frames]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib.util
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import specconsole
from specconsole.base.samples import Sample
from specconsole.config import GpuConfig, HostConfig
from specconsole.formats.nvidia_smi import GpuReading, GpuSnapshot, GpuState
from specconsole.hosts.base import Connection, ConnState
from specconsole.hosts.local import LocalHost
from specconsole.monitor import HostStatus
from specconsole.report import status_json
from specconsole.sources.nvidia_smi import NvidiaSmiSource


def smi_stream(double: str = "SmiLines") -> Any:
    """The in-memory nvidia-smi stream double with the class ``double``: the measured tree's, else
    (a tree from before it, or before ``specconsole/lab/testing/smi_stream.py``) this checkout's
    copy, run against the measured tree."""
    try:
        from specconsole.lab.testing import smi_stream
    except ImportError:
        smi_stream = None
    if smi_stream is None or not hasattr(smi_stream, double):
        path = Path(__file__).resolve().parents[1] / "src/specconsole/lab/testing/smi_stream.py"
        spec = importlib.util.spec_from_file_location("bench_smi_stream", path)
        assert spec is not None and spec.loader is not None
        smi_stream = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(smi_stream)
    return smi_stream


def bursts_of(stream: Any, gpus: int, bursts: int) -> list[list[str]]:
    """``bursts`` query-gpu bursts of ``gpus`` rows, utilization and power moving between bursts."""
    return [stream.query_gpu_rows([(b * 7 + i) % 100 for i in range(gpus)],
                                  [300 + b % 50 + (i % 10) / 10 + 0.05 for i in range(gpus)])
            for b in range(bursts)]


def framed(bursts: list[list[str]]) -> list[list[str]]:
    """``bursts`` as the frame filter sends them (each burst's lines, its closing ``.`` included)."""
    from specconsole.remote.smi_frames import encode

    out, last = [], []
    for burst in bursts:
        raw = [line.encode() for line in burst]
        out.append(encode(raw, last).decode().split("\n")[:-1])
        last = raw
    return out


async def ingest(hosts: int, gpus: int, bursts: int, frames: bool = False) -> tuple[float, int, int]:
    loop = asyncio.get_running_loop()
    created = 0
    default = loop.get_task_factory()

    def counting(lp: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> asyncio.Task[Any]:
        nonlocal created
        created += 1
        return default(lp, coro, **kw) if default else asyncio.Task(coro, loop=lp, **kw)

    published = 0

    def publish(_s: Sample[Any]) -> None:
        nonlocal published
        published += 1

    stream = smi_stream("SmiChunks" if frames else "SmiLines")  # a frame a read, as SSH brings it
    lines = bursts_of(stream, gpus, bursts)  # the same rows for every host, made before the clock starts
    if frames:
        lines = framed(lines)
    sources = []
    for h in range(hosts):
        src = NvidiaSmiSource(LocalHost(HostConfig(name=f"h{h}", role="train")), GpuConfig(interval_s=1.0))
        src.frames = frames  # nvidia-smi's own lines, or framed (set on a tree before gpu.frames: harmless)
        src._apps_last_line = time.monotonic() + 3600  # apps known: no processes
        sources.append(src)
    double = stream.SmiChunks if frames else stream.SmiLines
    runs = [asyncio.ensure_future(s._consume_gpus(double(lines, 0.05), publish)) for s in sources]
    await asyncio.sleep(0)
    loop.set_task_factory(counting)  # type: ignore[arg-type]
    c0 = time.process_time()
    try:
        await asyncio.gather(*runs)
    finally:
        loop.set_task_factory(default)
    cpu = time.process_time() - c0
    return cpu / (hosts * gpus * bursts) * 1e6, created, published


def statuses(hosts: int, gpus: int, now: float) -> list[HostStatus]:
    readings = tuple(GpuReading(index=i, uuid=f"GPU-{i:08d}", name="NVIDIA H200", utilization_pct=50.0 + i,
                                memory_util_pct=12.0, memory_used_mib=20480.0, memory_total_mib=143771.0,
                                power_draw_w=310.5, power_limit_w=700.0, temperature_c=55.0,
                                sm_clock_mhz=1980.0, pstate="P0") for i in range(gpus))
    conn = Connection(ConnState.CONNECTED, since=now - 60, last_ok=now)
    return [HostStatus(name=f"h{h:03d}", role="train", address=f"root@127.0.0.2:{2200 + h}", connection=conn,
                       gpu=Sample(GpuSnapshot(GpuState.OK, readings, at=now), at=now, interval=1.0),
                       sglang=None, training=None, expected=("gpu",)) for h in range(hosts)]


def json_cost(hosts: int, gpus: int, ticks: int) -> tuple[str, float, float]:
    try:
        from specconsole.status_watch import StatusJsonLines

        cached = StatusJsonLines()
        line: Callable[[list[HostStatus], float], str] = cached.line
        how = "StatusJsonLines"
    except ImportError:
        def line(s: list[HostStatus], now: float) -> str:
            return json.dumps(status_json(s, now))
        how = "json.dumps(status_json)"
    now = time.time()
    base = statuses(hosts, gpus, now)
    fresh_sets = [[dataclasses.replace(s, gpu=Sample(s.gpu.value, at=now + t, interval=1.0))  # type: ignore[union-attr]
                   for s in base] for t in range(ticks)]
    line(base, now)
    c0 = time.process_time()
    for t in range(ticks):
        line(fresh_sets[t], now + t + 0.5)
    changed = (time.process_time() - c0) / ticks * 1e3
    c0 = time.process_time()
    for t in range(ticks):
        line(fresh_sets[-1], now + ticks + t)
    same = (time.process_time() - c0) / ticks * 1e3
    return how, changed, same


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=400)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--bursts", type=int, default=20, help="query-gpu bursts per host (ingest)")
    ap.add_argument("--ticks", type=int, default=10, help="JSON lines per case")
    ap.add_argument("--frames", action="store_true",
                    help="ingest framed bursts (gpu.frames) rather than nvidia-smi's own lines")
    args = ap.parse_args()
    print(f"specconsole from {specconsole.__file__}")
    us, tasks, published = asyncio.run(ingest(args.hosts, args.gpus, args.bursts, args.frames))
    lines = args.hosts * args.gpus * args.bursts
    how = " (framed)" if args.frames else ""
    print(f"ingest{how}: {args.hosts} hosts x {args.gpus} GPUs x {args.bursts} bursts = {lines} lines: "
          f"{us:.1f} CPU-µs/line, {tasks} tasks created while reading, {published} snapshots")
    how, changed, same = json_cost(args.hosts, args.gpus, args.ticks)
    print(f"json ({how}): {args.hosts} hosts x {args.gpus} GPUs: {changed:.1f} CPU-ms/line with every GPU "
          f"sample new, {same:.1f} CPU-ms/line with none new")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
