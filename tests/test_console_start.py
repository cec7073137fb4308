"""Opening the console with its hosts already connecting (ui/console/start.py): a host's news reaches
the screen at once even from a task started before the console (outside Textual's context), and no
host is connected for a console that cannot run."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
from pathlib import Path

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
