"""The console's own screen: the panes, their layout, and the redraw.

:class:`ConsoleScreen` is the app's default screen (the bottom of the stack, under every dialog).
It composes the summary bar, the fleet view, the host panes (from
:data:`specconsole.ui.panes.per_host.PER_HOST_PANES`), the eval and events panes and the action
view, and redraws them every ``console.refresh_s`` from the fleet's latest snapshots; a connection
change (or a host's first data) triggers one coalesced redraw ~50 ms later. What it draws with (the
fleet, the history, the alerts, the palette, the navigator) is the app's: it sees the app as a
:class:`ScreenHost`.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Collection
from typing import Protocol, TypeVar

from textual.app import ComposeResult
from textual.containers import Container, VerticalScroll
from textual.geometry import Size
from textual.screen import Screen
from textual.timer import Timer
from textual.widget import Widget

from specconsole.base import gc_tuning
from specconsole.base.events import Event, EventLog
from specconsole.base.freshness import Staleness
from specconsole.config import Config
from specconsole.monitor import HostStatus
from specconsole.ui.console.app_alerts import ConsoleAlerts
from specconsole.ui.console.app_leaving import Leaving
from specconsole.ui.console.context import find
from specconsole.ui.console.cropping import CroppingCompositor
from specconsole.ui.console.provider import StatusProvider
from specconsole.ui.fleet.fleet_view import FleetNavigator, FleetView
from specconsole.ui.fleet.summary_bar import SummaryBar
from specconsole.ui.panes.action_view import ActionPanel
from specconsole.ui.panes.eval_pane import EvalPane
from specconsole.ui.panes.events_pane import EventsPane
from specconsole.ui.panes.history import History
from specconsole.ui.panes.pane_base import PerHostPane, View
from specconsole.ui.panes.per_host import per_host_panes
from specconsole.ui.registry import KeyPlan
from specconsole.ui.style.formatting import Palette
from specconsole.ui.widgets.footer import ConsoleFooter

#: How soon after a connection change (or a host's first data) the panes are redrawn.
COALESCE_S = 0.05
#: redraws at least this often (``console.refresh_s``): a heartbeat waits for the next one, drawn in
#: its frame, instead of costing two frames a second of its own, and so does a host's first data
#: before the first full frame, instead of a redraw and a layout for each piece (issue 34)
HEARTBEAT_DRAW_S = 1.0

W = TypeVar("W", bound=Widget)


class ScreenHost(Protocol):
    """What the console's screen uses of the app (its state; the screen holds only the redraw's)."""

    @property
    def config(self) -> Config: ...

    @property
    def fleet(self) -> StatusProvider: ...

    @property
    def events(self) -> EventLog: ...

    @property
    def fleet_nav(self) -> FleetNavigator: ...

    @property
    def alerts(self) -> ConsoleAlerts: ...

    @property
    def history(self) -> History: ...

    @property
    def freshness(self) -> Staleness: ...

    @property
    def palette(self) -> Palette: ...

    @property
    def new_events(self) -> deque[Event]: ...

    @property
    def is_running(self) -> bool: ...

    @property
    def leaving(self) -> Leaving: ...

    @property
    def key_plan(self) -> KeyPlan: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    #: when the first frame with every host's data was on screen (the start-up bench reads it)
    first_full_frame_at: float | None


class Body(VerticalScroll):
    """The panes' scroll (``#body``), which takes the focus as the console opens.

    Its focus restyles only itself: no rule styles what is in it by the body's focus (``#body:focus``
    is its own scrollbar's colour; tests/test_ui_layout.py checks every descendant's styles both
    ways), and Textual's restyle of all 40 of them cost ~20 ms of the first frame (issue 34)."""

    def watch_has_focus(self, _has_focus: bool) -> None:
        self.app.stylesheet.update_nodes([self], animate=True)


class ConsoleScreen(Screen[None]):
    """The panes and their redraw (``console.refresh_s``, and coalesced on connection changes)."""

    def __init__(self, console: ScreenHost) -> None:
        super().__init__()
        self._compositor = CroppingCompositor()  # renders only the widgets and rows that changed (issue 34)
        self.console = console
        self._redraw_timer: Timer | None = None
        self._coalescing = False  # a coalesced redraw is armed
        self._first_frame_drawn = False  # the data that completes the first full frame was drawn at once
        self._pane_list: list[PerHostPane] | None = None  # the mounted ones, until panes_changed()
        self._hosts_seen: set[str] = set()  # hosts that had complete data at a redraw
        self._thread_id = threading.get_ident()
        self._composed = False  # its panes are all mounted (their own parts too): it may draw
        self._heartbeats_wait = True  # see heartbeats_wait
        #: redraws so far (tests)
        self.redraws = 0
        # the breakpoint classes (the app's -narrow/-tall...) for the terminal's size now: the first
        # Resize, which sets them, then finds them set and does not style every widget a second time
        self.update_classes(self._breakpoints(self.app.size), update=False)

    def _breakpoints(self, size: Size) -> dict[str, bool]:
        """Which breakpoint classes ``Screen._on_resize`` gives a screen of ``size``."""
        across, down = self.app.HORIZONTAL_BREAKPOINTS or [], self.app.VERTICAL_BREAKPOINTS or []
        chosen = self._get_breakpoint_classes(size.width, across) | self._get_breakpoint_classes(size.height, down)
        return {name: name in chosen for _, name in (*across, *down)}

    def compose(self) -> ComposeResult:
        console = self.console
        nav = console.fleet_nav
        # past console.fleet_threshold hosts: the fleet view, and panes only for a host drilled into
        panes = per_host_panes(() if nav.fleet_mode else console.config.hosts)
        yield SummaryBar(id="summary")
        yield FleetView(console.config, nav, console.key_plan.key_of, id="fleet")
        with Body(id="body"):
            with Container(id="hosts", classes=f"-n{min(len(panes['hosts']), 3)}"):
                yield from panes["hosts"]
            # the eval pane beside a column of the serving and training panes (one under the other
            # at 80 columns, the eval pane first: its comparison is on the first screen)
            with Container(id="lower", classes="" if panes["middle"] else "-solo"):
                yield EvalPane(id="eval")
                with Container(id="middle"):
                    yield from panes["middle"]
            yield EventsPane(console.events, id="events")
        yield ActionPanel(heartbeats_wait=lambda: self.heartbeats_wait, id="action")
        yield ConsoleFooter()

    def on_mount(self) -> None:
        self._composed = True  # Mount comes after every child's own compose and mount
        self.console.fleet.subscribe(self.fleet_changed)
        self._redraw_timer = self.set_interval(max(0.1, self.console.config.console.refresh_s),
                                               self.refresh_panes, name="refresh")
        self.query_one(ActionPanel).display = False
        self.console.fleet_nav.apply()
        self.refresh_panes()

    def stop_redraws(self) -> None:
        if self._redraw_timer is not None:
            self._redraw_timer.stop()
        self.heartbeats_wait = False  # no redraw to wait for: heartbeats are drawn as they come

    @property
    def heartbeats_wait(self) -> bool:
        """Heartbeats (and, before the first full frame, a host's first data) reach the screen with
        the next redraw: one comes within HEARTBEAT_DRAW_S, and redraws were not stopped."""
        return self._heartbeats_wait and self.console.config.console.refresh_s <= HEARTBEAT_DRAW_S

    @heartbeats_wait.setter
    def heartbeats_wait(self, value: bool) -> None:
        self._heartbeats_wait = value

    def panes_changed(self) -> None:
        """Per-host panes were mounted or removed (a fleet drill-down): look them up again."""
        self._pane_list = None

    # -- change notifications (may come from any thread) ----------------------------------
    def fleet_changed(self, host: str, kind: str) -> None:
        if self.console.leaving.stopping is not None:
            return  # leaving: hosts closing must not cost redraws
        if threading.get_ident() != self._thread_id:
            self.app.call_from_thread(self.fleet_changed, host, kind)
            return
        # a set, not a DOM query, for a host's first data: this runs for every sample of every host
        urgent = kind == "connection" or host not in self._hosts_seen
        if not urgent:
            return
        if self._before_first_frame():
            if self._all_filled(self.console.fleet.statuses()):  # the frame that completes them all: now
                self._first_frame_drawn = True
                self.call_later(self.refresh_panes)
                return
            if kind != "connection" and self.heartbeats_wait:
                return  # drawn by the frame that completes them all, or the next timed redraw
        if not self._coalescing and self.console.is_running:
            # armed from the screen's own message loop: a host's task may have been started before
            # the console (ui/console/start.py), in a context without Textual's, where a timer set
            # here would never fire
            self._coalescing = True
            self.call_later(self._arm_coalesce)

    def _before_first_frame(self) -> bool:
        """The hosts' panes (not the fleet view, whose first data coalesces over many hosts) are
        shown and not every host's real values were drawn yet."""
        console = self.console
        return (not self._first_frame_drawn and console.first_full_frame_at is None
                and not console.fleet_nav.fleet_mode and console.is_running)

    def _all_filled(self, statuses: Collection[HostStatus]) -> bool:
        """Every host's panes can show real values in ``statuses`` (what the first full frame waits
        for; the fleet view does not show GPU processes)."""
        processes = self.console.fleet_nav.body_shown
        return bool(statuses) and all(s.filled(processes=processes) for s in statuses)

    def _arm_coalesce(self) -> None:
        self.set_timer(COALESCE_S, self._coalesced_refresh, name="coalesce")

    def _coalesced_refresh(self) -> None:
        self._coalescing = False
        self.refresh_panes()

    def flush_events(self) -> None:
        """The events that came since the last flush, into the events pane."""
        pane = self._one(EventsPane) if self._composed else None
        if pane is not None:
            pane.flush(self.console.new_events)

    # -- drawing -------------------------------------------------------------------------------
    def _one(self, widget_type: type[W], selector: str | None = None) -> W | None:
        return find(self.app, widget_type, selector)

    def refresh_panes(self) -> None:
        """Redraw every pane from the latest snapshots (only what changed reaches the screen)."""
        console = self.console
        summary = self._one(SummaryBar) if self._composed else None
        if not console.is_running or summary is None:
            return
        now = console.clock()
        statuses = {s.name: s for s in console.fleet.statuses()}
        console.alerts.tick(statuses.values(), now)
        console.history.seed(console.fleet.take_history())  # plots' history from Prometheus' query_range
        for s in statuses.values():
            console.history.record(s)
        view = View(now=now, palette=console.palette, history=console.history, freshness=console.freshness)
        nav = console.fleet_nav
        if self._pane_list is None:  # the panes change only on a drill-down; walking the DOM does cost
            self._pane_list = list(self.query(PerHostPane))  # every kind in PER_HOST_PANES
        if nav.body_shown:  # hidden panes do no work
            for pane in self._pane_list:
                pane.show(statuses.get(pane.host.name), view)
        rows = nav.rows(list(statuses.values()), view)
        nav.show(view)
        summary.show(list(statuses.values()), view, rows if nav.fleet_mode else None, console.alerts.summary())
        self._hosts_seen.update(name for name, s in statuses.items() if s.complete)
        action = self._one(ActionPanel)
        if action is not None and action.display:
            action.redraw(now)
        self.flush_events()
        self.redraws += 1
        if console.first_full_frame_at is None and self._all_filled(statuses.values()):
            self.call_after_refresh(self._mark_first_full_frame)

    def _mark_first_full_frame(self) -> None:
        if self.console.first_full_frame_at is None:
            self.console.first_full_frame_at = time.time()
            mark = os.environ.get("SPECCONSOLE_FIRST_FRAME_FILE")
            if mark:  # the frame is on screen now; the collection below comes after it
                with contextlib.suppress(OSError), open(mark, "w") as f:
                    f.write(f"{self.console.first_full_frame_at:.6f}\n")
            gc_tuning.settle()  # start-up's objects out of the collector's way

