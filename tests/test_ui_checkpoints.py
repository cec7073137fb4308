"""The training pane's checkpoint table and ``D``: the deploy wizard opens with the checkpoint
under the cursor as the draft model, and the wizard's preflight refuses a folder without an HF
config.json, naming the file. Against the lab (real sshd hosts, real systemctl, SGLang simulator);
nothing is deployed."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import pytest
from textual.app import App, ComposeResult
from textual.widgets import Button, Input, Static

from conftest import wait_for
from specconsole.config import Config, load_config
from specconsole.lab.parts.environment import Lab
from specconsole.sources.checkpoints import Checkpoint, CheckpointListing
from specconsole.ui.console.app import ConsoleApp
from specconsole.ui.panes.checkpoints_pane import CheckpointTable
from specconsole.ui.panes.events_pane import EventsPane
from specconsole.ui.screens.deploy_form import DeployForm
from specconsole.ui.style.themes import BUNDLED_DIR, load_themes

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


async def test_D_opens_the_wizard_with_the_selected_checkpoint(lab: Lab, tmp_path: Path) -> None:
    root = checkpoints(tmp_path / "ckpt")
    app = ConsoleApp(config_with_checkpoints(lab, tmp_path, root), themes=load_themes([BUNDLED_DIR]))
    async with app.run_test(size=(160, 48)) as pilot:
        table = app.query_one(CheckpointTable)
        await wait_for(lambda: len(table._keys) == 2, 60, what="the checkpoint table", pilot=pilot)
        rows = [[c.plain for c in table.table.get_row(k)] for k in table.table.rows]
        assert [r[0] for r in rows] == ["200", "100"]  # newest first
        assert rows[0][3] == "latest no config.json" and rows[1][3] == ""
        assert rows[0][2].endswith("KiB") and rows[0][4] == "dflash-run-step200"
        # the pane is shown by a class change: its title is on screen after the next layout
        await wait_for(lambda: "checkpoints (2) · D deploys the selected · /" in app.screen_text(), 10,
                       what="the checkpoint pane's title on screen", pilot=pilot)

        # D on the newest: the wizard, prefilled with its path; Plan is refused naming config.json
        await pilot.press("D")
        await wait_for(lambda: isinstance(app.screen, DeployForm), 60, what="the deploy form", pilot=pilot)
        form = app.screen
        draft = form.query_one("#deploy-draft_model", Input)
        assert draft.value == str(root / "dflash-run-step200")
        form.query_one("#plan", Button).press()
        error = form.query_one("#error-draft_model", Static)
        await wait_for(lambda: "config.json" in str(error.render()), 120,
                       what="the refusal beside the draft model", pilot=pilot)
        assert f"{root / 'dflash-run-step200'}/config.json" in str(error.render())
        assert isinstance(app.screen, DeployForm)  # the form stays open; nothing changed
        await pilot.press("escape")
        await wait_for(lambda: not isinstance(app.screen, DeployForm), 60, what="the form to close", pilot=pilot)
        await wait_for(lambda: app.actions.running is None, 60, what="the flow to end", pilot=pilot)

        # move the cursor to step 100 (an HF folder) and press D again
        table.table.focus()
        await pilot.press("down")
        assert table.selected is not None and table.selected.step == 100
        await pilot.press("D")
        await wait_for(lambda: isinstance(app.screen, DeployForm), 60, what="the deploy form again", pilot=pilot)
        assert app.screen.query_one("#deploy-draft_model", Input).value == str(root / "dflash-run-step100")
        await pilot.press("escape")
        await wait_for(lambda: app.actions.running is None, 60, what="the flow to end", pilot=pilot)
        events = app.query_one(EventsPane).lines
        assert any(f"draft model: checkpoint dflash-run-step200 (step 200) from train: {root}" in ln for ln in events)
        assert any("it has no config.json" in ln for ln in events)
        assert sum("cancelled by the operator; nothing was changed" in ln for ln in events) == 2


class TableApp(App[None]):
    def compose(self) -> ComposeResult:
        yield CheckpointTable()


T_LIST = 1_783_000_000.0


def listing_of(directory: str, *steps: int, error: str | None = None) -> CheckpointListing:
    now = T_LIST
    ckpts = tuple(Checkpoint(name=f"run-step{s}", path=f"{directory}/run-step{s}", step=s, layout="specforge",
                             mtime=now - 60 * i, run_id="run", size_bytes=3 << 30, has_config=True,
                             is_latest=i == 0, is_best=s == 100)
                  for i, s in enumerate(sorted(steps, reverse=True)))
    return CheckpointListing(directory, ckpts, listed_at=now, error=error)


async def test_table_hides_when_empty_shows_errors_and_keeps_the_cursor() -> None:
    app = TableApp()
    async with app.run_test(size=(100, 20)) as pilot:
        widget = app.query_one(CheckpointTable)
        widget.show(None, T_LIST)
        widget.show(listing_of("/ckpt"), T_LIST)
        await pilot.pause()
        assert not widget.has_class("-shown") and widget.selected is None  # nothing saved yet
        widget.show(listing_of("/ckpt", error="checkpoint folder /ckpt on train: No such file or directory"),
                    T_LIST)
        await pilot.pause()
        assert widget.has_class("-shown") and not widget.table.display
        assert "No such file or directory" in str(widget.query_one(".ckpt-title", Static).render())
        widget.show(listing_of("/ckpt", 100, 200), T_LIST)
        await pilot.pause()
        assert widget.table.display and widget.table.row_count == 2
        assert [c.plain for c in widget.table.get_row("/ckpt/run-step200")][:4] == ["200", "0.0s", "3.0 GiB", "latest"]
        widget.table.move_cursor(row=1)
        assert widget.selected is not None and widget.selected.step == 100
        # a new checkpoint arrives on top: the cursor stays on the checkpoint it was on
        widget.show(listing_of("/ckpt", 100, 200, 300), T_LIST)
        await pilot.pause()
        assert widget.table.row_count == 3 and widget.selected is not None and widget.selected.step == 100
