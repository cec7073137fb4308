"""What a recording holds, and the fleet's state rebuilt from it.

A record is ``[t, kind, host, payload]`` (``t``: wall-clock time it was recorded):

- ``"meta"``: the recording's head (``payload``: ``{"config": <the config file's text or None>,
  "hosts": [...]}``), first in every keyframe;
- ``"host"``: a host's name, role, address and expected source kinds;
- ``"connection"``: a :class:`~specconsole.hosts.Connection`;
- ``"gpu"``, ``"sglang"``, ``"training"``: a sample as ``[at, interval, value]``;
- ``"event"``: an :class:`~specconsole.base.events.Event` (action steps and alerts are events too).

:class:`FleetState` applies records in order and answers ``statuses()`` (the same
:class:`~specconsole.monitor.HostStatus` the live fleet gives) and the alerts firing. The writer
feeds it live objects; a reader feeds it decoded msgpack (dicts, lists), converted to the real
dataclasses only when a status is asked for.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import msgspec

from specconsole.base.events import Event
from specconsole.base.samples import Sample
from specconsole.formats.nvidia_smi import GpuSnapshot
from specconsole.hosts import Connection, ConnState
from specconsole.monitor import SOURCE_KINDS, HostStatus
from specconsole.sources.sglang import SglangSnapshot
from specconsole.sources.training import TrainingProgress

Record = list[Any]  # [t, kind, host, payload]

VALUE_TYPES: dict[str, type[Any]] = {"gpu": GpuSnapshot, "sglang": SglangSnapshot, "training": TrainingProgress}
#: an alert's worst-first order (``source="alert"`` events carry level warning or error)
ALERT_RANK = {"error": 2, "warning": 1}


def sample_record(t: float, host: str, kind: str, sample: Sample[object]) -> Record:
    return [t, kind, host, (sample.at, sample.interval, sample.value)]


def event_record(event: Event) -> Record:
    return [event.at, "event", event.data.get("host", "") if event.source == "alert" else event.source, event]


def host_record(t: float, status: HostStatus) -> Record:
    return [t, "host", status.name, {"name": status.name, "role": status.role, "address": status.address,
                                     "expected": list(status.expected)}]


def encode_hook(obj: Any) -> Any:
    """What msgpack cannot write as is (an exotic value in an event's data) is written as text."""
    return str(obj)


def to_event(raw: Any) -> Event:
    if isinstance(raw, Event):
        return raw
    return msgspec.convert(raw, Event)


def step_fields(event: Event) -> dict[str, Any] | None:
    """The step event an action's ``Event`` carries (``steps.audit``), else None."""
    data = event.data
    if "action" in data and "kind" in data:
        return data
    return None


@dataclass
class HostEntry:
    name: str
    role: str = ""
    address: str = ""
    expected: tuple[str, ...] = ()
    connection: Any = None  # Connection, or its decoded dict
    samples: dict[str, Any] = field(default_factory=dict)  # kind -> Sample, or [at, interval, raw]
    cached: HostStatus | None = None


@dataclass(frozen=True)
class Alert:
    name: str
    host: str
    level: str
    value: float | None
    message: str
    since: float


class FleetState:
    """The fleet as the records so far say it is."""

    def __init__(self) -> None:
        self.hosts: dict[str, HostEntry] = {}
        self.config_text: str | None = None
        self.alerts: dict[tuple[str, str], Alert] = {}  # (alert, host) -> firing
        self.t: float = 0.0

    def entry(self, host: str) -> HostEntry:
        entry = self.hosts.get(host)
        if entry is None:
            entry = self.hosts[host] = HostEntry(host)
        return entry

    def apply(self, record: Record) -> None:
        t, kind, host, payload = record
        self.t = max(self.t, t)
        if kind in VALUE_TYPES:
            entry = self.entry(host)
            entry.samples[kind] = payload
            entry.cached = None
        elif kind == "connection":
            entry = self.entry(host)
            entry.connection = payload
            entry.cached = None
        elif kind == "event":
            self._event(to_event(payload))
        elif kind == "host":
            entry = self.entry(host)
            entry.role, entry.address = payload["role"], payload["address"]
            entry.expected = tuple(payload["expected"])
            entry.cached = None
        elif kind == "alerts":  # a keyframe's: the alerts firing then
            self.alerts = {(a["name"], a["host"]): Alert(**a) for a in payload}
        elif kind == "meta":
            self.config_text = payload.get("config")

    def _event(self, event: Event) -> None:
        if event.source != "alert":
            return
        data = event.data
        key = (str(data.get("alert", "")), str(data.get("host", "")))
        if data.get("state") == "resolved":
            self.alerts.pop(key, None)
        elif data.get("state") == "firing":
            value = data.get("value")
            self.alerts[key] = Alert(key[0], key[1], event.level, value if isinstance(value, int | float) else None,
                                     event.message, event.at)

    def worst_alert(self) -> Alert | None:
        if not self.alerts:
            return None
        return max(self.alerts.values(), key=lambda a: (ALERT_RANK.get(a.level, 0), a.since))

    def statuses(self) -> list[HostStatus]:
        out = []
        for entry in self.hosts.values():
            if entry.cached is None:
                entry.cached = _status(entry)
            out.append(entry.cached)
        return out

    def keyframe(self, t: float, meta: dict[str, Any]) -> list[Record]:
        """Records that rebuild this whole state from nothing (written at the head of a keyframe)."""
        records: list[Record] = [[t, "meta", "", meta]]
        for entry in self.hosts.values():
            records.append([t, "host", entry.name, {"name": entry.name, "role": entry.role,
                                                     "address": entry.address, "expected": list(entry.expected)}])
            if entry.connection is not None:
                records.append([t, "connection", entry.name, entry.connection])
            for kind, payload in entry.samples.items():
                records.append([t, kind, entry.name, payload])
        if self.alerts:
            records.append([t, "alerts", "", [dataclasses.asdict(a) for a in self.alerts.values()]])
        return records


_refs_resolved = False


def _resolve_refs() -> None:
    """msgspec reads the value types' annotations; ``TrainingProgress.checkpoints`` names a type
    its module imports only for type checkers: give that module the name once."""
    global _refs_resolved
    from specconsole.sources import training_progress
    from specconsole.sources.checkpoints import CheckpointListing

    if not hasattr(training_progress, "CheckpointListing"):
        training_progress.CheckpointListing = CheckpointListing  # type: ignore[attr-defined]
    _refs_resolved = True


def _sample(kind: str, payload: Any) -> Sample[Any] | None:
    if payload is None:
        return None
    if isinstance(payload, Sample):
        return payload
    at, interval, value = payload
    if not isinstance(value, VALUE_TYPES[kind]):
        if not _refs_resolved:
            _resolve_refs()
        value = msgspec.convert(value, VALUE_TYPES[kind])
    return Sample(value, at, interval)


def _status(entry: HostEntry) -> HostStatus:
    conn = entry.connection
    if conn is None:
        conn = Connection(ConnState.CONNECTING, 0.0)
    elif not isinstance(conn, Connection):
        conn = msgspec.convert(conn, Connection)
        entry.connection = conn
    samples = {}
    for kind in SOURCE_KINDS:
        sample = _sample(kind, entry.samples.get(kind))
        if sample is not None:
            entry.samples[kind] = sample  # converted once
        samples[kind] = sample
    return HostStatus(name=entry.name, role=entry.role, address=entry.address, connection=conn,
                      gpu=samples["gpu"], sglang=samples["sglang"], training=samples["training"],
                      expected=entry.expected)
