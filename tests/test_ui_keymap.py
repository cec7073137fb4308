"""``[keys]`` remaps through Textual's own keymap (binding ids = the registry's action ids)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import sample_data as sd
from conftest import wait_for
from specconsole.ui.console.app import ConsoleApp
from specconsole.ui.screens.help import HelpScreen
from specconsole.ui.style.themes import BUNDLED_DIR, load_themes

pytestmark = pytest.mark.timeout(90)


def remapped(tmp_path: Path, keys: dict[str, str], read_only: bool = False) -> ConsoleApp:
    now = sd.FROZEN_NOW
    config = dataclasses.replace(sd.sample_config(str(tmp_path / "state")), keys=keys)
    return ConsoleApp(config, fleet=sd.sample_fleet(now), clock=lambda: now, read_only=read_only,
                      themes=load_themes([BUNDLED_DIR]))


async def test_a_remapped_key_runs_the_action_and_the_old_key_does_not(tmp_path: Path) -> None:
    app = remapped(tmp_path, {"help": "h", "cycle_theme": "ctrl+t"})
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app._keymap == {"help": "h", "cycle_theme": "ctrl+t"}
        await pilot.press("question_mark")
        await pilot.pause()  # the key handled: nothing opens
        assert not isinstance(app.screen, HelpScreen)
        footer = app.screen_text().splitlines()[-1]
        assert "h Help" in footer and "? Help" not in footer and "^t Theme" in footer, footer
        theme = app.theme
        await pilot.press("t")
        await pilot.pause()
        assert app.theme == theme
        await pilot.press("ctrl+t")
        await wait_for(lambda: app.theme != theme, 10, what="ctrl+t to change the theme", pilot=pilot)
        await pilot.press("h")
        await wait_for(lambda: isinstance(app.screen, HelpScreen), 10, what="h to open the help screen", pilot=pilot)
        assert "h " in app.screen_text()


async def test_a_remapped_key_takes_another_actions_default_key(tmp_path: Path) -> None:
    """``refresh = "t"``: t refreshes, and the theme action it displaced has no key (a warning says so)."""
    app = remapped(tmp_path, {"refresh": "t"})
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app.key_plan.key_of("cycle_theme") is None
        theme, refreshes = app.theme, app.console_screen.redraws
        await pilot.press("t")
        await wait_for(lambda: app.console_screen.redraws > refreshes, 10, what="t to refresh", pilot=pilot)
        assert app.theme == theme
        assert any("cycle_theme: its key t is now refresh's" in w for w in app.key_plan.warnings)
