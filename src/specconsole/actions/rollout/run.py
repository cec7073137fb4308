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
gate, a failed deploy, an error the rollout cannot go past (a replica's host or the router that
stays away) or an abort (``abort`` set: SIGINT headless, the abort key in the console)
halts: every replica promoted in this run is rolled back in parallel (each an agent run that
takes it out, drains, restores, waits for health and puts it back), and the last lines say what
each replica serves (its ``/server_info``) and whether the router lists it.

A dropped SSH connection to a replica is said within a second (:func:`_watch_connections`; the
host reconnects on its own with backoff) and every step that needs the host waits for it and
goes on: the agent's part never depended on the connection (:func:`execute` re-attaches), the
verdict's write is repeated, the gate and the canary's readings reopen their tunnel. Each state
change is written to the rollout's journal (:mod:`.journal`) when ``opts.journal`` is set.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from specconsole.actions.deploy.execute import execute, first_line, follow, reconnect, run_reattaching
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
from specconsole.actions.rollout.journal import Journal
from specconsole.actions.rollout.router import Worker, list_workers, same_url
from specconsole.base.errors import ConfigError, HostUnavailable, SpecConsoleError
from specconsole.config import Config, HostConfig, RouterConfig
from specconsole.hosts import CommandResult, Host
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
    #: this run's deploy folder on the host (a roll-back restores its backup; the journal keeps it)
    workdir: str = ""
    #: called after each state change (the journal's write)
    on_change: Callable[[], None] | None = field(default=None, repr=False)

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
    #: how long the host agent retries a router that answers /workers with 5xx or not at all
    router_wait_s: float = 30.0
    #: the rollout's journal (None: none written)
    journal: Journal | None = None
    #: the gate's baseline, measured already (a resumed rollout's); None: measured first
    baseline: Figures | None = None


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
    if r.on_change is not None:
        r.on_change()


class Halt(Exception):
    """Stop promoting: the message says why (gate, deploy, abort)."""


async def rollout(replicas: list[Replica], opts: RolloutOptions, emit: Emit, abort: asyncio.Event,
                  board: Board | None = None) -> RolloutOutcome:
    """Roll ``opts.request`` out across ``replicas`` (the first is the canary); ``board`` (the action
    view's one line per replica) is fed every event."""
    if board is not None:
        emit = _feeding(board, emit)
    top = Steps("rollout", emit)
    journal = opts.journal
    if journal is not None:
        for r in replicas:
            r.on_change = lambda: journal.note(replicas)
        top.info(f"journal: {journal.path} (if this console dies: specconsole deploy --resume {journal.id})")
    watcher = asyncio.create_task(_watch_connections(replicas, emit))
    try:
        out = await _rollout(replicas, opts, emit, abort, top, board)
    except BaseException as err:
        if journal is not None and not isinstance(err, asyncio.CancelledError):
            journal.note(replicas)
            journal.end(False, f"error: {first_line(err)}")
        raise
    finally:
        watcher.cancel()
    if journal is not None:
        journal.note(replicas)
        journal.end(out.ok, out.message)
    return out


async def _rollout(replicas: list[Replica], opts: RolloutOptions, emit: Emit, abort: asyncio.Event, top: Steps,
                   board: Board | None) -> RolloutOutcome:
    names = ", ".join(r.name for r in replicas)
    top.begin("router", f"checking the router {opts.router.url} lists {names}")
    workers = await _router_workers(opts, top)
    missing = [r.name for r in replicas if not any(same_url(w.url, r.worker_url) for w in workers)]
    if missing:
        raise SpecConsoleError(f"the router {opts.router.url} does not list {', '.join(missing)} (it lists "
                               f"{', '.join(w.url for w in workers) or 'no worker'}); set sglang.router_worker_url "
                               f"to the URL the router knows each replica by")
    top.info(f"the router lists all {len(replicas)} replicas")
    if opts.baseline is not None:
        baseline = opts.baseline
        top.info(f"baseline (measured before): {baseline.text()}")
    else:
        base = replicas[1] if len(replicas) > 1 else replicas[0]
        top.begin("baseline", f"measuring the gate's {len(opts.prompts)} prompts on {base.name} (not yet changed)")
        baseline = await _measure(base, top, opts)
        top.info(f"baseline on {base.name}: {baseline.text()}")
        _show_acceptance(top, baseline, None, "fleet")
    if opts.journal is not None:
        opts.journal.note(replicas, baseline)
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
        except SpecConsoleError as err:  # a host or the router that stayed away: stop, undo what changed
            if r.state in ("deploying", "gating"):
                _set(r, top, "failed")
            halted = f"{r.name}: {first_line(err)}"
            top.error(halted)
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
        await roll_back_all(changed, opts, emit, halted)
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
    plan = await _preflight(r, opts, steps, canary)
    r.plan = plan
    if not plan.changes:
        _set(r, steps, "unchanged")
        steps.done(f"{r.name} already runs these settings; left as it is")
        return
    extra = {"router": {"url": opts.router.url, "worker_url": r.worker_url, "hold": True,
                        "metrics_url": plan.base_url.rstrip("/") + "/metrics", "router_wait_s": opts.router_wait_s,
                        "drain_timeout_s": opts.drain_timeout_s, "verdict_path": f"{plan.workdir}/verdict"}}
    r.workdir = plan.workdir
    if r.on_change is not None:
        r.on_change()
    outcome = await execute(r.host, plan, steps, operator=opts.operator, extra=extra)
    if outcome.outcome != "deployed":
        _set(r, steps, "rolled back" if outcome.outcome == "rolled_back" else "failed")
        await _rejoin(r, plan, steps, outcome)
        raise Halt(f"{r.name}: deploy {outcome.outcome}: {outcome.message}")
    r.changed = True
    _set(r, steps, "gating")
    steps.begin("gate", f"quality gate on {r.name}: {len(opts.prompts)} prompts straight to the replica")
    verdict = await gate_on(r, steps, opts, baseline)
    shown = f" ({r.figures.text()})" if r.figures else ""
    (steps.info if verdict.passed else steps.error)(f"{r.name}: {verdict.line}{shown}")
    if r.figures is not None:
        _show_acceptance(steps, r.figures, baseline, "canary" if canary else "new config")
    if abort.is_set() and verdict.passed:
        verdict = Verdict(False, "aborted by the operator")
    word = "promote" if verdict.passed else f"rollback {verdict.line}"
    steps.begin("verdict", f"telling the agent on {r.name}: {word.split(':')[0]}")
    res = await _write_verdict(r, plan, steps, word, opts)
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


async def _preflight(r: Replica, opts: RolloutOptions, steps: Steps, canary: bool) -> DeployPlan:
    """Preflight (reads only: repeated after a dropped connection, once the host is back)."""
    while True:
        steps.begin("preflight", f"{'canary' if canary else 'replica'} {r.name}: preflight")
        try:
            return await preflight(r.host, r.cfg, opts.request, steps)
        except DeployRefused as err:
            _set(r, steps, "failed")
            steps.failed(f"refused: {err}")
            raise Halt(f"{r.name}: {err}") from None
        except HostUnavailable as err:
            await reconnect(r.host, steps, first_line(err), "repeating the preflight (it only reads)",
                            what="the rollout waits; nothing on the host was changed yet")


async def _write_verdict(r: Replica, plan: DeployPlan, steps: Steps, word: str,
                         opts: RolloutOptions) -> CommandResult:
    """The verdict into the agent's ``verdict`` file (temp file + rename: repeated after a drop). A host
    that stays away past the hold: the agent puts the replica back as it is and the rollout sees it."""
    cmd = ["sh", "-c", 'cat > "$1.tmp" && mv -f "$1.tmp" "$1"', "sh", f"{plan.workdir}/verdict"]
    try:
        return await asyncio.wait_for(run_reattaching(r.host, steps, cmd, input=word + "\n"),
                                      max(10.0, opts.drain_timeout_s))
    except TimeoutError:
        return CommandResult("verdict", None, "", f"{r.name} stayed unreachable", 0.0)


async def _watch_connections(replicas: list[Replica], emit: Emit) -> None:
    """Say a replica's dropped SSH connection within a second, each reconnect attempt, and its return
    (the host reconnects on its own with backoff)."""
    seen = {r.name: (r.host.status.state, r.host.status.attempt) for r in replicas}
    steps = {r.name: Steps("rollout", emit, host=r.name) for r in replicas}
    while True:
        await asyncio.sleep(0.2)
        for r in replicas:
            st = r.host.status
            before, attempt = seen[r.name]
            if (st.state, st.attempt) == (before, attempt):
                continue
            seen[r.name] = (st.state, st.attempt)
            s = steps[r.name]
            s.step = ""
            retry = (f"; next try in {max(0.0, st.next_retry_at - time.time()):.1f}s"
                     if st.next_retry_at else "")
            if st.up and before is not st.state:
                s.info(f"SSH connection to {r.name} is back (reconnected)")
            elif not st.up and before.value == "connected":
                s.warn(f"SSH connection to {r.name} dropped ({st.last_error or st.state}); reconnecting with "
                       f"backoff{retry}; what runs on the host goes on")
            elif not st.up and st.attempt != attempt:
                s.warn(f"{r.name}: still reconnecting (attempt {st.attempt}{retry}): {st.last_error or st.state}")


async def _rejoin(r: Replica, plan: DeployPlan, steps: Steps, outcome: DeployOutcome) -> DeployOutcome:
    """Follow the agent to its router event (back in the router, or why not)."""
    after = max((int(e.get("seq", 0)) for e in outcome.events), default=0)
    res = await follow(r.host, plan.workdir, steps, after=after)
    r.in_router = res.outcome == "in_router"
    return res


async def roll_back_all(changed: list[Replica], opts: RolloutOptions, emit: Emit, why: str) -> None:
    await asyncio.gather(*(_roll_back(r, opts, emit, why) for r in changed))


async def _roll_back(r: Replica, opts: RolloutOptions, emit: Emit, why: str) -> None:
    """Restore what this run's deploy on ``r`` replaced: an agent run (out of the router, drain,
    restore, health, back in)."""
    steps = Steps("rollout", emit, host=r.name)
    assert r.plan is not None
    _set(r, steps, "rolling back")
    steps.begin("roll back", f"rolling {r.name} back to what it served before this rollout")
    plan = replace(r.plan, id=time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3))  # a deploy id of its own
    extra = {"router": {"url": opts.router.url, "worker_url": r.worker_url, "hold": False,
                        "metrics_url": plan.base_url.rstrip("/") + "/metrics", "router_wait_s": opts.router_wait_s,
                        "drain_timeout_s": opts.drain_timeout_s, "verdict_path": ""},
             "restore_from": r.workdir or r.plan.workdir, "restore_reason": f"rollout halted: {why}"}
    try:
        while True:
            try:
                outcome = await execute(r.host, plan, steps, operator=opts.operator, extra=extra)
                break
            except HostUnavailable as err:  # every step of execute is safe to repeat
                await reconnect(r.host, steps, first_line(err), "repeating the roll-back's start (safe to repeat)")
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
    client = None
    try:
        while True:  # at least one reading, even when opening the client took the whole wait
            if abort.is_set():
                return "aborted by the operator during the canary wait"
            try:
                if client is None:  # (again) after a failed reading: its tunnel may have gone with the connection
                    client = await sglang_client(r.host, r.cfg, top)
                m = await asyncio.wait_for(
                    top.watch(client.metrics(), f"GET {client.display_url}/metrics of the canary {r.name}"),
                    max(HEARTBEAT_S, end - time.monotonic()) + 5)
                figures = (f"{m.gen_throughput or 0:.0f} tok/s, accept {m.spec_accept_length or 0:.2f}, "
                           f"{m.running_reqs or 0} running")
            except (SpecConsoleError, TimeoutError) as err:
                tunnel_gone = not r.host.status.up and r.cfg.sglang is not None and r.cfg.sglang.tunnel
                figures = ("no reading: the SSH tunnel went with the connection; reading again once it is back"
                           if tunnel_gone else f"/metrics: {first_line(err)}")
                if client is not None:
                    await client.aclose()
                client = None
            left = max(0.0, end - time.monotonic())
            top.emit("heartbeat", f"canary {r.name}: {left:.0f}s left; live: {figures}")
            if left <= 0:
                break
            await asyncio.sleep(min(HEARTBEAT_S, left))
    finally:
        if client is not None:
            await client.aclose()
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
    """The gate's prompts on ``r``; measured again (a new tunnel) once after its SSH connection dropped."""
    for attempt in (1, 2):
        try:
            async with await sglang_client(r.host, r.cfg, steps) as client:
                async def generate(text: str, max_new: int) -> dict[str, Any]:
                    return await client.generate(text, max_new, 0.0)

                return await steps.watch(measure(generate, opts.prompts, where=r.name),
                                         f"gate prompts on {r.name} ({len(opts.prompts)} prompts)")
        except SpecConsoleError as err:
            if attempt == 2 or not r.cfg.sglang or not r.cfg.sglang.tunnel:
                raise
            if r.host.status.up:
                steps.warn(f"gate on {r.name}: {first_line(err)}; measuring again through a new tunnel")
            else:
                await reconnect(r.host, steps, first_line(err), "measuring the gate's prompts again")
    raise AssertionError("unreachable")


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


async def gate_on(r: Replica, steps: Steps, opts: RolloutOptions, baseline: Figures) -> Verdict:
    """The gate's prompts on ``r`` judged against ``baseline`` (kept in ``r.figures`` and ``r.verdict``);
    a replica the gate cannot measure fails it."""
    try:
        r.figures = await _measure(r, steps, opts)
        verdict = judge(r.figures, baseline, opts.gate)
    except SpecConsoleError as err:
        verdict = Verdict(False, f"gate could not measure: {first_line(err)}")
    r.verdict = verdict.line
    return verdict


#: for the resume (:mod:`.resume`), which settles a dead console's replicas the same way
say_state = _set
measure_on = _measure
final_lines = _final_lines


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


__all__ = ["GateError", "Halt", "Replica", "RolloutOptions", "RolloutOutcome", "final_lines", "gate_on", "measure_on",
           "options",
           "roll_back_all", "rollout", "say_state", "select"]
