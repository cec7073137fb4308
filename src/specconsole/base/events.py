"""The event log: a timestamped record of everything the console did and noticed.

Connections, errors, actions and each of their steps become :class:`Event`s. The log keeps
the recent ones in memory for the events pane, tells subscribers, and appends every event as
one JSON line to the audit file (created on first write, never rewritten).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any, Literal

Level = Literal["info", "warning", "error", "step"]


@dataclass(frozen=True, slots=True)
class Event:
    message: str
    source: str = "console"
    level: Level = "info"
    at: float = field(default_factory=time.time)
    data: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        """``18:11:02 serve  connection lost`` (what the events pane shows)."""
        return f"{time.strftime('%H:%M:%S', time.localtime(self.at))} {self.source:<8} {self.message}"


class EventLog:
    """In-memory ring of recent events plus an append-only JSONL audit file."""

    def __init__(self, audit_path: str | os.PathLike[str] | None = None, keep: int = 1000) -> None:
        self.audit_path = Path(audit_path).expanduser() if audit_path else None
        self.recent: deque[Event] = deque(maxlen=keep)
        self._subscribers: list[Callable[[Event], None]] = []
        self.audit_error: str | None = None
        self._folder_made = False  # the audit file's folder was made (or found) by this log

    def subscribe(self, callback: Callable[[Event], None]) -> None:
        self._subscribers.append(callback)

    def emit(self, message: str, /, source: str = "console", level: Level = "info", **data: Any) -> Event:
        """Keep, audit and tell subscribers of a new event (``message`` is positional, so ``data``
        may hold a key of that name: an alert's one-line ``message``)."""
        event = Event(message, source, level, data=data)
        self.recent.append(event)
        self._audit(event)
        for callback in list(self._subscribers):
            callback(event)
        return event

    def replay(self, event: Event) -> None:
        """Show a recorded event as it was (its own time and data) without auditing it: a replay's
        events happened once already."""
        self.recent.append(event)
        for callback in list(self._subscribers):
            callback(event)

    def record(self, message: str, source: str = "console", level: Level = "info") -> Event:
        """Keep and audit an event without notifying subscribers: safe from any thread even when
        the UI's loop is stuck (used on the way out)."""
        event = Event(message, source, level)
        self.recent.append(event)
        self._audit(event)
        return event

    def check_audit(self) -> str | None:
        """Whether the audit file can be written: ``None`` when it can (it is created, empty, if
        missing), else the one-line problem. An action that changes a host asks this first and
        refuses when there would be no record of it (unless the operator said ``--no-audit``).
        A log made without an audit file (a test's, a library user's) has nothing to check."""
        if self.audit_path is None:
            return None
        try:
            self._make_folder()
            with self.audit_path.open("a", encoding="utf-8"):
                pass
        except OSError as err:
            return f"audit log {self.audit_path} is not writable ({err.strerror or err})"
        return self.audit_error

    def _make_folder(self) -> None:
        """The audit file's folder; a file in its place is left for the open to name ("Not a
        directory"), not reported as mkdir's "File exists"."""
        assert self.audit_path is not None
        with contextlib.suppress(FileExistsError):
            self.audit_path.parent.mkdir(parents=True, exist_ok=True)

    def _audit(self, event: Event) -> None:
        if self.audit_path is None:
            return
        line = json.dumps(_record(event), default=_json_value) + "\n"
        for retry in (False, True):  # the folder is made once; made again if the file cannot be opened
            try:
                if not self._folder_made:
                    self._make_folder()
                    self._folder_made = True
                with self.audit_path.open("a", encoding="utf-8") as f:
                    f.write(line)
                return
            except OSError as err:
                if not retry and self._folder_made:  # the folder may have been removed since
                    self._folder_made = False
                    continue
                if self.audit_error is None:  # say it once, in the log itself
                    self.audit_error = (f"audit log {self.audit_path} not writable: {err.strerror}; "
                                        "set console.audit_log")
                    self.recent.append(Event(self.audit_error, "console", "warning"))
                return


def _record(event: Event) -> dict[str, Any]:
    """``asdict(event)`` without its deep copy (the line is written at once): ``data``'s values
    are JSON's own, or what :func:`_json_value` makes of them."""
    return {"message": event.message, "source": event.source, "level": event.level, "at": event.at,
            "data": event.data}


def _json_value(value: object) -> object:
    """A value JSON has no type for: a dataclass as its fields (as ``asdict`` gave), else its ``str``."""
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    return str(value)
