"""The console driven by Textual's Pilot against the lab: real sshd hosts, nvidia-smi double,
torchrun job and SGLang simulator. Nothing here mocks a host or a source. (Layout, help, read-only
gating and themes need no host: test_ui_sample.py, on sample data.)"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import wait_for
from specconsole.config import Config, load_config
from specconsole.lab.parts.environment import Lab
from specconsole.ui.console.app import ConsoleApp
from specconsole.ui.fleet.summary_bar import SummaryBar
from specconsole.ui.panes.host_pane import HostPane
from specconsole.ui.panes.serving_pane import ServingPane
from specconsole.ui.panes.training_pane import TrainingPane
from specconsole.ui.style.themes import BUNDLED_DIR, load_themes

pytestmark = pytest.mark.timeout(120)

#: What the panes show once every source has answered (the refresh after the values came).
SHOWN = ("● connected", "gen ", "tok/s", "algorithm EAGLE", "ETA ", "to 6 epochs", "last log line",
         "connected to root@127.0.0.2")


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
        # the next refresh tick draws them all
        await wait_for(lambda: all(part in app.screen_text() for part in SHOWN), 10, what=f"the panes to show {SHOWN}",
                       pilot=pilot)
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
