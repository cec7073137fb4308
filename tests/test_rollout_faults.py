"""The rollout under what real fleets do to it (issue 36, items 1-3), on a lab of 3 replicas behind the
real sglang-router 0.3.2, real sshd, the real host agents and the simulator; one lab for the module.

- router faults: the router restarted while the canary is held out (a restarted router re-adds the
  workers on its command line), a worker the router already dropped, ``/workers`` answering 5xx
  (a fault proxy in front of the router: :mod:`specconsole.lab.testing.router_proxy`);
- SSH drops: the sshd session of the replica being drained, and of the canary during its wait;
- the console killed -9 mid-rollout: the journal, ``status``, ``deploy --resume`` and ``--undo``, and
  the deploy lock held through the hold (the lock gap).

Each test ends with every replica in the router, each on one config (asserted), and starts from what
the one before left (it reads the window first)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from conftest import running_lab, wait_for
from specconsole.actions.deploy.preflight import DeployRequest
from specconsole.actions.rollout import run as rollout
from specconsole.actions.rollout.journal import Journal, unfinished
from specconsole.lab.parts import serve_replicas
from specconsole.lab.parts.environment import Lab, LabOptions
from specconsole.lab.testing.router_load import RouterLoad
from specconsole.lab.testing.router_proxy import RouterProxy
from specconsole.steps import StepEvent
from test_deploy_faults import drop_sessions
from test_rollout import run as rollout_run

pytestmark = pytest.mark.xdist_group("rollout-faults-lab")
NAMES = ["serve", "serve2", "serve3"]
GATE = "accept_len>=0.95*baseline"


def _ready(lab: Lab) -> None:
    text = lab.config_path.read_text()
    assert "\n[router]\n" in text and f"state_dir = {json.dumps(str(state_dir(lab)))}" in text
    lab.config_path.write_text(text.replace("\n[router]\n", f"\n[router]\ngate = {json.dumps(GATE)}\n"))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, lab_parts: None) -> Iterator[Lab]:
    yield from running_lab(tmp_path_factory.mktemp("rollout-faults") / "lab",
                           LabOptions(trainer=False, serve=3, sglang_startup_s=1.0, sglang_load_rps=0,
                                      sglang_step_ms=2.0), _ready)


def info(lab: Lab, name: str) -> dict[str, Any]:
    with urllib.request.urlopen(serve_replicas.worker_url(lab, name) + "/server_info", timeout=5) as r:
        return dict(json.loads(r.read()))


def windows(lab: Lab) -> dict[str, int]:
    return {n: int(info(lab, n)["speculative_draft_window_size"]) for n in NAMES}


def in_router(lab: Lab) -> list[str]:
    return sorted(serve_replicas.router_workers(lab))


def all_urls(lab: Lab) -> list[str]:
    return sorted(serve_replicas.worker_url(lab, n) for n in NAMES)


def state_dir(lab: Lab) -> Path:
    return lab.dir / "console-state"


async def run(lab: Lab, request: DeployRequest, on_event: Callable[[StepEvent], None] | None = None, *,
              router_url: str | None = None, router_wait_s: float | None = None, canary_wait_s: float | None = None,
              drain_timeout_s: float | None = None) -> tuple[rollout.RolloutOutcome, list[StepEvent]]:
    """test_rollout's run, with the router's URL (a fault proxy's) and the agent's router patience."""
    def tweak(opts: rollout.RolloutOptions) -> None:
        if router_url is not None:
            opts.router = replace(opts.router, url=router_url)
        if router_wait_s is not None:
            opts.router_wait_s = router_wait_s

    def each(e: StepEvent, _abort: asyncio.Event) -> None:
        if on_event is not None:
            on_event(e)

    return await rollout_run(lab, request, on_event=each, canary_wait_s=canary_wait_s,
                             drain_timeout_s=drain_timeout_s, tweak=tweak)


def text(events: list[StepEvent]) -> str:
    """The events as lines (also left in $TMPDIR/rollout-faults-last.log to read after a failure)."""
    out = "\n".join(f"{e.at:.2f} {e.line()}" for e in events)
    with contextlib.suppress(OSError):
        Path(tempfile.gettempdir(), "rollout-faults-last.log").write_text(out)
    return out


def router_entries(lab: Lab) -> list[dict[str, Any]]:
    """The router's worker entries (empty while it does not answer)."""
    try:
        with urllib.request.urlopen(serve_replicas.router_url(lab) + "/workers", timeout=2) as r:
            return list(json.loads(r.read())["workers"])
    except (OSError, ValueError, KeyError):
        return []


def restart_router_while_held(lab: Lab, seen: dict[str, Any]) -> Callable[[StepEvent], None]:
    """An ``on_event`` that restarts the router (same port, same command line) when the console begins the
    canary's gate, the agent holding it out; the console waits here while the agent on the host goes on
    alone (as under a slow gate). ``seen``: whether the two others came back, and in how many of 120
    samples over 6 s the router listed the canary healthy (an unhealthy entry gets no requests)."""
    serve = serve_replicas.worker_url(lab, "serve")

    def on_event(e: StepEvent) -> None:
        if e.host == "serve" and e.kind == "step" and e.step == "gate" and "restarted" not in seen:
            seen["restarted"] = serve_replicas.restart_router(lab, down_s=1.0)
            seen["others back"] = bool(wait_for(lambda: len(in_router(lab)) >= 2, 30, step=0.05))
            listed, end = 0, time.monotonic() + 6
            while time.monotonic() < end:
                listed += any(w.get("url") == serve and w.get("is_healthy", True) for w in router_entries(lab))
                time.sleep(0.05)
            seen["listed samples"] = listed

    return on_event


def settled(lab: Lab) -> None:
    """Every replica listed by the router once, healthy (each test also checks what each one serves)."""
    def healthy() -> list[str]:
        return sorted(str(w.get("url")) for w in router_entries(lab) if w.get("is_healthy", True))

    assert wait_for(lambda: healthy() == all_urls(lab), 30, step=0.2), router_entries(lab)


# ------------------------------------------------------------------------------------------ router faults

async def test_router_restarted_while_the_canary_is_held_keeps_it_out_and_ends_in_the_router(fleet: Lab) -> None:
    """The router restarts (same port, same command line) while the canary is held out for the gate: the
    restarted router re-adds every worker on its command line that answers /health, the held canary
    too; its agent says the router went and came back and takes the canary out again at once."""
    before = windows(fleet)
    serve = serve_replicas.worker_url(fleet, "serve")
    seen: dict[str, Any] = {}
    on_event = restart_router_while_held(fleet, seen)
    out, events = await run(fleet, DeployRequest(draft_window=before["serve"] + 8, health_timeout_s=60), on_event,
                            drain_timeout_s=60)
    lines = text(events)
    assert seen.get("others back"), (seen, lines)
    figure(f"router restarted while held: canary listed healthy in {seen['listed samples']} of 120 samples over 6s")
    assert seen["listed samples"] <= 30, seen   # <= 1.5 s of the 6 s: the guard reads the router every second
    assert out.ok, lines
    mine = [e for e in events if e.host == "serve"]
    assert any("stopped answering GET /workers" in e.message for e in mine), lines
    assert any("answers again" in e.message for e in mine), lines
    # the restarted router had re-added it (under a new worker id), and the guard took it out again
    again = [e for e in mine if "again while it is out" in e.message and serve in e.message]
    assert again, lines
    deletes = [e.message for e in mine if e.kind == "command" and e.message.startswith("DELETE ")]
    assert len(deletes) >= 2 and len(set(deletes)) == len(deletes), deletes
    assert [r.state for r in out.replicas] == ["promoted"] * 3
    assert set(windows(fleet).values()) == {before["serve"] + 8}
    settled(fleet)


async def test_a_worker_the_router_already_dropped_is_said_and_put_back(fleet: Lab) -> None:
    before = windows(fleet)
    serve2 = serve_replicas.worker_url(fleet, "serve2")
    dropped: list[bool] = []

    def on_event(e: StepEvent) -> None:
        if e.host == "serve" and e.kind == "step" and e.step == "gate" and not dropped:
            with urllib.request.urlopen(serve_replicas.router_url(fleet) + "/workers", timeout=5) as r:
                wid = next(w["id"] for w in json.loads(r.read())["workers"] if w["url"] == serve2)
            req = urllib.request.Request(f"{serve_replicas.router_url(fleet)}/workers/{wid}", method="DELETE")
            urllib.request.urlopen(req, timeout=5).close()
            dropped.append(bool(wait_for(lambda: serve2 not in in_router(fleet), 15, step=0.1)))

    out, events = await run(fleet, DeployRequest(draft_window=before["serve"] + 8, health_timeout_s=60), on_event)
    lines = text(events)
    assert dropped == [True]
    assert out.ok, lines
    assert any(e.host == "serve2" and e.kind == "warning" and "does not list" in e.message
               and "dropped it already" in e.message for e in events), lines
    assert set(windows(fleet).values()) == {before["serve"] + 8}
    settled(fleet)


async def test_workers_answering_503_for_a_while_is_retried_and_the_rollout_goes_on(fleet: Lab) -> None:
    before = windows(fleet)
    armed: list[bool] = []
    with RouterProxy(serve_replicas.router_url(fleet)) as proxy:
        def on_event(e: StepEvent) -> None:
            if e.host == "serve2" and e.kind == "step" and e.step == "preflight" and not armed:
                armed.append(True)
                proxy.fail_next(503, 3)  # serve2's first GET /workers and two of its retries

        out, events = await run(fleet, DeployRequest(draft_window=before["serve"] + 8, health_timeout_s=60), on_event,
                                router_url=proxy.url)
    lines = text(events)
    assert any(status == 503 for _, _, status in proxy.seen)
    assert out.ok, lines
    assert any(e.host == "serve2" and e.kind == "warning" and "answered GET /workers with HTTP 503" in e.message
               for e in events), lines
    assert any(e.host == "serve2" and "answers GET /workers again" in e.message for e in events), lines
    assert set(windows(fleet).values()) == {before["serve"] + 8}
    settled(fleet)


async def test_workers_answering_503_for_good_halts_with_one_line_and_rolls_the_canary_back(fleet: Lab) -> None:
    """Persistent 503 from the second replica on: its agent changes nothing (one line says why), the rollout
    halts and rolls the promoted canary back once the router answers again."""
    before = windows(fleet)
    with RouterProxy(serve_replicas.router_url(fleet)) as proxy:
        def on_event(e: StepEvent) -> None:
            if e.host == "serve2" and e.kind == "step" and e.step == "preflight":
                proxy.fail_workers = 503
            if e.step == "halt" and e.kind == "step":
                proxy.fail_workers = None

        out, events = await run(fleet, DeployRequest(draft_window=before["serve"] + 8, health_timeout_s=60), on_event,
                                router_url=proxy.url, router_wait_s=2.0)
    lines = text(events)
    assert not out.ok
    assert "HTTP 503" in out.message and "nothing was changed" in out.message, out.message
    assert [r.state for r in out.replicas] == ["rolled back", "failed", "untouched"], lines
    assert not out.replicas[1].changed
    after = windows(fleet)
    assert after == before
    settled(fleet)


# ------------------------------------------------------------------------------------------ SSH drops

def _said_within(events: list[StepEvent], host: str, at: float) -> float:
    said = next(e.at for e in events if e.host == host and e.kind == "warning" and e.at >= at
                and ("dropped" in e.message or "lost the connection" in e.message))
    back = next((e.at for e in events if e.host == host and e.at >= at and "is back" in e.message), None)
    figure(f"SSH drop of {host}: said after {said - at:.2f}s, reconnected after "
           f"{back - at if back is not None else float('nan'):.2f}s")
    return said - at


def figure(line: str) -> None:
    """A measured figure, appended to $TMPDIR/rollout-faults-figures.txt (the report's numbers)."""
    with contextlib.suppress(OSError), open(Path(tempfile.gettempdir(), "rollout-faults-figures.txt"), "a") as f:
        f.write(f"{time.strftime('%H:%M:%S')} {line}\n")


async def test_ssh_drop_of_the_replica_being_drained_is_said_and_the_rollout_ends_all_promoted(fleet: Lab) -> None:
    before = windows(fleet)
    kills: list[tuple[float, int]] = []

    def on_event(e: StepEvent) -> None:
        if e.host == "serve2" and e.kind == "step" and e.step == "drain" and not kills:
            t = time.time()
            kills.append((t, drop_sessions(fleet, "serve2")))

    with RouterLoad(serve_replicas.router_url(fleet), concurrency=2) as load:
        out, events = await run(fleet, DeployRequest(draft_window=before["serve"] + 8, health_timeout_s=60), on_event)
        stats = load.stop()
    lines = text(events)
    assert kills and kills[0][1] > 0, kills
    assert _said_within(events, "serve2", kills[0][0]) <= 1.0, lines
    assert any(e.host == "serve2" and "SSH connection to serve2 is back" in e.message for e in events), lines
    assert any(e.host == "serve2" and "re-attaching" in e.message for e in events), lines
    assert out.ok, lines
    assert stats.failed == 0, stats.line()
    assert set(windows(fleet).values()) == {before["serve"] + 8}
    settled(fleet)


async def test_ssh_drop_of_the_canary_during_its_wait_is_said_and_the_wait_reads_it_again(fleet: Lab) -> None:
    before = windows(fleet)
    kills: list[float] = []

    def on_event(e: StepEvent) -> None:
        if e.step == "canary wait" and e.kind == "heartbeat" and not kills:
            kills.append(time.time())
            assert drop_sessions(fleet, "serve") > 0

    out, events = await run(fleet, DeployRequest(draft_window=before["serve"] + 8, health_timeout_s=60), on_event,
                            canary_wait_s=6.0)
    lines = text(events)
    assert kills
    assert _said_within(events, "serve", kills[0]) <= 1.0, lines
    assert any(e.host == "serve" and "SSH connection to serve is back" in e.message for e in events), lines
    beats = [e for e in events if e.step == "canary wait" and e.kind == "heartbeat" and e.at > kills[0]]
    assert any("tok/s" in b.message and "/metrics:" not in b.message for b in beats), lines  # read again after
    assert out.ok, lines
    assert set(windows(fleet).values()) == {before["serve"] + 8}
    settled(fleet)


# ------------------------------------------------------------------------------------------ console kill -9

def _deploy(lab: Lab, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "specconsole", "deploy", "--config", str(lab.config_path),
                             "--yes", "--json", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _kill_at(proc: subprocess.Popen[str], hit: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        ev = json.loads(line)
        seen.append(ev)
        if hit(ev):
            proc.kill()
            break
    proc.wait(10)
    assert proc.returncode == -signal.SIGKILL, seen[-5:]
    return seen


def _events(proc: subprocess.Popen[str], timeout: float = 300) -> tuple[int, list[dict[str, Any]], str]:
    out, err = proc.communicate(timeout=timeout)
    events = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    with contextlib.suppress(OSError):
        Path(tempfile.gettempdir(), "rollout-faults-last.log").write_text(
            "\n".join(f"{e['host']} {e['step']}: {e['kind']}: {e['message']}" for e in events) + "\n" + err)
    return proc.returncode, events, err


def test_console_killed_while_the_canary_is_held_resume_finishes_it(fleet: Lab) -> None:
    """kill -9 while the canary is held for the gate: the agent keeps its deploy lock through the hold (no
    other deploy can start), puts the canary back after the drain timeout on the new config, unjudged;
    ``status`` names the unfinished rollout; ``deploy --resume`` follows what is left, gates the canary
    now and rolls the rest out: all three on the new config, in the router."""
    before = windows(fleet)
    new = before["serve"] + 8
    proc = _deploy(fleet, "--hosts", "serve*", "--draft-window", str(new), "--drain-timeout", "8")
    _kill_at(proc, lambda ev: ev["host"] == "serve" and ev["step"] == "gate")
    # the lock gap: during the hold the lock is still the agent's (it was released before the hold before)
    lock = serve_replicas.unit_path(fleet, "serve").parent / "sglang.service.d" / ".specconsole" / "deploy.lock"
    held = json.loads(lock.read_text()) if lock.exists() else {}
    assert held.get("pid") and Path(f"/proc/{held['pid']}").exists(), (lock, held)
    assert serve_replicas.worker_url(fleet, "serve") not in in_router(fleet)
    journal, = unfinished(state_dir(fleet))
    assert [(r.name, r.state, r.changed) for r in journal.replicas] == [
        ("serve", "gating", True), ("serve2", "waiting", False), ("serve3", "waiting", False)]
    assert journal.replicas[0].workdir and journal.baseline
    status = subprocess.run([sys.executable, "-m", "specconsole", "status", "--config", str(fleet.config_path)],
                            capture_output=True, text=True, timeout=120)
    assert f"rollout {journal.id}" in status.stdout and "serve: gating (new config)" in status.stdout, status.stdout
    assert f"deploy --resume {journal.id}" in status.stdout
    # no verdict came: the agent puts it back as it is after the drain timeout (then resumed: gated then)
    assert wait_for(lambda: serve_replicas.worker_url(fleet, "serve") in in_router(fleet), 30, step=0.2)
    rc, events, err = _events(_deploy(fleet, "--resume"))
    lines = "\n".join(f"{e['host']} {e['step']}: {e['message']}" for e in events)
    assert rc == 0, (err, lines)
    assert any(e["host"] == "serve" and "not judged" in e["message"] for e in events), lines
    assert any(e["host"] == "serve" and e["step"] == "gate" and e["kind"] == "step" for e in events), lines
    assert windows(fleet) == dict.fromkeys(NAMES, new)
    done = Journal.load(journal.path)
    assert done.ended and done.ended["ok"] and not unfinished(state_dir(fleet))
    settled(fleet)


def test_console_killed_while_the_canary_is_held_resume_gates_it_while_still_held(fleet: Lab) -> None:
    """A resume within the drain timeout finds the canary still held: it gates it and gives the agent the
    verdict the dead console never wrote, then rolls the rest out."""
    before = windows(fleet)
    new = before["serve"] + 8
    proc = _deploy(fleet, "--hosts", "serve*", "--draft-window", str(new), "--drain-timeout", "60")
    _kill_at(proc, lambda ev: ev["host"] == "serve" and ev["step"] == "gate")
    rc, events, err = _events(_deploy(fleet, "--resume"))
    lines = "\n".join(f"{e['host']} {e['step']}: {e['message']}" for e in events)
    assert rc == 0, (err, lines)
    assert any(e["host"] == "serve" and e["step"] == "verdict" and "telling the agent on serve: promote"
               in e["message"] for e in events), lines
    assert not any("not judged" in e["message"] for e in events), lines
    assert windows(fleet) == dict.fromkeys(NAMES, new)
    settled(fleet)


def test_console_killed_while_the_second_replica_deploys_resume_undo_rolls_both_back(fleet: Lab) -> None:
    """Undo: the second replica's agent, still holding it for a verdict, is told to roll back (it restores on
    its own); the promoted canary is rolled back by an agent run; the third was never touched."""
    before = windows(fleet)
    proc = _deploy(fleet, "--hosts", "serve*", "--draft-window", str(before["serve"] + 8), "--drain-timeout", "60")
    _kill_at(proc, lambda ev: ev["host"] == "serve2" and ev["step"] == "restart")
    journal, = unfinished(state_dir(fleet))
    assert [r.state for r in journal.replicas] == ["promoted", "deploying", "waiting"]
    rc, events, err = _events(_deploy(fleet, "--resume", journal.id, "--undo"))
    lines = "\n".join(f"{e['host']} {e['step']}: {e['message']}" for e in events)
    assert rc == 0, (err, lines)
    assert any(e["host"] == "serve2" and "telling the agent on serve2: rollback" in e["message"] for e in events), lines
    rolled = {e["host"] for e in events if e["step"] == "roll back" and e["kind"] == "step"}
    assert rolled == {"serve", "serve2"}, lines
    assert windows(fleet) == before
    assert not [e for e in events if e["host"] == "serve3" and e["kind"] == "command"]
    settled(fleet)


def test_resume_with_nothing_to_resume_is_one_line(fleet: Lab) -> None:
    res = subprocess.run([sys.executable, "-m", "specconsole", "deploy", "--config", str(fleet.config_path), "--resume",
                          "--yes"], capture_output=True, text=True, timeout=60)
    err = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(err) == 1 and "no unfinished rollout" in err[0], res.stderr
