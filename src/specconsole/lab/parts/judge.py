"""The lab's warm SGLang judge (:mod:`specconsole.lab.doubles.sglang_judge`): real SGLang 0.5.23 deciding
every launch of the serving host's SGLang, started with the lab unless the lab shares one."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
from pathlib import Path

from specconsole.lab.doubles import sglang_judge
from specconsole.lab.doubles.models import DRAFT_MODEL, SERVE_GPUS, TARGET_MODEL, judge_env, write_models
from specconsole.lab.parts.state import LabError, LabState, Say
from specconsole.lab.procs import send_signal, spawn, wait_dead

#: The socket of a warm SGLang judge the lab shares instead of starting its own (the test suite's).
JUDGE_ENV = "SPECCONSOLE_LAB_JUDGE"


def judge_command(python: str, sock: str, warm_dir: Path, owner: int | None = None) -> list[str]:
    """The judge's command line; it warms up on a serving host's models written to ``warm_dir``:
    the target alone, and with the DFlash draft (see :func:`sglang_judge.serve`)."""
    write_models(warm_dir)
    target = ["--model-path", str(warm_dir / TARGET_MODEL), "--tp-size", str(SERVE_GPUS)]
    warm = [target, [*target, "--speculative-algorithm", "DFLASH",
                     "--speculative-draft-model-path", str(warm_dir / DRAFT_MODEL)]]
    return [python, sglang_judge.__file__, "serve", sock, *(["--owner", str(owner)] if owner else []),
            "--warm", json.dumps(warm)]


def judge_socket_path(lab_dir: Path) -> str:
    """A short socket path for a lab's judge (a Unix socket's path is limited to 107 bytes)."""
    digest = hashlib.sha256(str(lab_dir.resolve()).encode()).hexdigest()[:12]
    return f"/tmp/specconsole-judge-{digest}.sock"


def start_judge(state: LabState, lab_dir: Path, env: dict[str, str], say: Say) -> None:
    """Start the lab's warm SGLang judge on ``state.judge_socket`` (its log and HF cache in ``lab_dir``),
    unless it shares a running one (``$SPECCONSOLE_LAB_JUDGE``)."""
    sock = state.judge_socket
    if os.environ.get(JUDGE_ENV) == sock and Path(sock).exists():
        say(f"lab: sharing the SGLang judge on {sock}")
        return
    python = sglang_judge.sglang_python()
    if python is None:
        raise LabError(f"lab: {sglang_judge.missing_message()}")
    with contextlib.suppress(FileNotFoundError):
        Path(sock).unlink()
    log = open(lab_dir / "logs" / "sglang-judge.log", "ab")  # noqa: SIM115 - the child keeps it
    env = {**env, **judge_env(lab_dir / "hf-home")}
    proc = spawn(judge_command(python, sock, lab_dir / "judge-warm-up"), stdout=log, stderr=log, env=env)
    log.close()
    state.judge_pid = proc.pid
    state.remember(proc.pid)
    say(f"lab: starting real SGLang 0.5.23's argument judge (pid {proc.pid}; it imports SGLang while the "
        f"hosts start, and SGLang's first start waits for it)")


def stop_judge(state: LabState) -> None:
    """Stop the lab's own judge and remove its socket (a shared judge is left alone)."""
    pid = state.judge_pid
    if pid and state.ours(pid):
        send_signal(pid, signal.SIGTERM)
        wait_dead([pid], 5)
    state.judge_pid = None
    if state.judge_socket and os.environ.get(JUDGE_ENV) != state.judge_socket:
        with contextlib.suppress(OSError):
            Path(state.judge_socket).unlink()
