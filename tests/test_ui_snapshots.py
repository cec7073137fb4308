"""SVG snapshots pinning the console's layout at 80x24, 120x40 (a host down) and 160x48.

Live values change on every run, so these draw a fixed state: HostStatus objects built from the
real source dataclasses (specconsole.ui.sample_data), a frozen clock, seeded histories, UTC.
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

from specconsole.hosts import ConnState
from specconsole.ui import sample_data as sd
from specconsole.ui.app import ConsoleApp
from specconsole.ui.themes import BUNDLED_DIR, load_themes

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
    now = sd.FROZEN_NOW
    app = ConsoleApp(sd.sample_config(str(tmp_path / "state")), fleet=sd.sample_fleet(now, **kwargs),
                     clock=lambda: now, themes=load_themes([BUNDLED_DIR]))
    sd.seed_history(app.history, now)
    return app


async def settle(pilot: Pilot[Any]) -> None:
    app: ConsoleApp = pilot.app  # type: ignore[assignment]
    await pilot.pause()
    app.refresh_panes()
    await pilot.pause()
    await pilot.wait_for_scheduled_animations()


def test_layout_80x24(snap_compare: Any, tmp_path: Path) -> None:
    assert snap_compare(frozen_app(tmp_path), terminal_size=(80, 24), run_before=settle)


def test_layout_160x48(snap_compare: Any, tmp_path: Path) -> None:
    assert snap_compare(frozen_app(tmp_path), terminal_size=(160, 48), run_before=settle)


def test_layout_120x40_host_down(snap_compare: Any, tmp_path: Path) -> None:
    assert snap_compare(frozen_app(tmp_path, train_state=ConnState.DOWN), terminal_size=(120, 40),
                        run_before=settle)


def test_help_screen_80x24(snap_compare: Any, tmp_path: Path) -> None:
    async def open_help(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        await pilot.press("question_mark")
        await pilot.pause()

    assert snap_compare(frozen_app(tmp_path), terminal_size=(80, 24), run_before=open_help)
