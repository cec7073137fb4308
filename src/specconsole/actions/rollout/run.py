"""A rollout: one change across the serving replicas behind the sglang-router, canary first,
each promoted only when the quality gate holds (``specconsole deploy --hosts PATTERN``).

Before anything changes: the router must list every replica (:mod:`.router`), and the gate's
baseline is measured on a replica not yet changed (the second one; the only one if there is one).
Then per replica, in order (the first is the canary):

1. preflight (:func:`specconsole.actions.deploy.preflight`, as a single deploy);
2. :func:`~specconsole.actions.deploy.execute.execute` with a ``router`` section: the host agent
   takes the replica out of the router, drains it, deploys (restart, health, verify, smoke,
   rollback on failure) and holds it out (:mod:`.deploy_agent_router`);
3. the gate (:mod:`.gate`) on the replica directly; the verdict goes to the agent: ``promote``,
   or ``rollback REASON`` (it restores the previous config, health-gated);
4. the agent puts the replica back and says so; the console follows it to that event.

After the canary, ``canary_wait_s`` holds (heartbeats with the canary's live figures). A failed
gate, a failed deploy or an abort (``abort`` set: SIGINT headless, the abort key in the console)
halts: every replica promoted in this run is rolled back in parallel (each an agent run that
takes it out, drains, restores, waits for health and puts it back), and the last lines say what
each replica serves (its ``/server_info``) and whether the router lists it.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from specconsole.actions.deploy.execute import execute, first_line, follow
from specconsole.actions.deploy.preflight import (
    DeployOutcome,
    DeployPlan,
    DeployRefused,
    DeployRequest,
    preflight,
    sglang_client,
)
from specconsole.actions.rollout.board import Board
from specconsole.actions.rollout.gate import (
    Figures,
    GateError,
    Threshold,
    Verdict,
    acceptance_figures,
    judge,
    measure,
)
from specconsole.actions.rollout.router import Worker, list_workers, same_url
from specconsole.base.errors import ConfigError, SpecConsoleError
from specconsole.config import Config, HostConfig, RouterConfig
from specconsole.hosts import Host
from specconsole.steps import HEARTBEAT_S, Emit, StepEvent, Steps


@dataclass
class Replica:
    """One replica's part in the rollout (what the action view shows on its line)."""

    cfg: HostConfig
    host: Host
    state: str = "waiting"   # waiting | deploying | gating | promoted | rolled back | unchanged | failed | untouched
    figures: Figures | None = None
    verdict: str = ""
    plan: DeployPlan | None = None
    changed: bool = False    # runs the new config now (promoted, or held before the verdict)
    serves: str = ""
    in_router: bool | None = None
    #: what the agent's hold ended with (promote, rollback ..., timeout: no verdict in time)
    verdict_seen: str = ""

    @property
    def name(self) -> str:
        return self.cfg.name

    @property
    def worker_url(self) -> str:
        assert self.cfg.sglang is not None
        return self.cfg.sglang.router_worker_url or self.cfg.sglang.base_url


@dataclass
class RolloutOptions:
    request: DeployRequest
    router: RouterConfig
    gate: tuple[Threshold, ...]
    prompts: list[tuple[str, int]]
    canary_wait_s: float = 0.0
    drain_timeout_s: float = 60.0
    operator: str = ""


@dataclass
class RolloutOutcome:
    ok: bool
    message: str
    replicas: list[Replica] = field(default_factory=list)
    baseline: Figures | None = None

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1


def _set(r: Replica, steps: Steps, state: str) -> None:
    """A replica's new state, said as a line of its own (the audit log and --json carry it, with the
    gate's figures once measured)."""
    r.state = state
    gate = f"; gate {r.figures.text()}" if r.figures is not None else ""
    steps.emit("info", f"replica {r.name}: {state}{gate}")


class Halt(Exception):
    """Stop promoting: the message says why (gate, deploy, abort)."""


async def rollout(replicas: list[Replica], opts: RolloutOptions, emit: Emit, abort: asyncio.Event,
                  board: Board | None = None) -> RolloutOutcome:
    """Roll ``opts.request`` out across ``replicas`` (the first is the canary); ``board`` (the action
    view's one line per replica) is fed every event."""
    if board is not None:
        emit = _feeding(board, emit)
    top = Steps("rollout", emit)
    names = ", ".join(r.name for r in replicas)
    top.begin("router", f"checking the router {opts.router.url} lists {names}")
    workers = await _router_workers(opts, top)
    missing = [r.name for r in replicas if not any(same_url(w.url, r.worker_url) for w in workers)]
    if missing:
        raise SpecConsoleError(f"the router {opts.router.url} does not list {', '.join(missing)} (it lists "
                               f"{', '.join(w.url for w in workers) or 'no worker'}); set sglang.router_worker_url "
                               f"to the URL the router knows each replica by")
    top.info(f"the router lists all {len(replicas)} replicas")
    base = replicas[1] if len(replicas) > 1 else replicas[0]
    top.begin("baseline", f"measuring the gate's {len(opts.prompts)} prompts on {base.name} (not yet changed)")
    baseline = await _measure(base, top, opts)
    top.info(f"baseline on {base.name}: {baseline.text()}")
    _show_acceptance(top, baseline, None, "fleet")
    if board is not None:
        board.baseline = baseline
    out = RolloutOutcome(True, "", replicas, baseline)
    halted = ""
    for i, r in enumerate(replicas):
        if abort.is_set():
            halted = "aborted by the operator"
            break
        try:
            await _one(r, opts, baseline, emit, abort, canary=i == 0)
        except Halt as why:
            halted = str(why)
            break
        if i == 0 and opts.canary_wait_s > 0 and len(replicas) > 1:
            halted = await _canary_wait(r, opts, top, abort)
            if halted:
                break
    for r in replicas:
        if r.state == "waiting":
            _set(r, top, "untouched")
    if halted:
        top.begin("halt", f"rollout halted: {halted}; rolling back every replica changed in this run")
        changed = [r for r in replicas if r.changed]
        await asyncio.gather(*(_roll_back(r, opts, emit, halted) for r in changed))
        out.ok, out.message = False, f"halted: {halted}"
    else:
        plans = [r.plan.summary() for r in replicas if r.plan is not None and r.state == "promoted"]
        out.message = f"promoted on all {len(replicas)} replicas" + (f": {plans[0]}" if plans else "")
    await _final_lines(replicas, opts, top)
    (top.done if out.ok else top.failed)(f"rollout {out.message}")
    return out


def _feeding(board: Board, emit: Emit) -> Emit:
    def both(event: StepEvent) -> None:
        board.feed(event)
        emit(event)

    return both


async def _one(r: Replica, opts: RolloutOptions, baseline: Figures, emit: Emit, abort: asyncio.Event,
               canary: bool) -> None:
    steps = Steps("rollout", emit, host=r.name)
    _set(r, steps, "deploying")
    steps.begin("preflight", f"{'canary' if canary else 'replica'} {r.name}: preflight")
    try:
        plan = await preflight(r.host, r.cfg, opts.request, steps)
    except DeployRefused as err:
        _set(r, steps, "failed")
        steps.failed(f"refused: {err}")
        raise Halt(f"{r.name}: {err}") from None
    r.plan = plan
    if not plan.changes:
        _set(r, steps, "unchanged")
        steps.done(f"{r.name} already runs these settings; left as it is")
        return
    extra = {"router": {"url": opts.router.url, "worker_url": r.worker_url, "hold": True,
                        "metrics_url": plan.base_url.rstrip("/") + "/metrics",
                        "drain_timeout_s": opts.drain_timeout_s, "verdict_path": f"{plan.workdir}/verdict"}}
    outcome = await execute(r.host, plan, steps, operator=opts.operator, extra=extra)
    if outcome.outcome != "deployed":
        _set(r, steps, "rolled back" if outcome.outcome == "rolled_back" else "failed")
        await _rejoin(r, plan, steps, outcome)
        raise Halt(f"{r.name}: deploy {outcome.outcome}: {outcome.message}")
    r.changed = True
    _set(r, steps, "gating")
    steps.begin("gate", f"quality gate on {r.name}: {len(opts.prompts)} prompts straight to the replica")
    try:
        r.figures = await _measure(r, steps, opts)
        verdict = judge(r.figures, baseline, opts.gate)
    except SpecConsoleError as err:
        verdict = Verdict(False, f"gate could not measure: {first_line(err)}")
    r.verdict = verdict.line
    shown = f" ({r.figures.text()})" if r.figures else ""
    (steps.info if verdict.passed else steps.error)(f"{r.name}: {verdict.line}{shown}")
    if r.figures is not None:
        _show_acceptance(steps, r.figures, baseline, "canary" if canary else "new config")
    if abort.is_set() and verdict.passed:
        verdict = Verdict(False, "aborted by the operator")
    word = "promote" if verdict.passed else f"rollback {verdict.line}"
    steps.begin("verdict", f"telling the agent on {r.name}: {word.split(':')[0]}")
    res = await steps.run(r.host, ["sh", "-c", 'cat > "$1.tmp" && mv -f "$1.tmp" "$1"', "sh",
                                   f"{plan.workdir}/verdict"], input=word + "\n")
    if not res.ok:
        steps.warn(f"could not write the verdict ({res.stderr.strip()[:120]}); the agent puts {r.name} back "
                   f"after {opts.drain_timeout_s:g}s")
    final = await _rejoin(r, plan, steps, outcome)
    r.verdict_seen = str(final.events[-1].get("verdict", "")) if final.events else ""
    if not verdict.passed and r.verdict_seen == "timeout":  # the agent stopped waiting and put it back as it is
        steps.warn(f"{r.name} went back into the router on the new config before the verdict arrived (the gate "
                   f"took longer than the drain timeout {opts.drain_timeout_s:g}s); the halt rolls it back")
        _set(r, steps, "failed")
        raise Halt(f"{r.name}: {verdict.line}")
    if verdict.passed:
        _set(r, steps, "promoted")
        steps.done(f"{r.name} promoted: {plan.summary()}; {final.message}")
        return
    r.changed = False
    _set(r, steps, "rolled back")
    raise Halt(f"{r.name}: {verdict.line}")


async def _rejoin(r: Replica, plan: DeployPlan, steps: Steps, outcome: DeployOutcome) -> DeployOutcome:
    """Follow the agent to its router event (back in the router, or why not)."""
    after = max((int(e.get("seq", 0)) for e in outcome.events), default=0)
    res = await follow(r.host, plan, f"{plan.workdir}/progress.jsonl", steps, after=after)
    r.in_router = res.outcome == "in_router"
    return res


async def _roll_back(r: Replica, opts: RolloutOptions, emit: Emit, why: str) -> None:
    """Restore what this run's deploy on ``r`` replaced: an agent run (out of the router, drain,
    restore, health, back in)."""
    steps = Steps("rollout", emit, host=r.name)
    assert r.plan is not None
    _set(r, steps, "rolling back")
    steps.begin("roll back", f"rolling {r.name} back to what it served before this rollout")
    plan = replace(r.plan, id=time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3))  # a deploy id of its own
    extra = {"router": {"url": opts.router.url, "worker_url": r.worker_url, "hold": False,
                        "metrics_url": plan.base_url.rstrip("/") + "/metrics",
                        "drain_timeout_s": opts.drain_timeout_s, "verdict_path": ""},
             "restore_from": r.plan.workdir, "restore_reason": f"rollout halted: {why}"}
    try:
        outcome = await execute(r.host, plan, steps, operator=opts.operator, extra=extra)
        await _rejoin(r, plan, steps, outcome)
    except SpecConsoleError as err:
        _set(r, steps, "failed")
        steps.failed(f"roll back of {r.name} failed: {first_line(err)}")
        return
    r.changed = outcome.outcome != "rolled_back"
    _set(r, steps, "rolled back" if outcome.outcome == "rolled_back" else "failed")


async def _canary_wait(r: Replica, opts: RolloutOptions, top: Steps, abort: asyncio.Event) -> str:
    top.begin("canary wait", f"holding {opts.canary_wait_s:g}s on the canary {r.name} before the rest")
    end = time.monotonic() + opts.canary_wait_s
    async with await sglang_client(r.host, r.cfg, top) as client:
        while True:  # at least one reading, even when opening the client took the whole wait
            if abort.is_set():
                return "aborted by the operator during the canary wait"
            try:
                m = await top.watch(client.metrics(), f"GET {client.display_url}/metrics of the canary {r.name}")
                figures = (f"{m.gen_throughput or 0:.0f} tok/s, accept {m.spec_accept_length or 0:.2f}, "
                           f"{m.running_reqs or 0} running")
            except SpecConsoleError as err:
                figures = f"/metrics: {first_line(err)}"
            left = max(0.0, end - time.monotonic())
            top.emit("heartbeat", f"canary {r.name}: {left:.0f}s left; live: {figures}")
            if left <= 0:
                break
            await asyncio.sleep(min(HEARTBEAT_S, left))
    top.info(f"canary wait over; {r.name} live: {figures}")
    return ""


async def _router_workers(opts: RolloutOptions, steps: Steps) -> list[Worker]:
    """The router's workers (``GET /workers``), with heartbeats."""
    return await steps.watch(list_workers(opts.router.url, opts.router.timeout_s), f"GET {opts.router.url}/workers")


def _show_acceptance(steps: Steps, figures: Figures, baseline: Figures | None, role: str) -> None:
    """The acceptance histogram beside the fleet's (a line the console and the CLI plot), or, once,
    that the server gives none."""
    shown = acceptance_figures(figures, baseline, role=role, said=baseline is not None and baseline.no_detail)
    if shown is not None:
        steps.emit("info", shown[0], acceptance=shown[1])


async def _measure(r: Replica, steps: Steps, opts: RolloutOptions) -> Figures:
    async with await sglang_client(r.host, r.cfg, steps) as client:
        async def generate(text: str, max_new: int) -> dict[str, Any]:
            return await client.generate(text, max_new, 0.0)

        return await steps.watch(measure(generate, opts.prompts, where=r.name),
                                 f"gate prompts on {r.name} ({len(opts.prompts)} prompts)")


async def _final_lines(replicas: list[Replica], opts: RolloutOptions, top: Steps) -> None:
    """One line per replica: what it serves now (its /server_info) and whether the router lists it."""
    top.begin("result", "what each replica serves now")
    try:
        listed = [w.url for w in await _router_workers(opts, top)]
    except SpecConsoleError as err:
        listed = []
        top.warn(first_line(err))
    for r in replicas:
        try:
            async with await sglang_client(r.host, r.cfg, top) as client:
                info = await top.watch(client.server_info(), f"GET {client.display_url}/server_info of {r.name}")
            draft = info.draft_model_path
            r.serves = (f"{info.algorithm or 'no speculation'}"
                        + (f" window {info.draft_window}" if info.draft_window else "")
                        + (f" draft {str(draft).rstrip('/').rsplit('/', 1)[-1]}" if draft else ""))
        except SpecConsoleError as err:
            r.serves = f"unknown ({first_line(err)})"
        r.in_router = any(same_url(u, r.worker_url) for u in listed)
        figures = f"; gate: {r.figures.text()}" if r.figures else ""
        top.info(f"{r.name}: {r.state}; serves {r.serves}; {'in' if r.in_router else 'NOT in'} the router{figures}")


def select(config: Config, pattern: str) -> list[HostConfig]:
    """The serving hosts whose names match ``pattern`` (fnmatch, comma-separated), in config order."""
    import fnmatch

    pats = [p.strip() for p in pattern.split(",") if p.strip()]
    chosen = [h for h in config.serve_hosts if any(fnmatch.fnmatchcase(h.name, p) for p in pats)]
    if not chosen:
        names = ", ".join(h.name for h in config.serve_hosts) or "none"
        raise ConfigError(config.path, "hosts", f"--hosts {pattern!r} matches no serving host (serving hosts: "
                          f"{names})", "pass a name pattern such as 'serve*'")
    return chosen


def options(config: Config, request: DeployRequest, *, gate: str | None, canary_wait_s: float | None,
            drain_timeout_s: float | None, operator: str,
            gate_prompts: Callable[[RouterConfig], list[tuple[str, int]]]) -> RolloutOptions:
    """The rollout's settings: the flags, else ``[router]``; the gate's prompts from ``gate_prompts``
    (the caller hands in :func:`specconsole.eval.suite.gate_prompts`: the eval suite's tasks)."""
    from specconsole.actions.rollout.gate import parse_gate

    if config.router is None:
        raise ConfigError(config.path, "router", "a rollout (--hosts) needs the router in front of the replicas",
                          'add [router] with url = "http://ROUTER:30000"')
    r = config.router
    thresholds = parse_gate(gate if gate is not None else r.gate)
    return RolloutOptions(request, r, thresholds, gate_prompts(r),
                          canary_wait_s=r.canary_wait_s if canary_wait_s is None else canary_wait_s,
                          drain_timeout_s=r.drain_timeout_s if drain_timeout_s is None else drain_timeout_s,
                          operator=operator)


__all__ = ["GateError", "Halt", "Replica", "RolloutOptions", "RolloutOutcome", "options", "rollout", "select"]
