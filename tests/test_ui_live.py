"""The console driven by Textual's Pilot against the lab: real sshd hosts, nvidia-smi double,
torchrun job and SGLang simulator. Nothing here mocks a host or a source."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import wait_for
from specconsole.config import Config, load_config
from specconsole.lab.environment import Lab
from specconsole.ui.app import ConsoleApp
from specconsole.ui.palette import ActionsProvider
from specconsole.ui.panes import EventsPane, HostPane, ServingPane, SummaryBar, TrainingPane
from specconsole.ui.registry import REGISTRY, key_display
from specconsole.ui.screens import ConfirmScreen, HelpScreen
from specconsole.ui.themes import BUNDLED_DIR, load_themes

pytestmark = pytest.mark.timeout(120)


def lab_config(lab: Lab, tmp_path: Path, keys: dict[str, str] | None = None, **console: Any) -> Config:
    """The lab's config with this test's own state dir and audit log."""
    cfg = load_config(lab.config_path)
    settings = dataclasses.replace(cfg.console, state_dir=str(tmp_path / "state"),
                                   audit_log=str(tmp_path / "audit.log"), **console)
    return dataclasses.replace(cfg, console=settings, keys=keys if keys is not None else cfg.keys)


def make_app(config: Config, **kwargs: Any) -> ConsoleApp:
    return ConsoleApp(config, themes=load_themes([BUNDLED_DIR]), **kwargs)


def host_pane(app: ConsoleApp, name: str) -> HostPane:
    return app.query_one(f"#host-{name}", HostPane)


def serving_tokens_per_s(app: ConsoleApp) -> float | None:
    for s in app.fleet.statuses():
        if s.sglang is not None and s.sglang.value.metrics is not None:
            return s.sglang.value.metrics.tokens_per_s
    return None


def cell_texts(pane: HostPane) -> list[list[str]]:
    table = pane.table
    return [[c.plain for c in table.get_row(key)] for key in table.rows]


async def test_panes_fill_with_real_values_from_both_hosts(lab: Lab, tmp_path: Path) -> None:
    app = make_app(lab_config(lab, tmp_path))
    async with app.run_test(size=(160, 48)) as pilot:
        train, serve = host_pane(app, "train"), host_pane(app, "serve")
        await wait_for(lambda: len(train.row_keys) == 8 and len(serve.row_keys) == 2, 45,
                       what="GPU rows of both hosts", pilot=pilot)
        # stable row keys, one per GPU index, in index order
        assert train.row_keys == [f"gpu-{i}" for i in range(8)]
        assert [str(k.value) for k in train.table.rows] == [f"gpu-{i}" for i in range(8)]
        rows = cell_texts(train)
        assert [r[0] for r in rows] == [str(i) for i in range(8)]
        assert all(r[1] == "H200" and r[2].endswith("%") and "/140.4" in r[3] for r in rows)
        # the torchrun workers hold two of the training GPUs (the double follows the real processes)
        # ("…" is the pending cell before the compute-apps stream has answered: not a process)
        await wait_for(lambda: sum(r[6] not in ("-", "…") for r in cell_texts(train)) >= 1, 45,
                       what="a training process", pilot=pilot)

        training = app.query_one(TrainingPane)
        serving = app.query_one(ServingPane)
        await wait_for(lambda: re.search(r"step \[b\][0-9]", training.query_one(".body").text) is not None, 60,
                       what="a training step from the torchrun log", pilot=pilot)
        await wait_for(lambda: "healthy" in serving.query_one(".body").text, 45, what="SGLang healthy", pilot=pilot)
        await wait_for(lambda: serving_tokens_per_s(app) is not None, 45, what="SGLang tokens/s", pilot=pilot)
        await pilot.pause(1.2)  # one more refresh tick
        screen = app.screen_text()
        assert "● connected" in screen
        assert "gen " in screen and "tok/s" in screen
        assert "algorithm EAGLE" in screen  # the lab deploys NEXTN; SGLang reports it as EAGLE
        assert re.search(r"step [0-9,]+/[0-9,]+", screen)
        assert "ETA " in screen and "to 6 epochs" in screen
        assert "last log line" in screen
        assert "connected to root@127.0.0.2" in screen  # events pane
        assert not train.has_class("-stale") and not serve.has_class("-stale")
        # histories are per sample: the utilization plot gains a point with each new reading
        util = app.history.series("train", "util")
        first = len(util.values())
        assert first >= 1
        await wait_for(lambda: len(util.values()) >= first + 2, 10, what="two more utilization points",
                       pilot=pilot)
        summary = app.query_one(SummaryBar).render()
        assert "step " in str(summary)
        # the audit file receives the same events
        audit = [json.loads(line) for line in (tmp_path / "audit.log").read_text().splitlines()]
        assert any(e["message"].startswith("connected to") for e in audit)


async def test_80x24_sums_up_both_hosts_side_by_side(lab: Lab, tmp_path: Path) -> None:
    """80x24 (issue 21): each host's GPUs summed up in two lines, the two hosts side by side, so the
    eval pane fits on the first screen under them."""
    app = make_app(lab_config(lab, tmp_path))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(lambda: len(host_pane(app, "serve").row_keys) == 2
                       and len(host_pane(app, "train").row_keys) == 8, 45, what="GPU rows", pilot=pilot)
        await pilot.pause(0.3)
        assert app.screen.has_class("-narrow") and app.screen.has_class("-short")
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
    app = make_app(lab_config(lab, tmp_path))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.3)
        assert app.screen.has_class("-medium")
        train, serve = host_pane(app, "train"), host_pane(app, "serve")
        assert train.region.y == serve.region.y and train.region.x < serve.region.x  # side by side


async def test_help_screen_lists_every_binding(lab: Lab, tmp_path: Path) -> None:
    app = make_app(lab_config(lab, tmp_path))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        await wait_for(lambda: isinstance(app.screen, HelpScreen), 45, what="the help screen", pilot=pilot)
        help_screen = app.screen
        assert isinstance(help_screen, HelpScreen)
        assert help_screen.rows == [s.id for s in REGISTRY]
        text = app.screen_text()
        for spec in REGISTRY:
            assert spec.help[:40] in text, spec.id
            assert key_display(spec.key) in text
        await pilot.press("escape")
        await wait_for(lambda: not isinstance(app.screen, HelpScreen), 45, what="help to close", pilot=pilot)
        # the command palette offers every action too
        provider = ActionsProvider(app.screen)
        hits = [hit async for hit in provider.discover()]
        listed = {str(h.display).split(" (")[0] for h in hits}
        assert listed == {s.description for s in REGISTRY if s.id != "command_palette"}


async def check_read_only(app: ConsoleApp) -> None:
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.2)
        assert app.read_only
        bound = {b.binding.action for b in app.screen.active_bindings.values()}  # what Textual offers
        assert "kill_training" not in bound and "deploy" not in bound
        assert app.check_action("kill_training", ()) is False
        await wait_for(lambda: "Help" in app.screen_text().splitlines()[-1], 45, what="the footer", pilot=pilot)
        footer = app.screen_text().splitlines()[-1]
        assert "Kill training" not in footer and "Deploy" not in footer and "Help" in footer
        await pilot.press("k", "d")
        await pilot.pause(0.3)
        assert not isinstance(app.screen, ConfirmScreen)
        app.trigger_action("kill_training")  # the palette path: refused with a reason
        await pilot.pause(0.2)
        assert any("kill training: unavailable: removed in read-only mode" in line
                   for line in app.query_one(EventsPane).lines)
        provider = ActionsProvider(app.screen)
        listed = [str(h.display) async for h in provider.discover()]
        assert not any("Kill" in t or "Deploy" in t for t in listed)
        await pilot.press("question_mark")
        await wait_for(lambda: isinstance(app.screen, HelpScreen), 45, what="the help screen", pilot=pilot)
        assert "kill_training" not in app.screen.rows and "deploy" not in app.screen.rows
        assert "Read-only mode" in app.screen_text()


async def test_read_only_removes_destructive_bindings(lab: Lab, tmp_path: Path) -> None:
    await check_read_only(make_app(lab_config(lab, tmp_path), read_only=True))  # --read-only
    await check_read_only(make_app(lab_config(lab, tmp_path, read_only=True)))  # read_only = true


async def test_theme_cycles_and_is_remembered(lab: Lab, tmp_path: Path) -> None:
    config = lab_config(lab, tmp_path)
    app = make_app(config)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.2)
        assert app.theme == "dark"
        before = app.palette
        await pilot.press("t")
        await pilot.pause(0.2)
        assert app.theme == "light"
        assert app.palette != before
        await pilot.press("t")
        await pilot.pause(0.2)
        assert app.theme == "high-contrast"
    state = json.loads((tmp_path / "state" / "console.json").read_text())
    assert state["theme"] == "high-contrast"
    app = make_app(config)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.1)
        assert app.theme == "high-contrast"  # remembered
    app = make_app(config, theme="light")  # --theme picks, and is remembered too
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.1)
        assert app.theme == "light"
    assert json.loads((tmp_path / "state" / "console.json").read_text())["theme"] == "light"
