"""Synthetic recordings: the sample fleet (tests/fleet_sample.py) changing every second, written by
the real :class:`~specconsole.recorder.recorder.Recorder` on a fake clock (no thread, no lab)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import sample_data as sd
from fleet_sample import fleet_statuses
from specconsole.base.events import Event
from specconsole.base.samples import Sample
from specconsole.monitor import HostStatus
from specconsole.recorder.recorder import Recorder
from specconsole.recorder.records import Record, event_record, host_record, sample_record
from specconsole.steps import StepEvent

T0 = sd.FROZEN_NOW


def vary(status: HostStatus, k: int, now: float) -> HostStatus:
    """``status`` at second ``k``: GPU util, tokens/s and the training step move; every sample new."""
    gpu = training = sglang = None
    if status.gpu is not None:
        gpus = tuple(dataclasses.replace(g, utilization_pct=50.0 + (k * 7 + g.index) % 40)
                     for g in status.gpu.value.gpus)
        gpu = Sample(dataclasses.replace(status.gpu.value, gpus=gpus), now, 1.0)
    if status.training is not None:
        training = Sample(dataclasses.replace(status.training.value, step=12000 + 2 * k), now, 5.0)
    if status.sglang is not None and status.sglang.value.metrics is not None:
        metrics = dataclasses.replace(status.sglang.value.metrics, tokens_per_s=1800.0 + 10 * k)
        sglang = Sample(dataclasses.replace(status.sglang.value, metrics=metrics), now, 2.0)
    return dataclasses.replace(status, gpu=gpu, training=training, sglang=sglang)


def steps_as_events(steps: Iterable[StepEvent]) -> list[Event]:
    """Step events as the event log holds them (``steps.audit``'s shape), at their own times."""
    out = []
    for e in steps:
        out.append(Event(e.message if e.kind != "command" else f"$ {e.message}", e.host or e.action,
                         {"failed": "error", "error": "error", "warning": "warning"}.get(e.kind, "step"),  # type: ignore[arg-type]
                         at=e.at, data={"action": e.action, "kind": e.kind, "step": e.step, "command": e.command,
                                        "exit_status": e.exit_status, "elapsed_s": round(e.elapsed_s, 3),
                                        "took_s": e.took_s}))
    return out


def alert(name: str, host: str, state: str, at: float, level: str = "warning", value: float | None = 1.0) -> Event:
    return Event(f"{name} on {host}: {state}", "alert", level, at=at,  # type: ignore[arg-type]
                 data={"alert": name, "host": host, "state": state, "value": value, "message": f"{name} {state}"})


def record_synthetic(path: Path, *, hosts: int = 2, seconds: int = 60, events: Iterable[Event] = (),
                     changes: Callable[[int, list[HostStatus]], list[HostStatus]] | None = None,
                     statuses: list[HostStatus] | None = None, **kwargs: Any) -> Recorder:
    """``seconds`` of ``hosts`` hosts (or ``statuses``), one flush per second on a fake clock;
    ``events`` are added when the clock passes their time; ``changes(k, statuses)`` edits the fleet."""
    clock = [T0]
    kwargs.setdefault("config_text", None)
    recorder = Recorder(path, clock=lambda: clock[0], **kwargs)
    base = statuses if statuses is not None else (sd.sample_statuses(T0) if hosts == 2 else fleet_statuses(hosts, T0))
    for s in base:
        recorder.add(host_record(T0, s))
        recorder.add([T0, "connection", s.name, s.connection])
    pending = sorted(events, key=lambda e: e.at)
    connections = {s.name: s.connection for s in base}
    for k in range(seconds + 1):
        now = T0 + k
        clock[0] = now
        current = [vary(s, k, now) for s in base]
        if changes is not None:
            current = changes(k, current)
        for s in current:
            if s.connection != connections[s.name]:
                connections[s.name] = s.connection
                recorder.add([now, "connection", s.name, s.connection])
            for kind in ("gpu", "sglang", "training"):
                sample = getattr(s, kind)
                if sample is not None:
                    recorder.add(sample_record(now, s.name, kind, sample))
        while pending and pending[0].at <= now:
            recorder.add(event_record(pending.pop(0)))
        recorder.flush()
    recorder.stop()
    return recorder


__all__ = ["T0", "Record", "alert", "record_synthetic", "steps_as_events"]
