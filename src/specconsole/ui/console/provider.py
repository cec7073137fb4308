"""Where the console's statuses come from: a :class:`~specconsole.monitor.Fleet`, or anything shaped like one.

The app calls ``statuses()``, ``subscribe(listener)``, ``start()`` and ``stop()``, and seeds the
plots with ``take_history()`` (what Prometheus had from before the console started); the
destructive flows and the eval act through ``host(name)``, the monitor's own connection (None:
nothing to act through, e.g. fixed statuses).
:class:`FixedStatuses` serves a fixed set of :class:`HostStatus` objects (built from the real
dataclasses) with no hosts behind them: the layout snapshots use it, and so can a replay.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from specconsole.base.events import EventLog
from specconsole.hosts import Host
from specconsole.monitor import ChangeListener, HistoryPoints, HostStatus


class StatusProvider(Protocol):
    events: EventLog

    def statuses(self) -> list[HostStatus]: ...

    def subscribe(self, listener: ChangeListener) -> None: ...

    def host(self, name: str) -> Host | None: ...

    def take_history(self) -> HistoryPoints:
        """The plots' points from before now not handed out yet (``{(host, kind): [(at, value)]}``)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class FixedStatuses:
    """A provider of statuses that only change when :meth:`set` is called."""

    def __init__(self, statuses: Iterable[HostStatus], events: EventLog | None = None) -> None:
        self._statuses = list(statuses)
        self.events = events or EventLog()
        self._listeners: list[ChangeListener] = []
        self.started = False
        self.stopped = False

    def statuses(self) -> list[HostStatus]:
        return list(self._statuses)

    def set(self, statuses: Iterable[HostStatus]) -> None:
        self._statuses = list(statuses)
        for s in self._statuses:
            for listener in list(self._listeners):
                listener(s.name, "connection")

    def subscribe(self, listener: ChangeListener) -> None:
        self._listeners.append(listener)

    def host(self, name: str) -> Host | None:
        return None

    def take_history(self) -> HistoryPoints:
        return {}

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.stopped = True
