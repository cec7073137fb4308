"""Turning :class:`~specconsole.monitor.HostStatus` snapshots into JSON and plain text.

Used by ``specconsole status``; every sample is shown with its timestamp, age and staleness.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import time
from datetime import UTC, datetime
from typing import Any

from specconsole.base.samples import Sample, format_age, format_bytes
from specconsole.base.values import printable
from specconsole.formats.nvidia_smi import GpuSnapshot
from specconsole.formats.slurm import slurm_lines
from specconsole.monitor import HostStatus
from specconsole.sources.sglang import SglangSnapshot
from specconsole.sources.training import TrainingProgress


def jsonable(value: Any) -> Any:
    """Dataclasses, enums, tuples and floats made JSON-safe (NaN/inf become null)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


def sample_json(sample: Sample[Any] | None, now: float) -> dict[str, Any] | None:
    if sample is None:
        return None
    return {
        "at": iso(sample.at),
        "age_s": round(sample.age(now), 3),
        "interval_s": sample.interval,
        "stale": sample.is_stale(now),
        "value": jsonable(sample.value),
    }


def status_json(statuses: list[HostStatus], now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    hosts = []
    for s in statuses:
        c = s.connection
        hosts.append({
            "name": s.name,
            "role": s.role,
            "address": s.address,
            "reachable": s.reachable,
            "connection": {
                "state": c.state.value, "since": iso(c.since), "attempt": c.attempt,
                "last_ok": iso(c.last_ok), "last_error": c.last_error,
            },
            "gpu": sample_json(s.gpu, now),
            "sglang": sample_json(s.sglang, now),
            "training": sample_json(s.training, now),
        })
    return {"at": iso(now), "hosts": hosts}


# ------------------------------------------------------------------------------------- text

def _num(value: float | None, fmt: str = "{:.0f}", unit: str = "") -> str:
    return "n/a" if value is None else fmt.format(value) + unit


def _stamp(sample: Sample[Any], now: float) -> str:
    age = format_age(sample.age(now))
    return f"STALE {age} old" if sample.is_stale(now) else f"{age} ago"


def status_text(statuses: list[HostStatus], now: float | None = None) -> str:
    now = time.time() if now is None else now
    out: list[str] = []
    for s in statuses:
        c = s.connection
        conn = c.state.value if c.state.value != "reconnecting" else f"reconnecting {c.attempt}"
        if c.state.value == "on_demand":
            conn = "via Prometheus (ssh on demand)"
        out.append(f"== {s.name} ({s.role}, {s.address}): {conn}")
        if c.last_error and not s.reachable:
            out.append(f"   error: {c.last_error}")
        if s.gpu is not None:
            out.extend(_gpu_lines(s.gpu, now))
        if s.sglang is not None:
            out.extend(_sglang_lines(s.sglang, now))
        if s.training is not None:
            out.extend(_training_lines(s.training, now))
        present = {"gpu": s.gpu, "sglang": s.sglang, "training": s.training}
        for kind in s.expected:
            if present.get(kind) is None:
                out.append(f"   {kind}: no data yet")
    return "\n".join(printable(line) for line in out)  # what hosts say cannot move the cursor


def _gpu_lines(sample: Sample[GpuSnapshot], now: float) -> list[str]:
    g = sample.value
    state = g.state.value
    lines = [f"   gpus: {state}, {len(g.gpus)} GPU(s) ({_stamp(sample, now)})"]
    if g.error:
        lines.append(f"     {g.error}")
    for r in g.gpus:
        mem = f"{_num(r.memory_used_mib)}/{_num(r.memory_total_mib)} MiB"
        power = f"{_num(r.power_draw_w)}/{_num(r.power_limit_w)} W"
        lines.append(f"     [{r.index}] {r.name or '?'}: util {_num(r.utilization_pct, unit='%')}, "
                     f"mem {mem}, power {power}, {_num(r.temperature_c, unit='C')}")
    for idx in g.missing:
        lines.append(f"     [{idx}] MISSING (was present earlier)")
    if not g.processes_known:
        lines.append("     processes: not known yet")
    elif g.processes:
        procs = ", ".join(f"pid {p.pid} ({_num(p.used_memory_mib)} MiB)" for p in g.processes)
        lines.append(f"     processes: {procs}")
    return lines


def _sglang_lines(sample: Sample[SglangSnapshot], now: float) -> list[str]:
    v = sample.value
    state = v.state.value
    lines = [f"   sglang: {state} ({_stamp(sample, now)})"]
    if v.error:
        lines.append(f"     {v.error}")
    if v.info is not None:
        i = v.info
        lines.append(f"     version {i.version}, {i.algorithm or 'no speculation'}, block {i.block_size}, "
                     f"window {i.draft_window}, draft {i.draft_model_path}")
    if v.metrics is not None:
        m = v.metrics
        lines.append(f"     {_num(m.tokens_per_s, '{:.1f}')} tok/s, running {_num(m.running_reqs)}, "
                     f"queued {_num(m.queued_reqs)}, accept length {_num(m.spec_accept_length, '{:.2f}')}")
    return lines


def _training_lines(sample: Sample[TrainingProgress], now: float) -> list[str]:
    p = sample.value
    total = f"/{p.total_steps}" if p.total_steps else ""
    epochs = f"/{p.total_epochs:g}" if p.total_epochs else ""
    epoch = f"{p.epoch:.2f}" if p.epoch is not None else "n/a"
    state = f"job {p.state}: " if p.state else ""
    lines = [f"   training: step {_num(p.step)}{total}, epoch {epoch}{epochs}, "
             f"loss {_num(p.loss, '{:.4f}')} ({_stamp(sample, now)})"]
    lines.append(f"     {state}{_num(p.tokens_per_s, '{:.0f}')} tok/s, {_num(p.steps_per_s, '{:.3f}')} steps/s, "
                 f"ETA {p.eta_text or 'n/a'}, malformed lines {p.malformed}")
    if p.behind_bytes:
        lines.append(f"     {format_bytes(p.behind_bytes)} behind the log's end")
    if p.skips:
        lines.append(f"     skipped ahead {p.skips} time(s), {format_bytes(p.skipped_bytes)} of log not read")
    if p.error:
        lines.append(f"     {p.error}")
    if p.slurm is not None:  # issue 32: the Slurm job
        lines.extend(f"     {line}" for line in slurm_lines(p.slurm, now))
    return lines
