"""Opening a host's SSH connection for an action when the console left it closed.

A host whose every sample comes from Prometheus is not connected at start (its state reads
``on_demand``); an action that needs it (kill, deploy, logs, eval, checkpoints) opens the
connection first, as a step of its own.
"""

from __future__ import annotations

from specconsole.base.errors import HostUnavailable
from specconsole.hosts import ConnState, Host
from specconsole.steps import Steps


async def connect_on_demand(host: Host, steps: Steps, timeout: float) -> None:
    """Connect ``host`` now if its connection was left on demand, with a step saying so; raises
    :class:`HostUnavailable` (naming the host and why) when it does not connect in ``timeout``."""
    if host.status.state is not ConnState.ON_DEMAND:
        return
    steps.begin("connect", f"connecting to {host.name} over SSH (not connected until now: its "
                           "samples come from Prometheus)")
    if not await steps.watch(host.wait_connected(timeout), f"connecting to {host.name}"):
        why = host.status.last_error or f"no answer within {timeout:g}s"
        raise HostUnavailable(f"{host.name}: cannot connect over SSH: {why}")
    steps.info(f"connected to {host.name} in {steps.step_took():.1f}s")
