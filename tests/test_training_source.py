"""TrainingTracker (dedupe, restarts, rates, ETA, stall) and TrainingSource over a LocalHost."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from pathlib import Path

import pytest

from conftest import wait_for
from specconsole.base.samples import Sample
from specconsole.config import HostConfig, TrainingConfig
from specconsole.hosts.local import LocalHost
from specconsole.lab.parts.environment import Lab
from specconsole.sources.training import TrainingSource, tail_error
from specconsole.sources.training_progress import TrainingProgress, TrainingTracker

FIXTURES = Path(__file__).parent / "fixtures" / "training"
T0 = 1_783_000_000.0  # a wall-clock time in 2026


def cfg(**kw: object) -> TrainingConfig:
    kw.setdefault("log_path", "/var/log/train.log")
    return TrainingConfig(**kw)  # type: ignore[arg-type]


def jline(step: int, t: float | None = None, **fields: object) -> str:
    data: dict[str, object] = {}
    if t is not None:
        data["time"] = t
    data["step"] = step
    data.setdefault("loss", round(6.0 - step * 0.001, 6))
    data.update(fields)
    return json.dumps(data)


# --------------------------------------------------------------------------- dedupe, restarts

def test_retail_after_reconnect_is_not_counted_again():
    tr = TrainingTracker(cfg())
    tr.stream_started(1000.0)
    for s in range(1, 11):  # the initial backlog, all at once
        tr.feed(jline(s, T0 + s), 1000.0)
    tr.feed(jline(11, T0 + 11), 1010.0)
    tr.feed(jline(12, T0 + 12), 1011.0)
    assert (tr.lines_seen, tr.progress(1011.0).step) == (12, 12)

    tr.stream_started(2000.0)  # reconnected: tail -n re-sends the last lines
    for s in range(8, 13):
        tr.feed(jline(s, T0 + s), 2000.0)
    p = tr.progress(2000.0)
    assert p.lines_seen == 12 and p.step == 12 and p.restarts == 0
    assert p.last_line_at == 1011.0  # nothing new arrived
    assert len(p.loss_history) == 12

    tr.feed(jline(13, T0 + 13), 2000.1)  # written while we were away
    p = tr.progress(2000.1)
    assert (p.lines_seen, p.step, len(p.loss_history), p.last_line_at) == (13, 13, 13, 2000.1)
    assert p.steps_per_s == pytest.approx(1.0)


def test_slow_retail_is_still_deduped_and_repeated_chatter_still_counts():
    tr = TrainingTracker(cfg())
    tr.stream_started(0.0)
    for s in range(1, 201):
        tr.feed(f"epoch=0 step={s} loss=2.0", 0.0)
    tr.feed("INFO heartbeat", 0.0)
    tr.stream_started(100.0)
    for i, s in enumerate(range(1, 201)):  # a slow link: the re-tail dribbles in over 10 s
        tr.feed(f"epoch=0 step={s} loss=2.0", 100.0 + i * 0.05)
    p = tr.progress(111.0)
    assert (p.restarts, p.step, p.lines_seen, p.last_line_at) == (0, 200, 201, 0.0)
    tr.feed("INFO heartbeat", 500.0)  # the same chatter again, live: a new line
    assert tr.progress(500.0).last_line_at == 500.0 and tr.lines_seen == 202


def test_restart_is_detected_and_resets_the_rate():
    tr = TrainingTracker(cfg(total_steps=1000))
    for s in range(1, 101):
        tr.feed(jline(s, T0 + 2 * s), 5.0)
    assert tr.progress(10.0).steps_per_s == pytest.approx(0.5)
    tr.feed("Starting training from epoch 0, step 0", 20.0)
    p = tr.progress(20.0)
    assert p.restarts == 1 and p.step == 0 and p.steps_per_s is None and p.eta_s is None
    tr.feed(jline(1, T0 + 1000), 21.0)
    tr.feed(jline(2, T0 + 1010), 22.0)
    p = tr.progress(22.0)
    assert p.step == 2 and p.steps_per_s == pytest.approx(0.1) and p.restarts == 1
    assert p.eta_s == pytest.approx(998 / 0.1)


def test_restart_written_while_disconnected_is_seen_in_the_retail():
    tr = TrainingTracker(cfg())
    tr.stream_started(0.0)
    for s in range(1, 11):
        tr.feed(jline(s, T0 + s), 0.0)
    tr.stream_started(100.0)
    for s in range(6, 11):
        tr.feed(jline(s, T0 + s), 100.0)  # replayed
    tr.feed("Total training steps: 500", 100.0)
    tr.feed(jline(1, T0 + 50), 100.0)  # the new run
    tr.feed(jline(2, T0 + 52), 100.0)
    p = tr.progress(100.0)
    assert (p.restarts, p.step, p.total_steps, p.lines_seen) == (1, 2, 500, 13)
    assert p.steps_per_s == pytest.approx(0.5)


def test_late_and_repeated_steps_are_not_restarts():
    tr = TrainingTracker(cfg())
    tr.feed(jline(100, T0 + 100), 1.0)
    tr.feed(jline(99, T0 + 101, loss=9.9), 1.0)  # a late line from another logger
    tr.feed("Training:  1%|#  | 100/10000 [01:40<2:45:00,  1.00it/s, loss=5.9]", 1.0)  # same step
    p = tr.progress(1.0)
    assert p.restarts == 0 and p.step == 100 and p.loss == 5.9
    assert p.loss_history == (5.9,)  # step 100 once; its bar's loss updates the value
    assert p.total_steps == 10000


def test_a_single_bogus_step_is_not_a_restart():
    tr = TrainingTracker(cfg(total_steps=1000))
    for s in range(1, 101):
        tr.feed(jline(s, T0 + s), 5.0)
    tr.feed('{"step": -100}', 6.0)  # negative: malformed, never a position
    tr.feed(jline(5, T0 + 100.5, loss=0.1), 6.0)  # one stray line from step 5
    p = tr.progress(6.0)
    assert (p.step, p.restarts, p.malformed, p.loss) == (100, 0, 1, pytest.approx(5.9))
    assert p.steps_per_s == pytest.approx(1.0)
    tr.feed(jline(101, T0 + 101), 7.0)  # the run goes on: the stray line is dismissed
    p = tr.progress(7.0)
    assert (p.step, p.restarts) == (101, 0) and tr.stray_records == 1
    assert 0.1 not in p.loss_history and p.steps_per_s == pytest.approx(1.0)


def test_a_drop_is_a_restart_once_steps_count_up_from_it():
    tr = TrainingTracker(cfg(total_steps=1000))
    for s in range(1, 101):
        tr.feed(jline(s, T0 + s), 5.0)
    tr.feed(jline(40, T0 + 200), 6.0)  # resumed from the step-40 checkpoint, no marker
    assert (tr.progress(6.0).step, tr.progress(6.0).restarts) == (100, 0)  # not yet confirmed
    tr.feed(jline(41, T0 + 202), 7.0)
    p = tr.progress(7.0)
    assert (p.step, p.restarts) == (41, 1) and p.steps_per_s == pytest.approx(0.5)
    # a restart marker confirms at once, even without a step of its own
    tr.feed("Resuming training from the latest checkpoint", 8.0)
    tr.feed(jline(10, T0 + 300), 8.0)
    assert (tr.progress(8.0).step, tr.progress(8.0).restarts) == (10, 2)
    # a drop with the next line still below the drop stays pending
    tr.feed(jline(60, T0 + 320), 9.0)
    tr.feed(jline(3, T0 + 330), 9.0)
    tr.feed(jline(2, T0 + 331), 9.0)
    assert (tr.progress(9.0).step, tr.progress(9.0).restarts) == (60, 2)
    tr.feed(jline(3, T0 + 333), 9.0)
    assert (tr.progress(9.0).step, tr.progress(9.0).restarts) == (3, 3)


def test_epoch_only_drop_needs_confirmation_too():
    tr = TrainingTracker(cfg(total_epochs=3))
    for e in (0.25, 0.5, 0.75):
        tr.feed(f"{{'loss': 2.5, 'epoch': {e}}}", 1.0)
    tr.feed("{'loss': 9.9, 'epoch': 0.01}", 2.0)
    tr.feed("{'loss': 2.4, 'epoch': 1.0}", 3.0)
    assert (tr.progress(3.0).epoch, tr.progress(3.0).restarts) == (1.0, 0)
    tr.feed("{'loss': 5.0, 'epoch': 0.01}", 4.0)
    tr.feed("{'loss': 4.9, 'epoch': 0.02}", 5.0)
    assert (tr.progress(5.0).epoch, tr.progress(5.0).restarts) == (0.02, 1)


# --------------------------------------------------------------------------- steps/s

def test_steps_per_s_from_line_timestamps_includes_the_backlog():
    tr = TrainingTracker(cfg())
    for s in range(3000, 4001, 100):
        tr.feed(jline(s, T0 + (s - 3000) * 20.0), 50.0)  # backlog: own timestamps count
    assert tr.progress(50.0).steps_per_s == pytest.approx(0.05)


def test_steps_per_s_from_arrival_ignores_the_backlog_burst():
    tr = TrainingTracker(cfg())
    tr.stream_started(0.0)
    for s in range(1, 6):
        tr.feed(f"epoch=0 step={s} loss=2.0", 0.0)
    assert tr.progress(0.0).steps_per_s is None
    tr.feed("epoch=0 step=6 loss=2.0", 10.0)
    assert tr.progress(10.0).steps_per_s is None  # one live point is not a rate
    tr.feed("epoch=0 step=8 loss=2.0", 20.0)
    assert tr.progress(20.0).steps_per_s == pytest.approx(0.2)


def test_steps_per_s_is_a_sliding_window():
    tr = TrainingTracker(cfg())
    for s in range(1, 41):
        t = 10.0 * s if s <= 20 else 200.0 + (s - 20)
        tr.feed(jline(s, T0 + t), 0.0)
    # the last 32 points: steps 9..40, at t = 90 .. 220
    assert tr.progress(0.0).steps_per_s == pytest.approx(31 / 130)


def test_tqdm_rate_is_used_when_there_is_no_window_yet():
    tr = TrainingTracker(cfg())
    tr.feed("Training:  12%|#  | 4000/33000 [1:23:45<7:01:00,  2.10it/s, loss=2.31]", 0.0)
    p = tr.progress(0.0)
    assert p.steps_per_s == 2.1 and p.total_steps == 33000
    assert p.eta_s == pytest.approx(29000 / 2.1) and p.eta_text == "3h 50m to 33000 steps"


# --------------------------------------------------------------------------- ETA

def two_points(tr: TrainingTracker, rate: float, last: int = 4000, span: int = 1000) -> None:
    tr.feed(jline(last - span, T0), 0.0)
    tr.feed(jline(last, T0 + span / rate), 0.0)


def test_eta_to_total_steps_is_exact():
    tr = TrainingTracker(cfg(total_steps=33000))
    two_points(tr, 0.047)
    p = tr.progress(0.0)
    assert p.step == 4000 and p.total_steps == 33000 and p.target_steps == 33000
    assert p.steps_per_s == pytest.approx(0.047, rel=1e-12)
    assert p.eta_s == pytest.approx(29000 / 0.047, rel=1e-9)  # 617021.28 s
    assert p.eta_s == pytest.approx(617021.2766, abs=1e-3)
    assert p.eta_target == "33000 steps" and p.eta_text == "7d 3h to 33000 steps"
    assert p.fraction == pytest.approx(4000 / 33000) and not p.is_done


def test_eta_to_epochs_via_configured_steps_per_epoch():
    tr = TrainingTracker(cfg(total_epochs=6, steps_per_epoch=5500))
    two_points(tr, 0.047)
    p = tr.progress(0.0)
    assert p.target_steps == 33000 and p.eta_target == "6 epochs"
    assert p.epoch == pytest.approx(4000 / 5500)  # derived: the lines carry no epoch
    assert p.eta_s == pytest.approx(617021.2766, abs=1e-3)
    assert p.eta_text == "7d 3h to 6 epochs"


def test_seed_workflow_reads_7d_2h_to_6_epochs():
    """~19.5K tokens/s, checkpoint at step 4000, 6 epochs, an estimate of 7.1 days."""
    tr = TrainingTracker(cfg(total_epochs=6))
    for s in range(3990, 4001):
        tr.feed(jline(s, T0 + (s - 3990) * 21.15, epoch=0, tokens_per_sec=19500.0,
                      total_steps=33000), 0.0)
    p = tr.progress(0.0)
    assert p.steps_per_epoch == 5500  # 33000 steps / 6 epochs: integer epochs can't tell
    assert p.target_steps == 33000
    assert p.tokens_per_s == 19500.0
    assert p.eta_s == pytest.approx(29000 * 21.15, rel=1e-9)  # 613350 s = 7.1 days
    assert p.eta_s / 86400 == pytest.approx(7.1, abs=0.01)
    assert p.eta_text == "7d 2h to 6 epochs"


def test_steps_per_epoch_inferred_from_a_fractional_epoch():
    tr = TrainingTracker(cfg(total_epochs=6))
    tr.feed(jline(2750, T0, epoch=0.5), 0.0)
    tr.feed(jline(2800, T0 + 1000, epoch=0.5090909090909091), 0.0)
    p = tr.progress(0.0)
    assert p.steps_per_epoch == pytest.approx(5500)
    assert p.target_steps == 33000 and p.steps_per_s == pytest.approx(0.05)
    assert p.eta_s == pytest.approx((33000 - 2800) / 0.05)


def test_eta_from_epoch_only_lines():
    tr = TrainingTracker(cfg(total_epochs=3))
    tr.stream_started(0.0)
    tr.feed("{'loss': 2.9, 'grad_norm': 1.4, 'learning_rate': 9.8e-05, 'epoch': 0.25}", 10.0)
    tr.feed("{'loss': 2.6, 'grad_norm': 1.2, 'learning_rate': 9.5e-05, 'epoch': 0.5}", 20.0)
    p = tr.progress(20.0)
    assert p.epoch == 0.5 and p.step is None and p.lr == 9.5e-05
    assert p.eta_s == pytest.approx(100.0) and p.eta_text == "1m to 3 epochs"
    # with steps_per_epoch the steps follow from the epoch
    tr2 = TrainingTracker(cfg(total_epochs=3, steps_per_epoch=1000))
    tr2.stream_started(0.0)
    tr2.feed("{'loss': 2.9, 'epoch': 0.25}", 10.0)
    tr2.feed("{'loss': 2.6, 'epoch': 0.5}", 20.0)
    p2 = tr2.progress(20.0)
    assert (p2.step, p2.target_steps, p2.steps_per_s) == (500, 3000, pytest.approx(25.0))
    assert p2.eta_s == pytest.approx(100.0)


def test_done_and_no_rate():
    tr = TrainingTracker(cfg())
    tr.feed(jline(5, T0, total_steps=10), 0.0)
    p = tr.progress(0.0)
    assert p.eta_s is None and p.eta_text is None and p.eta_target == "10 steps"
    tr.feed(jline(10, T0 + 5, total_steps=10), 1.0)
    p = tr.progress(1e9)
    assert p.is_done and p.eta_s == 0.0 and p.eta_text == "done (10 steps)"
    assert not p.stalled  # a finished job is quiet, not stalled


# --------------------------------------------------------------------------- stall, counts

def test_stall_flag_after_stall_warning_min():
    tr = TrainingTracker(cfg(stall_warning_min=10))
    assert not tr.progress(0.0).stalled
    tr.feed(jline(1, T0), 1000.0)
    assert not tr.progress(1000.0 + 599).stalled
    assert tr.progress(1000.0 + 600).stalled
    tr.feed("INFO still alive", 1700.0)  # any new line counts as life
    assert not tr.progress(1700.0).stalled


def test_counts_and_recent_lines_from_a_real_shaped_log():
    tr = TrainingTracker(cfg())
    raw = (FIXTURES / "dflash.jsonl").read_bytes().decode().split("\n")
    for line in raw:
        tr.feed(line, 5.0)
    p = tr.progress(5.0)
    assert p.lines_seen == 8 and p.malformed == 2
    assert p.step == 3 and p.total_steps == 33000
    assert p.recent_lines[-1].startswith('{"event": "checkpoint"')
    assert len(p.recent_lines) == 8
    assert p.loss_history == (5.5735, 5.5471, 5.5035)
    tr2 = TrainingTracker(cfg())
    for line in (FIXTURES / "tqdm.log").read_bytes().decode().split("\n"):
        tr2.feed(line, 5.0)
    shown = tr2.progress(5.0).recent_lines
    assert shown[0] == "  12%|█▏        | 4000/33000 [1:23:45<7:01:00,  2.10it/s, loss=2.31]"
    assert all("\x1b" not in s and "\r" not in s for s in shown)


def test_tail_error_from_stderr():
    missing = "tail: cannot open '/x/train.log' for reading: No such file or directory\n"
    assert tail_error(missing, "/x/train.log") == "log file not found yet: /x/train.log"
    appeared = missing + "tail: '/x/train.log' has appeared;  following new file\n"
    assert tail_error(appeared, "/x/train.log") is None
    denied = "tail: cannot open '/x/train.log' for reading: Permission denied\n"
    assert tail_error(denied, "/x/train.log") == "cannot read log file /x/train.log: Permission denied"
    gone = "tail: '/x/train.log' has become inaccessible: No such file or directory\n"
    assert (tail_error(gone, "/x/train.log") or "").startswith("log deleted: /x/train.log — ")
    assert tail_error(gone + "tail: '/x/train.log' has appeared;  following new file\n", "/x/train.log") is None
    perm = "tail: '/x/train.log' has become inaccessible: Permission denied\n"
    assert tail_error(perm, "/x/train.log") == ("log unreadable: /x/train.log: Permission denied — "
                                                "check the file's permissions")


# --------------------------------------------------------------------------- the source, for real

def tail_pids(path: Path) -> list[int]:
    """Processes running `tail ... PATH` (our LocalHost's stream), found in /proc."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == b"tail" and str(path).encode() in argv:
            pids.append(int(entry))
    return pids


class Running:
    """A TrainingSource running on a LocalHost, collecting what it publishes."""

    def __init__(self, log: Path, **training: object) -> None:
        self.cfg = TrainingConfig(log_path=str(log), **training)  # type: ignore[arg-type]
        self.host = LocalHost(HostConfig(name="trainbox", role="train", training=self.cfg))
        self.source = TrainingSource(self.host, self.cfg, interval_s=0.2)
        self.samples: list[Sample[TrainingProgress]] = []
        self.task: asyncio.Task[None] | None = None

    @property
    def last(self) -> TrainingProgress:
        return self.samples[-1].value

    async def __aenter__(self) -> Running:
        await self.host.start()
        self.task = asyncio.create_task(self.source.run(self.samples.append))
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        await self.host.close()


async def test_source_picks_up_appended_lines_incrementally(tmp_path: Path):
    log = tmp_path / "train.log"
    log.write_text("Total training steps: 33000\n" + "".join(jline(s, T0 + s) + "\n" for s in (1, 2)))
    async with Running(log, total_epochs=6) as run:
        await wait_for(lambda: bool(run.samples) and run.last.step == 2, 15.0, what="the condition")
        assert run.source.command == ["tail", "-n", "200", "-F", "--", str(log)]
        assert len(tail_pids(log)) == 1
        with log.open("a") as f:
            for s in range(3, 6):
                f.write(jline(s, T0 + s) + "\n")
                f.flush()
                await wait_for(lambda s=s: run.last.step == s, 15.0, what="the condition")
        p = run.last
        assert p.lines_seen == 6 and p.total_steps == 33000 and p.eta_target == "6 epochs"
        assert p.steps_per_s == pytest.approx(1.0) and p.error is None
        assert run.source.streams_started == 1 and len(tail_pids(log)) == 1  # one tail, still
        sample = run.samples[-1]
        assert sample.interval == 0.2 and abs(sample.at - time.time()) < 5
        # periodic samples keep coming with no new lines (ages, stall stay current)
        n = len(run.samples)
        await wait_for(lambda: len(run.samples) >= n + 2, timeout=5, what="the condition")
    await wait_for(lambda: not tail_pids(log), timeout=5, what="the condition")


async def test_source_waits_for_a_log_created_later(tmp_path: Path):
    log = tmp_path / "later" / "train.log"
    async with Running(log) as run:
        await wait_for(lambda: bool(run.samples)
                       and run.last.error == f"log file not found yet: {log}", 15.0, what="the condition")
        n = len(run.samples)
        await wait_for(lambda: len(run.samples) >= n + 3, timeout=5, what="the condition")
        assert run.last.error == f"log file not found yet: {log}"  # it stays until the file is there
        assert run.last.step is None
        log.parent.mkdir()
        log.write_text("Starting training from epoch 0, step 0\n" + jline(1, T0) + "\n")
        await wait_for(lambda: run.last.step == 1, timeout=20, what="the condition")  # tail -F polls for it
        assert run.last.error is None
        assert len(tail_pids(log)) == 1 and run.source.streams_started == 1


async def test_source_restarts_the_tail_when_the_stream_ends(tmp_path: Path):
    log = tmp_path / "train.log"
    log.write_text("".join(jline(s, T0 + s) + "\n" for s in (1, 2, 3)))
    async with Running(log) as run:
        await wait_for(lambda: bool(run.samples) and run.last.step == 3, 15.0, what="the condition")
        [pid] = tail_pids(log)
        os.kill(pid, 15)  # the stream ends (as when a host drops)
        await wait_for(lambda: run.source.streams_started == 2 and len(tail_pids(log)) == 1, 15.0, what="the condition")
        with log.open("a") as f:
            f.write(jline(4, T0 + 4) + "\n")
        await wait_for(lambda: run.last.step == 4, 15.0, what="the condition")
        p = run.last
        assert p.lines_seen == 4 and p.restarts == 0 and p.error is None  # re-tail deduped
        assert len(p.loss_history) == 4


async def test_source_flags_a_deleted_log_and_recovers(tmp_path: Path):
    log = tmp_path / "train.log"
    log.write_text("".join(jline(s, T0 + s) + "\n" for s in (1, 2, 3)))
    async with Running(log) as run:
        await wait_for(lambda: bool(run.samples) and run.last.step == 3, 15.0, what="the condition")
        log.unlink()
        await wait_for(lambda: (run.last.error or "").startswith(f"log deleted: {log} — "), timeout=20,
                       what="the condition")
        assert run.last.step == 3  # what was read stays
        n = len(run.samples)
        await wait_for(lambda: len(run.samples) >= n + 3, timeout=5, what="the condition")
        assert (run.last.error or "").startswith("log deleted")  # it stays until the log is back
        log.write_text(jline(4, T0 + 4) + "\n")
        await wait_for(lambda: run.last.step == 4 and run.last.error is None, timeout=20, what="the condition")
        assert run.source.streams_started == 1


async def test_source_skips_an_oversized_line_and_goes_on(tmp_path: Path):
    log = tmp_path / "train.log"
    log.write_text(jline(1, T0 + 1) + "\n")
    async with Running(log) as run:
        await wait_for(lambda: bool(run.samples) and run.last.step == 1, 15.0, what="the condition")
        with log.open("a") as f:
            f.write('{"step": 2, "blob": "' + "x" * (3 << 20) + '"}\n')  # 3 MiB on one line
            f.write(jline(3, T0 + 3) + "\n")
        await wait_for(lambda: run.last.step == 3, timeout=30, what="the condition")
        p = run.last
        assert p.malformed == 1 and p.error is None and p.lines_seen == 3
        assert any("was skipped: longer than the 64 KiB line limit" in ln for ln in p.recent_lines)
        with log.open("a") as f:  # and keeps reading: the same stream, nothing restarted
            f.write(jline(4, T0 + 4) + "\n")
        await wait_for(lambda: run.last.step == 4, timeout=20, what="the condition")
        assert run.source.streams_started == 1


async def test_over_ssh_a_long_line_arrives_in_pieces_and_is_skipped_too(lab_hosts: Lab):
    """asyncssh hands a 3 MiB line over as pieces of its buffer size: those over the limit are
    skipped and counted like the local host's, and reading goes on."""
    from specconsole.config import load_config
    from specconsole.hosts.ssh import SshHost

    log = lab_hosts.root("train") / "long.log"
    log.write_text(jline(1, T0 + 1) + "\n")
    cfg = TrainingConfig(log_path=str(log))
    host = SshHost(load_config(lab_hosts.config_path).host("train"))
    source = TrainingSource(host, cfg, interval_s=0.2)
    samples: list[Sample[TrainingProgress]] = []
    await host.start()
    task = asyncio.create_task(source.run(samples.append))
    try:
        await wait_for(lambda: bool(samples) and samples[-1].value.step == 1, timeout=60, what="the condition")
        with log.open("a") as f:
            f.write('{"step": 2, "blob": "' + "x" * (3 << 20) + '"}\n')
            f.write(jline(3, T0 + 3) + "\n")
        await wait_for(lambda: samples[-1].value.step == 3, timeout=120, what="the condition")
        p = samples[-1].value
        assert p.malformed >= 1 and p.error is None
        assert any("was skipped: longer than the 64 KiB line limit" in ln
                   for ln in p.recent_lines)
        assert all(len(ln) <= TrainingTracker.RECENT_CHARS for ln in p.recent_lines)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await host.close()


async def test_a_flood_is_measured_and_skipped_not_replayed(tmp_path: Path):
    """40 MB of well-formed lines at once: the tail says how far behind the log's end it is
    within 2 s, skips ahead to the newest lines instead of replaying them all (saying so), and
    shows the newest step, no longer behind, within 10 s."""
    from specconsole.sources.training import SKIP_AHEAD_BYTES

    log = tmp_path / "train.log"
    log.write_text(jline(1, T0 + 1) + "\n")
    async with Running(log) as run:
        await wait_for(lambda: bool(run.samples) and run.last.step == 1, 15.0, what="step 1")
        await wait_for(lambda: run.last.behind_bytes == 0, 10.0, what="a first lag check")
        pad = "x" * 200
        last = 2 + 40_000_000 // len(jline(2, T0, loss=1.0, pad=pad))
        with log.open("a") as f:
            for start in range(2, last + 1, 10_000):
                steps = range(start, min(start + 10_000, last + 1))
                f.write("".join(jline(s, T0 + s, loss=1.0, pad=pad) + "\n" for s in steps))
        flooded = time.monotonic()
        await wait_for(lambda: (run.last.behind_bytes or 0) > 0 or run.last.skips > 0, 2.5, what="the lag")
        await wait_for(lambda: run.last.step == last and run.last.behind_bytes == 0, 10.0, what="catching up")
        p = run.last
        assert p.skips >= 1 and p.skipped_bytes > SKIP_AHEAD_BYTES and p.skip_note is not None
        assert "behind the log's end; skipped ahead to its last 200 lines" in p.skip_note
        assert time.monotonic() - flooded < 12
        assert p.lines_seen < last // 2  # most of the flood was never parsed
        assert run.source.streams_started >= 2


def test_a_skip_ahead_becomes_one_event() -> None:
    from specconsole.monitor import HostMonitor

    cfg = TrainingConfig(log_path="/var/log/train.jsonl")
    monitor = HostMonitor(HostConfig(name="trainbox", role="train", training=cfg),
                          host=LocalHost(HostConfig(name="trainbox", role="train")))
    publish = monitor._publisher("training")
    note = "training log: the tail was 9 MiB behind the log's end; skipped ahead"
    for skips in (0, 1, 1, 2):
        publish(Sample(TrainingProgress(log_path=cfg.log_path, skips=skips, skip_note=note), at=T0, interval=1.0))
    assert [(e.message, e.level, e.source) for e in monitor.events.recent] == [(note, "warning", "trainbox")] * 2
