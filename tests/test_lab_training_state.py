"""After a kill, the console's monitor and `status --json` show training as stopped (from the
job's processes), not a stale `stalled: false` with the last tokens/s."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import running_lab, wait_for
from specconsole.actions.kill.training import find_job, kill_job
from specconsole.config import load_config
from specconsole.hosts.ssh import SshHost
from specconsole.lab.parts.environment import Lab, LabOptions
from specconsole.monitor import Fleet
from specconsole.steps import StepEvent, Steps


@pytest.fixture
def job_lab(tmp_path: Path, lab_parts: None) -> Iterator[Lab]:
    """A lab of its own with a training job (this test kills it)."""
    yield from running_lab(tmp_path / "lab", LabOptions(sglang=False, trainer_step_seconds=0.2))


def training(fleet: Fleet) -> object:
    sample = fleet.monitors["train"].samples.get("training")
    return None if sample is None else sample.value


async def until(predicate, timeout: float) -> float | None:  # type: ignore[no-untyped-def]
    """Poll ``predicate`` every 50 ms; the time.time() it first held, or None."""
    held: list[float] = []

    def check() -> bool:
        if predicate():
            held.append(time.time())
            return True
        return False

    await wait_for(check, timeout, step=0.05)
    return held[0] if held else None


def status(lab: Lab, *extra: str) -> subprocess.CompletedProcess[str]:
    """`specconsole status` once (a generous first-snapshot timeout: a loaded machine is slow)."""
    return subprocess.run([sys.executable, "-m", "specconsole", "status", *extra, "--timeout", "120",
                           "--config", str(lab.config_path)], capture_output=True, text=True, timeout=240)


def status_json(lab: Lab) -> dict[str, object]:
    hosts = {h["name"]: h for h in json.loads(status(lab, "--json").stdout)["hosts"]}
    return hosts["train"]["training"]["value"]  # type: ignore[no-any-return]


@pytest.mark.serial  # asserts a time bound
async def test_training_shows_stopped_within_2s_of_a_kill(job_lab: Lab) -> None:
    config = load_config(job_lab.config_path)
    fleet = Fleet(config)
    await fleet.start()
    try:
        running = await until(lambda: getattr(training(fleet), "state", None) == "running"
                              and getattr(training(fleet), "tokens_per_s", None), 120)
        assert running, f"the monitor never saw the job running: {training(fleet)}"
        before = await asyncio.to_thread(status_json, job_lab)
        assert before["state"] == "running" and before["tokens_per_s"]

        host = SshHost(config.host("train"))
        await host.start()
        assert await host.wait_connected(15)
        events: list[StepEvent] = []
        try:
            steps = Steps("kill-training", events.append, host="train")
            plan = await find_job(host, config.host("train"), steps)
            outcome = await kill_job(host, plan, steps, grace_s=30)
        finally:
            await host.close()
        assert outcome.ok and outcome.stopped
        killed_at = events[-1].at

        stopped_at = await until(lambda: getattr(training(fleet), "state", None) == "stopped", 30)
        assert stopped_at is not None, f"the monitor still shows {training(fleet)}"
        assert stopped_at - killed_at <= 2.0, f"stopped shown {stopped_at - killed_at:.1f}s after the kill"
        shown = training(fleet)
        assert shown.tokens_per_s is None and shown.steps_per_s is None and shown.eta_s is None  # type: ignore[attr-defined]
        assert not shown.stalled and shown.eta_text.startswith(f"stopped at step {outcome.step}")  # type: ignore[attr-defined]
    finally:
        await fleet.stop()

    # both forms of `status` at once (each is a process of its own, mostly waiting on its snapshot)
    after, text = await asyncio.gather(asyncio.to_thread(status_json, job_lab), asyncio.to_thread(status, job_lab))
    assert after["state"] == "stopped" and after["stalled"] is False
    assert after["tokens_per_s"] is None and after["eta_s"] is None and after["step"] == outcome.step
    assert f"job stopped: n/a tok/s, n/a steps/s, ETA stopped at step {outcome.step}" in text.stdout
