"""The console's flows by action id: what a registry entry's ``flow`` names
(:class:`~specconsole.ui.registry.ActionSpec`), run by ``ConsoleActions.start``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from specconsole.ui.flows.flows import FlowContext, deploy_checkpoint_flow, deploy_flow, kill_training_flow
from specconsole.ui.flows.rollout_flow import rollout_flow

#: A destructive action's whole flow (confirm, then act, every step reported), run in a worker.
Flow = Callable[[FlowContext], Awaitable[None]]

FLOWS: dict[str, Flow] = {
    "kill_training": kill_training_flow,
    "deploy": deploy_flow,
    "deploy_checkpoint": deploy_checkpoint_flow,
    "rollout": rollout_flow,
}
