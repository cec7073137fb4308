"""``R`` in the fleet view: the rollout wizard across the marked serving hosts (``m`` marks).

The deploy form (checked in place by preflight on the canary, the first marked host in config
order), the canary's plan to confirm, then :func:`specconsole.actions.rollout.run.rollout` with the
action view showing one line per replica (:class:`~specconsole.actions.rollout.board.Board`).
``X`` aborts: the rollout stops and rolls back what it changed.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from specconsole.actions.on_demand import connect_on_demand
from specconsole.base.errors import SpecConsoleError
from specconsole.steps import Steps, audit

if TYPE_CHECKING:
    from specconsole.ui.flows.flows import FlowContext


def _say(app: FlowContext, message: str) -> None:
    app.events.emit(f"Roll out: {message}", level="warning")
    app.notify(message, title="Roll out", severity="warning", timeout=8)


async def rollout_flow(app: FlowContext) -> None:
    from specconsole.actions.rollout import run as rollout
    from specconsole.actions.rollout.board import Board
    from specconsole.actions.rollout.journal import Journal
    from specconsole.eval.suite import gate_prompts
    from specconsole.ui.flows.flows import _audited, ask_deploy_form
    from specconsole.ui.screens.deploy_form import prefill
    from specconsole.ui.screens.plan import PlanScreen

    marked = app.marked_hosts()
    chosen = [h for h in app.config.serve_hosts if h.name in marked]
    if not chosen:
        _say(app, "mark the serving replicas to roll out to with m in the fleet view first")
        return
    if not _audited(app, "Roll out"):
        return
    hosts = [app.host(h.name) for h in chosen]
    if any(h is None for h in hosts):
        _say(app, "this console shows fixed statuses and has no connection to act through")
        return
    canary_cfg, canary = chosen[0], hosts[0]
    assert canary is not None
    names = ", ".join(h.name for h in chosen)
    panel = app.open("rollout", f"Roll out to {names}", canary_cfg.name)
    emit = audit(app.events, also=app.emit)
    steps = Steps("rollout", emit)
    try:
        for cfg, host in zip(chosen, hosts, strict=True):
            assert host is not None
            await connect_on_demand(host, steps, cfg.ssh.connect_timeout_s + 2)
    except SpecConsoleError as err:
        steps.failed(str(err))
        return
    status = app.statuses().get(canary_cfg.name)
    plan, request = await ask_deploy_form(app, canary, canary_cfg, steps,
                                          prefill(canary_cfg, status.sglang if status is not None else None),
                                          "you to fill in the rollout's deploy form")
    if plan is None or request is None:
        steps.done("cancelled by the operator; nothing was changed")
        return
    steps.hand_over(f"your confirmation of the plan (canary {canary_cfg.name}, then {len(chosen) - 1} more)")
    if not await app.ask(PlanScreen(plan)):
        steps.done("cancelled by the operator; nothing was changed")
        return
    steps.resume()
    try:
        opts = rollout.options(app.config, request, gate=None, canary_wait_s=None, drain_timeout_s=None,
                               operator="console", gate_prompts=gate_prompts)
        replicas = [rollout.Replica(cfg, host) for cfg, host in zip(chosen, hosts, strict=True) if host is not None]
        try:  # what each replica was left in, should this console die (deploy --resume)
            opts.journal = Journal.begin(app.config.console.state_dir, request, opts.router.url,
                                         [r.name for r in replicas], ",".join(t.text() for t in opts.gate),
                                         opts.operator)
        except OSError as err:
            steps.warn(f"no rollout journal (deploy --resume cannot pick this rollout up): {err}")
        board = Board(replicas)
        panel.board = board
        app.rollout_abort = asyncio.Event()
        await rollout.rollout(replicas, opts, emit, app.rollout_abort, board)
    except SpecConsoleError as err:
        steps.failed(str(err))
    finally:
        app.rollout_abort = None
