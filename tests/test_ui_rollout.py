"""The console's rollout parts (Pilot, no lab): m marks fleet rows; the action view shows one line
per replica during a rollout and 8 of them fit 80x24 (the lab tests in test_rollout.py run the rollout)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import sample_data as sd
from fleet_sample import fixed_fleet, fleet_config
from specconsole.actions.rollout.board import Board
from specconsole.actions.rollout.gate import Figures
from specconsole.actions.rollout.run import Replica
from specconsole.steps import StepEvent
from specconsole.ui.console.app import ConsoleApp
from specconsole.ui.fleet.fleet_view import FleetTable
from specconsole.ui.panes.action_view import ActionPanel
from specconsole.ui.style.themes import BUNDLED_DIR, load_themes

pytestmark = pytest.mark.timeout(90)
NOW = sd.FROZEN_NOW


def app_of(tmp_path: Path, n: int) -> ConsoleApp:
    return ConsoleApp(fleet_config(n, str(tmp_path / "state")), fleet=fixed_fleet(n, NOW), clock=lambda: NOW,
                      themes=load_themes([BUNDLED_DIR]))


def open_board(app: ConsoleApp, n: int) -> tuple[list[Replica], ActionPanel, Board]:
    """The action view of a rollout to the first ``n`` serving hosts, with its board (baseline 5.10, 437 tok/s)."""
    serve = [h for h in app.actions.config.serve_hosts][:n]
    replicas = [Replica(c, host=None) for c in serve]  # type: ignore[arg-type]
    panel = app.actions.open("rollout", f"Roll out to {n} replicas", serve[0].name)
    board = Board(replicas, Figures(5.10, 437.0, 3, 357))
    panel.board = board
    return replicas, panel, board


async def test_m_marks_and_unmarks_fleet_rows(tmp_path: Path) -> None:
    app = app_of(tmp_path, 12)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        table = app.query_one(FleetTable)
        first = table.cursor_host
        await pilot.press("m", "down", "m")
        await pilot.pause()
        second = table.cursor_host
        assert first and second and app.actions.marked_hosts() == {first, second}
        assert f"✓{first}" in app.screen_text() and f"✓{second}" in app.screen_text()
        await pilot.press("m")
        await pilot.pause()
        assert app.actions.marked_hosts() == {first}


async def test_eight_replicas_one_line_each_at_80x24(tmp_path: Path) -> None:
    app = app_of(tmp_path, 16)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        replicas, panel, _ = open_board(app, 8)
        app.screen.heartbeats_wait = False  # drawn as they come (as with refresh_s > 1 s): the clock is theirs
        at = NOW
        app.actions.emit(StepEvent("rollout", "step", "measuring the gate's 3 prompts", step="baseline", at=at))
        replicas[0].state, replicas[0].figures = "promoted", Figures(5.25, 449.6, 3, 357)
        replicas[1].state = "deploying"
        for i, r in enumerate(replicas[:2]):
            app.actions.emit(StepEvent("rollout", "step", "restarting", step="restart", host=r.name, at=at + i))
            app.actions.emit(StepEvent("rollout", "heartbeat", "`systemctl restart -- sglang.service` running for 1.0s",
                                       step="restart", host=r.name, at=at + i + 1))
        await pilot.pause()
        assert panel.display and not (panel.track and panel.track.finished)
        screen = app.screen_text()
        for r in replicas:
            assert r.name in screen, r.name
        assert "promoted" in screen and "acc 5.25/5.10 450/437 tok/s" in screen
        assert "deploying" in screen and screen.count("waiting") == 6
        assert "Roll out to 8 replicas · running 2.0s · baseline" in screen
        assert "serve-001 promoted    restart             2.0s  acc 5.25/5.10 450/437 tok/s" in screen
        region = app.query_one(ActionPanel).region
        assert region.y + region.height <= 23 and region.width == 80


async def test_a_replica_done_is_its_board_line_not_a_toast_the_rollout_s_end_is(tmp_path: Path) -> None:
    """At 80x24 a "Roll out ...: done" toast after each promoted replica covered the board's gate
    figures while the rollout went on (seen in tmux on the demo with --serve 3)."""
    app = app_of(tmp_path, 4)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        replicas, panel, _ = open_board(app, 2)
        replicas[0].state = "promoted"
        app.actions.emit(StepEvent("rollout", "done", f"{replicas[0].name} promoted: draft_window=32",
                                   host=replicas[0].name, at=NOW))
        await pilot.pause()

        def ends() -> list[str]:
            return [n.title for n in app._notifications if n.title.endswith((": done", ": FAILED"))]

        assert ends() == []
        assert panel.track is not None and not panel.track.finished
        app.actions.emit(StepEvent("rollout", "done", "rollout promoted on all 2 replicas", at=NOW + 1))
        await pilot.pause()
        assert ends() == ["Roll out to 2 replicas: done"]
        assert panel.track.finished


async def test_the_fleet_view_names_the_rollout_keys_when_a_router_is_configured(tmp_path: Path) -> None:
    """Without it, m and R (not in the footer) were found only through the help screen."""
    from specconsole.config import RouterConfig
    from specconsole.ui.fleet.fleet_view import FleetView

    config = fleet_config(4, str(tmp_path / "state"))
    assert config.router is None
    plain = ConsoleApp(config, fleet=fixed_fleet(4, NOW), clock=lambda: NOW, themes=load_themes([BUNDLED_DIR]))
    async with plain.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert "roll out" not in str(plain.query_one(FleetView).border_subtitle)
    routed = replace(config, router=RouterConfig(url="http://127.0.0.1:1"))
    for read_only, hint in ((False, True), (True, False)):
        app = ConsoleApp(routed, fleet=fixed_fleet(4, NOW), clock=lambda: NOW, themes=load_themes([BUNDLED_DIR]),
                         read_only=read_only)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            subtitle = str(app.query_one(FleetView).border_subtitle)
            assert (" · m mark · R roll out" in subtitle) is hint, (read_only, subtitle)
            if hint:
                await pilot.press("f")
                await pilot.pause()
                assert "f host panes · m mark · R roll out" in app.screen_text()
