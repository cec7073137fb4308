"""Opening the console with its hosts already connecting (ui/console/start.py): a host's news reaches
the screen at once even from a task started before the console (outside Textual's context), and no
host is connected for a console that cannot run."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
from pathlib import Path
from typing import Any

import pytest

import sample_data as sd
from conftest import wait_for
from specconsole.hosts.base import ConnState
from specconsole.ui.console import start
from specconsole.ui.console.app import ConsoleApp
from specconsole.ui.console.provider import FixedStatuses
from specconsole.ui.style.themes import BUNDLED_DIR, load_themes

pytestmark = pytest.mark.timeout(120)


async def test_news_from_a_task_started_before_the_console_is_drawn_within_the_coalescing(tmp_path: Path) -> None:
    """The redraw for a connection change is armed ~50 ms after it, not at the next tick (60 s here):
    the listener runs in a context with none of Textual's (as a host task started by start.py does)."""
    now = sd.FROZEN_NOW
    fleet = FixedStatuses(sd.sample_statuses(now, train_state=ConnState.RECONNECTING), sd.sample_events(now))
    config = dataclasses.replace(sd.sample_config(str(tmp_path / "state")))
    config = dataclasses.replace(config, console=dataclasses.replace(config.console, refresh_s=60.0))
    app = ConsoleApp(config, fleet=fleet, clock=lambda: now, themes=load_themes([BUNDLED_DIR]))
    async with app.run_test(size=(160, 48)) as pilot:
        def summary() -> str:
            return app.screen_text().splitlines()[0]

        await wait_for(lambda: "train ●" not in summary(), 10, what="the training host not connected", pilot=pilot)
        redraws = app.main_screen.redraws  # type: ignore[union-attr]
        outside = contextvars.Context()  # what a task made before the app had: no active app or pump
        asyncio.get_running_loop().call_soon(fleet.set, sd.sample_statuses(now), context=outside)
        await wait_for(lambda: "train ● 0.4s" in summary(), 5,
                       what="the reconnected host drawn without waiting for the 60 s tick", pilot=pilot)
        assert app.main_screen.redraws > redraws  # type: ignore[union-attr]


def test_a_console_without_a_terminal_connects_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[object] = []
    monkeypatch.setattr("specconsole.monitor.Fleet.__init__", lambda self, *a, **k: made.append(self))
    code = start.run_console(sd.sample_config(str(tmp_path / "state")), read_only=True, theme=None)
    assert code == 2 and made == []
    assert capsys.readouterr().err.strip() == start.NEEDS_TERMINAL


async def test_a_host_s_first_data_waits_for_the_frame_that_completes_every_host(tmp_path: Path) -> None:
    """Before the first full frame a host's first samples cost no redraw (and layout) of their own:
    the sample that completes every host's panes is drawn at once; a connection change still is
    within the coalescing."""
    now = sd.FROZEN_NOW
    full = sd.sample_statuses(now)
    train = full[0].training
    assert train is not None
    running = dataclasses.replace(train, value=dataclasses.replace(train.value, state="running"))
    full[0] = dataclasses.replace(full[0], training=running)  # the job's processes were checked
    assert all(s.complete for s in full)
    empty = [dataclasses.replace(s, gpu=None, sglang=None, training=None) for s in full]
    fleet = FixedStatuses(empty, sd.sample_events(now))
    config = sd.sample_config(str(tmp_path / "state"))
    config = dataclasses.replace(config, console=dataclasses.replace(config.console, refresh_s=1.0))
    app = ConsoleApp(config, fleet=fleet, clock=lambda: now, themes=load_themes([BUNDLED_DIR]))
    async with app.run_test(size=(160, 48)) as pilot:
        screen: Any = app.main_screen
        await pilot.pause()
        screen._redraw_timer.pause()  # no timed redraw: each redraw below is one a change asked for
        redraws = screen.redraws
        fleet._statuses = [full[0], empty[1]]  # the training host's data, the serving host's none
        screen.fleet_changed(full[0].name, "gpu")
        await asyncio.sleep(0.3)  # six times the coalescing
        await pilot.pause()
        assert screen.redraws == redraws and app.first_full_frame_at is None
        screen.fleet_changed(full[0].name, "connection")
        await wait_for(lambda: screen.redraws > redraws, 5, what="the connection change drawn", pilot=pilot)
        redraws = screen.redraws
        fleet._statuses = list(full)
        screen.fleet_changed(full[1].name, "sglang")
        await wait_for(lambda: app.first_full_frame_at is not None, 5, what="the full frame", pilot=pilot)
        assert screen.redraws == redraws + 1
