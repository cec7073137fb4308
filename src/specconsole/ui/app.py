"""The Textual console: ``specconsole [--config F] [--read-only] [--theme NAME]``.

Structure:

- the data comes from a :class:`~specconsole.monitor.Fleet` (or any
  :class:`~specconsole.ui.provider.StatusProvider`); its sources run as their own asyncio tasks,
  the UI never waits on a host. The app redraws every ``console.refresh_s`` from
  ``fleet.statuses()``; change notifications only mark hosts dirty, and a connection change (or
  a host's first data) triggers one coalesced redraw ~50 ms later, so nothing waits a full tick
  to show a host going down and nothing redraws more than needed.
- the panes (:mod:`specconsole.ui.panes`) render snapshots; layout and colours are in
  ``console.tcss``; breakpoints put the host panes side by side from 120 columns.
- every key, the footer, the ``?`` screen and the command palette come from one registry
  (:mod:`specconsole.ui.registry`), remapped by ``[keys]``, gated by read-only mode.
- themes are loaded from TOML files (:mod:`specconsole.ui.themes`); ``t`` cycles them,
  and the choice is remembered in ``console.state_dir``.
- destructive actions go through :meth:`ConsoleApp.run_action_flow` (one hook).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import signal
import sys
import termios
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

from rich.console import Console
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Container, VerticalScroll
from textual.css.query import NoMatches
from textual.driver import Driver
from textual.screen import ModalScreen, Screen
from textual.theme import BUILTIN_THEMES
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Footer

from specconsole import paths
from specconsole.actions.steps import Emit, StepEvent
from specconsole.config import Config, HostConfig
from specconsole.eval.store import EvalRun
from specconsole.events import Event, EventLog
from specconsole.freshness import Staleness
from specconsole.monitor import HostStatus
from specconsole.shutdown import STOP_TIMEOUT_S, ExitGuard, kill_children, signal_name
from specconsole.ui.action_view import ActionPanel
from specconsole.ui.eval_pane import EvalPane, OnResult
from specconsole.ui.fleet_view import FleetNavigator, FleetView
from specconsole.ui.format import Palette
from specconsole.ui.history import History
from specconsole.ui.palette import ActionsProvider
from specconsole.ui.panes import (
    EventList,
    EventsPane,
    HostPane,
    ServingPane,
    SummaryBar,
    TrainingPane,
    View,
)
from specconsole.ui.provider import StatusProvider
from specconsole.ui.quit_key import typing_text, with_quit_deadline
from specconsole.ui.registry import BY_ID, REGISTRY, KeyPlan, keymap, plan_keys, registry_bindings
from specconsole.ui.screens import ConfirmScreen, HelpScreen
from specconsole.ui.themes import ConsoleState, LoadedThemes, load_themes, pick_theme

#: How soon after a connection change (or a host's first data) the panes are redrawn.
COALESCE_S = 0.05

#: What a forced exit writes to a live terminal: what Textual's application mode turned on, off.
RESTORE_TERMINAL = (b"\x1b[?1000l\x1b[?1003l\x1b[?1015l\x1b[?1006l\x1b[?2004l\x1b[?7h\x1b[<u"
                    b"\x1b[?1049l\x1b[?25h\x1b[?1004l")

W = TypeVar("W", bound=Widget)


def _dom_id(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


class ConsoleApp(App[int]):
    """The console. ``fleet`` defaults to a real :class:`Fleet` for ``config``."""

    CSS_PATH = "console.tcss"
    TITLE = "specconsole"
    COMMANDS = App.COMMANDS | {ActionsProvider}
    # textual types these ``ClassVar[...] | None``, which checkers read as instance attributes
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-medium"), (200, "-wide")]  # noqa: RUF012
    VERTICAL_BREAKPOINTS = [(0, "-short"), (40, "-tall")]  # noqa: RUF012
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close_action_view", "Close action view", show=False),
        *registry_bindings(),  # default keys; [keys] remaps them by id through Textual's keymap
    ]

    def __init__(self, config: Config, *, fleet: StatusProvider | None = None, read_only: bool = False,
                 theme: str | None = None, clock: Callable[[], float] = time.time,
                 themes: LoadedThemes | None = None, handle_signals: bool = False,
                 start_fleet: bool = True) -> None:
        self._config = config
        self._read_only = read_only or config.console.read_only
        self.clock = clock
        self.loaded_themes = themes if themes is not None else load_themes()
        if fleet is None:
            from specconsole.monitor import Fleet

            fleet = Fleet(config, events=EventLog(config.console.audit_log))
        self.fleet: StatusProvider = fleet
        self.events: EventLog = fleet.events
        self.key_plan: KeyPlan = plan_keys(config.keys, self._read_only)
        self.history = History()
        self.console_state = ConsoleState(config.console.state_dir)
        self.handle_signals = handle_signals
        self.start_fleet = start_fleet
        self.exit_signal: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Future[None] | None = None
        self._refresh_timer: Timer | None = None
        self._leaving: asyncio.Future[None] | None = None
        #: the ``specconsole`` command: on leaving, end the process once the terminal is restored
        self.leave_process = False
        # SIGHUP/SIGTERM/SIGINT and q: leave within the guard's deadline whatever the loop is doing
        self.exit_guard = ExitGuard(note=lambda m: self.events.record(m, level="warning"),
                                    restore=self._restore_terminal) if handle_signals else None
        self.first_full_frame_at: float | None = None
        self._dirty: set[str] = set()
        self._pending: Timer | None = None
        self._refreshes = 0
        self._panes: list[HostPane | ServingPane | TrainingPane] | None = None
        self._seen: set[str] = set()  # hosts that had complete data at a redraw
        self.freshness = Staleness()  # each value's stale state, with hysteresis
        self.fleet_nav = FleetNavigator(self)  # fleet view or host panes (issue 13)
        self._thread_id = threading.get_ident()
        self._action_running: str | None = None
        self._cli_theme = theme
        super().__init__()
        self._install_bindings()
        self._register_themes()
        remembered = self.console_state.theme
        self.initial_theme = pick_theme(self.theme_names, cli=theme, remembered=remembered,
                                        configured=config.console.theme)
        if config.console.theme and config.console.theme not in self.theme_names:
            self.events.emit(f"console.theme = {config.console.theme!r}: no such theme "
                             f"(themes: {', '.join(self.theme_names)}); using {self.initial_theme}",
                             level="warning")
        self.theme = self.initial_theme
        self.palette = Palette.from_variables(self.get_css_variables())
        for warning in self.key_plan.warnings:
            self.events.emit(warning, level="warning")
        # events reach the pane through this queue (flushed on the UI thread); it starts with
        # what happened before the console opened (the audit log's recent lines)
        self.new_events: deque[Event] = deque(self.events.recent)
        self.events.subscribe(self._event_added)

    # -- the ActionContext protocol ------------------------------------------------------
    @property
    def config(self) -> Config:
        return self._config

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def theme_names(self) -> list[str]:
        return self.loaded_themes.names or ["textual-dark", "textual-light"]

    # -- set-up ----------------------------------------------------------------------------
    def _install_bindings(self) -> None:
        """``[keys]``, as resolved by the registry's plan, becomes Textual's keymap (binding ids are
        the registry's action ids); a remapped key displaces the binding that had it by default."""
        self.set_keymap(keymap(self.key_plan))

    def _register_themes(self) -> None:
        for warning in self.loaded_themes.warnings:
            self.events.emit(warning, level="warning")
        if not self.loaded_themes.themes:
            self.events.emit(f"no theme files found (shipped, {paths.config_dir() / 'themes'}); "
                             "using Textual's dark and light themes", level="warning")
            self.loaded_themes.themes = {n: BUILTIN_THEMES[n] for n in ("textual-dark", "textual-light")}
        for theme in self.loaded_themes.themes.values():
            self.register_theme(theme)

    def detail_panes(self, hosts: Sequence[HostConfig]) -> tuple[list[Widget], list[Widget]]:
        """The host panes and the serving/training panes of ``hosts``."""
        names = {h.name for h in hosts}
        return ([HostPane(h, id=f"host-{_dom_id(h.name)}") for h in hosts],
                [*(ServingPane(h, id=f"serving-{_dom_id(h.name)}") for h in self.config.serve_hosts
                   if h.name in names),
                 *(TrainingPane(h, id=f"training-{_dom_id(h.name)}") for h in self.config.train_hosts
                   if h.name in names)])

    def panes_changed(self) -> None:
        self._panes = None

    def compose(self) -> ComposeResult:
        # past console.fleet_threshold hosts: the fleet view, and panes only for a host drilled into
        top, middle = self.detail_panes(() if self.fleet_nav.fleet_mode else self.config.hosts)
        yield SummaryBar(id="summary")
        yield FleetView(self.config, id="fleet")
        with VerticalScroll(id="body"):
            with Container(id="hosts", classes=f"-n{min(len(top), 3)}"):
                yield from top
            with Container(id="middle"):
                yield from middle
                yield EvalPane(id="eval")
            yield EventsPane(self.events, id="events")
        yield ActionPanel(id="action")
        yield Footer()

    async def on_mount(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self.exit_guard is not None:
            self.exit_guard.install(self._signal_received)
        self.fleet.subscribe(self._fleet_changed)
        if self._cli_theme and self._cli_theme != self.console_state.theme:
            self._remember_theme(self._cli_theme)
        self._refresh_timer = self.set_interval(max(0.1, self.config.console.refresh_s), self.refresh_panes,
                                                name="refresh")
        if self.start_fleet:
            self.run_worker(self._start_fleet(), name="fleet-start", group="fleet", exit_on_error=False)
        self.query_one(ActionPanel).display = False
        self.fleet_nav.apply()
        self.refresh_panes()

    async def _start_fleet(self) -> None:
        try:
            await self.fleet.start()
        except Exception as err:  # a host that cannot even start must not take the console down
            self.events.emit(f"starting the monitors failed: {err}", level="error")

    async def on_unmount(self) -> None:
        stopping = self._stopping or asyncio.ensure_future(self._stop_fleet())
        await asyncio.wait([stopping], timeout=STOP_TIMEOUT_S + 0.5)  # the fleet's stop is bounded too

    # -- leaving: q, signals, the terminal going away ------------------------------------
    def action_quit(self) -> None:  # type: ignore[override]
        self._leave(0, None)

    def get_driver_class(self) -> type[Driver]:
        base = super().get_driver_class()
        return with_quit_deadline(base) if self.handle_signals else base

    def quit_key_pressed(self, key: str) -> None:
        """From the input thread, before the loop sees the key: q arms the exit deadline at once."""
        if self.exit_guard is not None and key == self.key_plan.key_of("quit") and not typing_text(self):
            self.exit_guard.arm(0, "quit")

    def _signal_received(self, sig: int) -> None:
        """From the signal handler (any moment, main thread): hand the exit to the loop."""
        self.exit_signal = sig
        if sig == signal.SIGHUP and self.exit_guard is not None:
            # the terminal is gone: nothing to restore, and the loop may already be stuck writing
            # to it. The kernel closes our connections as we exit (the hosts' watchdogs end the
            # streams); our local children are killed first.
            self.exit_guard.force_exit(f"{signal_name(sig)} received: the terminal is gone; closing every "
                                       "connection and leaving", restore=False)
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                self._loop.call_soon_threadsafe(
                    self._leave, 128 + sig, f"{signal_name(sig)} received; stopping the monitors and leaving")

    def _leave(self, code: int, message: str | None) -> None:
        """Stop the monitors and the app together; the guard's deadline bounds the whole exit."""
        if self._stopping is not None:
            return
        if self.exit_guard is not None:
            self.exit_guard.arm(code, message or "quit")
        if message:
            self.events.emit(message, level="warning")
        if self._refresh_timer is not None:  # no more redraws: the loop now serves the exit
            self._refresh_timer.stop()
        self._stopping = asyncio.ensure_future(self._stop_fleet())
        if self.leave_process:
            self._leaving = asyncio.ensure_future(self._leave_process(code))
        else:
            self.exit(code)

    async def _leave_process(self, code: int) -> None:
        """The ``specconsole`` command's way out: the monitors stopped (bounded), the terminal
        restored as Textual's own exit does, our children gone, then the process ends at once,
        without tearing down every widget and object one by one (seconds at many hosts)."""
        assert self._stopping is not None
        await asyncio.wait([self._stopping], timeout=STOP_TIMEOUT_S + 0.3)
        driver = self._driver
        if driver is not None and self.exit_signal != signal.SIGHUP:  # after SIGHUP no terminal is left
            with contextlib.suppress(Exception):
                driver.stop_application_mode()  # input thread stopped, modes and screen restored
                driver.close()  # the output thread has written everything
        kill_children(self.exit_guard.spare if self.exit_guard else frozenset())
        for stream in (sys.__stdout__, sys.__stderr__):
            with contextlib.suppress(Exception):
                stream.flush()  # type: ignore[union-attr]
        os._exit(code)

    async def _stop_fleet(self) -> None:
        try:
            await self.fleet.stop()
        except Exception as err:  # leaving must not fail
            self.events.record(f"stopping the monitors failed: {err!r}", level="error")

    def _restore_terminal(self) -> None:
        """Best effort before a forced exit: the terminal's modes as they were (never blocks long)."""
        driver = self._driver
        attrs, fd = getattr(driver, "attrs_before", None), getattr(driver, "fileno", None)
        if attrs is None or not isinstance(fd, int):
            return
        with contextlib.suppress(termios.error, OSError):
            termios.tcsetattr(fd, termios.TCSANOW, attrs)

        def write() -> None:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                os.write(sys.__stderr__.fileno(), RESTORE_TERMINAL)  # type: ignore[union-attr]

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        writer.join(0.2)

    # -- change notifications (may come from any thread) ----------------------------------
    def _fleet_changed(self, host: str, kind: str) -> None:
        if self._stopping is not None:
            return  # leaving: hosts closing must not cost redraws
        if threading.get_ident() != self._thread_id:
            self.call_from_thread(self._fleet_changed, host, kind)
            return
        self._dirty.add(host)
        urgent = kind == "connection" or not self._has_data(host)
        if urgent and self._pending is None and self.is_running:
            self._pending = self.set_timer(COALESCE_S, self._coalesced_refresh, name="coalesce")

    def _has_data(self, host: str) -> bool:
        return host in self._seen  # a set, not a DOM query: this runs for every sample of every host

    def _coalesced_refresh(self) -> None:
        self._pending = None
        self.refresh_panes()

    def _event_added(self, event: Event) -> None:
        self.new_events.append(event)  # deque.append is thread-safe
        if not self.is_running:
            return
        if threading.get_ident() != self._thread_id:
            self.call_from_thread(self._flush_events)
        else:
            self.call_later(self._flush_events)

    def _flush_events(self) -> None:
        pane = self._one(EventsPane)
        if pane is not None:
            pane.flush(self.new_events)

    # -- drawing -------------------------------------------------------------------------------
    @property
    def main_screen(self) -> Screen[Any] | None:
        """The console's own screen (the bottom of the stack), also while a dialog is open."""
        return self.screen_stack[0] if self.screen_stack else None

    def _one(self, widget_type: type[W], selector: str | None = None) -> W | None:
        screen = self.main_screen
        if screen is None:
            return None
        try:
            return screen.query_one(selector or widget_type, widget_type)  # type: ignore[arg-type]
        except NoMatches:
            return None

    def _host_pane(self, name: str) -> HostPane | None:
        return self._one(HostPane, f"#host-{_dom_id(name)}")

    host_pane = _host_pane

    def statuses(self) -> dict[str, HostStatus]:
        return {s.name: s for s in self.fleet.statuses()}

    def refresh_panes(self) -> None:
        """Redraw every pane from the latest snapshots (only what changed reaches the screen)."""
        screen = self.main_screen
        summary = self._one(SummaryBar)
        if not self.is_running or screen is None or summary is None:
            return
        now = self.clock()
        statuses = self.statuses()
        prometheus = getattr(self.fleet, "prometheus", None)  # plots' history from query_range
        if prometheus is not None:
            self.history.seed(prometheus.take_history())
        for s in statuses.values():
            self.history.record(s)
        view = View(now=now, palette=self.palette, history=self.history, freshness=self.freshness)
        if self._panes is None:  # the panes change only on a drill-down; walking the DOM does cost
            self._panes = [*screen.query(HostPane), *screen.query(ServingPane), *screen.query(TrainingPane)]
        if self.fleet_nav.body_shown:  # hidden panes do no work
            for pane in self._panes:
                pane.show(statuses.get(pane.host.name), view)
        rows = self.fleet_nav.rows(list(statuses.values()), view)
        self.fleet_nav.show(view)
        summary.show(list(statuses.values()), view, rows if self.fleet_nav.fleet_mode else None)
        self._seen.update(name for name, s in statuses.items() if s.complete)
        action = self._one(ActionPanel)
        if action is not None and action.display:
            action.redraw(now)
        self._flush_events()
        self._dirty.clear()
        self._refreshes += 1
        if self.first_full_frame_at is None and statuses and all(s.complete for s in statuses.values()):
            self.call_after_refresh(self._mark_first_full_frame)

    def _mark_first_full_frame(self) -> None:
        if self.first_full_frame_at is None:
            self.first_full_frame_at = time.time()
            mark = os.environ.get("SPECCONSOLE_FIRST_FRAME_FILE")
            if mark:
                with contextlib.suppress(OSError), open(mark, "w") as f:
                    f.write(f"{self.first_full_frame_at:.6f}\n")

    def watch_theme(self, name: str) -> None:
        self.palette = Palette.from_variables(self.get_css_variables())
        if not self.is_running:
            return
        self.refresh_panes()  # cells are compared with their styles: every coloured cell is rewritten
        screen = self.main_screen
        if screen is not None:
            for log in screen.query(EventList):
                log.refresh()
        if name in self.theme_names and name != self.console_state.theme:
            self._remember_theme(name)

    def _remember_theme(self, name: str) -> None:
        problem = self.console_state.remember(theme=name)
        if problem:
            self.events.emit(problem, level="warning")

    def screen_text(self) -> str:
        """The current screen as plain text, one line per row (tests, the tmux smoke check)."""
        width, height = self.size
        console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True,
                          color_system=None, record=True, legacy_windows=False, safe_box=False)
        console.print(self.screen._compositor.render_update(
            full=True, screen_stack=self._background_screens))
        return console.export_text(styles=False)

    # -- actions -------------------------------------------------------------------------------
    def unavailable_reason(self, action_id: str) -> str | None:
        if action_id in self.key_plan.removed_ids:
            return "removed in read-only mode"
        spec = BY_ID.get(action_id)
        if spec is None:
            return "no such action"
        return spec.available(self)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action not in BY_ID:
            return True
        if not self.key_plan.is_bound(action):
            return False  # read-only: removed entirely
        if isinstance(self.screen, ModalScreen) and action not in ("command_palette", "quit"):
            return False
        return True if self.unavailable_reason(action) is None else None

    def trigger_action(self, action_id: str) -> None:
        """Run a registry action by id (the palette uses this), saying why when it cannot run."""
        spec = BY_ID[action_id]
        why = self.unavailable_reason(action_id)
        if why is not None:
            self.events.emit(f"{spec.description.lower()}: unavailable: {why}", level="warning")
            self.notify(f"{spec.description}: {why}", severity="warning", timeout=4)
            return
        self.call_later(self.run_action, action_id)

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            return
        reasons = {b.spec.id: r for b in self.key_plan.bound if (r := self.unavailable_reason(b.spec.id))}
        self.push_screen(HelpScreen(self.key_plan, reasons, self.read_only))

    def action_cycle_theme(self) -> None:
        names = self.theme_names
        index = names.index(self.theme) if self.theme in names else -1
        self.theme = names[(index + 1) % len(names)]
        self.events.emit(f"theme: {self.theme}")

    def action_refresh(self) -> None:
        self.refresh_panes()

    def action_fleet_view(self) -> None:
        self.fleet_nav.toggle()

    def action_fleet_sort(self) -> None:
        view = self.fleet_nav.view
        if view is not None:
            self.notify(f"sorted by {view.cycle_sort()}", timeout=2)

    def action_fleet_filter(self) -> None:
        view = self.fleet_nav.view
        if view is not None:
            view.open_filter()

    def action_eval_run(self) -> None:
        self.query_one(EvalPane).action_start_run()

    def on_eval_pane_run_requested(self, message: EvalPane.RunRequested) -> None:
        """``e`` (or the palette) in the eval pane: measure the configured serving host."""
        message.pane.start(self._start_eval)

    async def _start_eval(self, emit: Emit, on_result: OnResult) -> EvalRun:
        """The eval pane's run: progress in the pane and, as steps, in the events pane + audit log."""
        from specconsole.actions.steps import audit
        from specconsole.eval.start import start_eval
        from specconsole.ui.flows import serving_state

        serve = self.config.serve_hosts[0].name if self.config.serve_hosts else ""
        monitor = getattr(self.fleet, "monitors", {}).get(serve)  # its connection carries the tunnel
        panel = self.open_action("eval", "Eval run", serve, scroll_to="eval",
                                 state=(lambda: serving_state(self, serve)) if serve else None)

        def both(event: StepEvent) -> None:
            emit(event)
            self.action_emit(event)

        try:
            return await start_eval(self.config, emit=audit(self.events, also=both), on_result=on_result,
                                    connection=monitor.host if monitor is not None else None)
        except Exception as err:
            if panel.track is not None and panel.track.action == "eval" and not panel.track.finished:
                self.action_emit(StepEvent("eval", "failed", str(err).splitlines()[0] if str(err) else repr(err)))
            raise

    # -- the action view ---------------------------------------------------------------
    @property
    def action_panel(self) -> ActionPanel:
        """The action view (on the console's own screen, also while a dialog is open)."""
        panel = self._one(ActionPanel)
        if panel is None:
            raise NoMatches("the console's screen has no action view yet")
        return panel

    def open_action(self, action: str, title: str, host: str, *, state: Callable[[], str] | None = None,
                    scroll_to: str | None = None) -> ActionPanel:
        """Show the action view for a new action (a toast says it started); feed it with :meth:`action_emit`.

        ``action`` is the name its step events carry; ``state`` gives the view's last line (the
        host's state); ``scroll_to``: the pane that matters for it (``serving``, ``training``,
        ``eval``) is scrolled into view. While another action's view is still running, that one stays
        and this action reports in Events and toasts only."""
        panel = self.action_panel
        if panel.busy and panel.track is not None and panel.track.action != action:
            self.notify(f"started; its steps are in Events (the action view follows {panel.track.title})",
                        title=title, timeout=6)
            return panel
        panel.start(action, title, host, self.clock(), state)
        self.notify("started; its steps are in the action view below", title=title, timeout=4)
        if scroll_to:
            target = self._one(Widget, f".{scroll_to}-pane")
            if target is not None:
                self.call_after_refresh(target.scroll_visible, animate=False)
        return panel

    def action_emit(self, event: StepEvent) -> None:
        """A step event of a running action: into the action view (when it is the one shown); a toast
        when it ends."""
        panel = self._one(ActionPanel)
        if panel is None:
            return
        shown = panel.feed(event)
        title = panel.track.title if shown and panel.track is not None else event.action
        if event.kind == "done":
            self.notify(event.message, title=f"{title}: done", timeout=8)
        elif event.kind == "failed":
            self.notify(event.message, title=f"{title}: FAILED", severity="error", timeout=15)

    def action_close_action_view(self) -> None:
        panel = self._one(ActionPanel)
        if panel is None or not panel.display:
            self.fleet_nav.back()  # from a host's panes back to the fleet view
            return
        if not panel.close():
            self.notify("the action is still running; its view closes when it ends", severity="warning",
                        timeout=4)
            return
        screen = self.main_screen
        if screen is not None:  # the rows it covered are the body's again: repaint them all
            screen.refresh(layout=True)
            self.call_after_refresh(screen.refresh, repaint=True)

    def action_kill_training(self) -> None:
        self._start_flow("kill_training")

    def action_deploy(self) -> None:
        self._start_flow("deploy")

    def action_deploy_checkpoint(self) -> None:
        self._start_flow("deploy_checkpoint")

    def _start_flow(self, action_id: str) -> None:
        if action_id in self.key_plan.removed_ids:
            return  # read-only; the binding does not exist, this guards the palette and run_action
        if self._action_running:
            self.notify(f"{BY_ID[self._action_running].description} is still running", severity="warning")
            return
        self._action_running = action_id

        async def flow() -> None:
            try:
                await self.run_action_flow(action_id)
            except Exception as err:
                self.events.emit(f"{BY_ID[action_id].description.lower()}: failed: {err!r}", level="error")
                panel = self._one(ActionPanel)
                action = {"kill_training": "kill-training", "deploy_checkpoint": "deploy"}.get(action_id, action_id)
                if panel is not None and panel.track is not None and panel.track.action == action \
                        and not panel.track.finished:
                    self.action_emit(StepEvent(action, "failed", f"failed: {err!r}"))
            finally:
                self._action_running = None

        self.run_worker(flow(), name=action_id, group="actions", exit_on_error=False)

    async def confirm(self, title: str, body: str, confirm_label: str, *, destructive: bool = True) -> bool:
        """Ask in a modal dialog whose default button is Cancel (call from a worker, e.g. a flow)."""
        answer: bool = await self.push_screen_wait(ConfirmScreen(title, body, confirm_label, destructive=destructive))
        return answer

    async def run_action_flow(self, action_id: str) -> None:
        """THE hook for destructive actions (``kill_training``, ``deploy``); runs in a worker.

        It owns the whole flow (:mod:`specconsole.ui.flows`): confirm (``await self.confirm(...)``,
        Cancel focused), then act, emitting each step to ``self.events`` (events pane + audit log).
        """
        from specconsole.ui.flows import deploy_checkpoint_flow, deploy_flow, kill_training_flow

        flows = {"kill_training": kill_training_flow, "deploy": deploy_flow,
                 "deploy_checkpoint": deploy_checkpoint_flow}
        await flows[action_id](self)


def run_console(config: Config, *, read_only: bool, theme: str | None,
                cleanup: Callable[[], None] | None = None, leave_process: bool = False) -> int:
    """The ``specconsole`` command without a subcommand: run the console until q or a signal.

    Leaving takes at most the exit deadline (:mod:`specconsole.shutdown`); a forced exit runs
    ``cleanup`` first. ``leave_process``: once the console has stopped (terminal restored,
    monitors stopped, children gone), end the process right away instead of waiting for the
    interpreter's teardown of every object (seconds at many hosts on a busy machine).
    """
    themes = load_themes()
    names = themes.names or ["textual-dark", "textual-light"]
    if theme and theme not in names:
        print(f"specconsole: --theme {theme}: no such theme (themes: {', '.join(names)}); "
              f"add {paths.config_dir() / 'themes' / theme}.toml or pick one of those", file=sys.stderr)
        return 2
    if not sys.stdout.isatty() or not sys.stdin.isatty():
        print("specconsole: the console needs a terminal; for a headless snapshot use "
              "`specconsole status` (or `status --watch`)", file=sys.stderr)
        return 2
    app = ConsoleApp(config, read_only=read_only, theme=theme, themes=themes, handle_signals=True)
    guard = app.exit_guard
    assert guard is not None
    guard.cleanup = cleanup
    app.leave_process = leave_process
    try:
        result = app.run()
    finally:
        guard.disarm()
        guard.uninstall()
        kill_children(guard.spare)  # local streams whose stop was cut short (not the demo's lab)
    code = int(app.return_code) if app.return_code not in (None, 0) else (
        int(result) if isinstance(result, int) else 0)
    if leave_process:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
    return code


__all__ = ["REGISTRY", "ConsoleApp", "run_console"]
