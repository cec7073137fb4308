"""``specconsole status [--watch]``: snapshots on a fixed schedule, and JSON lines that serialise
only what changed.

- :class:`FixedTicks`: tick ``k`` is due at ``start + k * interval`` whatever printing took, so
  the watch loop does not drift; a tick more than one interval late is skipped, never bunched.
- :class:`StatusJsonLines`: ``status_json(statuses, now)`` as one line of compact JSON (msgspec's
  encoder, in C), built from parts cached per host: each sample's value is serialised once per
  sample (keyed by the sample object, which a source replaces with every observation), the
  connection part once per connection change; only ``age_s`` and ``stale`` are written each tick.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import math
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import msgspec

from specconsole.base import gc_tuning
from specconsole.base.errors import SpecConsoleError
from specconsole.base.samples import STALE_GRACE_S, Sample
from specconsole.report import iso, status_json, status_text

if TYPE_CHECKING:
    from specconsole.monitor import Fleet, HostStatus

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


class FixedTicks:
    """Ticks at ``start + k * interval`` (``start`` = the clock when made)."""

    def __init__(self, interval: float, *, clock: Clock = time.monotonic,
                 sleep: Sleep = asyncio.sleep) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be > 0, got {interval}")
        self.interval = interval
        self.clock = clock
        self.sleep = sleep
        self.start = clock()
        self.k = 0
        #: Ticks skipped because the previous one ended more than an interval late.
        self.skipped = 0

    async def next(self) -> float:
        """Sleep until the next tick is due; returns when it was due (on ``clock``)."""
        self.k += 1
        now = self.clock()
        due = self.start + self.k * self.interval
        if now >= due + self.interval:  # a whole interval late: go on from the latest due tick
            latest = int((now - self.start) // self.interval)
            self.skipped += latest - self.k
            self.k = latest
            due = self.start + latest * self.interval
        await self.sleep(max(0.0, due - now))
        return due


# ------------------------------------------------------------------------------------- JSON

def _plain(value: Any) -> Any:
    """:func:`specconsole.report.jsonable`, with the fields of each dataclass type looked up once."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        return value if math.isfinite(value) else None
    names = _FIELDS.get(kind)
    if names is None:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            names = _FIELDS[kind] = tuple(f.name for f in dataclasses.fields(value))
        else:
            return _other(value)
    out = {}
    for name in names:  # scalars inline: most fields are, and a call per field is most of the cost
        v = getattr(value, name)
        k = type(v)
        if k is str or k is int or k is bool or v is None:
            out[name] = v
        elif k is float:
            out[name] = v if math.isfinite(v) else None
        else:
            out[name] = _plain(v)
    return out


_FIELDS: dict[type, tuple[str, ...]] = {}


_ENCODE = msgspec.json.Encoder().encode  # NaN and infinity are written as null, as jsonable makes them


def _dumps(value: Any) -> str:
    """``jsonable(value)`` as compact JSON: msgspec encodes dataclasses, enums and tuples itself
    (in C); a value holding anything it does not know goes through :func:`_plain` first."""
    try:
        return _ENCODE(value).decode()
    except (TypeError, ValueError):
        return _ENCODE(_plain(value)).decode()


def _other(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class StatusJsonLines:
    """One ``status --watch --json`` line per call, re-serialising only changed parts."""

    def __init__(self) -> None:
        self._heads: dict[str, tuple[tuple[Any, ...], str]] = {}
        self._samples: dict[tuple[str, str], tuple[Sample[Any], str, str, str]] = {}
        #: Sample values serialised so far (a cache hit does not count).
        self.serialised = 0

    def line(self, statuses: list[HostStatus], now: float | None = None) -> str:
        now = time.time() if now is None else now
        hosts = ",".join(self._host(s, now) for s in statuses)
        names = {s.name for s in statuses}
        if len(self._heads) > len(names):  # hosts that are gone: forget them
            self._heads = {n: v for n, v in self._heads.items() if n in names}
            self._samples = {k: v for k, v in self._samples.items() if k[0] in names}
        return '{"at":' + _dumps(iso(now)) + ',"hosts":[' + hosts + "]}"

    def _host(self, s: HostStatus, now: float) -> str:
        key = (s.role, s.address, s.connection)
        cached = self._heads.get(s.name)
        if cached is None or cached[0] != key:
            c = s.connection
            head = _dumps({
                "name": s.name, "role": s.role, "address": s.address, "reachable": s.reachable,
                "connection": {"state": c.state.value, "since": iso(c.since), "attempt": c.attempt,
                               "last_ok": iso(c.last_ok), "last_error": c.last_error},
            })[:-1]
            cached = self._heads[s.name] = (key, head)
        return (cached[1] + ',"gpu":' + self._sample(s.name, "gpu", s.gpu, now)
                + ',"sglang":' + self._sample(s.name, "sglang", s.sglang, now)
                + ',"training":' + self._sample(s.name, "training", s.training, now) + "}")

    def _sample(self, host: str, kind: str, sample: Sample[Any] | None, now: float) -> str:
        if sample is None:
            return "null"
        cached = self._samples.get((host, kind))
        if cached is None or cached[0] is not sample:
            self.serialised += 1
            cached = self._samples[(host, kind)] = (
                sample,
                '{"at":' + _dumps(iso(sample.at)) + ',"age_s":',
                ',"interval_s":' + _dumps(sample.interval) + ',"stale":',
                ',"value":' + _dumps(sample.value) + "}",
            )
        _, head, middle, tail = cached
        age = max(0.0, now - sample.at)  # Sample.age and is_stale, inlined (3,000 a tick)
        stale = "true" if age > sample.interval + STALE_GRACE_S else "false"
        # repr of a finite float is what json.dumps writes (an age is never NaN or infinite)
        return head + repr(round(age, 3)) + middle + stale + tail


# ---------------------------------------------------------------------------- the command

async def print_status(fleet: Fleet, *, as_json: bool, watch: bool, interval: float, timeout: float,
                       write: Callable[[str], None] | None = None, alerts: bool = False) -> int:
    """Start ``fleet``, print its first complete snapshot and, with ``watch``, one every
    ``interval`` s on a fixed schedule until cancelled. Exit status: 1 if a host is unreachable.
    With ``alerts`` (and ``watch``): the alert lines instead of snapshots (:func:`watch_alerts`)."""
    if watch and not interval > 0:
        raise SpecConsoleError(f"status --interval {interval:g}: must be more than 0 s (fix: e.g. --interval 1)")
    if alerts and not watch:
        raise SpecConsoleError("status --alerts: alerts need time to fire (fix: specconsole status --watch --alerts)")
    out = write or (lambda text: print(text, flush=True))
    await fleet.start()
    if alerts:
        await watch_alerts(fleet, interval=interval, as_json=as_json, write=out)
        return 0
    statuses = await fleet.first_snapshot(timeout)
    gc_tuning.settle()  # start-up's objects out of the collector's way
    if not watch:
        out(json.dumps(status_json(statuses), indent=2) if as_json else status_text(statuses))
        return 0 if all(s.reachable for s in statuses) else 1
    lines = StatusJsonLines()
    ticks = FixedTicks(interval)
    while True:
        if as_json:
            out(lines.line(statuses))
        else:
            out(status_text(statuses) + "\n")
        await ticks.next()
        statuses = fleet.statuses()


async def watch_alerts(fleet: Fleet, *, interval: float, as_json: bool, write: Callable[[str], None],
                       clock: Clock = time.time) -> None:
    """``status --watch --alerts``: the console's alert engine on a fixed schedule, from the start
    (a host that never connects is an alert too); each firing and resolving is printed (a line, or
    with ``as_json`` the webhook's JSON) and delivered as the console does (webhook, tmux), as are
    the webhook's own warnings. Runs until cancelled."""
    from specconsole.alerts.baseline import EvalBaseline
    from specconsole.alerts.delivery import AlertDelivery, payload
    from specconsole.alerts.engine import AlertEngine

    engine = AlertEngine.for_config(fleet.config, fleet.events, EvalBaseline())
    delivery = AlertDelivery(fleet.config.alerting, fleet.events)
    fleet.events.subscribe(lambda e: write(e.line()) if e.source == "webhook" else None)
    hook = fleet.config.alerting.webhook
    write(f"alerts: {len(engine.rules)} rules ({', '.join(r.name for r in engine.rules) or 'none'}) on "
          f"{len(fleet.monitors)} hosts, every {interval:g} s" + (f"; webhook {hook}" if hook else ""))
    delivery.start()
    ticks = FixedTicks(interval)
    try:
        while True:
            for event in engine.evaluate(fleet.statuses(), clock()):
                write(json.dumps(payload(event)) if as_json else event.line())
            await ticks.next()
    finally:
        await delivery.stop()
