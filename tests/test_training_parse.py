"""The training-log line parser against real-shaped lines of drafter trainers (formats.md)."""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path

import pytest

from specconsole.formats.training_log import (
    LineKind,
    LineParser,
    TrainingRecord,
    canonical_key,
    display_line,
    parse_line,
    parse_number,
    parse_timestamp,
    strip_ansi,
)

FIXTURES = Path(__file__).parent / "fixtures" / "training"


def lines(name: str) -> list[str]:
    # bytes, not text mode: universal newlines would turn tqdm's \r into line breaks
    return [ln for ln in (FIXTURES / name).read_bytes().decode("utf-8").split("\n") if ln]


def records(name: str, **kw: object) -> list[TrainingRecord]:
    parser = LineParser(**kw)  # type: ignore[arg-type]
    out = []
    for ln in lines(name):
        parsed = parser.parse(ln)
        if parsed.kind is LineKind.RECORD:
            assert parsed.record is not None
            out.append(parsed.record)
    return out


def local(stamp: str, fmt: str) -> float:
    return datetime.strptime(stamp, fmt).timestamp()


# --------------------------------------------------------------------------- JSON lines

def test_json_lines_of_a_dflash_trainer():
    parser = LineParser()
    kinds = [parser.parse(ln).kind for ln in lines("dflash.jsonl")]
    assert kinds == [
        LineKind.RECORD,     # Total training steps: 33000
        LineKind.RECORD,     # Starting training from epoch 0, step 0
        LineKind.RECORD, LineKind.RECORD,
        LineKind.MALFORMED,  # truncated {"step": 3, "lo
        LineKind.RECORD,     # ISO time string
        LineKind.MALFORMED,  # "loss": "n/a"
        LineKind.OTHER,      # a JSON event with no training fields
    ]
    first = parser.parse(lines("dflash.jsonl")[2]).record
    assert first == TrainingRecord(
        step=1, epoch=0.0002, loss=5.5735, lr=1e-05, tokens_per_s=19480.2, grad_norm=0.2467,
        total_steps=33000, time=1783412100.0,
    )
    iso = parser.parse(lines("dflash.jsonl")[5]).record
    assert iso is not None and iso.step == 3
    assert iso.time == pytest.approx(local("2026-07-07 10:15:42.56", "%Y-%m-%d %H:%M:%S.%f"))
    assert parser.parse(lines("dflash.jsonl")[0]).record == TrainingRecord(
        total_steps=33000, extra={"steps": 33000.0})


def test_json_aliases_nested_and_extra_fields():
    rec = parse_line('{"global_step": 7, "train/loss": 1.5, "learning_rate": 2e-4, "tok/s": 19500, '
                     '"acc_0": 0.8, "metrics": {"grad_norm": 0.5}, "name": "x", "ok": true}').record
    assert rec == TrainingRecord(step=7, loss=1.5, lr=2e-4, tokens_per_s=19500.0, grad_norm=0.5,
                                 extra={"acc_0": 0.8})


def test_json_timestamp_field_and_milliseconds():
    assert parse_line('{"timestamp": 1783412100000, "step": 1, "loss": 2}').record.time == 1783412100.0
    # a duration called "time" is not a clock reading
    rec = parse_line('{"time": 0.35, "step": 1, "loss": 2}').record
    assert rec.time is None and rec.extra == {"time": 0.35}


# --------------------------------------------------------------------------- dict reprs

def test_specforge_train_dict_repr_with_step_prefix_and_train_prefix():
    recs = records("specforge_train.log")
    assert [r.step for r in recs] == [100, 120, 140]
    assert [r.loss for r in recs] == [2.45, 2.31, 2.2]
    assert recs[2].grad_norm == 0.98 and recs[2].lr == 9.9e-05
    assert recs[1].extra == {"acc": 0.41, "perf/global_samples_per_second": 84.9}
    assert recs[2].extra["train/acc"] == 0.43


def test_hf_trainer_dict_lines_and_step_acc_lines():
    recs = records("modelopt_hf.log")
    assert recs[0] == TrainingRecord(epoch=0.25, loss=2.9071, grad_norm=1.4482, lr=9.8e-05)
    assert recs[1] == TrainingRecord(step=500, extra={"Acc": 0.3811})
    assert recs[2].epoch == 0.5 and recs[3].step == 1000
    assert parse_line("***** Running training *****").kind is LineKind.OTHER
    assert parse_line("  Num examples = 800,000").kind is LineKind.OTHER


def test_dict_repr_with_nan_is_still_read():
    rec = parse_line("{'loss': nan, 'grad_norm': inf, 'epoch': 0.5}").record
    assert math.isnan(rec.loss) and rec.grad_norm == math.inf and rec.epoch == 0.5


# --------------------------------------------------------------------------- key=value / key: value

def test_specforge_dflash_python_logging_lines():
    parser = LineParser()
    parsed = [parser.parse(ln) for ln in lines("specforge_dflash.log")]
    assert [p.kind for p in parsed] == [
        LineKind.OTHER, LineKind.RECORD, LineKind.RECORD, LineKind.RECORD, LineKind.RECORD,
        LineKind.RECORD, LineKind.OTHER, LineKind.RECORD,
    ]
    step50 = parsed[3].record
    assert step50 == TrainingRecord(
        step=50, loss=5.1234, total_steps=73242, extra={"Acc": 0.1234},
        time=local("07/07/2026 09:15:51", "%m/%d/%Y %H:%M:%S"),
    )
    assert parsed[1].record.total_steps == 73242 and parsed[1].record.step is None
    start = parsed[2].record
    assert (start.step, start.epoch) == (0, 0.0)


def test_speculators_rich_kv_lines():
    recs = records("speculators.log")
    assert len(recs) == 2
    r = recs[0]
    assert (r.step, r.epoch, r.loss, r.lr, r.tokens_per_s) == (100, 0.0, 1.234, 6.0e-4, 4.02e4)
    assert r.extra == {"train/full_acc": 0.456, "train/acc_0": 0.81}  # not "trainer.py:212"
    assert r.time == local("07/07/26 22:21:40", "%m/%d/%y %H:%M:%S")
    assert recs[1].step == 200


def test_nemo_kv_line():
    rec = parse_line("epoch=0 step=305 loss=8.7851 acc=0.1181 lr=6.10169e-05").record
    assert rec == TrainingRecord(step=305, epoch=0.0, loss=8.7851, lr=6.10169e-05,
                                 extra={"acc": 0.1181})


def test_nemo_tqdm_bar_glued_to_a_log_line_by_cr_gives_the_best_record():
    rec = parse_line(lines("nemo_automodel.log")[2]).record
    # the log line's precise loss and its timestamp, completed by the bar's total and rate
    assert rec.step == 38 and rec.epoch == 0.0
    assert rec.loss == 8.284101
    assert rec.total_steps == 64 and rec.it_per_s == 3.07
    assert rec.lr == 4.47e-05
    assert rec.time == local("2026-07-07 22:20:52", "%Y-%m-%d %H:%M:%S")
    assert rec.extra == {"acc": 0.0107, "tau": 1.03}


def test_bar_glued_without_cr_is_split_too():
    line = lines("nemo_automodel.log")[2].replace("\r", "")
    rec = parse_line(line).record
    assert (rec.step, rec.loss, rec.total_steps, rec.it_per_s) == (38, 8.284101, 64, 3.07)


def test_key_value_variants():
    rec = parse_line("iter: 12 | loss: 3.5 | lr: 1.0e-04 | grad-norm: 0.7 | tokens/s: 19.5k").record
    assert rec == TrainingRecord(step=12, loss=3.5, lr=1e-4, grad_norm=0.7, tokens_per_s=19500.0)
    rec = parse_line("Epoch 2/6 Step 400 of 33000 loss=2.0").record
    assert (rec.epoch, rec.total_epochs, rec.step, rec.total_steps) == (2.0, 6.0, 400, 33000)
    rec = parse_line("step: 9/100, loss: 1.0").record
    assert (rec.step, rec.total_steps) == (9, 100)
    assert parse_line("global_step=3 loss=tensor(2.5000)").record.loss == 2.5


# --------------------------------------------------------------------------- tqdm

def test_tqdm_lines_with_ansi_and_cr():
    parser = LineParser()
    tq = [parser.parse(ln) for ln in lines("tqdm.log")]
    a = tq[0].record  # the last redraw wins
    assert (a.step, a.total_steps, a.it_per_s, a.loss) == (4000, 33000, 2.1, 2.31)
    b = tq[1].record  # s/it, description with the epoch, postfix units
    assert (b.step, b.total_steps, b.epoch, b.loss) == (4000, 33000, 0.0, 2.31)
    assert b.it_per_s == pytest.approx(1 / 21.15)
    assert b.extra == {"acc": 0.41, "iter_time": 21.1}
    assert tq[2].kind is LineKind.OTHER  # a bar, but it counts checkpoint shards, not steps
    d = tq[3].record  # no total known
    assert (d.step, d.total_steps, d.it_per_s, d.loss) == (4000, None, 2.1, 2.31)


def test_tqdm_unit_scale_and_bare_bar_in_tqdm_format():
    bare = "100%|##########| 1.20k/1.20k [00:10<00:00, 1.15kit/s]"
    assert parse_line(bare).kind is LineKind.OTHER  # no description, no postfix: not sure
    rec = parse_line(bare, format="tqdm").record
    assert (rec.step, rec.total_steps, rec.it_per_s) == (1200, 1200, 1150.0)
    assert parse_line("Evaluating: 50%|#####     | 5/10 [00:01<00:01, 4.2it/s, loss=1.0]").kind \
        is LineKind.OTHER


# --------------------------------------------------------------------------- other / malformed

@pytest.mark.parametrize("line", [
    "INFO: Started server process [1234]",
    "07/07/2026 09:18:06 - INFO - specforge.utils - Saved checkpoint to /ckpt/epoch_0_step_150",
    "Warmup for 100 steps",
    "Serving at http://0.0.0.0:30000",
    "Memory: 12.3 GB",
    "",
    "{\"event\": \"start\"}",
])
def test_chatter_is_other_not_malformed(line):
    assert parse_line(line).kind is LineKind.OTHER


@pytest.mark.parametrize("line", [
    '{"step": 12, "lo',
    '{"step": 12, "loss": "abc"}',
    "step=5 loss=abc",
    "{'loss': 2.3, 'epoch': ",
    # below zero: no trainer logs these; a bogus line must not become the current step
    '{"step": -100}',
    '{"step": 7, "loss": -2.5}',
    '{"step": 7, "tokens_per_sec": -19500}',
    "step=7 loss=-0.1",
    "{'loss': 2.3, 'learning_rate': -1e-05, 'epoch': 0.4}",
])
def test_broken_records_are_malformed(line):
    parsed = parse_line(line)
    assert parsed.kind is LineKind.MALFORMED and parsed.record is None and parsed.reason


# --------------------------------------------------------------------------- config

def test_custom_pattern_is_tried_first():
    pattern = r"it (?P<step>\d+) \| l=(?P<loss>[\d.]+) \| spd (?P<tokens_per_s>[\d.]+) \| a=(?P<acc>[\d.]+)"
    line = "it 42 | l=1.25 | spd 19500.5 | a=0.5"
    assert parse_line(line).kind is LineKind.OTHER
    rec = parse_line(line, patterns=[pattern]).record
    assert rec == TrainingRecord(step=42, loss=1.25, tokens_per_s=19500.5, extra={"acc": 0.5})
    # a pattern wins over what the built-in parsers would read
    rec = parse_line("step=1 loss=9.0 real_loss=2.0", patterns=[r"step=(?P<step>\d+).*real_loss=(?P<loss>\S+)"]).record
    assert rec.loss == 2.0
    bad = parse_line("it 42 | l=x.y | spd 1 | a=1", patterns=[r"it (?P<step>\d+) \| l=(?P<loss>\S+)"])
    assert bad.kind is LineKind.MALFORMED


def test_format_restricts_parsing():
    js = '{"step": 5, "loss": 2.0}'
    kv = "step=5 loss=2.0"
    bar = "Training:  12%|#         | 4000/33000 [1:23:45<7:01:00,  2.10it/s, loss=2.31]"
    assert parse_line(js, format="json").record.step == 5
    assert parse_line(kv, format="json").kind is LineKind.OTHER
    assert parse_line(kv, format="kv").record.step == 5
    assert parse_line(bar, format="kv").record.step is None  # kv reads only its postfix
    assert parse_line(bar, format="tqdm").record.step == 4000
    assert parse_line(kv, format="tqdm").kind is LineKind.OTHER
    assert parse_line(js, format="regex").kind is LineKind.OTHER
    assert parse_line(kv, format="regex", patterns=[r"step=(?P<step>\d+)"]).record.step == 5


# --------------------------------------------------------------------------- helpers

def test_helpers():
    assert strip_ansi("\x1b[1;32mloss\x1b[0m=1 \x1b]0;title\x07") == "loss=1 "
    assert display_line("\x1b[A\r 1%|a\r 2%|b\r") == " 2%|b"
    assert parse_number("6.00e-04") == 6e-4 and parse_number("[0.41]") == 0.41
    assert parse_number("19.5k") == 19500.0 and parse_number("120ms") == 0.12
    assert parse_number("abc") is None and parse_number(True) is None
    assert parse_timestamp("2026-07-07T22:20:52Z") == datetime.fromisoformat(
        "2026-07-07T22:20:52+00:00").timestamp()
    assert parse_timestamp("07/07/2026 22:20:52") == local("07/07/2026 22:20:52", "%m/%d/%Y %H:%M:%S")
    assert canonical_key("train/loss") == "loss" and canonical_key("profile/tokens_per_s") == "tokens_per_s"
    assert canonical_key("eval/loss") is None and canonical_key("global_step") == "step"


def test_json_with_trailing_text_is_not_truncated():
    rec = parse_line('{"step": 5, "loss": 2.0} (rank 0)').record
    assert (rec.step, rec.loss) == (5, 2.0)
    assert parse_line("Using template {role}: {content}").kind is LineKind.OTHER


def test_nan_loss_is_still_a_record():
    parsed = parse_line('{"step": 9, "loss": NaN}')
    assert parsed.kind is LineKind.RECORD and parsed.record is not None
    assert parsed.record.step == 9 and parsed.record.loss is not None and math.isnan(parsed.record.loss)
