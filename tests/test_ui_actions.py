"""k and d in the console: confirm dialogs with Cancel focused, then the real actions on a lab of
the test's own (real torchrun job, real systemctl + SGLang simulator), steps in the events pane."""

from __future__ import annotations

import dataclasses
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Button, Input, Select, Static

from conftest import click, running_lab, wait_for
from specconsole.config import load_config
from specconsole.lab.parts.environment import Lab, LabOptions
from specconsole.ui.console.app import ConsoleApp
from specconsole.ui.panes.action_view import ActionPanel
from specconsole.ui.panes.events_pane import EventsPane
from specconsole.ui.screens.confirm import ConfirmScreen
from specconsole.ui.screens.deploy_form import DeployForm
from specconsole.ui.screens.plan import PlanScreen
from specconsole.ui.style.themes import BUNDLED_DIR, load_themes

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def action_lab(tmp_path: Path, lab_parts: None) -> Iterator[Lab]:
    options = LabOptions(trainer_step_seconds=0.3, sglang_startup_s=1.0, sglang_load_rps=1,
                         gpu_interval_s=0.5, sglang_interval_s=0.5)
    yield from running_lab(tmp_path / "lab", options)


def make_app(lab: Lab, tmp_path: Path) -> ConsoleApp:
    cfg = load_config(lab.config_path)
    cfg = dataclasses.replace(cfg, console=dataclasses.replace(
        cfg.console, state_dir=str(tmp_path / "state"), audit_log=str(tmp_path / "audit.log")))
    return ConsoleApp(cfg, themes=load_themes([BUNDLED_DIR]))


def has(events: EventsPane, text: str) -> bool:
    return any(text in line for line in events.lines)


def server_info(lab: Lab) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{lab.state.sglang_port}/server_info", timeout=5) as r:
        return json.loads(r.read())


async def test_k_and_d_confirm_with_cancel_focused_then_run(action_lab: Lab, tmp_path: Path) -> None:
    app = make_app(action_lab, tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        events = app.query_one(EventsPane)
        statuses = lambda: {s.name: s for s in app.fleet.statuses()}  # noqa: E731
        await wait_for(lambda: all(s.reachable for s in statuses().values()), 90,
                       what="both hosts connected", pilot=pilot)
        await wait_for(lambda: bool(statuses()["train"].training and statuses()["train"].training.value.step), 90,
                       what="training steps", pilot=pilot)

        # k: the plan dialog, Cancel focused; Enter cancels and nothing is killed
        await pilot.press("k")
        await wait_for(lambda: isinstance(app.screen, ConfirmScreen), 90, what="the kill dialog", pilot=pilot)
        await wait_for(lambda: isinstance(app.focused, Button) and app.focused.id == "cancel", 90,
                       what="Cancel focused", pilot=pilot)
        body = app.screen.body_text  # type: ignore[attr-defined]
        assert "launcher" in body and "worker" in body and "GPU 0: 61000 MiB" in body
        await pilot.press("enter")
        await wait_for(lambda: has(events, "cancelled by the operator; nothing was changed"), 90,
                       what="cancel", pilot=pilot)
        launcher = action_lab.state.trainer_pid
        assert launcher and Path(f"/proc/{launcher}").exists()

        # k again, confirm: every step and command shows in the events pane
        await pilot.press("k")
        await wait_for(lambda: isinstance(app.screen, ConfirmScreen), 90, what="the kill dialog", pilot=pilot)
        await wait_for(lambda: isinstance(app.focused, Button) and app.focused.id == "cancel", 90,
                       what="Cancel focused", pilot=pilot)
        await click(pilot, "#confirm-button")
        await wait_for(lambda: has(events, "training job stopped on train"), 90, what="the kill to finish", pilot=pilot)
        assert has(events, f"$ kill -TERM {launcher}") and has(events, "exit 0 in")
        # the action view stays on screen with every step and the host's state
        panel = app.query_one(ActionPanel)
        assert panel.display and panel.track is not None and panel.track.ok
        steps = [r.name for r in panel.track.rows if not r.wait]  # the wait for the dialog is no step
        assert steps[:3] == ["find the job", "SIGTERM the launcher", "wait for the job to exit"] and "verify" in steps
        assert panel.state_line.startswith("train: training stopped")
        screen = app.screen_text()
        assert "SIGTERM the launcher" in screen and "▸ train: training stopped" in screen
        await pilot.press("escape")
        await pilot.pause()
        assert not panel.display

        # d: the form is prefilled (window 16), its algorithms come from the host's --help; Enter moves
        # field to field and then to Plan; the plan dialog has Cancel focused
        await pilot.press("d")
        await wait_for(lambda: isinstance(app.screen, DeployForm), 90, what="the deploy form", pilot=pilot)
        form = app.screen
        assert form.query_one("#deploy-draft_window", Input).value == "16"
        algorithms = form.query_one("#deploy-algorithm", Select)
        await wait_for(lambda: "EAGLE3" in [str(o[0]) for o in algorithms._options], 90,
                       what="the algorithms", pilot=pilot)
        assert {"DFLASH", "NEXTN", "EAGLE", "DSPARK"} <= {str(o[0]) for o in algorithms._options}
        await pilot.press("enter")
        assert isinstance(app.screen, DeployForm) and app.focused is form.query_one("#deploy-block_size", Input)
        await pilot.press("enter", "enter")
        assert isinstance(app.screen, DeployForm) and isinstance(app.focused, Button) and app.focused.id == "plan"
        await pilot.press("enter")
        await wait_for(lambda: isinstance(app.screen, PlanScreen), 90, what="the deploy plan", pilot=pilot)
        await wait_for(lambda: isinstance(app.focused, Button) and app.focused.id == "cancel", 90,
                       what="Cancel focused", pilot=pilot)
        assert "--speculative-algorithm  NEXTN → DFLASH" in app.screen.body_text  # type: ignore[attr-defined]
        await pilot.press("tab", "enter")
        await wait_for(lambda: has(events, "deployed: "), 120, what="the deploy to finish", pilot=pilot)
        assert has(events, "$ systemctl restart -- sglang.service") and has(events, "smoke:")
        info = server_info(action_lab)
        assert info["speculative_algorithm"] == "DFLASH" and info["speculative_draft_window_size"] == 16
        await wait_for(lambda: (s := statuses()["serve"].sglang) is not None and s.value.info is not None
                       and s.value.info.algorithm == "DFLASH", 90,
                       what="the serving pane's source to see DFLASH", pilot=pilot)
        panel = app.query_one(ActionPanel)
        assert panel.track is not None and panel.track.ok and "restart" in [r.name for r in panel.track.rows]
        await wait_for(lambda: panel.state_line == "serve: serving DFLASH, draft window 16, healthy", 90,
                       what="the action view's state line", pilot=pilot)
        await wait_for(lambda: "▸ serve: serving DFLASH, draft window 16, healthy" in app.screen_text(), 90,
                       what="the state line on screen", pilot=pilot)
        await pilot.press("escape")

        # a bad window is refused before anything changes, with SGLang's constraint named
        await pilot.press("d")
        await wait_for(lambda: isinstance(app.screen, DeployForm), 90, what="the deploy form", pilot=pilot)
        form = app.screen
        window = form.query_one("#deploy-draft_window", Input)
        window.value = "abc"
        await pilot.press("enter")  # checked in place: the error beside the field, the focus stays
        assert isinstance(app.screen, DeployForm) and app.focused is window
        assert "a whole number, got 'abc'" in str(form.query_one("#error-draft_window", Static).render())
        window.value = "8"
        await pilot.press("enter", "enter", "enter")  # fine as a number: on through the fields to Plan
        assert isinstance(app.focused, Button) and app.focused.id == "plan"
        await pilot.press("enter")  # preflight refuses it (block size 16 from the draft's config.json)
        await wait_for(lambda: "smaller than the block size 16" in
                       str(form.query_one("#error-draft_window", Static).render()), 90,
                       what="the refusal beside the field", pilot=pilot)
        assert isinstance(app.screen, DeployForm) and form.query_one("#error-draft_window").display
        assert has(events, "draft window 8 is smaller than the block size 16")
        assert server_info(action_lab)["speculative_draft_window_size"] == 16
        await pilot.press("escape")
    audit = (tmp_path / "audit.log").read_text()
    assert "kill -TERM" in audit and "systemctl restart -- sglang.service" in audit
