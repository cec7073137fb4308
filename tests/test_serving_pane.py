"""The serving pane on a fixed state (tests/sample_data.py, frozen clock): "hung" (the HTTP server
answers, the scheduler does not) is drawn as a badge with its reason, unlike "down"."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import sample_data as sd
from specconsole.base.freshness import Staleness
from specconsole.base.samples import Sample
from specconsole.monitor import HostStatus
from specconsole.sources.sglang import ServerState, SglangSnapshot
from specconsole.ui.console.app import ConsoleApp
from specconsole.ui.console.provider import FixedStatuses
from specconsole.ui.fleet.fleet_rows import DerivedCache, fleet_row
from specconsole.ui.fleet.summary_bar import SummaryBar
from specconsole.ui.panes.serving_pane import ServingPane
from specconsole.ui.style.themes import BUNDLED_DIR, load_themes
from specconsole.ui.widgets.text_block import TextBlock

pytestmark = pytest.mark.timeout(120)
NOW = sd.FROZEN_NOW
REASON = ("http://127.0.0.1:30000/health_generate did not answer within 10 s while /health answers 200 "
          "— the scheduler runs no requests (hung?)")


def with_sglang(state: ServerState, error: str | None) -> list[HostStatus]:
    train, serve = sd.sample_statuses(NOW)
    assert serve.sglang is not None
    info = serve.sglang.value.info
    snap = SglangSnapshot(state, None, error, info, None, at=NOW - 0.7)
    return [train, replace(serve, sglang=Sample(snap, at=NOW - 0.7, interval=13.0))]


async def serving_text(tmp_path: Path, statuses: list[HostStatus]) -> tuple[str, str]:
    app = ConsoleApp(sd.sample_config(str(tmp_path / "state")), fleet=FixedStatuses(statuses, sd.sample_events(NOW)),
                     clock=lambda: NOW, themes=load_themes([BUNDLED_DIR]))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        app.refresh_panes()
        await pilot.pause()
        body = app.query_one(ServingPane).query_one(".body", TextBlock).text
        summary = app.query_one(SummaryBar).text
    return body, summary


async def test_hung_is_a_badge_with_its_reason_and_down_is_not(tmp_path: Path) -> None:
    body, summary = await serving_text(tmp_path, with_sglang(ServerState.HUNG, REASON))
    first = body.splitlines()[0]
    assert first.startswith("[b reverse $error] hung [/] [$error]")
    assert REASON in first
    assert "algorithm [b]DFLASH[/]" in body  # the deployment stays shown
    assert "[$error]hung[/]" in summary
    body, _ = await serving_text(tmp_path, with_sglang(ServerState.DOWN, "nothing listening"))
    assert body.splitlines()[0].startswith("[b $error]down[/]")


def test_a_hung_server_is_a_problem_row_in_the_fleet_view() -> None:
    status = with_sglang(ServerState.HUNG, REASON)[1]
    row = fleet_row(status, None, NOW, Staleness(), DerivedCache())
    assert row.state == "sglang" and row.state_text.endswith("sglang")
    assert row.cell("sglang")[0] == "hung"
