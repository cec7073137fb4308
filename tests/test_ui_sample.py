"""The console on sample data (tests/sample_data.py: no host behind it, a frozen clock): the layout at
80x24 and 160x48, the help screen and the palette, read-only gating of keys and bindings, themes.
What needs real hosts (panes filled with real values, reconnects, actions) is in test_ui_live.py and
the other lab tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import sample_data as sd
from conftest import wait_for
from specconsole.ui.console.app import ConsoleApp
from specconsole.ui.console.command_palette import ActionsProvider
from specconsole.ui.panes.events_pane import EventsPane
from specconsole.ui.panes.host_pane import HostPane
from specconsole.ui.registry import BY_ID, REGISTRY, key_display
from specconsole.ui.screens.confirm import ConfirmScreen
from specconsole.ui.screens.help import HelpScreen
from specconsole.ui.style.themes import BUNDLED_DIR, load_themes

pytestmark = pytest.mark.timeout(90)


def sample_app(tmp_path: Path, console: dict[str, Any] | None = None, **kwargs: Any) -> ConsoleApp:
    """The console on the sample fleet, with this test's own state dir (and audit log in it)."""
    now = sd.FROZEN_NOW
    return ConsoleApp(sd.sample_config(str(tmp_path / "state"), **(console or {})), fleet=sd.sample_fleet(now),
                      clock=lambda: now, themes=load_themes([BUNDLED_DIR]), **kwargs)


def host_pane(app: ConsoleApp, name: str) -> HostPane:
    return app.query_one(f"#host-{name}", HostPane)


async def test_80x24_sums_up_both_hosts_side_by_side(tmp_path: Path) -> None:
    """80x24 (issue 21): each host's GPUs summed up in two lines, the two hosts side by side, so the
    eval pane fits on the first screen under them."""
    app = sample_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(lambda: len(host_pane(app, "serve").row_keys) == 2
                       and len(host_pane(app, "train").row_keys) == 8, 30, what="GPU rows", pilot=pilot)
        await wait_for(lambda: app.screen.has_class("-narrow") and app.screen.has_class("-short"), 10,
                       what="the narrow, short layout", pilot=pilot)
        await pilot.pause()
        train, serve = host_pane(app, "train"), host_pane(app, "serve")
        assert train.region.y == serve.region.y and train.region.x < serve.region.x  # side by side
        assert train.region.height <= 8 and not train.table.display  # a summary, not a row per GPU
        lines = app.screen_text().splitlines()
        assert len(lines) == 24 and all(len(line) <= 80 for line in lines)
        text = "\n".join(lines)
        assert "8× H200 · util" in text and "2× H200 · util" in text  # every GPU of both hosts counted
        assert "mem " in text and " kW" in text
        assert "? Help" in lines[-1] and "Quit" in lines[-1]
        assert "train ●" in lines[0] and "step " in lines[0]  # the summary bar
    app = sample_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(lambda: app.screen.has_class("-medium"), 10, what="the medium layout", pilot=pilot)
        await pilot.pause()
        train, serve = host_pane(app, "train"), host_pane(app, "serve")
        assert train.region.y == serve.region.y and train.region.x < serve.region.x  # side by side


async def test_help_screen_lists_every_binding(tmp_path: Path) -> None:
    app = sample_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()  # not read-only: the destructive actions' bindings are offered, each its flow
        offered = {b.binding.id: b.binding.action for b in app.screen.active_bindings.values()}
        assert offered["kill_training"] == "flow('kill_training')" and offered["deploy"] == "flow('deploy')"
        assert app.check_action("flow", ("kill_training",)) is True
        assert app.check_action("flow", ("help",)) is False  # flow() runs only an action's own flow
        await pilot.press("question_mark")
        await wait_for(lambda: isinstance(app.screen, HelpScreen), 30, what="the help screen", pilot=pilot)
        help_screen = app.screen
        assert isinstance(help_screen, HelpScreen)
        assert help_screen.rows == [s.id for s in REGISTRY]
        for spec in REGISTRY:  # the rows scroll (max-height): each one scrolled into view
            help_screen.query_one(f"#help-{spec.id}").scroll_visible(animate=False)
            await pilot.pause()
            text = app.screen_text()
            assert spec.help[:40] in text, spec.id
            assert key_display(spec.key) in text
        await pilot.press("escape")
        await wait_for(lambda: not isinstance(app.screen, HelpScreen), 30, what="help to close", pilot=pilot)
        # the command palette offers every action too
        provider = ActionsProvider(app.screen)
        hits = [hit async for hit in provider.discover()]
        listed = {str(h.display).split(" (")[0] for h in hits}
        assert listed == {s.description for s in REGISTRY if s.id != "command_palette"}


async def check_read_only(app: ConsoleApp) -> None:
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app.read_only
        offered = [b.binding for b in app.screen.active_bindings.values()]  # what Textual offers
        destructive = {s.id for s in REGISTRY if s.destructive}
        assert destructive == {"kill_training", "deploy", "deploy_checkpoint", "rollout"}
        assert not destructive & {b.id for b in offered}  # no binding of a destructive action (by its id)
        assert not [b.action for b in offered if b.action.startswith("flow")]  # and none runs a flow
        for spec_id in destructive:  # the action its binding would run is refused, also by its bare id
            spec = BY_ID[spec_id]
            assert spec.action == f"flow('{spec_id}')"
            assert app._check_action_state(spec.action, app) is False
            assert app.check_action("flow", (spec_id,)) is False and app.check_action(spec_id, ()) is False
        await wait_for(lambda: "Help" in app.screen_text().splitlines()[-1], 30, what="the footer", pilot=pilot)
        footer = app.screen_text().splitlines()[-1]
        assert "Kill training" not in footer and "Deploy" not in footer and "Help" in footer
        await pilot.press("k", "d")
        await pilot.pause()  # the keys handled: no dialog opens
        assert not isinstance(app.screen, ConfirmScreen)
        await wait_for(lambda: [line for line in app.query_one(EventsPane).lines if "removed in read-only mode" in line
                                and ("kill training: unavailable" in line or "deploy: unavailable" in line)], 10,
                       what="the keys' refusals in the events pane", pilot=pilot)
        said = [line for line in app.query_one(EventsPane).lines if "removed in read-only mode" in line]
        assert any("kill training: unavailable" in line for line in said)  # k says why, not nothing
        assert any("unavailable" in line and "deploy" in line.lower() for line in said), said
        app.trigger_action("kill_training")  # the palette path: refused with a reason
        await wait_for(lambda: any("kill training: unavailable: removed in read-only mode" in line
                                   for line in app.query_one(EventsPane).lines), 10,
                       what="the refusal in the events pane", pilot=pilot)
        provider = ActionsProvider(app.screen)
        listed = [str(h.display) async for h in provider.discover()]
        assert not any("Kill" in t or "Deploy" in t for t in listed)
        await pilot.press("question_mark")
        await wait_for(lambda: isinstance(app.screen, HelpScreen), 30, what="the help screen", pilot=pilot)
        assert "kill_training" not in app.screen.rows and "deploy" not in app.screen.rows
        assert "Read-only mode" in app.screen_text()


async def test_read_only_removes_destructive_bindings(tmp_path: Path) -> None:
    await check_read_only(sample_app(tmp_path, read_only=True))  # --read-only
    await check_read_only(sample_app(tmp_path, {"read_only": True}))  # read_only = true


async def test_theme_cycles_and_is_remembered(tmp_path: Path) -> None:
    app = sample_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app.theme == "dark"
        before = app.palette
        await pilot.press("t")
        await wait_for(lambda: app.theme == "light", 10, what="t to pick the light theme", pilot=pilot)
        assert app.palette != before
        await pilot.press("t")
        await wait_for(lambda: app.theme == "high-contrast", 10, what="t to pick the high-contrast theme",
                       pilot=pilot)
    state = json.loads((tmp_path / "state" / "console.json").read_text())
    assert state["theme"] == "high-contrast"
    app = sample_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app.theme == "high-contrast"  # remembered
    app = sample_app(tmp_path, theme="light")  # --theme picks, and is remembered too
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app.theme == "light"
    assert json.loads((tmp_path / "state" / "console.json").read_text())["theme"] == "light"
