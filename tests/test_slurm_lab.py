"""Slurm jobs against a real Slurm cluster in the lab (Debian's slurmctld, two slurmd, munge; no fake
squeue): the console sees the training job (``sbatch`` of ``srun torchrun --nnodes=2``) over the train
host's SSH connection, follows its StdOut log, and cancels it with ``scancel``, saying every step; a job
already gone, a ``scancel`` refused (not the job's user) and a controller that is down are one line each.

One lab for the module (bring-up ~2 s, the job's first step ~10 s on a loaded 2-core machine); a test that
needs a running job submits a fresh one (the console follows the newest active job of the name)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import running_lab, wait_for
from specconsole.actions.kill.slurm import CancelOutcome, cancel_slurm_job
from specconsole.config import HostConfig, load_config
from specconsole.formats.slurm import SlurmJob
from specconsole.hosts.base import CommandResult
from specconsole.hosts.ssh import SshHost
from specconsole.lab.parts import slurm_cluster
from specconsole.lab.parts.environment import Lab, LabOptions
from specconsole.steps import StepEvent, Steps

WHY_NOT = slurm_cluster.unavailable()
if WHY_NOT:
    pytest.skip(f"a real Slurm cluster: {WHY_NOT}", allow_module_level=True)

pytestmark = pytest.mark.xdist_group("slurm-lab")  # one cluster, its tests in order on one worker

OPTIONS = LabOptions(sglang=False, slurm=True, trainer_step_seconds=0.2, trainer_steps_per_epoch=500)


@pytest.fixture(scope="module")
def slurm_lab(tmp_path_factory: pytest.TempPathFactory, lab_parts: None) -> Iterator[Lab]:
    yield from running_lab(tmp_path_factory.mktemp("slurm") / "lab", OPTIONS)


def squeue(lab: Lab, job_id: str) -> str:
    res = slurm_cluster.client(lab, "squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T")
    return res.stdout.strip()


def running_job(lab: Lab) -> str:
    """A training job that runs and has logged a step (the lab's first, or a fresh one)."""
    jobs = slurm_cluster.client(lab, "squeue", "-h", "-t", "running,pending", "-n", slurm_cluster.JOB_NAME,
                                "-o", "%i").stdout.split()
    size = lab.train_log.stat().st_size if lab.train_log.exists() else 0
    job_id = jobs[-1] if jobs else slurm_cluster.submit_training(lab)

    def stepping() -> bool:
        if squeue(lab, job_id) != "RUNNING" or not lab.train_log.exists():
            return False
        with lab.train_log.open("rb") as f:
            f.seek(0 if jobs else size)  # a fresh job: a step of its own
            return b'"step"' in f.read()

    assert wait_for(stepping, 120, what=f"Slurm job {job_id} to run and log a step", step=0.3)
    return job_id


def cli(lab: Lab, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}  # the console's commands say their own
    return subprocess.run([sys.executable, "-m", "specconsole", *args, "--config", str(lab.config_path)],
                          capture_output=True, text=True, timeout=timeout, env=env)


def status_job(lab: Lab) -> dict[str, object]:
    res = cli(lab, "status", "--json")
    training = json.loads(res.stdout)["hosts"][0]["training"]
    assert training is not None, res.stderr
    value: dict[str, object] = training["value"]
    return value


async def cancel(cfg: HostConfig, answer: bool = True) -> tuple[list[StepEvent], CancelOutcome, list[str]]:
    events: list[StepEvent] = []
    host = SshHost(cfg)
    await host.start()
    assert await host.wait_connected(15)
    asked: list[str] = []

    async def confirm(title: str, body: str, button: str) -> bool:
        asked.append(f"{title}|{body}|{button}")
        return answer

    try:
        outcome = await cancel_slurm_job(host, cfg, Steps("kill-training", events.append, host=cfg.name), confirm)
    finally:
        await host.close()
    return events, outcome, asked


def test_two_slurmd_on_one_machine_run_the_job_across_both_nodes(slurm_lab: Lab) -> None:
    job_id = running_job(slurm_lab)
    show = slurm_cluster.client(slurm_lab, "scontrol", "show", "job", "-o", job_id).stdout
    assert "NumNodes=2" in show and "NodeList=n[1-2]" in show
    assert "world size 2" in slurm_lab.train_log.read_text()  # one torchrun per node, one rendezvous


def test_status_json_carries_the_job_and_its_progress(slurm_lab: Lab) -> None:
    job_id = running_job(slurm_lab)
    value = status_job(slurm_lab)
    job = value["slurm"]
    assert isinstance(job, dict)
    assert (job["job_id"], job["name"], job["state"], job["nodes"], job["num_nodes"], job["seen_by"]) == (
        job_id, "drafter-train", "RUNNING", "n[1-2]", 2, "squeue")
    assert job["stdout"] == str(slurm_lab.train_log) == value["log_path"]
    assert job["time_limit"] == "UNLIMITED" and job["elapsed"] and job["error"] == ""
    assert value["state"] == "running" and isinstance(value["step"], int)
    text = cli(slurm_lab, "status").stdout
    assert f"slurm: job {job_id} drafter-train RUNNING on n[1-2] (2 nodes)" in text


def test_kill_is_scancel_said_step_by_step_to_cancelled(slurm_lab: Lab) -> None:
    job_id = running_job(slurm_lab)
    cfg = load_config(slurm_lab.config_path).host("train")
    events, outcome, asked = asyncio.run(cancel(cfg))
    lines = [e.line() for e in events]
    assert outcome.ok, lines
    assert asked and asked[0].startswith(f"Cancel Slurm job {job_id} on train?") and asked[0].endswith(
        f"|scancel {job_id}")
    commands = [e.message for e in events if e.kind == "command"]
    conf = f"SLURM_CONF={slurm_lab.dir / 'slurm' / 'slurm.conf'}"
    assert f"env {conf} scancel -v {job_id}" in commands
    assert commands[0].startswith(f"env {conf} squeue -h -t all -O ")
    assert any(e.kind == "heartbeat" and "waiting for Slurm job" in e.message for e in events)
    final = events[-1]
    assert final.kind == "done" and "CANCELLED" in final.message and "training job stopped on train" in final.message
    assert "at step " in final.message
    assert squeue(slurm_lab, job_id) == "CANCELLED"


async def test_k_in_the_console_confirms_with_cancel_focused_then_scancels(slurm_lab: Lab, tmp_path: Path) -> None:
    from textual.widgets import Button

    from conftest import click
    from specconsole.ui.console.app import ConsoleApp
    from specconsole.ui.panes.events_pane import EventsPane
    from specconsole.ui.screens.confirm import ConfirmScreen
    from specconsole.ui.style.themes import BUNDLED_DIR, load_themes

    job_id = await asyncio.to_thread(running_job, slurm_lab)
    cfg = load_config(slurm_lab.config_path)
    cfg = replace(cfg, console=replace(cfg.console, state_dir=str(tmp_path / "state"),
                                       audit_log=str(tmp_path / "audit.log")))
    app = ConsoleApp(cfg, themes=load_themes([BUNDLED_DIR]))
    async with app.run_test(size=(200, 60)) as pilot:
        events = app.query_one(EventsPane)

        def has(text: str) -> bool:
            return any(text in line for line in events.lines)

        line = f"slurm: job {job_id} drafter-train RUNNING on n[1-2] (2 nodes)"
        await wait_for(lambda: line in app.screen_text(), 90, what="the job in the training pane", pilot=pilot)
        await pilot.press("k")
        await wait_for(lambda: isinstance(app.screen, ConfirmScreen), 90, what="the kill dialog", pilot=pilot)
        await wait_for(lambda: isinstance(app.focused, Button) and app.focused.id == "cancel", 90,
                       what="Cancel focused", pilot=pilot)
        assert f"Slurm job {job_id} drafter-train RUNNING" in app.screen.body_text  # type: ignore[attr-defined]
        await pilot.press("enter")
        await wait_for(lambda: has("cancelled by the operator; nothing was changed"), 90, what="cancel", pilot=pilot)
        assert squeue(slurm_lab, job_id) == "RUNNING"

        await pilot.press("k")
        await wait_for(lambda: isinstance(app.screen, ConfirmScreen), 90, what="the kill dialog", pilot=pilot)
        await wait_for(lambda: isinstance(app.focused, Button) and app.focused.id == "cancel", 90,
                       what="Cancel focused", pilot=pilot)
        await click(pilot, "#confirm-button")
        await wait_for(lambda: has(f"training job stopped on train: Slurm job {job_id} (drafter-train) CANCELLED"),
                       90, what="the scancel to finish", pilot=pilot)
        assert has(f"scancel -v {job_id}")
        await wait_for(lambda: f"slurm: job {job_id} drafter-train CANCELLED" in app.screen_text(), 30,
                       what="the pane to show the end state", pilot=pilot)
    assert squeue(slurm_lab, job_id) == "CANCELLED"


def test_kill_of_a_job_already_gone_is_one_line(slurm_lab: Lab) -> None:
    res = cli(slurm_lab, "kill-training", "--yes")
    jobs = slurm_cluster.client(slurm_lab, "squeue", "-h", "-t", "running,pending", "-o", "%i").stdout.split()
    assert not jobs
    assert res.returncode == 0, res.stdout + res.stderr
    assert "nothing to cancel on train: Slurm job" in res.stdout and "already ended: CANCELLED" in res.stdout
    assert "scancel" not in [ln.split("$ ")[-1].split()[0] for ln in res.stdout.splitlines() if "$ " in ln]


def test_sacct_reads_a_finished_job_from_the_completion_log(slurm_lab: Lab) -> None:
    """Once a job has left squeue (MinJobAge), sacct says how it ended; this cluster keeps no accounting
    database, so ``sacct -P`` answers "accounting storage is disabled" and ``sacct -c`` (jobcomp) is asked."""
    from specconsole.slurm.query import from_sacct

    cfg = load_config(slurm_lab.config_path).host("train")
    assert cfg.slurm is not None
    cancelled = slurm_cluster.client(slurm_lab, "squeue", "-h", "-t", "cancelled", "-o", "%i").stdout.split()
    assert cancelled
    said: list[str] = []

    async def read() -> tuple[SlurmJob | None, list[str]]:
        assert cfg.slurm is not None
        host = SshHost(cfg)
        await host.start()
        assert await host.wait_connected(15)

        async def run(argv: list[str]) -> CommandResult:
            said.append(" ".join(argv))
            return await host.run(argv)

        try:
            return await from_sacct(run, cfg.slurm, cancelled[-1])
        finally:
            await host.close()

    job, problems = asyncio.run(read())
    assert problems == [] and job is not None
    assert (job.job_id, job.state, job.name, job.nodes, job.seen_by) == (
        cancelled[-1], "CANCELLED", "drafter-train", "n[1-2]", "sacct")
    assert [c.split(" sacct ")[1].split()[0] for c in said] == ["-P", "-c"]


def test_scancel_refused_for_another_users_job(slurm_lab: Lab) -> None:
    from specconsole.lab.parts import sudo_user

    why = sudo_user.unavailable()
    if why:
        pytest.skip(f"a real non-root user: {why}")
    user = sudo_user.ensure_user().pw_name
    job_id = running_job(slurm_lab)  # root's job
    opened = sudo_user.reach_for_others(slurm_lab.dir / "slurm" / "slurm.conf",
                                        slurm_lab.dir / "hosts" / "train" / "ssh")
    try:
        cfg = replace(load_config(slurm_lab.config_path).host("train"), user=user)
        events, outcome, _asked = asyncio.run(cancel(cfg))
    finally:
        sudo_user.restore_modes(opened)
    lines = [e.line() for e in events]
    assert not outcome.ok, lines
    assert events[-1].kind == "failed"
    assert events[-1].message.startswith(f"scancel refused on train: Slurm job {job_id} belongs to root, not to {user}")
    assert squeue(slurm_lab, job_id) == "RUNNING"  # untouched


def test_controller_down_is_one_line_on_status_and_kill(slurm_lab: Lab) -> None:
    running_job(slurm_lab)
    slurm_cluster.stop_daemon(slurm_lab, "slurmctld")
    try:
        value = status_job(slurm_lab)
        job = value["slurm"]
        assert isinstance(job, dict)
        assert job["error"] == "slurmctld not reachable: Unable to contact slurm controller (connect failure)"
        assert value["state"] == "unknown"
        res = cli(slurm_lab, "kill-training", "--yes")
        assert res.returncode == 1
        failed = [ln for ln in res.stdout.splitlines() if "✗" in ln]
        assert len(failed) == 1 and failed[0].split("✗ ")[1].startswith(
            "nothing cancelled on train: slurmctld not reachable: Unable to contact slurm controller")
        assert "Traceback" not in res.stdout + res.stderr
    finally:
        slurm_cluster.start_controller(slurm_lab)
    assert wait_for(lambda: slurm_cluster.client(slurm_lab, "squeue", "-h").returncode == 0, 30,
                    what="slurmctld to answer again")


def test_lab_down_leaves_no_daemon_or_step(tmp_path: Path, lab_parts: None) -> None:
    lab = Lab(tmp_path / "lab", replace(OPTIONS, trainer_batch_tokens=256))
    lab.up()
    try:
        pids = slurm_cluster.daemon_pids(lab)
        assert set(pids) == {"munged", "slurmctld", "slurmd-n1", "slurmd-n2"}
        running_job(lab)
    finally:
        lab.down()
    from specconsole.base.pids import alive

    assert not [name for name, pid in pids.items() if alive(pid)]
    assert slurm_cluster._stepds(lab.dir / "slurm") == []
