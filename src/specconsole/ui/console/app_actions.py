"""The console's side of actions: the action view, the destructive flows, the eval run.

:class:`ConsoleActions` is held by :class:`~specconsole.ui.console.app.ConsoleApp` (``app.actions``):
:meth:`~ConsoleActions.open` and :meth:`~ConsoleActions.emit` feed the action view
(:class:`~specconsole.ui.panes.action_view.ActionPanel`); :meth:`~ConsoleActions.start` runs the flow an
:class:`~specconsole.ui.registry.ActionSpec` names (``FLOWS``, :mod:`specconsole.ui.flows.by_id`), one at a time,
handing it this object as its :class:`~specconsole.ui.flows.flows.FlowContext`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from textual.app import App
from textual.css.query import NoMatches
from textual.notifications import Notification, Notify, SeverityLevel
from textual.screen import ModalScreen, Screen
from textual.widget import Widget

from specconsole.steps import Emit, StepEvent, audit
from specconsole.ui.console.context import find
from specconsole.ui.flows.by_id import FLOWS
from specconsole.ui.flows.flows import serving_state
from specconsole.ui.panes.action_view import ActionPanel
from specconsole.ui.panes.checkpoints_pane import selected_checkpoint
from specconsole.ui.panes.eval_pane import EvalPane, OnResult
from specconsole.ui.registry import BY_ID
from specconsole.ui.screens.confirm import ConfirmScreen

if TYPE_CHECKING:
    from specconsole.base.events import EventLog
    from specconsole.config import Config
    from specconsole.eval.store import EvalRun
    from specconsole.hosts import Host
    from specconsole.monitor import HostStatus
    from specconsole.sources.checkpoints import Checkpoint
    from specconsole.ui.console.provider import StatusProvider
    from specconsole.ui.registry import KeyPlan

T = TypeVar("T")


class ConsoleActions:
    """What actions do in the console (a :class:`~specconsole.ui.flows.flows.FlowContext`)."""

    def __init__(self, app: App[Any], *, config: Config, fleet: StatusProvider, key_plan: KeyPlan,
                 clock: Callable[[], float], no_audit: bool) -> None:
        self.app = app
        self._config = config
        self.fleet = fleet
        self.key_plan = key_plan
        self.clock = clock
        self._no_audit = no_audit
        #: the id of the flow running now (one at a time)
        self.running: str | None = None
        #: set by the abort key while a rollout runs (the rollout flow makes it)
        self.rollout_abort: asyncio.Event | None = None
        self._echoes: list[Notification] = []  # toasts that repeat the action view (see ``echo``)

    # -- the FlowContext ---------------------------------------------------------------
    @property
    def config(self) -> Config:
        return self._config

    @property
    def events(self) -> EventLog:
        return self.fleet.events

    @property
    def no_audit(self) -> bool:
        return self._no_audit

    @property
    def screen(self) -> Screen[Any]:
        return self.app.screen

    def statuses(self) -> dict[str, HostStatus]:
        return {s.name: s for s in self.fleet.statuses()}

    def host(self, name: str) -> Host | None:
        return self.fleet.host(name)

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None) -> None:
        self.app.notify(message, title=title, severity=severity, timeout=timeout)

    async def confirm(self, title: str, body: str, confirm_label: str, *, destructive: bool = True) -> bool:
        """Ask in a modal dialog whose default button is Cancel (call from a worker, e.g. a flow)."""
        answer: bool = await self.app.push_screen_wait(ConfirmScreen(title, body, confirm_label,
                                                                     destructive=destructive))
        return answer

    async def ask(self, screen: Screen[T]) -> T:
        answer: T = await self.app.push_screen_wait(screen)
        return answer

    def selected_checkpoint(self) -> tuple[str, Checkpoint] | str:
        return selected_checkpoint(self.app)

    def marked_hosts(self) -> set[str]:
        """The hosts marked in the fleet view (``m``) for a rollout."""
        from specconsole.ui.fleet.fleet_view import FleetTable

        table = find(self.app, FleetTable)
        return set(table.marked) if table is not None else set()

    def abort_rollout(self) -> None:
        """The abort key: the running rollout stops and rolls back what it changed."""
        if self.rollout_abort is None or self.running != "rollout":
            self.notify("no rollout is running", severity="warning", timeout=4)
            return
        if not self.rollout_abort.is_set():
            self.rollout_abort.set()
            self.events.emit("rollout: abort pressed: stopping and rolling back what it changed", level="warning")
        self.notify("aborting: the rollout stops and rolls back what it changed", severity="warning", timeout=6)

    # -- the action view ---------------------------------------------------------------
    @property
    def action_panel(self) -> ActionPanel:
        """The action view (on the console's own screen, also while a dialog is open)."""
        panel = find(self.app, ActionPanel)
        if panel is None:
            raise NoMatches("the console's screen has no action view yet")
        return panel

    def open(self, action: str, title: str, host: str, *, state: Callable[[], str] | None = None,
             scroll_to: str | None = None) -> ActionPanel:
        """Show the action view for a new action (a toast says it started); feed it with :meth:`emit`.

        ``action`` is the name its step events carry; ``state`` gives the view's last line (the
        host's state); ``scroll_to``: the pane that matters for it (``serving``, ``training``,
        ``eval``) is scrolled into view. While another action's view is still running, that one stays
        and this action reports in Events and toasts only."""
        panel = self.action_panel
        if panel.busy and panel.track is not None and panel.track.action != action:
            self.echo(f"started; its steps are in Events (the action view follows {panel.track.title})",
                      title=title, timeout=6)
            return panel
        panel.start(action, title, host, self.clock(), state)
        self.echo("started; its steps are in the action view below", title=title, timeout=4)
        if scroll_to:
            target = find(self.app, Widget, f".{scroll_to}-pane")
            if target is not None:
                self.app.call_after_refresh(target.scroll_visible, animate=False)
        return panel

    def echo(self, message: str, *, title: str, timeout: float) -> None:
        """A toast that repeats what the action view shows ("started"): none while a dialog is open,
        and taken down when one opens (a toast sits over the dialog's right half, hiding its fields)."""
        if isinstance(self.app.screen, ModalScreen):
            return
        note = Notification(message, title, "information", timeout)
        self._echoes = [n for n in self._echoes if not n.has_expired] + [note]
        self.app.post_message(Notify(note))

    def drop_echoes(self, screen: Screen[Any]) -> None:
        """A dialog opened: take down the toasts that only repeat the action view (hidden behind it)."""
        if not isinstance(screen, ModalScreen):
            return
        for note in self._echoes:
            if note in self.app._notifications:
                self.app._unnotify(note)  # Textual has no public call to take one toast down
        self._echoes = []

    def emit(self, event: StepEvent) -> None:
        """A step event of a running action: into the action view (when it is the one shown); a toast
        when it ends (not when one replica of a rollout is done: its board line says so, and a toast
        per replica saying "done" would cover the board while the rollout goes on)."""
        panel = find(self.app, ActionPanel)
        if panel is None:
            return
        shown = panel.feed(event)
        if shown and panel.replica_event(event):
            return
        title = panel.track.title if shown and panel.track is not None else event.action
        if event.kind == "done":
            self.notify(event.message, title=f"{title}: done", timeout=8)
        elif event.kind == "failed":
            self.notify(event.message, title=f"{title}: FAILED", severity="error", timeout=15)

    def close_view(self) -> bool:
        """Escape: close the action view (not while its action runs); False when none is open."""
        panel = find(self.app, ActionPanel)
        if panel is None or not panel.display:
            return False
        if not panel.close():
            self.notify("the action is still running; its view closes when it ends", severity="warning",
                        timeout=4)
            return True
        screen = panel.screen  # the rows it covered are the body's again: repaint them all
        screen.refresh(layout=True)
        self.app.call_after_refresh(screen.refresh, repaint=True)
        return True

    # -- the flows ---------------------------------------------------------------------
    def start(self, action_id: str) -> None:
        """Run the flow of ``action_id``'s spec in a worker; one at a time."""
        if action_id in self.key_plan.removed_ids:
            return  # read-only; the binding does not exist, this guards the palette and run_action
        if self.running:
            self.notify(f"{BY_ID[self.running].description} is still running", severity="warning")
            return
        spec = BY_ID[action_id]
        assert spec.flow is not None, f"{action_id} has no flow"
        flow = FLOWS[spec.flow]
        self.running = action_id

        async def run() -> None:
            try:
                await flow(self)
            except Exception as err:
                self.events.emit(f"{spec.description.lower()}: failed: {err!r}", level="error")
                panel = find(self.app, ActionPanel)
                track = panel.track if panel is not None else None
                if track is not None and track.action == spec.step_action and not track.finished:
                    self.emit(StepEvent(spec.step_action, "failed", f"failed: {err!r}"))
            finally:
                self.running = None

        self.app.run_worker(run(), name=action_id, group="actions", exit_on_error=False)

    # -- the eval run ------------------------------------------------------------------
    def start_eval(self, pane: EvalPane) -> None:
        """``e`` (or the palette) in the eval pane: measure the configured serving host."""
        pane.start(self._eval)

    async def _eval(self, emit: Emit, on_result: OnResult) -> EvalRun:
        """The eval pane's run: progress in the pane and, as steps, in the events pane + audit log."""
        from specconsole.eval.start import start_eval

        serve = self.config.serve_hosts[0].name if self.config.serve_hosts else ""
        panel = self.open("eval", "Eval run", serve, scroll_to="eval",
                          state=(lambda: serving_state(self, serve)) if serve else None)

        def both(event: StepEvent) -> None:
            emit(event)
            self.emit(event)

        try:  # the monitor's connection carries the tunnel
            return await start_eval(self.config, emit=audit(self.events, also=both), on_result=on_result,
                                    connection=self.host(serve) if serve else None)
        except Exception as err:
            if panel.track is not None and panel.track.action == "eval" and not panel.track.finished:
                self.emit(StepEvent("eval", "failed", str(err).splitlines()[0] if str(err) else repr(err)))
            raise
