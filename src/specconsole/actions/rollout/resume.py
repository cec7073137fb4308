"""``deploy --resume``: finish or undo a rollout whose console died (its journal, :mod:`.journal`).

The host agents went on without the console: a held replica is put back into the router after the
drain timeout on the new config, unjudged (its agent's router event says ``verdict: timeout``); a
deploy that failed rolled itself back. So resuming first reads, per replica the journal names a
deploy folder for, what its agent did (``progress.jsonl``; an agent still running is followed to its
end; one still holding a deployed replica for the verdict gets it now: the gate measured on resume,
or ``rollback`` for an undo), and says what each replica serves now. Then:

- **finish** (the default): a replica left on the new config unjudged is gated now against the
  journal's baseline; one that fails halts (every replica on the new config is rolled back, as the
  rollout's own halt does); then the rollout goes on over the replicas not yet changed (a replica
  already on the new config is left as it is);
- **undo** (``--undo``): every replica on the new config is rolled back to what it served before.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

from specconsole.actions.deploy.execute import first_line, follow, run_reattaching
from specconsole.actions.deploy.preflight import DeployPlan, DeployRefused, DeployRequest, preflight
from specconsole.actions.rollout import run
from specconsole.actions.rollout.gate import Figures
from specconsole.actions.rollout.journal import Journal
from specconsole.base.errors import SpecConsoleError
from specconsole.steps import Emit, Steps


async def resume(journal: Journal, replicas: list[run.Replica], opts: run.RolloutOptions, emit: Emit,
                 abort: asyncio.Event, *, undo: bool = False) -> run.RolloutOutcome:
    top = Steps("rollout", emit)
    top.begin("resume", f"resuming rollout {journal.id} ({'undo' if undo else 'finish'}): its console (pid "
              f"{journal.pid}) is gone")
    for line in journal.lines():
        top.info(line)
    journal.resumed_by.append(f"pid {os.getpid()} at {time.strftime('%Y-%m-%d %H:%M:%S')} "
                              f"({'undo' if undo else 'finish'})")
    journal.pid = os.getpid()
    journal.save()
    by_name = {r.name: r for r in replicas}
    for left in journal.replicas:
        r = by_name[left.name]
        r.state, r.changed, r.workdir, r.verdict = left.state, left.changed, left.workdir, left.verdict
        r.on_change = lambda: journal.note(replicas)
    baseline = journal.baseline_figures()

    async def verdict(r: run.Replica, steps: Steps) -> str | None:
        """What to tell an agent still holding ``r`` for the dead console's verdict."""
        if undo:
            return "rollback undone by deploy --resume --undo"
        if baseline is None:
            return None  # nothing to gate against: it goes back as it is after the hold, and is gated then
        run.say_state(r, steps, "gating")
        steps.begin("gate", f"quality gate on {r.name} (held for the dead console's verdict): "
                    f"{len(opts.prompts)} prompts")
        v = await run.gate_on(r, steps, opts, baseline)
        (steps.info if v.passed else steps.error)(f"{r.name}: {v.line}")
        return "promote" if v.passed else f"rollback {v.line}"

    await asyncio.gather(*(_what_the_agent_did(r, emit, verdict) for r in replicas if r.workdir))
    if undo:
        out = await _undo(replicas, opts, emit, top, "undone by deploy --resume --undo")
    else:
        out = await _finish(replicas, opts, emit, abort, top, baseline, journal)
    journal.note(replicas)
    journal.end(out.ok, out.message)
    return out


async def _what_the_agent_did(r: run.Replica, emit: Emit,
                              tell: Callable[[run.Replica, Steps], Awaitable[str | None]]) -> None:
    """Read (or follow to its end) the agent of ``r``'s deploy and set what ``r`` serves by it; an agent
    holding the replica for a verdict gets ``tell(r, steps)`` (None: none; it times out)."""
    steps = Steps("rollout", emit, host=r.name)
    steps.begin("agent", f"{r.name}: what the deploy agent in {r.workdir} did after the console was gone")
    res = await run_reattaching(r.host, steps, ["cat", "--", f"{r.workdir}/progress.jsonl"])
    events = []
    for line in res.stdout.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    finals = [e for e in events if e.get("kind") == "final"]
    if not events:
        steps.warn(f"{r.name}: no agent events in {r.workdir} (the console died before the agent started); "
                   "nothing was changed by it")
        r.changed = False
        run.say_state(r, steps, "unchanged")
        return
    router_final = next((e for e in finals if e.get("phase") == "router"), None)
    if router_final is None:  # a rollout's agent always ends with one: follow it there (its deploy's final first)
        steps.info(f"{r.name}: its agent has not finished (last: {events[-1].get('message', '')[:100]}); "
                   "following it to its end")
    told = False
    while router_final is None:
        deployed = any(e.get("outcome") == "deployed" for e in finals)
        if deployed and not told:  # held for the verdict the dead console never wrote
            told = True
            word = await tell(r, steps)
            if word is not None:
                steps.begin("verdict", f"telling the agent on {r.name}: {word.split(':')[0]}")
                cmd = ["sh", "-c", 'cat > "$1.tmp" && mv -f "$1.tmp" "$1"', "sh", f"{r.workdir}/verdict"]
                await run_reattaching(r.host, steps, cmd, input=word + "\n")
        more = await follow(r.host, r.workdir, steps, after=max(int(e.get("seq", 0)) for e in events))
        events += more.events
        finals = [e for e in events if e.get("kind") == "final"]
        router_final = next((e for e in finals if e.get("phase") == "router"), None)
        if more.outcome == "crashed" and router_final is None:
            break
    deploy_final = next((e for e in finals if e.get("phase") != "router"), None)
    outcome = str((deploy_final or {}).get("outcome", "crashed"))
    verdict = str((router_final or {}).get("verdict", ""))
    where = str((router_final or {}).get("outcome", "unknown"))
    r.in_router = where == "in_router"
    r.verdict_seen = verdict
    if outcome == "deployed" and verdict == "promote":
        r.changed = True
        run.say_state(r, steps, "promoted")
    elif outcome == "deployed" and verdict.startswith("rollback"):
        r.changed = False
        run.say_state(r, steps, "rolled back")
    elif outcome == "deployed":  # no verdict came: put back as it is, on the new config
        r.changed = True
        run.say_state(r, steps, "not judged")
        steps.warn(f"{r.name} runs the new config, unjudged: its agent put it back after the drain timeout "
                   f"({'in' if r.in_router else 'NOT in'} the router)")
    elif outcome in ("rolled_back", "unchanged", "locked"):
        r.changed = False
        run.say_state(r, steps, "rolled back" if outcome == "rolled_back" else "unchanged")
    else:
        run.say_state(r, steps, "failed")
        steps.error(f"{r.name}: its agent ended {outcome}: {(deploy_final or {}).get('message', 'no final event')}")
    steps.done(f"{r.name}: deploy {outcome}; router: {where}" + (f"; verdict {verdict}" if verdict else ""))


async def _planned(r: run.Replica, opts: run.RolloutOptions, steps: Steps) -> DeployPlan:
    """A plan for ``r``'s unit as it is now (keeping every setting): what a roll-back's agent needs."""
    keep = DeployRequest(health_timeout_s=opts.request.health_timeout_s, host_check=False)
    return await preflight(r.host, r.cfg, keep, steps)


async def _undo(replicas: list[run.Replica], opts: run.RolloutOptions, emit: Emit, top: Steps,
                why: str) -> run.RolloutOutcome:
    changed = [r for r in replicas if r.changed]
    top.begin("undo", f"rolling back {', '.join(r.name for r in changed) or 'nothing'}: {why}")
    for r in changed:
        try:
            r.plan = await _planned(r, opts, Steps("rollout", emit, host=r.name))
        except (DeployRefused, SpecConsoleError) as err:
            top.error(f"{r.name}: cannot plan its roll back: {first_line(err)}")
    await run.roll_back_all([r for r in changed if r.plan is not None], opts, emit, why)
    for r in replicas:
        if r.state in ("waiting", "deploying"):
            run.say_state(r, Steps("rollout", emit, host=r.name), "untouched")
    await run.final_lines(replicas, opts, top)
    ok = not any(r.changed for r in replicas)
    message = f"undone: {why}" if ok else "undo incomplete: " + ", ".join(r.name for r in replicas if r.changed)
    (top.done if ok else top.failed)(f"rollout {message}")
    return run.RolloutOutcome(ok, message, replicas)


async def _finish(replicas: list[run.Replica], opts: run.RolloutOptions, emit: Emit, abort: asyncio.Event,
                  top: Steps, baseline: Figures | None, journal: Journal) -> run.RolloutOutcome:
    failed = next((r for r in replicas if r.verdict_seen.startswith("rollback")), None)
    if failed is not None:  # its gate failed (before the console died, or on resume): the rollout halts
        return await _undo(replicas, opts, emit, top, f"{failed.name}: {failed.verdict or failed.verdict_seen}")
    unjudged = [r for r in replicas if r.changed and r.state != "promoted"]
    if unjudged and baseline is None:
        base = next((r for r in replicas if not r.changed), None)
        if base is None:
            return await _undo(replicas, opts, emit, top, "no baseline to gate the unjudged replicas against")
        top.begin("baseline", f"measuring the gate's {len(opts.prompts)} prompts on {base.name} (not changed)")
        baseline = await run.measure_on(base, top, opts)
    for r in unjudged:
        assert baseline is not None
        steps = Steps("rollout", emit, host=r.name)
        run.say_state(r, steps, "gating")
        steps.begin("gate", f"quality gate on {r.name} (left unjudged): {len(opts.prompts)} prompts")
        verdict = await run.gate_on(r, steps, opts, baseline)
        (steps.info if verdict.passed else steps.error)(f"{r.name}: {verdict.line}")
        if not verdict.passed:
            return await _undo(replicas, opts, emit, top, f"{r.name}: {verdict.line}")
        run.say_state(r, steps, "promoted")
        steps.done(f"{r.name} promoted (gated on resume)")
    top.info("the rollout goes on over the replicas not yet on the new config")
    more = replace(opts, baseline=baseline, journal=journal)
    return await run.rollout(replicas, more, emit, abort)


__all__ = ["resume"]
