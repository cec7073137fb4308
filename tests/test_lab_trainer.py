"""The lab's real training job (specconsole.lab.doubles.trainer) under a real torchrun.

TORCHRUN TESTS: every ``test_torchrun_*`` here starts a real ``torchrun --nproc_per_node=2``
(launcher + two gloo/DDP workers on CPU); select them with ``-k torchrun``. They take ~10 s
each on a 2-core machine, mostly importing torch three times.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import wait_for
from specconsole.base.samples import Sample
from specconsole.config import HostConfig, TrainingConfig
from specconsole.formats.training_log import LineKind, LineParser
from specconsole.hosts.local import LocalHost
from specconsole.lab.doubles.trainer import parse_args
from specconsole.lab.procs import children
from specconsole.sources.training import TrainingSource
from specconsole.sources.training_progress import TrainingProgress

VENV_BIN = Path(sys.executable).parent
TRAINER = ["-m", "specconsole.lab.doubles.trainer"]


def env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def worker_env(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(kv.split("=", 1) for kv in raw.decode(errors="replace").split("\0") if "=" in kv)


def workers(launcher: int) -> dict[int, dict[str, str]]:
    """The launcher's children that are trainer workers, with their torchrun environment."""
    found = {}
    for pid in children(launcher):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"specconsole.lab.doubles.trainer" in cmd:
            found[pid] = worker_env(pid)
    return found


def wait_workers(proc: subprocess.Popen[bytes], timeout: float = 60.0) -> dict[int, dict[str, str]]:
    found: dict[int, dict[str, str]] = {}

    def two_workers() -> bool:
        assert proc.poll() is None, f"torchrun (pid {proc.pid}) exited ({proc.returncode}) before two workers showed"
        found.clear()
        found.update(workers(proc.pid))
        return len(found) == 2 and all("RANK" in e for e in found.values())

    assert wait_for(two_workers, timeout, what=f"torchrun (pid {proc.pid}) to show two workers", step=0.05)
    return found


def cleanup(proc: subprocess.Popen[bytes], worker_pids: list[int]) -> None:
    """Stop what this test started (by pid), should an assertion have left it running."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    for pid in worker_pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def test_cli_defaults_read_like_the_seed_workflow():
    a = parse_args(["--log-path", "/tmp/x.log"])
    assert (a.steps, a.epochs, a.steps_per_epoch, a.step_seconds) == (33000, 6, 5500, 18.6)
    assert a.steps * a.step_seconds / 86400 == pytest.approx(7.1, abs=0.01)  # days
    b = parse_args(["--log", "/tmp/x.log", "--steps", "200000", "--epochs", "6",
                    "--steps-per-epoch", "33000", "--step-seconds", "1"])
    assert (b.log, b.steps, b.steps_per_epoch) == ("/tmp/x.log", 200000, 33000)
    assert parse_args(["--log-path", "x", "--steps", "10", "--epochs", "3"]).steps_per_epoch == 4


@pytest.mark.usefixtures("lab_parts")
def test_torchrun_two_workers_train_and_log_json(tmp_path: Path):
    log = tmp_path / "runs" / "train.log"
    cmd = [str(VENV_BIN / "torchrun"), "--standalone", "--nproc_per_node=2", *TRAINER,
           "--log-path", str(log), "--steps", "6", "--epochs", "2", "--step-seconds", "0.3"]
    proc = subprocess.Popen(cmd, env=env(), cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    found: dict[int, dict[str, str]] = {}
    try:
        found = wait_workers(proc)
        assert sorted(e["RANK"] for e in found.values()) == ["0", "1"]
        assert sorted(e["LOCAL_RANK"] for e in found.values()) == ["0", "1"]
        assert {e["WORLD_SIZE"] for e in found.values()} == {"2"}
        for pid in found:  # torchrun starts each worker in its own session (formats.md)
            assert os.getpgid(pid) == pid
        out, _ = proc.communicate(timeout=90)
        assert proc.returncode == 0, out.decode(errors="replace")[-2000:]
    finally:
        cleanup(proc, list(found))

    lines = log.read_text().splitlines()
    assert lines[0] == "Total training steps: 6"
    assert lines[1].startswith("Starting training from epoch 0, step 0")
    assert lines[-1] == "Training complete: 6 steps"
    parser = LineParser("json")
    recs = [p.record for p in map(parser.parse, lines[2:-1])]
    assert all(r is not None for r in recs) and len(recs) == 6
    assert [r.step for r in recs] == [1, 2, 3, 4, 5, 6]
    assert [r.epoch for r in recs] == [pytest.approx(s / 3, abs=1e-6) for s in range(1, 7)]
    assert all(r.total_steps == 6 and r.tokens_per_s and r.grad_norm and r.lr for r in recs)
    times = [r.time for r in recs]
    assert times == sorted(times) and times[-1] - times[0] >= 5 * 0.3 - 0.05  # paced
    assert recs[-1].loss < recs[0].loss  # it really learns
    assert all(LineParser().parse(ln).kind is not LineKind.MALFORMED for ln in lines)


@pytest.mark.usefixtures("lab_parts")
async def test_torchrun_job_is_tailed_live_and_stops_on_sigterm(tmp_path: Path):
    log = tmp_path / "train.log"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           *TRAINER, "--log-path", str(log), "--epochs", "6",
           "--steps-per-epoch", "2000", "--step-seconds", "0.2"]
    cfg = TrainingConfig(log_path=str(log), total_epochs=6, steps_per_epoch=2000)
    host = LocalHost(HostConfig(name="train", role="train", training=cfg))
    await host.start()
    source = TrainingSource(host, cfg, interval_s=0.25)
    samples: list[Sample[TrainingProgress]] = []
    task = asyncio.create_task(source.run(samples.append))
    proc = subprocess.Popen(cmd, env=env(), cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    found: dict[int, dict[str, str]] = {}

    async def until(cond, timeout: float) -> None:  # type: ignore[no-untyped-def]
        def check() -> bool:
            if cond():
                return True
            assert proc.poll() is None, proc.stdout.read().decode(errors="replace")[-2000:]  # type: ignore[union-attr]
            return False

        assert await wait_for(check, timeout), f"timed out; last: {samples[-1:]}"

    try:
        found = await asyncio.to_thread(wait_workers, proc)
        await until(lambda: bool(samples) and (samples[-1].value.step or 0) >= 3, 60)
        first = samples[-1].value
        assert first.error is None and first.total_steps == 12000 and first.eta_target == "6 epochs"
        await until(lambda: (samples[-1].value.step or 0) >= first.step + 5, 30)
        now = samples[-1].value
        assert now.lines_seen > first.lines_seen and now.restarts == 0
        assert now.steps_per_s and 0.5 < now.steps_per_s <= 5.5
        assert now.eta_text and now.eta_text.endswith(" to 6 epochs")
        assert len(now.loss_history) >= 8 and now.loss is not None and 0 < now.loss < 10
        assert source.streams_started == 1

        proc.send_signal(signal.SIGTERM)  # the launcher forwards it to the workers
        await asyncio.to_thread(proc.wait, 60)
        await wait_for(lambda: "stopping training" in samples[-1].value.recent_lines[-1], 10,
                       what="'stopping training' as the last line tailed")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await host.close()
        cleanup(proc, list(found))
    text = log.read_text().splitlines()
    assert text[-1].startswith("Received SIGTERM at step ") and text[-1].endswith("stopping training")
    await wait_for(lambda: not any(_running(pid) for pid in found), 10, what="the workers to exit too")


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

