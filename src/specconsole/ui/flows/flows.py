"""The console's destructive flows: kill training and the deploy wizard.

Both reuse the actions core (:mod:`specconsole.actions`) on the monitor's own, already
connected host, report every step into the action view (on screen while the action runs and
until dismissed), the events pane and the audit log, and ask through a dialog whose default
button is Cancel. Nothing here knows how a step is carried out.

A flow sees the console only through :class:`FlowContext` (``ConsoleActions`` in
:mod:`specconsole.ui.console.app_actions` implements it); its :class:`~specconsole.ui.registry.ActionSpec`
names it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from specconsole.actions.on_demand import connect_on_demand
from specconsole.base.errors import SpecConsoleError
from specconsole.hosts import ConnState
from specconsole.steps import Steps, audit, require_audit

if TYPE_CHECKING:
    from textual.notifications import SeverityLevel
    from textual.screen import Screen

    from specconsole.actions.deploy.preflight import DeployPlan, DeployRequest
    from specconsole.base.events import EventLog
    from specconsole.config import Config, HostConfig
    from specconsole.hosts import Host
    from specconsole.monitor import HostStatus
    from specconsole.sources.checkpoints import Checkpoint
    from specconsole.steps import StepEvent
    from specconsole.ui.panes.action_view import ActionPanel, ActionTrack

T = TypeVar("T")


class StatusView(Protocol):
    """Where the host states the action view's last line shows come from."""

    def statuses(self) -> dict[str, HostStatus]: ...


class FlowContext(StatusView, Protocol):
    """What a flow uses of the console."""

    @property
    def config(self) -> Config: ...

    @property
    def events(self) -> EventLog: ...

    @property
    def no_audit(self) -> bool:
        """``--no-audit``: kill and deploy may run when the audit log cannot be written."""

    @property
    def screen(self) -> Screen[Any]:
        """The screen on top (a dialog while one is open)."""

    def host(self, name: str) -> Host | None:
        """The monitor's own connection to ``name`` (None: nothing to act through)."""

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None) -> None: ...

    @property
    def action_panel(self) -> ActionPanel: ...

    def open(self, action: str, title: str, host: str, *, state: Callable[[], str] | None = None,
             scroll_to: str | None = None) -> ActionPanel:
        """Show the action view for a new action (its steps come through :meth:`emit`)."""

    def emit(self, event: StepEvent) -> None: ...

    async def confirm(self, title: str, body: str, confirm_label: str, *, destructive: bool = True) -> bool:
        """Ask in a modal dialog whose default button is Cancel."""

    async def ask(self, screen: Screen[T]) -> T:
        """Push ``screen`` and wait for its answer."""

    def selected_checkpoint(self) -> tuple[str, Checkpoint] | str:
        """(training host, checkpoint) under the training pane's cursor, or why there is none."""

    def marked_hosts(self) -> set[str]:
        """The hosts marked in the fleet view for a rollout."""

    rollout_abort: asyncio.Event | None


def _host(app: FlowContext, role: str, what: str) -> tuple[HostConfig, Host] | None:
    hosts = app.config.train_hosts if role == "train" else app.config.serve_hosts
    if not hosts:
        message = f"{what}: no {role} host configured; add a [[hosts]] with role = \"{role}\" to the config"
        app.events.emit(message, level="warning")
        app.notify(message, title=what, severity="warning", timeout=8)
        return None
    cfg = hosts[0]
    host = app.host(cfg.name)
    if host is None:
        message = f"{cfg.name}: this console shows fixed statuses and has no connection to act through"
        app.events.emit(f"{what}: {message}", cfg.name, "error")
        app.notify(message, title=f"{what}: cannot start", severity="error", timeout=10)
        return None
    if not host.status.up and host.status.state is not ConnState.ON_DEMAND:  # on demand: connects
        message = (f"{cfg.name} is not connected ({host.status.last_error or host.status.state}); "
                   f"try again when its badge says connected")
        app.events.emit(f"{what}: {message}", cfg.name, "error")
        app.notify(message, title=f"{what}: cannot start", severity="error", timeout=10)
        return None
    return cfg, host


def _audited(app: FlowContext, what: str) -> bool:
    """Whether a kill or deploy may start: its audit record can be written, or the console was
    started with ``--no-audit`` (fail closed, as the headless commands)."""
    try:
        problem = require_audit(app.events, what, allow_unaudited=app.no_audit)
    except SpecConsoleError as err:
        app.events.emit(str(err), level="error")
        app.notify(str(err), title=f"{what}: refused", severity="error", timeout=15)
        return False
    if problem is not None:
        app.events.emit(f"{what}: {problem}; going on without a record (--no-audit)", level="warning")
    return True


def _current_step(app: StatusView, name: str) -> int | None:
    status = app.statuses().get(name)
    sample = status.training if status is not None else None
    return sample.value.step if sample is not None else None


def serving_state(app: StatusView, name: str) -> str:
    """``serve: serving DFLASH, draft window 16, healthy`` (DDTREE: ``serving DDTREE, block 16, tree budget
    16, healthy``) from the monitor's latest sample."""
    status = app.statuses().get(name)
    sample = status.sglang if status is not None else None
    if status is not None and not status.reachable:
        return f"{name}: host not reachable"
    if sample is None:
        return f"{name}: SGLang has not answered yet"
    v = sample.value
    state = v.state.value
    info = v.info
    if state != "healthy":
        note = v.error
        return f"{name}: SGLang {state}" + (f" ({note})" if note else "")
    if info is None:
        return f"{name}: SGLang healthy (deployment not read yet)"
    algo = info.algorithm or "no speculation"
    window = f", draft window {info.draft_window}" if info.draft_window is not None else ""
    if info.algorithm == "DDTREE":  # the tree: its block (draft tokens) and budget
        window += "".join(f", {what} {value}" for what, value in (("block", info.block_size),
                                                                  ("tree budget", info.tree_budget))
                          if value is not None)
    return f"{name}: serving {algo}{window}, healthy"


def training_state(app: StatusView, name: str, track: ActionTrack | None = None) -> str:
    """``train: training stopped at step N`` after a kill; the live step otherwise."""
    status = app.statuses().get(name)
    sample = status.training if status is not None else None
    if track is not None and track.ok and track.final is not None and "stopped" in track.final.message:
        # the kill names the step it saw; the log, read after the processes ended, may be further on
        m = re.search(r"at step (\d+)", track.final.message)
        steps = [int(m.group(1))] if m else []
        if sample is not None and sample.value.step is not None:
            steps.append(sample.value.step)
        return f"{name}: training stopped" + (f" at step {max(steps)}" if steps else "")
    if status is not None and not status.reachable:
        return f"{name}: host not reachable"
    if sample is None:
        return f"{name}: no training log read yet"
    p = sample.value
    step = f"step {p.step}" if p.step is not None else "no step yet"
    return f"{name}: training {'stalled' if p.stalled else 'running'}, {step}"


async def kill_training_flow(app: FlowContext) -> None:
    """Find the job, show what will be killed (Cancel focused), then stop it step by step."""
    from specconsole.actions.kill.training import find_job, kill_job

    found = _host(app, "train", "Kill training") if _audited(app, "Kill training") else None
    if found is None:
        return
    cfg, host = found
    panel = app.action_panel

    def mine() -> ActionTrack | None:
        return panel.track if panel.track is not None and panel.track.action == "kill-training" else None

    app.open("kill-training", f"Kill training on {cfg.name}", cfg.name, scroll_to="training",
                    state=lambda: training_state(app, cfg.name, mine()))
    steps = Steps("kill-training", audit(app.events, also=app.emit), host=cfg.name)
    try:
        await connect_on_demand(host, steps, cfg.ssh.connect_timeout_s + 2)
        if cfg.slurm is not None:  # a Slurm job: scancel (issue 32)
            from specconsole.actions.kill.slurm import cancel_slurm_job

            async def ask(title: str, body: str, button: str) -> bool:
                steps.hand_over("your confirmation")  # the dialog's time is the operator's, no step's
                return await app.confirm(title, body, button)

            await cancel_slurm_job(host, cfg, steps, ask)
            return
        plan = await find_job(host, cfg, steps, current_step=_current_step(app, cfg.name))
        if plan.empty:
            steps.done(plan.describe()[0])
            return
        steps.hand_over("your confirmation")  # the dialog's time is the operator's, no step's
        if not await app.confirm(f"Kill training on {cfg.name}?", "\n".join(plan.describe()),
                                 f"Kill {len(plan.pids)} processes"):
            steps.done("cancelled by the operator; nothing was changed")
            return
        assert cfg.training is not None
        await kill_job(host, plan, steps, grace_s=cfg.training.kill.grace_s)
    except SpecConsoleError as err:
        steps.failed(str(err))


async def discover_algorithms(host: Host, cfg: HostConfig, steps: Steps) -> list[str]:
    """Ask the installed SGLang (the unit's own program, read as preflight reads it) which speculative
    algorithms it has; none (the form offers its fallback) when the unit or its --help cannot be read."""
    from specconsole.actions.deploy.preflight import DeployRefused
    from specconsole.actions.deploy.unit_cli import read_unit_cli
    from specconsole.ui.screens.deploy_form import FALLBACK_ALGORITHMS

    if cfg.sglang is None:
        return []
    steps.begin("discover algorithms", f"asking {cfg.name}'s SGLang which algorithms it has")
    try:
        cli = (await read_unit_cli(host, cfg, steps)).cli
    except DeployRefused as err:
        steps.warn(f"{err}; offering {', '.join(FALLBACK_ALGORITHMS)}")
        return []
    flag = cli.name_for("algorithm") or "--speculative-algorithm"
    found = cli.algorithms()
    steps.info(f"{flag} choices: {', '.join(found)}" if found else f"{flag}: --help lists no choices")
    return found


async def ask_deploy_form(app: FlowContext, host: Host, cfg: HostConfig, steps: Steps, values: dict[str, str],
                          form_wait: str) -> tuple[DeployPlan | None, DeployRequest | None]:
    """The deploy form for ``host`` (algorithms discovered from its --help, each request checked in
    place by preflight, both through ``steps``): the plan and the request it was made from, or
    ``(None, None)`` when the operator cancelled. While the form is open its time is the operator's
    (``form_wait``), except while discovery or preflight runs (their steps begin and end the turn)."""
    from specconsole.actions.deploy.preflight import preflight
    from specconsole.ui.screens.deploy_form import DeployForm

    asked: list[DeployRequest] = []

    async def discover() -> list[str]:
        try:
            return await discover_algorithms(host, cfg, steps)
        finally:
            if isinstance(app.screen, DeployForm) and not app.screen.busy:  # not while preflight runs
                steps.hand_over(form_wait)

    async def check(request: DeployRequest) -> DeployPlan:
        asked[:] = [request]
        try:
            return await preflight(host, cfg, request, steps)
        except SpecConsoleError as err:
            steps.warn(f"refused: {err}; nothing was changed (the form stays open)")
            steps.hand_over(form_wait)
            raise

    plan = await app.ask(DeployForm(values, discover=discover, check=check))
    return (plan, asked[-1]) if plan is not None and asked else (None, None)


async def deploy_flow(app: FlowContext, draft_model: str | None = None, about: str | None = None) -> None:
    """The wizard: a form (algorithms from the host's --help, checked in place by preflight), the plan
    to confirm (Cancel focused), execute. ``draft_model`` prefills the draft model (a checkpoint)."""
    from specconsole.actions.deploy.preflight import execute
    from specconsole.ui.screens.deploy_form import prefill
    from specconsole.ui.screens.plan import PlanScreen

    found = _host(app, "serve", "Deploy") if _audited(app, "Deploy") else None
    if found is None:
        return
    cfg, host = found
    app.open("deploy", f"Deploy to {cfg.name}", cfg.name, scroll_to="serving",
                    state=lambda: serving_state(app, cfg.name))
    steps = Steps("deploy", audit(app.events, also=app.emit), host=cfg.name)
    try:
        await connect_on_demand(host, steps, cfg.ssh.connect_timeout_s + 2)
    except SpecConsoleError as err:
        steps.failed(str(err))
        return

    status = app.statuses().get(cfg.name)
    values = prefill(cfg, status.sglang if status is not None else None)
    if draft_model:
        values["draft_model"] = draft_model
    if about:
        steps.info(about)
    plan, _ = await ask_deploy_form(app, host, cfg, steps, values, "you to fill in the deploy form")
    if plan is None:
        steps.done("cancelled by the operator; nothing was changed")
        return
    try:
        if not plan.changes:
            steps.done("the unit already has these settings; nothing to deploy")
            return
        steps.hand_over("your confirmation of the plan")
        if not await app.ask(PlanScreen(plan)):
            steps.done("cancelled by the operator; nothing was changed")
            return
        await execute(host, plan, steps, operator="console")
    except SpecConsoleError as err:
        steps.failed(str(err))


async def deploy_checkpoint_flow(app: FlowContext) -> None:
    """``D``: the deploy wizard with the checkpoint under the training pane's cursor as the draft model."""
    picked = app.selected_checkpoint()
    if isinstance(picked, str):
        app.events.emit(f"deploy checkpoint: {picked}", level="warning")
        app.notify(picked, title="Deploy checkpoint", severity="warning", timeout=8)
        return
    host_name, ckpt = picked
    about = f"draft model: checkpoint {ckpt.name} (step {ckpt.step}) from {host_name}: {ckpt.path}"
    if not ckpt.has_config:
        about += (" — it has no config.json (training state only?); SGLang loads a Hugging Face model "
                  "folder, so the preflight will refuse it: export the checkpoint first")
    await deploy_flow(app, draft_model=ckpt.path, about=about)
