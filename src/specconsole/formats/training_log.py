"""Training-log line formats: turn one raw line of a drafter trainer's log into a record.

Pure parsing, no I/O. :class:`LineParser` / :func:`parse_line` turn one raw log line into a
:class:`ParsedLine`: a :class:`TrainingRecord`, "other" (chatter without training fields) or
"malformed" (looks like a record but cannot be read). It knows JSON lines, Python dict reprs
(HF Trainer, SpecForge's ``step 120: {...}``), ``key=value`` / ``key: value`` text (SpecForge's
``Train - Step N [N/total?], Loss: ...``, speculators, NeMo) and tqdm bars; it strips ANSI
codes and splits on ``\\r`` first (see ``/work/shared/reference/formats.md``).
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class TrainingRecord:
    """The training fields one log line carried; every field is optional."""

    step: int | None = None
    epoch: float | None = None
    loss: float | None = None
    lr: float | None = None
    tokens_per_s: float | None = None
    grad_norm: float | None = None
    total_steps: int | None = None
    total_epochs: float | None = None
    it_per_s: float | None = None
    time: float | None = None
    extra: Mapping[str, float] = field(default_factory=dict)

    @property
    def has_fields(self) -> bool:
        return any(getattr(self, name) is not None for name in _CORE)

    def merged_with(self, other: TrainingRecord) -> TrainingRecord:
        """Self, with the fields self lacks taken from ``other``."""
        changes: dict[str, Any] = {}
        for name in (*_CORE, "time"):
            if getattr(self, name) is None and getattr(other, name) is not None:
                changes[name] = getattr(other, name)
        if other.extra:
            changes["extra"] = {**other.extra, **self.extra}
        return replace(self, **changes) if changes else self


_CORE = ("step", "epoch", "loss", "lr", "tokens_per_s", "grad_norm", "total_steps",
         "total_epochs", "it_per_s")
_INT_FIELDS = frozenset({"step", "total_steps"})


class LineKind(StrEnum):
    RECORD = "record"
    OTHER = "other"
    MALFORMED = "malformed"


@dataclass(frozen=True)
class ParsedLine:
    kind: LineKind
    record: TrainingRecord | None = None
    reason: str | None = None


_OTHER = ParsedLine(LineKind.OTHER)

# --------------------------------------------------------------------------- key aliases

_ALIASES: dict[str, str] = {
    "step": "step", "global_step": "step", "globalstep": "step", "iteration": "step",
    "iter": "step", "train_step": "step",
    "epoch": "epoch", "train_epoch": "epoch",
    "loss": "loss", "train_loss": "loss", "training_loss": "loss", "loss_total": "loss",
    "lr": "lr", "learning_rate": "lr", "learningrate": "lr",
    "tokens_per_s": "tokens_per_s", "tokens_per_sec": "tokens_per_s", "tok/s": "tokens_per_s",
    "tokens/s": "tokens_per_s", "tok_per_s": "tokens_per_s", "tokens_per_second": "tokens_per_s",
    "toks/s": "tokens_per_s", "tokens/sec": "tokens_per_s", "tok/sec": "tokens_per_s",
    "grad_norm": "grad_norm", "gradient_norm": "grad_norm", "grad-norm": "grad_norm",
    "gnorm": "grad_norm",
    "total_steps": "total_steps", "max_steps": "total_steps", "num_training_steps": "total_steps",
    "total_epochs": "total_epochs", "num_epochs": "total_epochs", "num_train_epochs": "total_epochs",
    "it_per_s": "it_per_s", "it/s": "it_per_s",
    "time": "time", "timestamp": "time",
}
#: Namespaces a trainer or tracker puts in front of training keys (``train/loss``).
_PREFIXES = ("train/", "training/", "trainer/", "profile/", "perf/", "train.", "metrics/")


def canonical_key(key: str) -> str | None:
    """The record field a log key names (``train/loss`` -> ``loss``), or None for an extra."""
    k = key.strip().strip("'\"").lower()
    if k in _ALIASES:
        return _ALIASES[k]
    for prefix in _PREFIXES:
        if k.startswith(prefix) and k[len(prefix):] in _ALIASES:
            return _ALIASES[k[len(prefix):]]
    return None


# --------------------------------------------------------------------------- text helpers

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_CTRL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def strip_ansi(text: str) -> str:
    return _CTRL.sub("", _ANSI.sub("", text))


def display_line(raw: str) -> str:
    """What a terminal would show for a raw line: ANSI stripped, the last ``\\r`` segment."""
    parts = [p for p in strip_ansi(raw).split("\r") if p.strip()]
    return parts[-1].rstrip() if parts else ""


_NUM = re.compile(
    r"(?P<num>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?i:nan|inf(?:inity)?))"
    r"(?P<mult>[kKMGT])?(?P<unit>s|ms|%|x|/s|it/s|tok/s)?"
)
_MULT = {"k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def parse_number(text: Any) -> float | None:
    """A number from a log value: ``5.1234``, ``6.00e-04``, ``nan``, ``19.5k``, ``[0.41]``, ``1.2s``."""
    if isinstance(text, bool):
        return None
    if isinstance(text, int | float):
        return float(text)
    if not isinstance(text, str):
        return None
    t = text.strip().strip(",;")
    if t.startswith("[") and t.endswith("]"):
        t = t[1:-1].strip()
    if t.startswith("tensor(") and t.endswith(")"):
        t = t[7:-1].split(",")[0].strip()
    m = _NUM.fullmatch(t)
    if not m:
        return None
    value = float(m.group("num"))
    if m.group("mult"):
        value *= _MULT[m.group("mult")]
    if m.group("unit") == "ms":
        value /= 1000.0
    return value


_TS_LEAD = re.compile(
    r"^\s*\[?(?P<ts>\d{4}-\d{2}-\d{2}[ T]\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"
    r"|\d{1,2}/\d{1,2}/\d{2,4}[ T]\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?)\]?"
)


def parse_timestamp(text: Any) -> float | None:
    """Epoch seconds from a JSON ``time`` value or a log stamp; naive stamps are local time."""
    if isinstance(text, bool):
        return None
    if isinstance(text, int | float):
        v = float(text)
        if not math.isfinite(v) or v <= 0:
            return None
        return v / 1000.0 if v > 1e12 else v
    if not isinstance(text, str):
        return None
    s = text.strip().replace(",", ".")
    num = parse_number(s)
    if num is not None and _NUM.fullmatch(s):
        return parse_timestamp(num)
    if re.match(r"\d{1,2}/\d{1,2}/\d{2,4}", s):
        date, _, rest = s.replace("T", " ").partition(" ")
        fmt = "%m/%d/%Y" if len(date.rsplit("/", 1)[-1]) == 4 else "%m/%d/%y"
        rest_fmt = "%H:%M:%S.%f" if "." in rest else "%H:%M:%S"
        try:
            return datetime.strptime(f"{date} {rest}", f"{fmt} {rest_fmt}").timestamp()
        except ValueError:
            return None
    try:
        return datetime.fromisoformat(s).timestamp()
    except ValueError:
        return None


# --------------------------------------------------------------------------- the parser

# key=value or key: value; keys may be quoted (dict text) and namespaced (train/loss, tok/s).
_KV = re.compile(
    r"(?<![\w./\-'\"])['\"]?(?P<key>[A-Za-z_][\w.\-]*(?:/[A-Za-z_][\w.\-]*)*)['\"]?"
    r"\s*(?P<sep>=|:)\s*(?P<val>\[[^\]]*\]|tensor\([^)]*\)|[^\s,;|)}\]]+)"
)
# SpecForge "Step 50 [50/73242?]", "step 120:", "Step 7 of 100", "global step 9".
# Not "step" glued into a path or name: "/ckpt/run-step250", "epoch_0_step_150" are checkpoints.
_STEP_WORD = re.compile(
    r"(?<![\w./-])(?:global[ _])?step\s*#?\s*(?P<step>\d+)"
    r"(?:\s*\[\s*(?P<n>\d+)\s*/\s*(?P<total>\d+)\s*\??\s*\]|\s*(?:/|\bof\b)\s*(?P<total2>\d+))?",
    re.IGNORECASE,
)
_EPOCH_WORD = re.compile(
    r"\bepoch\s*#?\s*(?P<epoch>\d+(?:\.\d+)?)(?:\s*(?:/|\bof\b)\s*(?P<total>\d+))?\b",
    re.IGNORECASE,
)
_TOTAL_STEPS = re.compile(r"\btotal\s+(?:training\s+|optimi[sz]ation\s+)?steps\s*[:=]?\s*(\d+)",
                          re.IGNORECASE)
_TQDM_FRAC = r"\d+(?:\.\d+)?[kMGT]?"
# "Training:  59%|█████▉    | 38/64 [00:15<00:08,  3.07step/s, acc=0.0107, loss=8.2841]"
_TQDM_BAR = re.compile(
    r"(?P<pct>\d{1,3})%\|[^|\n]*\|\s*(?P<n>" + _TQDM_FRAC + r")/(?P<total>" + _TQDM_FRAC + r")"
    r"\s*\[(?P<elapsed>[\d:]+|\?)(?:<(?P<remaining>[\d:]+|\?))?,\s*(?P<rate>[^,\]]*)"
    r"(?:,\s*(?P<postfix>[^\]]*))?\]"
)
# "4000it [1:23:45, 2.10it/s, loss=2.31]" (no total known)
_TQDM_NOTOTAL = re.compile(
    r"(?<![\w.])(?P<n>" + _TQDM_FRAC + r")(?P<unit>[A-Za-z]+)\s\[(?P<elapsed>[\d:]+),\s*"
    r"(?P<rate>[^,\]]*)(?:,\s*(?P<postfix>[^\]]*))?\]"
)
_RATE_PER_S = re.compile(r"(?P<v>\d+(?:\.\d+)?)(?P<m>[kMG]?)[A-Za-z]+/s")
_RATE_S_PER = re.compile(r"(?P<v>\d+(?:\.\d+)?)s/[A-Za-z]+")
_TRAINING_WORD = re.compile(
    r"\b(?:step|global_step|epoch|loss|train_loss|lr|learning_rate|grad_norm|tokens_per_s(?:ec)?)\b",
    re.IGNORECASE,
)


_TRAIN_BAR = re.compile(r"train|epoch|step|iter|optimi", re.IGNORECASE)
_OTHER_BAR = re.compile(
    r"eval|valid|test|load|download|map\b|token|shard|generat|sampl|process|convert|upload|sav",
    re.IGNORECASE,
)


class _Bad(Exception):
    """A training field is present but unreadable: the line is malformed."""


class LineParser:
    """Parses log lines in ``format`` (``auto``, ``json``, ``kv``, ``tqdm``, ``regex``).

    ``patterns`` are user regexes with named groups (``step``, ``loss``, ...) tried first.
    """

    def __init__(self, format: str = "auto", patterns: Iterable[str] = ()) -> None:
        self.format = format
        self.patterns = tuple(re.compile(p) for p in patterns)

    def parse(self, line: str) -> ParsedLine:
        text = strip_ansi(line)
        results: list[TrainingRecord] = []
        malformed: str | None = None
        for segment in text.split("\r"):
            if not segment.strip():
                continue
            try:
                results.extend(self._segment(segment))
            except _Bad as bad:
                malformed = str(bad)
        if not results:
            if malformed:
                return ParsedLine(LineKind.MALFORMED, reason=malformed)
            return _OTHER
        return ParsedLine(LineKind.RECORD, _best(results))

    # -- one \r segment: may hold a tqdm bar glued to a log line -----------------------
    def _segment(self, text: str) -> list[TrainingRecord]:
        for rx in self.patterns:
            m = rx.search(text)
            if m:
                rec = _from_fields(
                    ((k, v) for k, v in m.groupdict().items() if v is not None),
                    strict=True, where="pattern",
                )
                if rec.time is None:
                    rec = replace(rec, time=_leading_time(text))
                if rec.has_fields:
                    return [rec]
        if self.format == "regex":
            return []
        out: list[TrainingRecord] = []
        rest = text
        if self.format in ("auto", "tqdm"):
            m = _TQDM_BAR.search(text) or _TQDM_NOTOTAL.search(text)
            if m:
                # what is glued on after the bar is parsed as a line of its own; what comes
                # before it is the bar's description ("Training Epoch 2: ")
                desc, rest = text[: m.start()], text[m.end():]
                bar = _from_tqdm(m)
                if self._training_bar(desc, bar):
                    if bar.epoch is None:
                        em = _EPOCH_WORD.search(desc)
                        if em:
                            bar = replace(bar, epoch=float(em.group("epoch")))
                    out.append(bar)
        if self.format == "tqdm" or not rest.strip():
            return out
        found = self._text(rest)
        if found is not None and found.has_fields:
            out.append(found)
        return out

    def _training_bar(self, desc: str, bar: TrainingRecord) -> bool:
        """Whether a tqdm bar counts training steps, not shards loaded or batches evaluated."""
        desc = _TS_LEAD.sub("", desc).strip()
        if _OTHER_BAR.search(desc):
            return False
        if _TRAIN_BAR.search(desc):
            return True
        postfix_fields = any(getattr(bar, n) is not None
                             for n in ("loss", "lr", "grad_norm", "tokens_per_s", "epoch"))
        return postfix_fields or (self.format == "tqdm" and not desc)

    def _text(self, text: str) -> TrainingRecord | None:
        stamp = _leading_time(text)
        body = _TS_LEAD.sub("", text, count=1) if stamp is not None else text
        brace = body.find("{")
        if brace >= 0 and self.format in ("auto", "json"):
            rec = self._structured(body, brace)
            if rec is not None:
                return rec if rec.time is not None or stamp is None else replace(rec, time=stamp)
        if self.format not in ("auto", "kv"):
            return None
        rec = _from_kv(body)
        if stamp is not None and rec.has_fields and rec.time is None:
            rec = replace(rec, time=stamp)
        return rec

    def _structured(self, body: str, brace: int) -> TrainingRecord | None:
        """A JSON object or Python dict repr starting at ``brace`` (``step 120: {...}``)."""
        end = body.rfind("}")
        complete = end > brace
        obj_text = body[brace:end + 1] if complete else body[brace:].rstrip()
        prefix = body[:brace]
        data: Any = None
        if complete:
            try:
                data = json.loads(obj_text)
            except ValueError:
                try:
                    data = ast.literal_eval(obj_text)
                except Exception:  # not a literal: nan, tensor(...), a format string
                    data = None
        if isinstance(data, dict):
            rec = _from_fields(_flatten(data), strict=True, where="object")
        elif complete:
            # a whole object that is not JSON nor a literal (nan, tensor(...)): read its pairs
            rec = _from_kv(obj_text)
            if not rec.has_fields:
                return None
        elif _TRAINING_WORD.search(obj_text):
            raise _Bad(f"truncated record: {obj_text[:60]!r}")
        else:
            return None
        if rec.step is None and prefix.strip():
            sm = _STEP_WORD.search(prefix)
            if sm:
                rec = replace(rec, step=int(sm.group("step")))
        return rec if rec.has_fields else None


def _best(records: list[TrainingRecord]) -> TrainingRecord:
    """The last record, completed from earlier ones of the same step (a bar glued to a line).

    A record of another step printed on the same line still tells the epoch: SpecForge's
    ``Training Epoch 1`` bar counts steps within the epoch (``93/12207``) while its log line
    glued after it counts global steps (``Step 12300``).
    """
    base = records[-1]
    for other in reversed(records[:-1]):
        if base.step is None or other.step is None or other.step == base.step:
            base = base.merged_with(other)
        elif base.epoch is None and other.epoch is not None:
            base = replace(base, epoch=other.epoch)
    return base


def _leading_time(text: str) -> float | None:
    m = _TS_LEAD.match(text)
    return parse_timestamp(m.group("ts")) if m else None


def _flatten(data: Mapping[str, Any], prefix: str = "") -> Iterable[tuple[str, Any]]:
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from _flatten(value, f"{name}/")
        else:
            yield name, value


def _from_fields(items: Iterable[tuple[str, Any]], *, strict: bool, where: str) -> TrainingRecord:
    values: dict[str, Any] = {}
    extra: dict[str, float] = {}
    for key, raw in items:
        name = canonical_key(key)
        if name == "time":
            ts = parse_timestamp(raw)
            if ts is not None and ts > 1e8:  # a wall-clock stamp, not a duration ("time=0.3s")
                values.setdefault("time", ts)
                continue
            name = None
        if name is None:
            num = parse_number(raw) if isinstance(raw, str | int | float) else None
            if num is not None and not isinstance(raw, bool):
                extra[str(key)] = num
            continue
        if raw is None or name in values:
            continue
        if name in ("step", "epoch") and isinstance(raw, str) and "/" in raw:
            head, _, tail = raw.partition("/")
            total = parse_number(tail)
            if total is not None:
                values.setdefault("total_steps" if name == "step" else "total_epochs", total)
            raw = head
        num = parse_number(raw)
        if num is None or (name in _INT_FIELDS and not math.isfinite(num)):
            if strict:
                raise _Bad(f"{where}: {key} is not a number: {raw!r}")
            continue
        if num < 0:  # no step, epoch, loss, rate or count is below zero (nan stays: divergence)
            if strict:
                raise _Bad(f"{where}: {key} is negative: {raw!r}")
            continue
        values[name] = num
    for name in _INT_FIELDS:
        if name in values:
            values[name] = int(values[name])
    return TrainingRecord(**values, extra=extra)


def _from_kv(body: str) -> TrainingRecord:
    pairs = [(m.group("key"), m.group("val")) for m in _KV.finditer(body)
             if not m.group("key").endswith(".py")]  # rich's "trainer.py:212"
    rec = _from_fields(pairs, strict=True, where="text")
    if rec.step is None:
        sm = _STEP_WORD.search(body)
        if sm:
            total = sm.group("total") or sm.group("total2")
            rec = replace(rec, step=int(sm.group("step")),
                          total_steps=rec.total_steps if total is None else int(total))
    if rec.epoch is None:
        em = _EPOCH_WORD.search(body)
        if em:
            total_e = em.group("total")
            rec = replace(rec, epoch=float(em.group("epoch")),
                          total_epochs=rec.total_epochs if total_e is None else float(total_e))
    if rec.total_steps is None:
        tm = _TOTAL_STEPS.search(body)
        if tm:
            rec = replace(rec, total_steps=int(tm.group(1)))
    return rec


def _tqdm_count(text: str) -> float:
    v = parse_number(text)
    return 0.0 if v is None else v


def _from_tqdm(m: re.Match[str]) -> TrainingRecord:
    groups = m.groupdict()
    step = int(_tqdm_count(groups["n"]))
    total = int(_tqdm_count(groups["total"])) if groups.get("total") else None
    it_per_s = None
    rate = (groups.get("rate") or "").strip()
    if (rm := _RATE_PER_S.fullmatch(rate)) is not None:
        it_per_s = float(rm.group("v")) * (_MULT.get(rm.group("m"), 1.0) if rm.group("m") else 1.0)
    elif (rm := _RATE_S_PER.fullmatch(rate)) is not None and float(rm.group("v")) > 0:
        it_per_s = 1.0 / float(rm.group("v"))
    post = _from_kv(groups.get("postfix") or "") if groups.get("postfix") else TrainingRecord()
    return replace(post, step=step if post.step is None else post.step,
                   total_steps=total if post.total_steps is None else post.total_steps,
                   it_per_s=it_per_s if post.it_per_s is None else post.it_per_s)


def parse_line(line: str, format: str = "auto", patterns: Iterable[str] = ()) -> ParsedLine:
    """Parse one line (convenience; build a :class:`LineParser` once for many lines)."""
    return LineParser(format, patterns).parse(line)
