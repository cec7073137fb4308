"""The console's alerts: the engine run at every redraw, its delivery (with the terminal bell),
and the summary bar's text for the worst active alert.

The engine (:mod:`specconsole.alerts.engine`) is the same one ``status --watch --alerts`` runs;
its firing and resolving are Events, so the events pane shows them as it shows every event.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from specconsole.alerts.baseline import EvalBaseline
from specconsole.alerts.delivery import AlertDelivery
from specconsole.alerts.engine import AlertEngine
from specconsole.base.events import EventLog
from specconsole.config import Config
from specconsole.monitor import HostStatus
from specconsole.ui.style.formatting import escape


class ConsoleAlerts:
    """What the app calls: :meth:`start` (mounted), :meth:`tick` (each redraw), :meth:`summary`, :meth:`stop`."""

    def __init__(self, config: Config, events: EventLog, *, bell: Callable[[], None],
                 env: Mapping[str, str] | None = None) -> None:
        self.engine = AlertEngine.for_config(config, events, EvalBaseline())
        self.delivery = AlertDelivery(config.alerting, events, bell=bell, env=env)

    def start(self) -> None:
        self.delivery.start()

    async def stop(self) -> None:
        await self.delivery.stop()

    def tick(self, statuses: Iterable[HostStatus], now: float) -> None:
        self.engine.evaluate(statuses, now)

    def summary(self) -> str | None:
        """``▲ training-stalled on train +1`` in the worst alert's colour; None while none is active."""
        active = self.engine.active
        if not active:
            return None
        worst = active[0]
        more = f" +{len(active) - 1}" if len(active) > 1 else ""
        colour = "$error" if worst.level == "error" else "$warning"
        return f"[b {colour}]▲ {escape(worst.short)}{more}[/]"
