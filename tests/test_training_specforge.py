"""Both SpecForge log formats, as whole sessions with the noise around them (formats.md).

* the newer ``specforge train``: ``step N: {'loss': ..., 'accuracy': ..., 'lr': ...,
  'perf/global_samples_per_second': ...}`` (a Python dict repr, read with ``ast.literal_eval``;
  ``nan`` and ``tensor(...)`` values, ``train/`` prefixes, eval records of the same step);
* the older ``scripts/train_dflash.py``: ``Train - Step N [N/total?], Loss: ..., Acc: ...``
  Python-logging lines, with the rank-0 ``Training Epoch E`` tqdm bar glued on by ``\\r``.

Both are read by the default ``format = "auto"``: nothing is configured per trainer.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from specconsole.config import TrainingConfig
from specconsole.formats.training_log import LineKind, LineParser, ParsedLine, parse_line
from specconsole.sources.training_progress import TrainingProgress, TrainingTracker

FIXTURES = Path(__file__).parent / "fixtures" / "training"
T0 = 1_783_000_000.0


def raw_lines(name: str) -> list[str]:
    # bytes, not text mode: universal newlines would turn tqdm's \r into line breaks
    return [ln for ln in (FIXTURES / name).read_bytes().decode("utf-8").split("\n") if ln]


def parsed(name: str) -> list[ParsedLine]:
    parser = LineParser()  # auto
    return [parser.parse(ln) for ln in raw_lines(name)]


def track(name: str) -> tuple[TrainingTracker, TrainingProgress]:
    tracker = TrainingTracker(TrainingConfig(log_path=name))
    tracker.stream_started(T0)
    lines = raw_lines(name)
    for i, ln in enumerate(lines):
        tracker.feed(ln, T0 + 10.0 + 60.0 * i)  # live lines a minute apart, after the backlog
    return tracker, tracker.progress(T0 + 10.0 + 60.0 * len(lines))


# --------------------------------------------------------------------------- newer: step N: {dict}

def test_newer_trainer_session_reads_every_step_record_and_nothing_else():
    out = parsed("specforge_train_session.log")
    assert not [p for p in out if p.kind is LineKind.MALFORMED]
    recs = [p.record for p in out if p.kind is LineKind.RECORD and p.record is not None]
    steps = [r.step for r in recs if r.step is not None]
    assert steps == [50, 100, 150, 200, 250, 250, 250, 300]
    # the chatter: run banner, a datasets.map bar, a warning and its source line, an NCCL warning,
    # the "saved checkpoint ... -step250" line (a path, not a step)
    others = [i for i, p in enumerate(out) if p.kind is LineKind.OTHER]
    assert others == [0, 1, 2, 3, 7, 13]


def test_newer_trainer_dict_fields():
    recs = {i: p.record for i, p in enumerate(parsed("specforge_train_session.log")) if p.record}
    first = recs[5]
    assert (first.step, first.loss, first.grad_norm, first.lr) == (50, 5.4117, 3.2181, 1.25e-05)
    assert first.extra["accuracy"] == 0.1043
    assert first.extra["perf/global_samples_per_second"] == 81.37
    assert (first.extra["acc_0"], first.extra["acc_1"]) == (0.3311, 0.1402)
    # a tracker set: train/ prefixes map to the same fields; [rank0]: in front does not matter
    prefixed = recs[8]
    assert (prefixed.step, prefixed.loss, prefixed.lr, prefixed.epoch) == (150, 4.5518, 3.75e-05, 0.01875)
    assert prefixed.extra["train/accuracy"] == 0.1698
    # nan is not a Python literal: the pairs are read one by one and the divergence kept
    diverged = recs[9]
    assert diverged.step == 200 and math.isnan(diverged.loss) and math.isnan(diverged.grad_norm)
    # a tensor repr left in the dict
    assert (recs[10].step, recs[10].loss) == (250, 4.2107)
    # an eval record of the same step is no training loss
    assert recs[11].step == 250 and recs[11].loss is None
    assert recs[11].extra["eval/simulated_acc_len"] == 2.41


def test_newer_trainer_session_progress():
    tracker, p = track("specforge_train_session.log")
    assert (p.step, p.total_steps, p.loss, p.lr) == (300, 24000, 4.0876, 7.5e-05)
    assert p.restarts == 0 and p.malformed == 0 and tracker.stray_records == 0
    assert p.steps_per_s is not None and p.eta_text is not None and p.eta_text.endswith("to 24000 steps")


def test_dict_line_is_read_without_eval():
    # ast.literal_eval, never eval: an expression in the dict is not run, only its pairs read
    line = "step 7: {'loss': __import__('os').getpid(), 'lr': 1e-05}"
    p = parse_line(line)
    assert p.kind is LineKind.MALFORMED or (p.record is not None and p.record.loss is None)


# --------------------------------------------------------------------------- older: Train - Step N

def test_older_trainer_session_glued_bars_and_log_lines():
    out = parsed("specforge_dflash_session.log")
    assert not [p for p in out if p.kind is LineKind.MALFORMED]
    recs = [p.record for p in out if p.record is not None]
    assert [r.step for r in recs] == [None, 0, 50, 100, 150, 200, 12300, 12350]
    step50 = recs[2]
    assert (step50.loss, step50.total_steps, step50.epoch) == (5.1234, 73242, 0.0)
    assert step50.extra["Acc"] == 0.1234
    assert step50.it_per_s == pytest.approx(1 / 1.42)
    # epoch 1's bar counts within the epoch (93/12207): its epoch is taken, its step and total not
    late = recs[6]
    assert (late.step, late.epoch, late.total_steps, late.loss) == (12300, 1.0, 73242, 2.1043)


def test_older_trainer_session_progress():
    tracker, p = track("specforge_dflash_session.log")
    assert (p.step, p.total_steps, p.epoch, p.loss) == (12350, 73242, 1.0, 2.0991)
    assert p.restarts == 0 and tracker.stray_records == 0 and p.malformed == 0
    assert p.eta_text is not None and p.eta_text.endswith("to 73242 steps")


@pytest.mark.parametrize("line", [
    "07/07/2026 09:18:06 - INFO - specforge.utils - Saved checkpoint to /ckpt/dflash/epoch_0_step_150",
    "2026-07-08 10:08:19,002 INFO saved checkpoint run-a-step250 to /ckpt/runs/run-a-step250",
    "Loading checkpoint shards: 100%|██████████| 5/5 [00:04<00:00,  1.12it/s]",
    "[rank3]:[W707 09:17:01.000000000 ProcessGroupNCCL.cpp:4115] Warning: TORCH_NCCL_AVOID_RECORD_STREAMS=1",
])
def test_checkpoint_and_noise_lines_carry_no_step(line):
    p = parse_line(line)
    assert p.record is None or p.record.step is None
