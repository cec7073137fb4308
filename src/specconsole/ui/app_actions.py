"""The console's side of actions: the action view, the destructive-action hook, the eval run.

:class:`ActionsMixin` is part of :class:`~specconsole.ui.app.ConsoleApp`: :meth:`open_action`
and :meth:`action_emit` feed the action view (:class:`~specconsole.ui.action_view.ActionPanel`);
every destructive action goes through :meth:`run_action_flow` (one hook, the flows are in
:mod:`specconsole.ui.flows`), one at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from textual.app import App
from textual.css.query import NoMatches
from textual.notifications import Notification, Notify
from textual.screen import ModalScreen
from textual.widget import Widget

from specconsole.actions.steps import Emit, StepEvent
from specconsole.eval.store import EvalRun
from specconsole.ui.action_view import ActionPanel
from specconsole.ui.eval_pane import EvalPane, OnResult
from specconsole.ui.registry import BY_ID
from specconsole.ui.screens import ConfirmScreen

if TYPE_CHECKING:
    from textual.screen import Screen

    from specconsole.config import Config
    from specconsole.events import EventLog
    from specconsole.ui.app import ConsoleApp
    from specconsole.ui.fleet_view import FleetNavigator
    from specconsole.ui.provider import StatusProvider
    from specconsole.ui.registry import KeyPlan

    _AppBase = App[int]
else:
    _AppBase = object

W = TypeVar("W", bound=Widget)


class ActionsMixin(_AppBase):
    """What actions do in the console; part of :class:`~specconsole.ui.app.ConsoleApp`, which sets these."""

    fleet: StatusProvider
    events: EventLog
    key_plan: KeyPlan
    fleet_nav: FleetNavigator
    clock: Callable[[], float]
    _action_running: str | None

    if TYPE_CHECKING:
        @property
        def config(self) -> Config: ...

        @property
        def main_screen(self) -> Screen[Any] | None: ...

        def _one(self, widget_type: type[W], selector: str | None = None) -> W | None: ...

    @property
    def console_app(self) -> ConsoleApp:
        """This app as what it is (the flows take the whole console)."""
        return cast("ConsoleApp", self)

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
                                 state=(lambda: serving_state(self.console_app, serve)) if serve else None)

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
            self.echo(f"started; its steps are in Events (the action view follows {panel.track.title})",
                      title=title, timeout=6)
            return panel
        panel.start(action, title, host, self.clock(), state)
        self.echo("started; its steps are in the action view below", title=title, timeout=4)
        if scroll_to:
            target = self._one(Widget, f".{scroll_to}-pane")
            if target is not None:
                self.call_after_refresh(target.scroll_visible, animate=False)
        return panel

    _echoes: list[Notification]

    def echo(self, message: str, *, title: str, timeout: float) -> None:
        """A toast that repeats what the action view shows ("started"): none while a dialog is open,
        and taken down when one opens (a toast sits over the dialog's right half, hiding its fields)."""
        if isinstance(self.screen, ModalScreen):
            return
        note = Notification(message, title, "information", timeout)
        self._echoes = [n for n in self._echoes if not n.has_expired] + [note]
        self.post_message(Notify(note))

    def _drop_echoes(self, screen: Screen[Any]) -> None:
        """A dialog opened: take down the toasts that only repeat the action view (hidden behind it)."""
        if not isinstance(screen, ModalScreen):
            return
        for note in self._echoes:
            if note in self._notifications:
                self._unnotify(note)  # Textual has no public call to take one toast down
        self._echoes = []

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
        await flows[action_id](self.console_app)
