"""The Textual console: ``specconsole [--config F] [--read-only] [--theme NAME]``.

Structure:

- the data comes from a :class:`~specconsole.monitor.Fleet` (or any
  :class:`~specconsole.ui.console.provider.StatusProvider`); its sources run as their own asyncio tasks,
  the UI never waits on a host.
- the panes and their redraw are the app's default screen,
  :class:`~specconsole.ui.console.console_screen.ConsoleScreen`: it composes them and redraws every
  ``console.refresh_s`` from ``fleet.statuses()``; change notifications only mark hosts dirty, and a
  connection change (or a host's first data) triggers one coalesced redraw ~50 ms later, so nothing
  waits a full tick to show a host going down and nothing redraws more than needed. The app holds
  the state they are drawn from (fleet, history, staleness, alerts, palette, navigator).
- the panes (:mod:`specconsole.ui.panes`) render snapshots; layout and colours are in
  ``console.tcss``; its breakpoints lay the panes out by the terminal's size (the host panes side by
  side, each GPU a row when there are 40 rows, else summed up; the eval pane beside serving and
  training from 120 columns, first under the hosts below that).
- every key, the footer, the ``?`` screen and the command palette come from one registry
  (:mod:`specconsole.ui.registry`), remapped by ``[keys]``, gated by read-only mode.
- themes are loaded from TOML files (:mod:`specconsole.ui.style.themes`); ``t`` cycles them,
  and the choice is remembered in ``console.state_dir``.
- the app is made of parts that take only what they use: ``actions``
  (:class:`~specconsole.ui.console.app_actions.ConsoleActions`: the action view, the flows each
  :class:`~specconsole.ui.registry.ActionSpec` names, the eval run), ``leaving``
  (:class:`~specconsole.ui.console.app_leaving.Leaving`: ``q``, signals, the terminal going away) and
  ``fleet_nav`` (:class:`~specconsole.ui.fleet.fleet_view.FleetNavigator`: fleet view or host panes);
  the app's methods for Textual's keys, messages and hooks hand over to them (and to the screen).
- the per-host panes come from one registry (:data:`specconsole.ui.panes.per_host.PER_HOST_PANES`).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from rich.console import Console
from textual import events as textual_events
from textual.app import App
from textual.binding import Binding, BindingType
from textual.driver import Driver
from textual.screen import ModalScreen, Screen
from textual.theme import BUILTIN_THEMES

from specconsole.base import paths
from specconsole.base.events import Event, EventLog
from specconsole.base.freshness import Staleness
from specconsole.base.shutdown import ExitGuard, kill_children
from specconsole.config import Config
from specconsole.monitor import Fleet, HostStatus
from specconsole.ui.console import context
from specconsole.ui.console.app_actions import ConsoleActions
from specconsole.ui.console.app_alerts import ConsoleAlerts
from specconsole.ui.console.app_leaving import Leaving
from specconsole.ui.console.command_palette import ActionsProvider
from specconsole.ui.console.console_screen import ConsoleScreen
from specconsole.ui.console.provider import StatusProvider
from specconsole.ui.fleet.fleet_view import FleetNavigator
from specconsole.ui.panes.eval_pane import EvalPane
from specconsole.ui.panes.events_pane import EventList
from specconsole.ui.panes.history import History
from specconsole.ui.registry import (
    BY_ID,
    REGISTRY,
    ActionSpec,
    KeyPlan,
    keymap,
    plan_keys,
    registry_bindings,
    spec_id_of,
)
from specconsole.ui.screens.help import HelpScreen
from specconsole.ui.style.formatting import Palette
from specconsole.ui.style.themes import ConsoleState, LoadedThemes, load_themes, pick_theme

if TYPE_CHECKING:
    from specconsole.recorder.recorder import Recorder


class ConsoleApp(App[int]):
    """The console. ``fleet`` defaults to a real :class:`Fleet` for ``config``."""

    CSS_PATH = "console.tcss"
    TITLE = "specconsole"
    COMMANDS = App.COMMANDS | {ActionsProvider}
    # textual types these ``ClassVar[...] | None``, which checkers read as instance attributes
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-medium"), (200, "-wide")]  # noqa: RUF012
    VERTICAL_BREAKPOINTS = [(0, "-short"), (40, "-tall")]  # noqa: RUF012
    #: the actions this app binds (a replay adds its timeline's); ``OFFLINE``: none may touch a host
    KEY_REGISTRY: ClassVar[tuple[ActionSpec, ...]] = REGISTRY
    OFFLINE: ClassVar[bool] = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close_action_view", "Close action view", show=False),
        *registry_bindings(),  # default keys; [keys] remaps them by id through Textual's keymap
    ]

    def __init__(self, config: Config, *, fleet: StatusProvider | None = None, read_only: bool = False,
                 theme: str | None = None, clock: Callable[[], float] = time.time,
                 themes: LoadedThemes | None = None, handle_signals: bool = False,
                 start_fleet: bool = True, no_audit: bool = False) -> None:
        self._config = config
        self._read_only = read_only or config.console.read_only
        self.clock = clock
        self.loaded_themes = themes if themes is not None else load_themes()
        if fleet is None:
            fleet = Fleet(config, events=EventLog(config.console.audit_log))
        self.fleet: StatusProvider = fleet
        self.events: EventLog = fleet.events
        self.key_plan: KeyPlan = plan_keys(config.keys, self._read_only, self.KEY_REGISTRY, offline=self.OFFLINE)
        self.history = History()
        self.console_state = ConsoleState(config.console.state_dir)
        self.start_fleet = start_fleet
        self.first_full_frame_at: float | None = None  # set by the screen's first complete frame
        self._console_screen: ConsoleScreen | None = None  # made when Textual asks for the default screen
        self.freshness = Staleness()  # each value's stale state, with hysteresis
        self.fleet_nav = FleetNavigator(self)  # fleet view or host panes (issue 13)
        self.actions = ConsoleActions(self, config=config, fleet=fleet, key_plan=self.key_plan, clock=clock,
                                      no_audit=no_audit)
        self.leaving = Leaving(self, fleet=fleet, events=self.events, quit_key=lambda: self.key_plan.key_of("quit"),
                               stop_redraws=self._stop_redraws, handle_signals=handle_signals)
        self._console_thread_id = threading.get_ident()
        self._cli_theme = theme
        super().__init__()
        self.alerts = ConsoleAlerts(config, self.events, bell=self.bell)  # the engine runs at each redraw
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
        self._unfinished_rollouts()
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

    @property
    def fleet_shown(self) -> bool:
        return self.fleet_nav.showing_fleet

    @property
    def exit_guard(self) -> ExitGuard | None:
        """SIGHUP/SIGTERM/SIGINT and q: leave within the guard's deadline (None in tests' apps)."""
        return self.leaving.guard

    @exit_guard.setter
    def exit_guard(self, guard: ExitGuard | None) -> None:
        self.leaving.guard = guard

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

    def get_driver_class(self) -> type[Driver]:
        return self.leaving.driver_class(super().get_driver_class())

    def get_default_screen(self) -> Screen[Any]:
        """The console's own screen: the panes and their redraw (under every dialog)."""
        self._console_screen = self.new_console_screen()
        return self._console_screen

    def new_console_screen(self) -> ConsoleScreen:
        return ConsoleScreen(self)

    @property
    def console_screen(self) -> ConsoleScreen | None:
        """The screen with the panes (None until Textual has asked for it)."""
        return self._console_screen

    def _unfinished_rollouts(self) -> None:
        """A rollout whose console died (its journal, actions/rollout/journal.py): what each replica was
        left in, and how to finish or undo it, as the first events."""
        from specconsole.actions.rollout.journal import unfinished

        try:
            left = unfinished(self.config.console.state_dir)
        except OSError as err:
            self.events.emit(f"rollout journals unreadable: {err}", level="warning")
            return
        for journal in left:
            for line in journal.lines():
                self.events.emit(f"unfinished {line.strip()}" if line.startswith("rollout") else line.strip(),
                                 source="rollout", level="warning")
            self.events.emit(f"finish it: specconsole deploy --resume {journal.id}; undo it: add --undo",
                             source="rollout", level="warning")

    def on_load(self) -> None:
        """The hosts are connected from the loop's first message, before the screen is composed
        and styled: their handshakes and first readings overlap the console's own start-up."""
        if self.start_fleet:
            self.run_worker(self._start_fleet(), name="fleet-start", group="fleet", exit_on_error=False)

    async def on_mount(self) -> None:
        self.leaving.install()  # the console screen mounts itself: its panes, its redraws
        self.screen_change_signal.subscribe(self, self.actions.drop_echoes)
        if self._cli_theme and self._cli_theme != self.console_state.theme:
            self._remember_theme(self._cli_theme)
        self.alerts.start()

    async def _start_fleet(self) -> None:
        try:
            await self.fleet.start()
        except Exception as err:  # a host that cannot even start must not take the console down
            self.events.emit(f"starting the monitors failed: {err}", level="error")

    async def on_unmount(self) -> None:
        await self.alerts.stop()
        await self.leaving.stopped()

    # -- leaving (app_leaving.py) ------------------------------------------------------
    def action_quit(self) -> None:  # type: ignore[override]
        self.leaving.leave(0, None)

    def quit_key_pressed(self, key: str) -> None:
        """The driver's hook (from its input thread, before the loop sees the key)."""
        self.leaving.quit_key_pressed(key)

    def _stop_redraws(self) -> None:
        if self._console_screen is not None:
            self._console_screen.stop_redraws()

    # -- events (may come from any thread) ------------------------------------------------------
    def _event_added(self, event: Event) -> None:
        self.new_events.append(event)  # deque.append is thread-safe
        if not self.is_running:
            return
        screen = self._console_screen
        if event.data.get("kind") == "heartbeat" and screen is not None and screen.heartbeats_wait:
            return  # the next redraw flushes it, within a second, in its own frame
        if threading.get_ident() != self._console_thread_id:
            self.call_from_thread(self._flush_events)
        else:
            self.call_later(self._flush_events)

    def _flush_events(self) -> None:
        if self._console_screen is not None:
            self._console_screen.flush_events()

    # -- drawing -------------------------------------------------------------------------------
    @property
    def main_screen(self) -> Screen[Any] | None:
        """The console's own screen (the bottom of the stack), also while a dialog is open."""
        return context.main_screen(self)

    def statuses(self) -> dict[str, HostStatus]:
        return {s.name: s for s in self.fleet.statuses()}

    def refresh_panes(self) -> None:
        """Redraw every pane now (the console screen's redraw; ``r``, the fleet view, a replay's keys)."""
        if self._console_screen is not None:
            self._console_screen.refresh_panes()

    def panes_changed(self) -> None:
        """Per-host panes were mounted or removed (a fleet drill-down): the screen looks them up again."""
        if self._console_screen is not None:
            self._console_screen.panes_changed()

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
        """Textual asks before it offers or runs an action: ``flow('<id>')`` is gated as ``<id>``."""
        spec_id = spec_id_of(action, parameters)
        spec = BY_ID.get(spec_id)
        if action == "flow" and (spec is None or spec.flow is None):
            return False  # flow() runs only a registry action's own flow
        if spec is None:
            return True
        if not self.key_plan.is_bound(spec_id):
            return False  # read-only: removed entirely
        if isinstance(self.screen, ModalScreen) and spec_id not in ("command_palette", "quit"):
            return False
        return True if self.unavailable_reason(spec_id) is None else None

    def on_key(self, event: textual_events.Key) -> None:
        """The key of an action read-only mode removed says why (the palette's one line), not nothing:
        in a browser session of ``specconsole web`` (read-only by default) ``k`` is not silent."""
        if isinstance(self.screen, ModalScreen):
            return
        spec = next((s for s in self.key_plan.removed if s.key == event.key), None)
        if spec is not None:
            event.stop()
            self.trigger_action(spec.id)

    def trigger_action(self, action_id: str) -> None:
        """Run a registry action by id (the palette uses this), saying why when it cannot run."""
        spec = BY_ID[action_id]
        why = self.unavailable_reason(action_id)
        if why is not None:
            self.events.emit(f"{spec.description.lower()}: unavailable: {why}", level="warning")
            self.notify(f"{spec.description}: {why}", severity="warning", timeout=4)
            return
        self.call_later(self.run_action, spec.action)

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

    # -- actions with a flow, the action view, the eval run (app_actions.py) --------------
    def action_flow(self, spec_id: str) -> None:
        """``flow('<id>')``: every registry action with a flow binds this (gated by ``check_action``)."""
        self.actions.start(spec_id)

    def action_fleet_mark(self) -> None:
        view = self.fleet_nav.view
        host = view.table.toggle_mark() if view is not None else None
        if view is not None and host is not None:
            marked = ", ".join(sorted(view.table.marked)) or "none"
            self.notify(f"marked for a rollout: {marked}", timeout=3)

    def action_abort_rollout(self) -> None:
        self.actions.abort_rollout()

    def action_close_action_view(self) -> None:
        if not self.actions.close_view():
            self.fleet_nav.back()  # from a host's panes back to the fleet view

    def action_eval_run(self) -> None:
        self.query_one(EvalPane).action_start_run()

    def on_eval_pane_run_requested(self, message: EvalPane.RunRequested) -> None:
        self.actions.start_eval(message.pane)


def run_console(config: Config, *, read_only: bool, theme: str | None,
                cleanup: Callable[[], None] | None = None, leave_process: bool = False,
                no_audit: bool = False, web_session: bool = False, fleet: Fleet | None = None,
                loop: asyncio.AbstractEventLoop | None = None, spare: frozenset[int] | None = None) -> int:
    """The ``specconsole`` command without a subcommand: run the console until q or a signal
    (called by :func:`specconsole.ui.console.start.run_console`, which has checked for a terminal).

    Leaving takes at most the exit deadline (:mod:`specconsole.base.shutdown`); a forced exit runs
    ``cleanup`` first. ``leave_process``: once the console has stopped (terminal restored,
    monitors stopped, children gone), end the process right away instead of waiting for the
    interpreter's teardown of every object (seconds at many hosts on a busy machine).
    ``web_session``: a browser's session of ``specconsole web`` (textual-serve's web driver is the
    terminal; the flight recorder is left to the operator's own console: one writer per file).
    ``fleet`` and ``loop``: a fleet already started on ``loop``, which the console then runs on
    (:mod:`specconsole.ui.console.start`); else the console makes and starts its own. ``spare``:
    the child processes from before that fleet's start (the demo's lab), which are not the console's to kill.
    """
    themes = load_themes()
    names = themes.names or ["textual-dark", "textual-light"]
    if theme and theme not in names:
        print(f"specconsole: --theme {theme}: no such theme (themes: {', '.join(names)}); "
              f"add {paths.config_dir() / 'themes' / theme}.toml or pick one of those", file=sys.stderr)
        return 2
    app = ConsoleApp(config, fleet=fleet, read_only=read_only, theme=theme, themes=themes, handle_signals=True,
                     no_audit=no_audit, start_fleet=fleet is None)
    recorder = None if web_session else _start_recorder(app)
    guard = app.exit_guard
    assert guard is not None
    guard.cleanup = cleanup
    guard.spare_before = spare
    app.leaving.leave_process = leave_process
    try:
        result = app.run(loop=loop)
    finally:
        guard.disarm()
        guard.uninstall()
        if recorder is not None:
            recorder.stop()
        kill_children(guard.spare)  # local streams whose stop was cut short (not the demo's lab)
    code = int(app.return_code) if app.return_code not in (None, 0) else (
        int(result) if isinstance(result, int) else 0)
    if leave_process:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
    return code


def _start_recorder(app: ConsoleApp) -> Recorder | None:
    """The flight recorder (``[recorder]``, on by default): every sample, state change, event and
    action step into ``recorder.path``, written by its own thread (``specconsole replay``)."""
    from specconsole.recorder.recorder import start_recording

    settings = app.config.recorder.resolved(app.config.console.state_dir)
    if not settings.enabled or not isinstance(app.fleet, Fleet):
        return None
    events = app.events

    def problem(line: str) -> None:
        events.emit(line, level="warning")

    recorder = start_recording(app.config, app.fleet, on_error=problem)
    events.emit(f"recording to {settings.path} (kept {settings.retention_h:g} h; specconsole replay "
                f"{settings.path})")
    return recorder


__all__ = ["REGISTRY", "ConsoleApp", "run_console"]
