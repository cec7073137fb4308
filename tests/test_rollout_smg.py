"""The rollout behind SGLang's current gateway, SMG (PyPI ``smg``; ``lab up --serve 3 --router smg``), the
same way as behind sglang-router 0.3.2 (tests/test_rollout.py, tests/test_rollout_faults.py): out of the
router, drained, deployed, gated, back in, under load with no failed request; and kept out of a
restarted gateway while the canary is held."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import running_lab
from specconsole.actions.deploy.preflight import DeployRequest
from specconsole.lab.parts import serve_replicas
from specconsole.lab.parts.environment import Lab, LabOptions
from specconsole.lab.testing.router_load import RouterLoad
from test_rollout_faults import NAMES, _ready, all_urls, restart_router_while_held, run, settled, text, windows

pytestmark = pytest.mark.xdist_group("rollout-smg-lab")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, lab_parts: None) -> Iterator[Lab]:
    yield from running_lab(tmp_path_factory.mktemp("rollout-smg") / "lab",
                           LabOptions(trainer=False, serve=3, sglang_startup_s=1.0, sglang_load_rps=0,
                                      sglang_step_ms=2.0, router="smg"), _ready)


def workers(lab: Lab) -> list[dict[str, Any]]:
    with urllib.request.urlopen(serve_replicas.router_url(lab) + "/workers", timeout=5) as r:
        return list(json.loads(r.read())["workers"])


def test_the_lab_runs_smg_and_it_speaks_the_worker_api(gateway: Lab) -> None:
    """What the rollout relies on, asked of the real gateway: GET /workers lists id/url/is_healthy; POST
    /workers answers 202 with a worker_id (queued); a URL listed already is refused (409)."""
    title = Path(f"/proc/{gateway.state.router_pid}/cmdline").read_text()  # retitled by the router itself
    assert title.startswith("smg::router"), title   # sglang-router 0.3.2 calls itself sglang::router
    listed = workers(gateway)
    assert sorted(w["url"] for w in listed) == all_urls(gateway)
    assert all(w["id"] and w["is_healthy"] is True for w in listed)
    req = urllib.request.Request(serve_replicas.router_url(gateway) + "/workers", method="POST",
                                 data=json.dumps({"url": listed[0]["url"]}).encode(),
                                 headers={"content-type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=5)
    assert err.value.code == 409


async def test_rollout_behind_smg_promotes_all_three_under_load(gateway: Lab) -> None:
    before = windows(gateway)
    with RouterLoad(serve_replicas.router_url(gateway), concurrency=3) as load:
        out, events = await run(gateway, DeployRequest(draft_window=before["serve"] + 8, health_timeout_s=60))
        stats = load.stop()
    lines = text(events)
    assert out.ok, lines
    assert stats.sent > 50 and stats.failed == 0, stats.line()
    assert windows(gateway) == dict.fromkeys(NAMES, before["serve"] + 8)
    for name in NAMES:
        steps = [e.step for e in events if e.host == name and e.kind == "step"]
        for step in ("leave the router", "drain", "restart", "gate", "hold", "rejoin the router"):
            assert step in steps, (name, step)
    # smg answers the removal with 202 (queued) and the addition with 202 and a worker_id
    assert any(e.kind == "result" and e.message.startswith("HTTP 202") and "worker_id" in e.message
               and e.step == "rejoin the router" for e in events), lines
    settled(gateway)


async def test_smg_restarted_while_the_canary_is_held_keeps_it_out(gateway: Lab) -> None:
    before = windows(gateway)
    seen: dict[str, Any] = {}
    on_event = restart_router_while_held(gateway, seen)
    out, events = await run(gateway, DeployRequest(draft_window=before["serve"] + 8, health_timeout_s=60), on_event,
                            drain_timeout_s=60)
    lines = text(events)
    assert seen.get("others back"), (seen, lines)
    assert seen["listed samples"] <= 30, seen
    assert out.ok, lines
    assert any(e.host == "serve" and "again while it is out" in e.message for e in events), lines
    assert windows(gateway) == dict.fromkeys(NAMES, before["serve"] + 8)
    settled(gateway)
