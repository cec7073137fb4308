"""SVG snapshots pinning the console's layout at 80x24, 120x40 (a host down) and 160x48 with the eval
comparison (z-lab's published run and ours) on screen, and with an action running (the action
view) at 80x24, 120x40 and 200x50, the plan dialog and the wizard.

Live values change on every run, so these draw a fixed state: HostStatus objects built from the
real source dataclasses (tests/sample_data.py), a frozen clock, seeded histories, UTC.
Regenerate after an intended layout change with:
    .venv/bin/pytest tests/test_ui_snapshots.py --snapshot-update
and look at the SVGs under tests/__snapshots__/test_ui_snapshots/ before committing them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

import sample_data as sd
from specconsole.hosts import ConnState
from specconsole.ui.console.app import ConsoleApp

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    # the eval pane names its (empty) results folder: make it the same on every run
    monkeypatch.setenv("SPECCONSOLE_EVAL_RESULTS", "/nonexistent/specconsole-eval-results")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def frozen_app(tmp_path: Path, **kwargs: Any) -> ConsoleApp:
    return sd.frozen_console(str(tmp_path / "state"), **kwargs)


def comparison_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> ConsoleApp:
    """The frozen console with z-lab's published run and ours stored: the eval pane opens on their
    comparison (what issue 21 wants on the first screen at 80x24)."""
    monkeypatch.setenv("SPECCONSOLE_EVAL_RESULTS", str(sd.save_runs(tmp_path / "eval-results", sd.comparison_runs())))
    return frozen_app(tmp_path, **kwargs)


async def settle(pilot: Pilot[Any]) -> None:
    app: ConsoleApp = pilot.app  # type: ignore[assignment]
    await pilot.pause()
    app.refresh_panes()
    await pilot.pause()
    await pilot.wait_for_scheduled_animations()


def test_layout_80x24(snap_compare: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both hosts summed up side by side, then the comparison with its average row and ratio."""
    assert snap_compare(comparison_app(tmp_path, monkeypatch), terminal_size=(80, 24), run_before=settle)


def test_layout_160x48(snap_compare: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert snap_compare(comparison_app(tmp_path, monkeypatch), terminal_size=(160, 48), run_before=settle)


def test_layout_120x40_host_down(snap_compare: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert snap_compare(comparison_app(tmp_path, monkeypatch, train_state=ConnState.DOWN),
                        terminal_size=(120, 40), run_before=settle)


def test_layout_empty_eval_80x24(snap_compare: Any, tmp_path: Path) -> None:
    """No stored runs: the eval pane says where it looked and how to make one, in a short box."""
    assert snap_compare(frozen_app(tmp_path), terminal_size=(80, 24), run_before=settle)


def test_help_screen_80x24(snap_compare: Any, tmp_path: Path) -> None:
    async def open_help(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        await pilot.press("question_mark")
        await pilot.pause()

    assert snap_compare(frozen_app(tmp_path), terminal_size=(80, 24), run_before=open_help)


# ---------------------------------------------------------------- an action running (issue 10)

def action_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ConsoleApp:
    """The frozen console with stored eval runs and a deploy caught mid-restart in the action view."""
    monkeypatch.setenv("SPECCONSOLE_EVAL_RESULTS", str(sd.save_runs(tmp_path / "eval-results", sd.sample_runs())))
    return frozen_app(tmp_path)


async def deploy_running(pilot: Pilot[Any]) -> None:
    from specconsole.ui.flows.flows import serving_state

    app: ConsoleApp = pilot.app  # type: ignore[assignment]
    await settle(pilot)
    app.actions.open("deploy", "Deploy to serve", "serve", scroll_to="serving",
                    state=lambda: serving_state(app, "serve"))
    for event in sd.sample_deploy_events():
        app.actions.emit(event)
    await settle(pilot)
    app.clear_notifications()  # the "started" toast comes and goes with the timing: not in the picture
    await settle(pilot)


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 50)], ids=["80x24", "120x40", "200x50"])
def test_deploy_running(snap_compare: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                        size: tuple[int, int]) -> None:
    """The action view docked above the footer: each step with its command, outcome and elapsed time,
    the latest heartbeat, the host's state; the serving pane in view above it."""
    assert snap_compare(action_app(tmp_path, monkeypatch), terminal_size=size, run_before=deploy_running)


def test_plan_dialog_80x24(snap_compare: Any, tmp_path: Path) -> None:
    """The plan fits: flags current → new on one line, unchanged ones behind a count, buttons visible."""
    from specconsole.ui.screens.plan import PlanScreen

    async def open_plan(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        pilot.app.push_screen(PlanScreen(sd.sample_plan()))
        await pilot.pause()
        await pilot.wait_for_scheduled_animations()

    assert snap_compare(frozen_app(tmp_path), terminal_size=(80, 24), run_before=open_plan)


def test_deploy_form_error_in_place_80x24(snap_compare: Any, tmp_path: Path) -> None:
    """The wizard at 80x24: a bad window is marked beside its field and the form stays open."""
    from textual.widgets import Input

    from specconsole.ui.screens.deploy_form import DeployForm

    async def bad_window(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        pilot.app.push_screen(DeployForm({"algorithm": "DFLASH", "draft_window": "16", "block_size": "",
                                          "draft_model": "/models/dflash-qwen3-8b-b16"}))
        await pilot.pause()
        for field in pilot.app.screen.query(Input):
            field.cursor_blink = False  # a blinking cursor's phase depends on when the picture is taken
        pilot.app.screen.query_one("#deploy-draft_window", Input).value = "sixteen"
        await pilot.press("enter")
        await pilot.pause()
        await pilot.wait_for_scheduled_animations()

    assert snap_compare(frozen_app(tmp_path), terminal_size=(80, 24), run_before=bad_window)
