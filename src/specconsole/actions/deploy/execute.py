"""Step 2 of a deploy: start the host agent and follow it, surviving dropped connections.

:func:`execute` copies the agent (:mod:`specconsole.remote.deploy_agent` as ``agent.py``, with
its sibling :mod:`specconsole.remote.deploy_agent_watch`) and the plan to the host's work folder
and starts it detached; :func:`follow` relays the agent's progress file as steps. Every step is
safe to repeat: after a dropped connection the console reconnects, repeats the upload and the
start (a running agent is found by the deploy's ``agent.pid`` and progress file) and re-attaches
to the progress file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from specconsole.actions.deploy.plan import DeployOutcome, DeployPlan
from specconsole.actions.deploy.privilege import ALIVE_SH, agent_python
from specconsole.base.errors import HostUnavailable
from specconsole.hosts import CommandResult, Host
from specconsole.hosts.commands import Command
from specconsole.sglang.acceptance import AcceptanceDetail
from specconsole.sglang.unit import quote_exec
from specconsole.steps import HEARTBEAT_S, Steps, shorten

#: The host agent's files, by the name each gets in the deploy's work folder (``agent.py``
#: imports its sibling by that name).
_REMOTE = Path(__file__).resolve().parents[2] / "remote"  # specconsole/remote/: what runs on a host
AGENT_FILES = {"agent.py": _REMOTE / "deploy_agent.py",
               "deploy_agent_watch.py": _REMOTE / "deploy_agent_watch.py",
               "deploy_agent_router.py": _REMOTE / "deploy_agent_router.py"}
SMOKE_PROMPT = "def fibonacci(n: int) -> int:\n    "
#: the agent heartbeats every 0.5 s while it waits; this long without any event, the console
#: checks whether its process is still there
AGENT_SILENT_S = 20.0


def first_line(err: BaseException) -> str:
    """An error's first line (its type's name when it says nothing)."""
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def agent_plan(plan: DeployPlan, operator: str = "") -> dict[str, Any]:
    base = plan.base_url.rstrip("/")
    return {
        "id": plan.id, "unit": plan.unit.name, "dropin_path": plan.unit.deploy_dropin,
        "dropin_text": plan.new_dropin, "workdir": plan.workdir, "lock_path": plan.lock_path,
        "health_url": f"{base}/health", "server_info_url": f"{base}/server_info",
        "generate_url": f"{base}/generate", "expect": plan.expect, "health_timeout_s": plan.health_timeout_s,
        # the old config is known to start: give its restart at least 10 minutes
        "rollback_health_timeout_s": max(600.0, plan.health_timeout_s),
        "smoke": {"text": SMOKE_PROMPT, "max_new_tokens": plan.smoke_tokens}, "summary": plan.summary(),
        "operator": operator, "exec_start": quote_exec(plan.new_argv),
    }


def _agent_python(plan: DeployPlan) -> str:
    """The agent's start words: its python, under ``sudo -n`` on a sudo host."""
    return shlex.join(plan.privilege.agent_argv(agent_python(plan.old_argv)))


def _launch_command(plan: DeployPlan) -> str:
    """Start the agent unless this deploy's agent already runs or ran (safe to repeat after a
    dropped connection: the progress file and ``agent.pid`` say which). Only the agent goes to
    the background, with every fd redirected, so it outlives the SSH session; the command
    returns once the agent wrote its first event (at most 10 s), or says it exited at once.
    The agent itself also refuses to run twice for one deploy (flock)."""
    py = _agent_python(plan)
    return (f"{ALIVE_SH}cd {shlex.quote(plan.workdir)} && "
            f"if [ -s agent.pid ] && alive \"$(cat agent.pid)\"; then "
            f"echo \"agent already running as pid $(cat agent.pid)\"; "
            f"elif [ -s progress.jsonl ]; then echo 'agent already ran'; "
            f"else {{ setsid nohup {py} agent.py plan.json progress.jsonl > agent.out 2>&1 < /dev/null & "
            f"echo $! > agent.pid; i=0; while [ ! -s progress.jsonl ] && [ $i -lt 100 ] && alive $!; "
            f"do sleep 0.1; i=$((i+1)); done; "
            f"if [ -s progress.jsonl ]; then echo \"agent started as pid $(cat agent.pid)\"; "
            f"elif alive $!; then echo \"agent starting as pid $(cat agent.pid)\"; "
            f"else echo \"agent pid $(cat agent.pid) has not written an event yet (see agent.out)\"; fi; }}; fi")


async def execute(host: Host, plan: DeployPlan, steps: Steps, operator: str = "",
                  extra: dict[str, Any] | None = None) -> DeployOutcome:
    """Start the host agent and follow it to its final event.

    Every step survives a dropped connection: the upload and the agent's start are repeated
    after reconnecting (both are idempotent; the start finds a running agent by the deploy's
    ``agent.pid`` and progress file), and following re-attaches to the progress file.
    ``extra`` goes into the agent's plan as well (a rollout's ``router`` section).
    """
    steps.begin("upload", f"copying the deploy agent and plan to {plan.workdir}")
    (await run_reattaching(host, steps, ["mkdir", "-p", plan.workdir])).check(host.name)
    for name, text in (*((name, source.read_text()) for name, source in AGENT_FILES.items()),
                       ("plan.json", json.dumps({**agent_plan(plan, operator), **(extra or {})}, indent=2))):
        path = f"{plan.workdir}/{name}"
        # write a temp file and rename: a repeated upload never leaves a half-written file
        res = await run_reattaching(host, steps, ["sh", "-c", 'cat > "$1.tmp" && mv -f "$1.tmp" "$1"', "sh", path],
                                     input=text)
        res.check(host.name)
    progress = f"{plan.workdir}/progress.jsonl"
    steps.begin("start the agent", "starting the supervised restart-verify-rollback step on the host")
    res = (await run_reattaching(host, steps, _launch_command(plan))).check(host.name)
    steps.info(f"{res.stdout.strip() or 'agent started'} on {host.name}; following {progress}")
    return await follow(host, plan.workdir, steps)


async def run_reattaching(host: Host, steps: Steps, cmd: Command, input: str | None = None) -> CommandResult:
    """Run an idempotent command; if the connection drops before it reports its exit status,
    say so, reconnect and run it again."""
    while True:
        try:
            res = await steps.run(host, cmd, input=input)
        except HostUnavailable as err:
            why = first_line(err)
        else:
            if res.exit_status is not None:
                return res
            why = "the connection dropped before the command reported its exit status"
        await reconnect(host, steps, why, "repeating the step (it is safe to repeat)")


async def reconnect(host: Host, steps: Steps, why: str, then: str,
                    what: str = "the deploy continues on the host; reconnecting to follow it") -> None:
    """Say the connection is lost (and ``what`` goes on meanwhile), wait for the host's own reconnect
    with heartbeats, then say it is back and ``then``."""
    steps.warn(f"lost the connection to {host.name} ({why}); {what}")
    await asyncio.sleep(0.2)   # let the host notice a half-closed connection
    started = time.monotonic()
    while not await host.wait_connected(HEARTBEAT_S):
        steps.emit("heartbeat", f"waiting to reconnect to {host.name} for "
                   f"{time.monotonic() - started:.0f}s; last seen: {host.status.last_error}")
    steps.info(f"reconnected to {host.name}; re-attaching: {then}")


async def follow(host: Host, workdir: str, steps: Steps, after: int = 0) -> DeployOutcome:
    """Relay the agent's events as steps until its final event; survive dropped connections.

    While the agent is silent for more than a heartbeat interval, a heartbeat says so (with
    the last event seen); if it stays silent and its process is gone, the deploy is reported
    as crashed with the agent's own output. ``after``: the events up to this sequence number were
    relayed already (a rollout follows the agent again after its first final event).
    """
    progress = f"{workdir}/progress.jsonl"
    seen = after
    events: list[dict[str, Any]] = []
    last = time.monotonic()
    last_msg = "no event yet"
    while True:
        try:
            async with host.stream(["tail", "-n", "+1", "-F", "--", progress]) as stream:
                lines: asyncio.Queue[str | None] = asyncio.Queue()
                reader = asyncio.create_task(_pump(stream.lines(), lines))
                try:
                    while True:
                        try:
                            line = await asyncio.wait_for(lines.get(), HEARTBEAT_S)
                        except TimeoutError:
                            quiet = time.monotonic() - last
                            steps.emit("heartbeat", f"waiting for the deploy agent on {host.name}: no event for "
                                       f"{quiet:.1f}s; last: {shorten(last_msg)}")
                            if quiet > AGENT_SILENT_S:
                                crashed = await _agent_gone(host, workdir)
                                if crashed is not None:
                                    steps.failed(crashed)
                                    return DeployOutcome("crashed", crashed, events)
                                last = time.monotonic()
                            continue
                        if line is None:
                            break
                        try:
                            ev = json.loads(line)
                        except ValueError:
                            continue
                        if ev.get("seq", 0) <= seen:
                            continue
                        seen = ev["seq"]
                        last, last_msg = time.monotonic(), str(ev.get("message", ""))
                        events.append(ev)
                        _relay(steps, ev, host.name)
                        if ev.get("kind") == "final":
                            return DeployOutcome(ev.get("outcome", "crashed"), ev.get("message", ""), events)
                finally:
                    reader.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await reader
                if reader.done() and not reader.cancelled() and reader.exception() is not None:
                    raise reader.exception()  # type: ignore[misc]
            raise HostUnavailable(f"{host.name}: the progress stream ended")
        except HostUnavailable as err:
            await reconnect(host, steps, first_line(err), f"following its progress after event {seen}")
            last = time.monotonic()


async def _pump(lines: AsyncIterator[str], out: asyncio.Queue[str | None]) -> None:
    """Move a stream's lines into a queue (None at its end), so waiting on it can time out."""
    try:
        async for line in lines:
            out.put_nowait(line)
    finally:
        out.put_nowait(None)


async def _agent_gone(host: Host, workdir: str) -> str | None:
    """None while the agent runs (or the host cannot say); else why it is gone."""
    pid_file = shlex.quote(f"{workdir}/agent.pid")
    try:
        res = await host.run(f"{ALIVE_SH}alive \"$(cat {pid_file} 2>/dev/null)\" && echo running || "
                             f"tail -c 600 {shlex.quote(workdir + '/agent.out')}", timeout=10)
    except (HostUnavailable, TimeoutError):
        return None
    if res.exit_status is None or res.stdout.startswith("running"):
        return None
    out = res.stdout.strip().splitlines()
    return (f"the deploy agent on {host.name} stopped without a final event"
            + (f": {out[-1]}" if out else "") + f"; check {workdir}/agent.out and the unit's state")


def _relay(steps: Steps, ev: dict[str, Any], host: str) -> None:
    kind = ev.get("kind", "info")
    message = ev.get("message", "")
    if kind == "step":
        steps.begin(ev.get("step") or message, message)
        return
    if ev.get("step"):
        steps.step = ev["step"]
    if kind == "final":
        outcome = ev.get("outcome")
        (steps.done if outcome in ("deployed", "in_router") else steps.failed)(message)
        return
    detail = AcceptanceDetail.from_json({"histogram": ev.get("accept_histogram"), "requests": 1,
                                         "drafts": ev.get("drafts"), "field": ev.get("histogram_field")}) \
        if "accept_histogram" in ev else None
    steps.emit(kind if kind in ("command", "result", "heartbeat", "info", "warning", "error") else "info",
               message, command=ev.get("command"), exit_status=ev.get("exit_status"), took_s=ev.get("took_s"),
               host=host, acceptance=((host, detail),) if detail is not None else ())
