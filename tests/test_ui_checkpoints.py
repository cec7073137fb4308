"""The training pane's checkpoint table and ``D``: the deploy wizard opens with the checkpoint
under the cursor as the draft model, and the wizard's preflight refuses a folder without an HF
config.json, naming the file. Against the lab (real sshd hosts, real systemctl, SGLang simulator);
nothing is deployed."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Button, Input, Static

from specconsole.config import Config, load_config
from specconsole.lab.environment import Lab
from specconsole.ui.app import ConsoleApp
from specconsole.ui.checkpoints_pane import CheckpointTable
from specconsole.ui.deploy_screen import DeployForm
from specconsole.ui.panes import EventsPane
from specconsole.ui.themes import BUNDLED_DIR, load_themes

pytestmark = pytest.mark.timeout(180)


def config_with_checkpoints(lab: Lab, tmp_path: Path, checkpoint_dir: Path) -> Config:
    cfg = load_config(lab.config_path)
    hosts = tuple(dataclasses.replace(h, training=dataclasses.replace(h.training, checkpoint_dir=str(checkpoint_dir)))
                  if h.training is not None else h for h in cfg.hosts)
    console = dataclasses.replace(cfg.console, state_dir=str(tmp_path / "state"), audit_log=str(tmp_path / "audit.log"))
    return dataclasses.replace(cfg, hosts=hosts, console=console)


def checkpoints(root: Path) -> Path:
    """Two ``specforge train`` checkpoints: step 100 an HF folder, step 200 (latest) training state only."""
    for step, age, hf in ((100, 600, True), (200, 30, False)):
        d = root / f"dflash-run-step{step}"
        d.mkdir(parents=True)
        (d / "training_state.pt").write_bytes(b"\0" * 2048)
        if hf:
            (d / "config.json").write_text(json.dumps({"architectures": ["DFlashDraftModel"], "block_size": 16}))
        stamp = time.time() - age
        os.utime(d, (stamp, stamp))
    (root / "dflash-run-latest").symlink_to("dflash-run-step200")
    return root


async def wait_for(pilot: Pilot[Any], check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        await pilot.pause(0.25)
    app: ConsoleApp = pilot.app  # type: ignore[assignment]
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}; screen:\n{app.screen_text()}")


async def test_D_opens_the_wizard_with_the_selected_checkpoint(lab: Lab, tmp_path: Path) -> None:
    root = checkpoints(tmp_path / "ckpt")
    app = ConsoleApp(config_with_checkpoints(lab, tmp_path, root), themes=load_themes([BUNDLED_DIR]))
    async with app.run_test(size=(160, 48)) as pilot:
        table = app.query_one(CheckpointTable)
        await wait_for(pilot, lambda: len(table._keys) == 2, "the checkpoint table")
        rows = [[c.plain for c in table.table.get_row(k)] for k in table.table.rows]
        assert [r[0] for r in rows] == ["200", "100"]  # newest first
        assert rows[0][3] == "latest no config.json" and rows[1][3] == ""
        assert rows[0][2].endswith("KiB") and rows[0][4] == "dflash-run-step200"
        assert "checkpoints (2) · D deploys the selected · /" in app.screen_text()

        # D on the newest: the wizard, prefilled with its path; Plan is refused naming config.json
        await pilot.press("D")
        await wait_for(pilot, lambda: isinstance(app.screen, DeployForm), "the deploy form")
        form = app.screen
        draft = form.query_one("#deploy-draft_model", Input)
        assert draft.value == str(root / "dflash-run-step200")
        form.query_one("#plan", Button).press()
        error = form.query_one("#error-draft_model", Static)
        await wait_for(pilot, lambda: "config.json" in str(error.render()), "the refusal beside the draft model",
                       timeout=120)
        assert f"{root / 'dflash-run-step200'}/config.json" in str(error.render())
        assert isinstance(app.screen, DeployForm)  # the form stays open; nothing changed
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, DeployForm), "the form to close")
        await wait_for(pilot, lambda: app._action_running is None, "the flow to end")

        # move the cursor to step 100 (an HF folder) and press D again
        table.table.focus()
        await pilot.press("down")
        assert table.selected is not None and table.selected.step == 100
        await pilot.press("D")
        await wait_for(pilot, lambda: isinstance(app.screen, DeployForm), "the deploy form again")
        assert app.screen.query_one("#deploy-draft_model", Input).value == str(root / "dflash-run-step100")
        await pilot.press("escape")
        await wait_for(pilot, lambda: app._action_running is None, "the flow to end")
        events = app.query_one(EventsPane).lines
        assert any(f"draft model: checkpoint dflash-run-step200 (step 200) from train: {root}" in ln for ln in events)
        assert any("it has no config.json" in ln for ln in events)
        assert sum("cancelled by the operator; nothing was changed" in ln for ln in events) == 2
