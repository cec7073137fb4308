"""The rollout (``deploy --hosts``) against the lab: 3 replicas behind a real sglang-router 0.3.2,
real sshd, real systemctl, the simulator; one lab for the module (each test starts from what the
one before left, and asserts against what it read first)."""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import running_lab, wait_for
from specconsole.actions.deploy.preflight import DeployRequest
from specconsole.actions.rollout import run as rollout
from specconsole.config import load_config
from specconsole.eval.suite import gate_prompts
from specconsole.hosts.ssh import SshHost
from specconsole.lab.doubles.models import WEAK_DRAFT_MODEL
from specconsole.lab.parts import serve_replicas
from specconsole.lab.parts.environment import Lab, LabOptions
from specconsole.lab.testing.router_load import RouterLoad
from specconsole.steps import StepEvent

pytestmark = pytest.mark.xdist_group("rollout-lab")  # one 3-replica lab for the module
NAMES = ["serve", "serve2", "serve3"]


#: The gate these tests roll out under: acceptance length only. The default gate's tok/s is the
#: simulator's wall-clock speed, which on a loaded 2-core machine says how busy the machine was
#: while a replica was measured, not what its draft does (test_rollout_gate tests tok/s verdicts).
GATE = "accept_len>=0.95*baseline"


def _acceptance_gate(lab: Lab) -> None:
    text = lab.config_path.read_text()
    assert "\n[router]\n" in text
    lab.config_path.write_text(text.replace("\n[router]\n", f"\n[router]\ngate = {json.dumps(GATE)}\n"))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, lab_parts: None) -> Iterator[Lab]:
    # Restart=on-failure: a config that cannot start crash-loops, as under a real unit
    yield from running_lab(tmp_path_factory.mktemp("rollout") / "lab",
                           LabOptions(trainer=False, serve=3, sglang_startup_s=1.0, sglang_load_rps=0,
                                      sglang_step_ms=2.0, sglang_restart="on-failure"), _acceptance_gate)


def info(lab: Lab, name: str) -> dict[str, Any]:
    with urllib.request.urlopen(serve_replicas.worker_url(lab, name) + "/server_info", timeout=5) as r:
        return dict(json.loads(r.read()))


def infos(lab: Lab) -> dict[str, dict[str, Any]]:
    return {n: info(lab, n) for n in NAMES}


def in_router(lab: Lab) -> list[str]:
    return sorted(serve_replicas.router_workers(lab))


def all_urls(lab: Lab) -> list[str]:
    return sorted(serve_replicas.worker_url(lab, n) for n in NAMES)


async def run(lab: Lab, request: DeployRequest, *, on_event: Callable[[StepEvent, asyncio.Event], None] | None = None,
              gate: str | None = None, canary_wait_s: float | None = None, drain_timeout_s: float | None = None,
              tweak: Callable[[rollout.RolloutOptions], None] | None = None
              ) -> tuple[rollout.RolloutOutcome, list[StepEvent]]:
    config = load_config(lab.config_path)
    chosen = rollout.select(config, "serve*")
    opts = rollout.options(config, request, gate=gate, canary_wait_s=canary_wait_s, drain_timeout_s=drain_timeout_s,
                           operator="test", gate_prompts=gate_prompts)
    if tweak is not None:  # what a test changes beyond the flags (test_rollout_faults: the router's URL)
        tweak(opts)
    hosts = [SshHost(c) for c in chosen]
    events: list[StepEvent] = []
    abort = asyncio.Event()

    def emit(e: StepEvent) -> None:
        events.append(e)
        if on_event is not None:
            on_event(e, abort)

    try:
        for h in hosts:
            await h.start()
        for h in hosts:
            assert await h.wait_connected(15)
        out = await rollout.rollout([rollout.Replica(c, h) for c, h in zip(chosen, hosts, strict=True)], opts,
                                    emit, abort)
    finally:
        for h in hosts:
            await h.close()
    return out, events


def longest_silence(events: list[StepEvent]) -> tuple[float, str]:
    """The longest gap between two events, and the two events' lines."""
    pairs = list(itertools.pairwise(sorted(events, key=lambda e: e.at)))
    if not pairs:
        return 0.0, ""
    a, b = max(pairs, key=lambda p: p[1].at - p[0].at)
    return b.at - a.at, (f"between [{a.host or 'rollout'} {a.step}] {a.message!r} "
                         f"and [{b.host or 'rollout'} {b.step}] {b.message!r}")


async def test_window_16_to_32_promotes_all_three_under_load(fleet: Lab) -> None:
    assert {i["speculative_draft_window_size"] for i in infos(fleet).values()} == {16}
    assert in_router(fleet) == all_urls(fleet)
    with RouterLoad(serve_replicas.router_url(fleet), concurrency=3) as load:
        out, events = await run(fleet, DeployRequest(draft_window=32, health_timeout_s=60), canary_wait_s=1.0)
        stats = load.stop()
    assert out.ok, out.message
    assert stats.sent > 50 and stats.failed == 0, stats.line()
    after = infos(fleet)
    assert {i["speculative_draft_window_size"] for i in after.values()} == {32}
    assert in_router(fleet) == all_urls(fleet)
    assert [r.state for r in out.replicas] == ["promoted"] * 3
    assert all(r.figures is not None and r.verdict.startswith("gate passed") for r in out.replicas)
    for name in NAMES:  # each replica: out of the router, drained, deployed, gated, back in
        steps = [e.step for e in events if e.host == name and e.kind == "step"]
        for step in ("leave the router", "drain", "restart", "wait for health", "gate", "hold", "rejoin the router"):
            assert step in steps, (name, step, steps)
    # the canary went first: its rejoin came before the second replica left the router
    rejoin = next(e.at for e in events if e.host == "serve" and e.step == "rejoin the router")
    leave2 = next(e.at for e in events if e.host == "serve2" and e.step == "leave the router")
    assert rejoin < leave2
    # --canary-wait: held on the canary with its live figures, between the two
    held = [e for e in events if e.step == "canary wait"]
    assert held and rejoin < held[0].at < leave2 and any("live: " in e.message and "tok/s" in e.message for e in held)
    result = [e.message for e in events if e.step == "result" and e.kind == "info"]
    assert len(result) == 3 and all("serves DFLASH window 32" in m and "in the router" in m for m in result)
    gap, where = longest_silence(events)
    assert gap < 3.0, f"{gap:.1f}s of silence {where}"  # the promise is 1 s; a loaded 2-core machine gets margin


async def test_weaker_draft_fails_the_gate_on_the_canary_and_is_rolled_back(fleet: Lab) -> None:
    before = infos(fleet)
    weak = serve_replicas.models_dir(fleet) / WEAK_DRAFT_MODEL
    out, events = await run(fleet, DeployRequest(draft_model=str(weak), health_timeout_s=60))
    assert not out.ok and "gate FAILED" in out.message and "acceptance length" in out.message
    canary, *rest = out.replicas
    assert canary.state == "rolled back" and rest[0].state == rest[1].state == "untouched"
    after = infos(fleet)
    for name in NAMES:
        assert after[name]["speculative_draft_model_path"] == before[name]["speculative_draft_model_path"]
    for name in NAMES[1:]:  # never restarted
        assert after[name]["startup_time"] == before[name]["startup_time"]
    assert not [e for e in events if e.host in NAMES[1:] and e.kind == "command"]
    assert in_router(fleet) == all_urls(fleet)
    lines = [e.message for e in events if e.step == "result" and e.kind == "info"]
    assert any(m.startswith("serve: rolled back; serves DFLASH") for m in lines), lines
    # acceptance as operators read it: the canary's histogram beside the fleet's, from the replicas'
    # own meta_info (issue 36 item 4); the weaker draft accepts less at every draft position
    (shown,) = [e for e in events if e.host == "serve" and e.step == "gate" and e.acceptance]
    (new_label, new), (fleet_label, old) = shown.acceptance
    assert (new_label, fleet_label) == ("serve (canary)", "serve2 (fleet)")
    assert canary.figures is not None and new.requests == old.requests == canary.figures.prompts
    assert new.positions == old.positions == 15 and new == canary.figures.acceptance
    assert new.accept_length < old.accept_length and new.by_position()[0] < old.by_position()[0]
    assert "(from spec_correct_drafts_histogram)" in shown.message


async def test_a_failed_gate_after_the_hold_timed_out_still_rolls_the_canary_back(fleet: Lab) -> None:
    """A gate slower than the drain timeout: the agent stopped holding and put the canary back on the
    new (weak) draft before the verdict; the rollout sees that and restores it anyway."""
    before = infos(fleet)
    weak = serve_replicas.models_dir(fleet) / WEAK_DRAFT_MODEL
    out, events = await run(fleet, DeployRequest(draft_model=str(weak), health_timeout_s=60), drain_timeout_s=0.05)
    assert not out.ok and "gate FAILED" in out.message
    assert out.replicas[0].verdict_seen == "timeout"
    assert any("before the verdict arrived" in e.message for e in events)
    restores = [e for e in events if e.host == "serve" and e.kind == "step" and "restoring the previous" in e.message]
    assert len(restores) == 1  # the halt's restore run (the agent had put it back as it was)
    after = infos(fleet)
    assert after["serve"]["speculative_draft_model_path"] == before["serve"]["speculative_draft_model_path"]
    assert all(after[n]["startup_time"] == before[n]["startup_time"] for n in NAMES[1:])
    assert in_router(fleet) == all_urls(fleet)


async def test_crash_looping_config_rolls_back_the_canary(fleet: Lab) -> None:
    bad = serve_replicas.models_dir(fleet) / "dflash-truncated"
    bad.mkdir(exist_ok=True)
    shutil.copyfile(fleet.draft_model_dir() / "config.json", bad / "config.json")
    (bad / "model.safetensors").write_bytes(b"\x00\x01")
    before = infos(fleet)
    out, events = await run(fleet, DeployRequest(draft_model=str(bad), health_timeout_s=30))
    assert not out.ok and "deploy rolled_back" in out.message, out.message
    assert [r.state for r in out.replicas] == ["rolled back", "untouched", "untouched"]
    assert any(e.host == "serve" and "crashed during start-up" in e.message for e in events)
    after = infos(fleet)
    assert after["serve"]["speculative_draft_model_path"] == before["serve"]["speculative_draft_model_path"]
    assert all(after[n]["startup_time"] == before[n]["startup_time"] for n in NAMES[1:])
    assert in_router(fleet) == all_urls(fleet)


def test_abort_mid_rollout_rolls_back_what_changed(fleet: Lab) -> None:
    """Headless: SIGINT while the second replica deploys; the canary (promoted) and the second are
    rolled back, the third is never touched; all three are in the router at the end."""
    before = infos(fleet)
    window = before["serve"]["speculative_draft_window_size"]
    proc = subprocess.Popen([sys.executable, "-m", "specconsole", "deploy", "--config", str(fleet.config_path),
                             "--hosts", "serve*", "--draft-window", str(window + 16), "--yes", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    events: list[dict[str, Any]] = []
    assert proc.stdout is not None
    sent = False
    for line in proc.stdout:
        ev = json.loads(line)
        events.append(ev)
        if not sent and ev["host"] == "serve2" and ev["step"] == "restart":
            proc.send_signal(signal.SIGINT)
            sent = True
    assert proc.wait(120) == 1, proc.stderr.read() if proc.stderr else ""
    assert sent
    after = infos(fleet)
    for name in NAMES:
        assert after[name]["speculative_draft_window_size"] == window, name
    assert after["serve3"]["startup_time"] == before["serve3"]["startup_time"]
    assert not [e for e in events if e["host"] == "serve3" and e["kind"] == "command"]
    halt = [e["message"] for e in events if e["step"] == "halt"]
    assert halt and "aborted by the operator" in halt[0]
    rolled = {e["host"] for e in events if e["step"] == "roll back" and e["kind"] == "step"}
    assert rolled == {"serve", "serve2"}, rolled
    assert wait_for(lambda: in_router(fleet) == all_urls(fleet), 30)
    lines = [e["message"] for e in events if e["step"] == "result" and e["kind"] == "info"]
    assert len(lines) == 3 and all(f"window {window}" in m and "in the router" in m for m in lines), lines


def test_bad_gate_and_unreachable_router_are_one_line_errors(tmp_path: Path) -> None:
    from specconsole.lab.parts.state import free_port

    cfg = tmp_path / "c.toml"
    cfg.write_text(f"""[console]
audit_log = "{tmp_path / 'audit.log'}"
state_dir = "{tmp_path / 'state'}"
[router]
url = "http://127.0.0.1:{free_port()}"
[[hosts]]
name = "serve"
role = "serve"
[hosts.sglang]
base_url = "http://127.0.0.1:{free_port()}"
""")
    base = [sys.executable, "-m", "specconsole", "deploy", "--config", str(cfg), "--hosts", "serve*",
            "--draft-window", "32", "--yes"]
    for extra, needle in ((["--gate", "accept_len>=banana"], "--gate: cannot read 'accept_len>=banana'"),
                          (["--gate", "latency>=0.9*baseline"], "unknown metric 'latency'"),
                          ([], "the router at http://127.0.0.1:"),
                          (["--hosts", "nope*"], "matches no serving host")):
        t0 = time.monotonic()
        res = subprocess.run(base + extra, capture_output=True, text=True, timeout=60)
        err = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(err) == 1 and needle in err[0], (extra, res.stderr, res.stdout)
        assert "Traceback" not in res.stderr and time.monotonic() - t0 < 30


def test_console_killed_while_the_canary_is_held_the_agent_puts_it_back(fleet: Lab) -> None:
    """SIGKILL the headless console while the canary waits for the gate's verdict: no console is
    left to say promote or rollback, and the host agent puts the replica back into the router
    within the drain timeout (as it is: the new config, healthy); nothing else was touched."""
    before = infos(fleet)
    window = before["serve"]["speculative_draft_window_size"]
    proc = subprocess.Popen([sys.executable, "-m", "specconsole", "deploy", "--config", str(fleet.config_path),
                             "--hosts", "serve*", "--draft-window", str(window + 8), "--drain-timeout", "8",
                             "--yes", "--json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        ev = json.loads(line)
        seen.append((round(time.monotonic(), 2), ev["host"], ev["kind"], ev["step"], ev["message"][:80]))
        if ev["host"] == "serve" and ev["step"] == "gate":
            proc.kill()
            killed = time.monotonic()
            break
    proc.wait(10)
    serve_url = serve_replicas.worker_url(fleet, "serve")
    # held out for the gate (a console slowed by a loaded machine may see its gate step late: the margin)
    assert serve_url not in in_router(fleet), (time.monotonic() - killed, seen[-30:])
    assert wait_for(lambda: in_router(fleet) == all_urls(fleet), 30, step=0.2)
    assert time.monotonic() - killed < 8 + 10  # the drain timeout, plus the router's own add job
    after = infos(fleet)
    assert after["serve"]["speculative_draft_window_size"] == window + 8
    assert all(after[n]["startup_time"] == before[n]["startup_time"] for n in NAMES[1:])


async def test_console_r_rolls_out_the_marked_replicas_and_x_aborts(fleet: Lab, tmp_path: Path) -> None:
    """The console: the marked replicas (m), R opens the deploy form (checked on the canary) and its
    plan, the action view shows one line per replica; X while the second replica deploys rolls back
    both changed replicas and never touches the third."""
    import dataclasses

    from textual.widgets import Button, Input

    from specconsole.ui.console.app import ConsoleApp
    from specconsole.ui.fleet.fleet_view import FleetTable
    from specconsole.ui.panes.action_view import ActionPanel
    from specconsole.ui.screens.deploy_form import DeployForm
    from specconsole.ui.screens.plan import PlanScreen
    from specconsole.ui.style.themes import BUNDLED_DIR, load_themes

    before = infos(fleet)
    window = before["serve"]["speculative_draft_window_size"]
    cfg = load_config(fleet.config_path)
    cfg = dataclasses.replace(cfg, console=dataclasses.replace(
        cfg.console, state_dir=str(tmp_path / "state"), audit_log=str(tmp_path / "audit.log")))
    app = ConsoleApp(cfg, themes=load_themes([BUNDLED_DIR]))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(lambda: all(s.reachable for s in app.fleet.statuses()), 90, what="hosts connected",
                       pilot=pilot)
        await pilot.press("f")
        await wait_for(lambda: bool(app.query(FleetTable)) and app.fleet_nav.view is not None
                       and app.fleet_nav.view.display, 30, what="the fleet view", pilot=pilot)
        app.query_one(FleetTable).marked = set(NAMES)
        await pilot.press("R")
        await wait_for(lambda: isinstance(app.screen, DeployForm), 90, what="the deploy form", pilot=pilot)
        form = app.screen
        form.query_one("#deploy-draft_window", Input).value = str(window + 16)
        form.query_one("#plan", Button).focus()
        await pilot.press("enter")
        await wait_for(lambda: isinstance(app.screen, PlanScreen), 90, what="the canary's plan", pilot=pilot)
        await wait_for(lambda: isinstance(app.focused, Button) and app.focused.id == "cancel", 30,
                       what="Cancel focused", pilot=pilot)
        await pilot.press("tab", "enter")
        panel = app.query_one(ActionPanel)
        await wait_for(lambda: panel.board is not None and panel.board.replicas[1].state == "deploying", 120,
                       what="the second replica deploying", pilot=pilot)
        await wait_for(lambda: all(f"{n} " in app.screen_text() for n in NAMES) and "promoted" in app.screen_text(),
                       30, what="one line per replica on screen", pilot=pilot)
        await pilot.press("X")
        await wait_for(lambda: panel.track is not None and panel.track.finished, 180, what="the rollout to end",
                       pilot=pilot)
        assert panel.track is not None and not panel.track.ok
        assert [r.state for r in panel.board.replicas] == ["rolled back", "rolled back", "untouched"]
    after = infos(fleet)  # each back on what it served before (the replicas need not agree)
    assert all(after[n]["speculative_draft_window_size"] == before[n]["speculative_draft_window_size"] for n in NAMES)
    assert after["serve3"]["startup_time"] == before["serve3"]["startup_time"]
    assert wait_for(lambda: in_router(fleet) == all_urls(fleet), 30)
