"""The console's destructive flows: kill training and the deploy wizard.

Both reuse the actions core (:mod:`specconsole.actions`) on the monitor's own, already
connected host, report every step into the events pane and the audit log, and ask through a
dialog whose default button is Cancel. Nothing here knows how a step is carried out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specconsole.actions.steps import Steps, audit
from specconsole.errors import SpecConsoleError

if TYPE_CHECKING:
    from specconsole.config import HostConfig
    from specconsole.hosts import Host
    from specconsole.ui.app import ConsoleApp


def _host(app: ConsoleApp, role: str) -> tuple[HostConfig, Host] | None:
    hosts = app.config.train_hosts if role == "train" else app.config.serve_hosts
    if not hosts:
        app.events.emit(f"no {role} host configured", level="warning")
        return None
    cfg = hosts[0]
    host = app.fleet.monitors[cfg.name].host
    if not host.status.up:
        app.events.emit(f"{cfg.name} is not connected ({host.status.last_error or host.status.state}); "
                        f"try again when its badge says connected", cfg.name, "error")
        return None
    return cfg, host


def _current_step(app: ConsoleApp, name: str) -> int | None:
    sample = app.fleet.monitors[name].samples.get("training")
    return getattr(sample.value, "step", None) if sample is not None else None


async def kill_training_flow(app: ConsoleApp) -> None:
    """Find the job, show what will be killed (Cancel focused), then stop it step by step."""
    from specconsole.actions.kill import find_job, kill_job

    found = _host(app, "train")
    if found is None:
        return
    cfg, host = found
    steps = Steps("kill-training", audit(app.events), host=cfg.name)
    try:
        plan = await find_job(host, cfg, steps, current_step=_current_step(app, cfg.name))
        if plan.empty:
            steps.done(plan.describe()[0])
            return
        if not await app.confirm(f"Kill training on {cfg.name}?", "\n".join(plan.describe()),
                                 f"Kill {len(plan.pids)} processes"):
            steps.done("cancelled by the operator; nothing was changed")
            return
        assert cfg.training is not None
        await kill_job(host, plan, steps, grace_s=cfg.training.kill.grace_s)
    except SpecConsoleError as err:
        steps.failed(str(err))


async def deploy_flow(app: ConsoleApp) -> None:
    """The wizard: a form prefilled from the config, preflight, the plan to confirm, execute."""
    from specconsole.actions.deploy import execute, preflight
    from specconsole.ui.deploy_screen import DeployForm, prefill

    found = _host(app, "serve")
    if found is None:
        return
    cfg, host = found
    request = await app.push_screen_wait(DeployForm(prefill(cfg, app.fleet.monitors[cfg.name].samples.get("sglang"))))
    if request is None:
        app.events.emit("deploy: cancelled by the operator; nothing was changed", cfg.name)
        return
    steps = Steps("deploy", audit(app.events), host=cfg.name)
    try:
        plan = await preflight(host, cfg, request, steps)
        if not plan.changes:
            steps.done("the unit already has these settings; nothing to deploy")
            return
        if not await app.confirm(f"Deploy to {cfg.name}?", "\n".join(plan.describe()),
                                 f"Deploy and restart {plan.unit.name}"):
            steps.done("cancelled by the operator; nothing was changed")
            return
        await execute(host, plan, steps, operator="console")
    except SpecConsoleError as err:
        steps.failed(str(err))
