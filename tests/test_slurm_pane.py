"""The training pane of a Slurm job (sample data, no host: tests/sample_data.py): the job's id, name, state,
nodes and elapsed/limit above the progress read from its log; a controller that does not answer is one
line with the job as last read; odd names are shown escaped. The lab's real cluster is test_slurm_lab.py."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import sample_data as sd
from conftest import wait_for
from specconsole.base.samples import Sample
from specconsole.formats.slurm import SlurmJob
from specconsole.ui.console.app import ConsoleApp
from specconsole.ui.console.provider import FixedStatuses
from specconsole.ui.style.themes import BUNDLED_DIR, load_themes

pytestmark = pytest.mark.timeout(90)

JOB = SlurmJob("4711", "drafter-train", "RUNNING", "1:02:03", "2-00:00:00", "n[1-2]", 2, "alice",
               "/data/runs/dflash-qwen3-8b/train.jsonl", read_at=sd.FROZEN_NOW - 1)


def with_job(job: SlurmJob) -> FixedStatuses:
    statuses = sd.sample_statuses(sd.FROZEN_NOW)
    train = statuses[0]
    assert train.training is not None
    progress = replace(train.training.value, slurm=job, state="running" if job.active else "unknown")
    statuses[0] = replace(train, training=Sample(progress, at=train.training.at, interval=1.0))
    return FixedStatuses(statuses, sd.sample_events(sd.FROZEN_NOW))


async def test_pane_shows_the_job_then_a_down_controller(tmp_path: Path) -> None:
    now = sd.FROZEN_NOW
    fleet = with_job(JOB)
    app = ConsoleApp(sd.sample_config(str(tmp_path / "state")), fleet=fleet, clock=lambda: now,
                     themes=load_themes([BUNDLED_DIR]))
    async with app.run_test(size=(200, 60)) as pilot:
        line = "slurm: job 4711 drafter-train RUNNING on n[1-2] (2 nodes), 1:02:03 of 2-00:00:00"
        await wait_for(lambda: line in app.screen_text(), 30, what="the job's line", pilot=pilot)
        assert "slurm log: /data/runs/dflash-qwen3-8b/train.jsonl" in app.screen_text()
        assert "step 12,345/198,000 (6.2%)" in app.screen_text()  # the log's progress below

        down = replace(JOB, read_at=now - 40,
                       error="slurmctld not reachable: Unable to contact slurm controller (connect failure)")
        fleet.set(with_job(down).statuses())
        await wait_for(lambda: "slurm: job as read 40s ago; slurmctld not reachable: Unable to contact" in
                       app.screen_text(), 30, what="the controller line", pilot=pilot)

        odd = replace(JOB, name="odd|name\x1b[31m", state="WIBBLING")
        fleet.set(with_job(odd).statuses())
        await wait_for(lambda: "odd|name\\x1b[31m WIBBLING (a state this console does not know)" in app.screen_text(),
                       30, what="the odd job's line", pilot=pilot)
