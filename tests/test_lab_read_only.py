"""Read-only gates the headless commands as it gates the console: `kill-training` and `deploy`
refuse before connecting, and the lab's hosts are left exactly as they were."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import running_lab, wait_for
from specconsole.base.pids import alive
from specconsole.lab.parts.environment import Lab, LabOptions

pytestmark = pytest.mark.xdist_group("lab-read-only")  # its module lab: one per run, not one per worker

GUARDED = LabOptions(trainer_step_seconds=0.25, trainer_steps_per_epoch=500, sglang_startup_s=1.0,
                     sglang_load_rps=1.0, gpu_interval_s=0.5, sglang_interval_s=0.5)


def wait_job(lab: Lab, timeout: float = 120) -> None:
    """Until the torchrun job logs steps and SGLang answers /health."""
    def up() -> bool:
        log = lab.train_log
        try:
            healthy = httpx.get(f"http://127.0.0.1:{lab.state.sglang_port}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            healthy = False
        return healthy and log.exists() and '"step"' in log.read_text()

    assert wait_for(up, timeout, what="the lab's training job to log a step and SGLang to answer /health", step=0.2)


@pytest.fixture(scope="module")
def guarded_lab(tmp_path_factory: pytest.TempPathFactory, lab_parts: None) -> Iterator[Lab]:
    """This module's own lab (a failure here would kill training or deploy: never the shared one)."""
    yield from running_lab(tmp_path_factory.mktemp("read-only") / "lab", GUARDED, wait_job)


def read_only_config(lab: Lab) -> Path:
    text = lab.config_path.read_text().replace("[console]\n", "[console]\nread_only = true\n", 1)
    path = lab.dir / "read-only.toml"
    path.write_text(text)
    return path


def host_state(lab: Lab) -> tuple[object, ...]:
    """What a kill or a deploy would change: the job's processes, the unit and its drop-ins, SGLang's pid."""
    main_pid = subprocess.run([str(lab.root("serve") / "bin" / "systemctl"), "show", "-p", "MainPID", "--value",
                               "sglang.service"], capture_output=True, text=True, timeout=60).stdout.strip()
    drop_ins = sorted(str(p) for p in lab.unit_path.parent.glob("sglang.service.d/**/*"))
    return (lab.unit_path.read_text(), drop_ins, main_pid)


COMMANDS = {
    "kill-training": ["kill-training", "--yes", "--grace", "5"],
    "deploy": ["deploy", "--algorithm", "DFLASH", "--draft-window", "16", "--yes", "--health-timeout", "30"],
}


@pytest.mark.parametrize("form", ["--read-only flag", "read_only = true"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_destructive_commands_refuse_in_read_only_mode(guarded_lab: Lab, command: str, form: str) -> None:
    before = host_state(guarded_lab)
    trainer = guarded_lab.state.trainer_pid
    assert trainer and alive(trainer)
    if form == "--read-only flag":
        argv = [*COMMANDS[command], "--read-only", "--config", str(guarded_lab.config_path)]
    else:
        argv = [*COMMANDS[command], "--config", str(read_only_config(guarded_lab))]
    res = subprocess.run([sys.executable, "-m", "specconsole", *argv], capture_output=True, text=True,
                         timeout=180, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert res.returncode == 3, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"specconsole: {command}: refused in read-only mode")
    assert ("--read-only" if form.startswith("--") else "read_only = true in") in lines[0]
    assert res.stdout == ""  # refused before connecting: not one step ran
    assert alive(trainer), "the training job was killed in read-only mode"
    assert host_state(guarded_lab) == before, "the serving host changed in read-only mode"


def test_the_global_read_only_flag_gates_too(guarded_lab: Lab) -> None:
    res = subprocess.run([sys.executable, "-m", "specconsole", "--read-only", "kill-training", "--yes",
                          "--config", str(guarded_lab.config_path)], capture_output=True, text=True, timeout=180)
    assert res.returncode == 3 and "refused in read-only mode (--read-only)" in res.stderr
    assert alive(guarded_lab.state.trainer_pid or 0)


def test_a_dry_run_deploy_is_allowed_in_read_only_mode(guarded_lab: Lab) -> None:
    before = host_state(guarded_lab)
    res = subprocess.run([sys.executable, "-m", "specconsole", "deploy", "--algorithm", "DFLASH",
                          "--draft-window", "16", "--dry-run", "--config", str(read_only_config(guarded_lab))],
                         capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "dry run: nothing on the host was changed" in res.stdout
    assert host_state(guarded_lab) == before
