"""The training host's job: a real ``torchrun --nproc_per_node=2`` run of :mod:`specconsole.lab.doubles.trainer`,
started in its own session and stopped with its whole process tree."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from specconsole.lab.parts.state import LabOptions, LabState, Say
from specconsole.lab.procs import descendants, send_signal, spawn, wait_dead


def start_trainer(o: LabOptions, root: Path, train_log: Path, pid_file: Path, env: dict[str, str],
                  state: LabState, say: Say, freeze_file: Path | None = None) -> int:
    """Start the job in the training host's folder ``root``, logging to ``train_log``; the launcher's pid
    (also written to ``pid_file``). While ``freeze_file`` exists the job runs without progress."""
    train_log.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
            "-m", "specconsole.lab.doubles.trainer", "--log-path", str(train_log),
            "--steps", str(o.trainer_steps), "--epochs", str(o.trainer_epochs),
            "--steps-per-epoch", str(o.trainer_steps_per_epoch),
            "--step-seconds", str(o.trainer_step_seconds), "--batch-tokens", str(o.trainer_batch_tokens)]
    if freeze_file is not None:
        argv += ["--freeze-file", str(freeze_file)]
    env = {**env, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    out = open(root / "logs" / "torchrun.out", "ab")  # noqa: SIM115
    proc = spawn(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=root)
    out.close()
    pid_file.write_text(f"{proc.pid}\n")
    state.trainer_pid = proc.pid
    state.remember(proc.pid)
    state.save()
    say(f"train: started torchrun --nproc_per_node=2 (launcher pid {proc.pid}), log {train_log}")
    return proc.pid


def stop_trainer(state: LabState, say: Say) -> None:
    """SIGTERM the job's launcher; SIGKILL its tree if it is not gone within 15 s."""
    pid = state.trainer_pid
    if pid and state.ours(pid):
        tree = [pid, *descendants(pid)]
        send_signal(pid, signal.SIGTERM)
        if not wait_dead(tree, 15):
            for p in tree:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p, signal.SIGKILL)
                send_signal(p, signal.SIGKILL)
            wait_dead(tree, 5)
        say(f"train: training job stopped (launcher pid {pid})")
    state.trainer_pid = None
    state.save()
