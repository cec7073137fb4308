"""A host going away and coming back, seen in the console: its pane turns stale and says it is
reconnecting or down, the other host's pane is untouched, and both recover when sshd returns.

Uses ``lab_hosts`` (fresh hosts of this test's own, safe to break) plus the training job.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conftest import wait_for
from specconsole.lab.parts.environment import Lab
from specconsole.ui.console.app import ConsoleApp
from specconsole.ui.panes.events_pane import EventsPane
from specconsole.ui.panes.training_pane import TrainingPane
from test_ui_live import host_pane, lab_config, make_app

pytestmark = pytest.mark.timeout(180)


def badge(app: ConsoleApp, name: str) -> str:
    return host_pane(app, name).query_one(".badge").text


async def test_stopped_sshd_turns_pane_stale_then_it_recovers(lab_hosts: Lab, tmp_path: Path) -> None:
    lab = lab_hosts
    lab.start_trainer()
    app = make_app(lab_config(lab, tmp_path))
    async with app.run_test(size=(160, 48)) as pilot:
        train, serve = host_pane(app, "train"), host_pane(app, "serve")
        await wait_for(lambda: len(train.row_keys) == 8 and len(serve.row_keys) == 2
                       and not train.has_class("-stale") and not serve.has_class("-stale"), 60,
                       what="both hosts live", pilot=pilot)
        assert "● connected" in badge(app, "train")
        rows_before = list(train.table.rows)

        lab.stop_sshd("train")
        t0 = time.monotonic()
        await wait_for(lambda: train.has_class("-stale")
                       and ("reconnecting" in badge(app, "train") or "down since" in badge(app, "train")), 30,
                       what="the train pane to turn stale and say reconnecting/down", pilot=pilot)
        noticed = time.monotonic() - t0
        await wait_for(lambda: "STALE" in badge(app, "train"), 15, what="the age of the last reading", pilot=pilot)
        # the last readings stay on screen, dimmed, in the same rows
        assert list(train.table.rows) == rows_before
        assert all(str(c.style) == "dim" for c in train.table.get_row("gpu-0"))
        assert app.query_one(TrainingPane).has_class("-stale")
        # a dead host only marks its own pane
        assert not serve.has_class("-stale") and "● connected" in badge(app, "serve")
        events = app.query_one(EventsPane)
        assert any("train" in line and ("reconnecting" in line or "down:" in line) for line in events.lines)

        lab.start_sshd("train")
        await wait_for(lambda: not train.has_class("-stale") and "● connected" in badge(app, "train"), 40,
                       what="the train pane to recover", pilot=pilot)
        assert "sample " in badge(app, "train") and "STALE" not in badge(app, "train")
        assert list(train.table.rows) == rows_before  # same stable rows, updated in place
        assert all(str(c.style) != "dim" for c in train.table.get_row("gpu-0"))
        assert any(line.endswith(f"connected to root@{lab.state.hosts['train'].address}:"
                                 f"{lab.state.hosts['train'].port}") for line in events.lines[-5:])
        assert noticed < 20
