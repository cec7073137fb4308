"""Reading a recording: the fleet at any time, the records in between, and what changed.

:class:`Recording` scans the blocks' headers once (no payload: an hour of 200 hosts is ~7,000
headers); :meth:`Recording.state_at` decodes from the keyframe before ``t`` (at most a minute of
blocks). :class:`Cursor` plays it forward block by block. A damaged block ends the recording
there: ``problem`` holds the one line saying so.
"""

from __future__ import annotations

import math
import re
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from specconsole.base.events import Event
from specconsole.monitor import HostStatus
from specconsole.recorder.records import FleetState, Record, step_fields, to_event
from specconsole.recorder.store import BlockReader, Damaged, keyframe_before, scan


class Recording:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        if not self.path.exists():
            raise FileNotFoundError(f"{self.path}: no such recording")
        self.blocks, self.problem = scan(self.path)
        first = next((i for i, b in enumerate(self.blocks) if b.keyframe), None)
        if first is None:
            self.blocks = []
        else:
            self.blocks = self.blocks[first:]

    @property
    def empty(self) -> bool:
        return not self.blocks

    @property
    def start(self) -> float:
        return self.blocks[0].t0 if self.blocks else 0.0

    @property
    def end(self) -> float:
        return max((b.t1 for b in self.blocks), default=0.0)

    def note(self, problem: str) -> None:
        """A block that did not decode: the recording ends before it (said once)."""
        if self.problem is None:
            self.problem = problem

    def cursor(self, t: float) -> Cursor:
        """A cursor holding the fleet at ``t`` (records up to and including ``t`` applied)."""
        count = len(self.blocks)
        cursor = Cursor(self, keyframe_before(self.blocks, t))
        cursor.advance(t)
        if len(self.blocks) < count:  # a damaged block ended the recording: again, from a keyframe before it
            return self.cursor(t)
        cursor.new_events.clear()
        return cursor

    def state_at(self, t: float) -> FleetState:
        return self.cursor(t).state

    def events_between(self, t0: float, t1: float) -> list[Event]:
        """The events recorded in ``(t0, t1]`` (action steps, alerts, connections...)."""
        cursor = self.cursor(t0)
        cursor.advance(t1)
        return cursor.new_events

    def next_event_after(self, t: float) -> float | None:
        """When the first event after ``t`` happened (None: none left). Only blocks that hold
        events are decoded past ``t``'s keyframe."""
        cursor = self.cursor(t)
        for block in self.blocks:
            if block.t1 <= t or not block.events:
                continue
            cursor.advance(block.t1)
            later = [e.at for e in cursor.new_events if e.at > t]
            if later:
                return min(later)
        return None


@dataclass
class Cursor:
    """Plays a recording forward from block ``index`` (a keyframe)."""

    recording: Recording
    index: int
    state: FleetState = field(default_factory=FleetState)
    new_events: list[Event] = field(default_factory=list)
    t: float = 0.0
    finished: bool = False
    _reader: BlockReader = field(default_factory=BlockReader)
    _held: deque[Record] = field(default_factory=deque)  # decoded, not yet due

    def advance(self, t: float) -> None:
        """Apply every record up to ``t``; the events among them are added to :attr:`new_events`."""
        blocks = self.recording.blocks
        while True:
            while self._held and self._held[0][0] <= t:
                self._apply(self._held.popleft())
            if self._held or self.index >= len(blocks) or blocks[self.index].t0 > t:
                break
            block = blocks[self.index]
            try:
                records = self._reader.read(block)
            except Damaged as err:
                self.recording.note(str(err))
                del blocks[self.index:]
                break
            self.index += 1
            records.sort(key=lambda r: r[0])
            if block.keyframe:  # the keyframe's head rebuilds the state: it is due at once
                head = [r for r in records if r[1] != "event"]
                for record in head:
                    self.state.apply(record)
                records = [r for r in records if r[1] == "event"]
            self._held = deque(sorted([*self._held, *records], key=lambda r: r[0]))
        self.t = max(self.t, t)
        self.finished = self.index >= len(blocks) and not self._held

    def _apply(self, record: Record) -> None:
        if record[1] == "event":
            event = to_event(record[3])
            self.new_events.append(event)
            record = [record[0], "event", record[2], event]
        self.state.apply(record)


# ------------------------------------------------------------------------------- times

_OFFSET = re.compile(r"^\+(\d+(?:\.\d+)?)([smh]?)$")


def parse_time(text: str, recording: Recording) -> float:
    """``+90s`` / ``+5m`` (from the recording's start), ``HH:MM[:SS]`` (on the recording's first
    day, local time), an ISO date-time, or seconds since the epoch."""
    text = text.strip()
    m = _OFFSET.match(text)
    if m:
        scale = {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]
        return recording.start + float(m.group(1)) * scale
    if re.match(r"^\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?$", text):
        day = datetime.fromtimestamp(recording.start).date().isoformat()
        return datetime.fromisoformat(f"{day}T{text}").timestamp()
    try:
        value = float(text)
        if math.isfinite(value):
            return value
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise ValueError(f"{text!r} is not a time: give +SECONDS[s|m|h] from the start, HH:MM[:SS], "
                         "an ISO date-time or epoch seconds") from None


# -------------------------------------------------------------------------------- diff

#: figures compared by ``--diff``: (name, getter)
def _figures(s: HostStatus) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    if s.gpu is not None and s.gpu.value.gpus:
        utils = [g.utilization_pct for g in s.gpu.value.gpus if g.utilization_pct is not None]
        mem = [g.memory_used_mib for g in s.gpu.value.gpus if g.memory_used_mib is not None]
        out["gpu_util_pct"] = sum(utils) / len(utils) if utils else None
        out["gpu_memory_used_mib"] = float(sum(mem)) if mem else None
    if s.sglang is not None and s.sglang.value.metrics is not None:
        out["tokens_per_s"] = s.sglang.value.metrics.tokens_per_s
        out["accept_length"] = s.sglang.value.metrics.spec_accept_length
    if s.training is not None:
        out["training_step"] = None if s.training.value.step is None else float(s.training.value.step)
        out["loss"] = s.training.value.loss
    return out


def _serving(s: HostStatus) -> dict[str, Any] | None:
    if s.sglang is None:
        return None
    info = s.sglang.value.info
    return {"state": s.sglang.value.state.value,
            "algorithm": info.algorithm if info else None, "block_size": info.block_size if info else None,
            "draft_window": info.draft_window if info else None}


def diff(recording: Recording, t1: float, t2: float, threshold: float = 0.1) -> dict[str, Any]:
    """What changed from ``t1`` to ``t2``: the actions that ended (deploys, kills, evals: their last
    step), connection state changes, serving and training state changes, and figures that moved
    by more than ``threshold`` (relative) or appeared/disappeared."""
    from specconsole.report import iso

    before = {s.name: s for s in recording.state_at(t1).statuses()}
    after = {s.name: s for s in recording.state_at(t2).statuses()}
    events = recording.events_between(t1, t2)
    actions = []
    connections = []
    alerts = []
    for e in events:
        step = step_fields(e)
        if step is not None and step["kind"] in ("done", "failed"):
            actions.append({"at": iso(e.at), "action": step["action"], "host": e.source, "outcome": step["kind"],
                            "message": e.message})
        elif e.source == "alert":
            alerts.append({"at": iso(e.at), "alert": e.data.get("alert"), "host": e.data.get("host"),
                           "state": e.data.get("state"), "message": e.message})
    hosts = []
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name), after.get(name)
        change: dict[str, Any] = {"name": name}
        if a is None or b is None:
            change["present"] = {"before": a is not None, "after": b is not None}
        else:
            if a.connection.state != b.connection.state:
                connections.append({"host": name, "before": a.connection.state.value,
                                    "after": b.connection.state.value})
                change["connection"] = {"before": a.connection.state.value, "after": b.connection.state.value}
            sa, sb = _serving(a), _serving(b)
            if sa != sb:
                change["serving"] = {"before": sa, "after": sb}
            ja = a.training.value.state if a.training else None
            jb = b.training.value.state if b.training else None
            if ja != jb:
                change["training_state"] = {"before": ja, "after": jb}
            figures = {}
            fa, fb = _figures(a), _figures(b)
            for key in sorted(set(fa) | set(fb)):
                va, vb = fa.get(key), fb.get(key)
                if _moved(va, vb, threshold):
                    figures[key] = {"before": _clean(va), "after": _clean(vb)}
            if figures:
                change["figures"] = figures
        if len(change) > 1:
            hosts.append(change)
    return {"from": iso(t1), "to": iso(t2), "threshold": threshold, "actions": actions,
            "connections": connections, "alerts": alerts, "hosts": hosts}


def _clean(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else round(v, 4)


def _moved(a: float | None, b: float | None, threshold: float) -> bool:
    a, b = _clean(a), _clean(b)
    if a is None or b is None:
        return a != b
    if a == b:
        return False
    return abs(b - a) > threshold * max(abs(a), abs(b), 1e-9)
