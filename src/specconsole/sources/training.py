"""The training-log source: tail a drafter trainer's log and turn its lines into progress.

Three layers, each usable alone:

* :class:`LineParser` / :func:`parse_line` turn one raw log line into a :class:`ParsedLine`:
  a :class:`TrainingRecord`, "other" (chatter without training fields) or "malformed" (looks
  like a record but cannot be read). It knows JSON lines, Python dict reprs (HF Trainer,
  ``step 120: {...}``), ``key=value`` / ``key: value`` text (SpecForge, speculators, NeMo) and
  tqdm bars; it strips ANSI codes and splits on ``\\r`` first (see
  ``/work/shared/reference/formats.md``).
* :class:`TrainingTracker` is pure: ``feed(line, arrival_time)`` and ``progress(now)``. It
  dedupes re-tailed lines, detects restarts, measures steps/s and computes the ETA.
* :class:`TrainingSource` runs one long-lived ``tail -n N -F LOG`` on a host and publishes
  :class:`TrainingProgress` samples.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import math
import re
import time
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from specconsole.config import TrainingConfig
from specconsole.errors import HostError, HostUnavailable
from specconsole.hosts.local import STREAM_LINE_LIMIT
from specconsole.samples import Sample, format_duration
from specconsole.sources import Publish
from specconsole.sources.job import JobWatch

if TYPE_CHECKING:
    from specconsole.hosts.base import Host, StreamProcess

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


#: A trainer announcing a (re)start: confirms that the next step going back is a restart.
_RESTART_MARKER = re.compile(
    r"\b(?:start(?:ing)?|restart(?:ing)?|resum(?:e|ed|ing))\s+(?:the\s+)?training\b"
    r"|\bresum(?:e|ed|ing)\s+from\b|\btotal\s+training\s+steps\b",
    re.IGNORECASE,
)


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
_STEP_WORD = re.compile(
    r"\b(?:global[ _])?step\s*#?\s*(?P<step>\d+)"
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
        tail = self._text(rest)
        if tail is not None and tail.has_fields:
            out.append(tail)
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
    """The last record, completed from earlier ones of the same step (a bar glued to a line)."""
    base = records[-1]
    for other in reversed(records[:-1]):
        if base.step is None or other.step is None or other.step == base.step:
            base = base.merged_with(other)
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


# --------------------------------------------------------------------------- progress


@dataclass(frozen=True)
class TrainingProgress:
    """An immutable snapshot of one training job as read from its log."""

    log_path: str
    last: TrainingRecord | None = None
    step: int | None = None
    total_steps: int | None = None
    epoch: float | None = None
    total_epochs: float | None = None
    steps_per_epoch: float | None = None
    loss: float | None = None
    loss_history: tuple[float, ...] = ()
    lr: float | None = None
    grad_norm: float | None = None
    tokens_per_s: float | None = None
    steps_per_s: float | None = None
    eta_s: float | None = None
    eta_target: str | None = None
    eta_text: str | None = None
    target_steps: int | None = None
    last_line_at: float | None = None
    lines_seen: int = 0
    malformed: int = 0
    restarts: int = 0
    recent_lines: tuple[str, ...] = ()
    stalled: bool = False
    error: str | None = None
    #: from the job's processes (:mod:`specconsole.sources.job`): "running", "stopped" or
    #: "unknown"; None until first checked
    state: str | None = None

    @property
    def is_done(self) -> bool:
        if self.step is not None and self.target_steps is not None:
            return self.step >= self.target_steps
        if self.epoch is not None and self.total_epochs is not None:
            return self.epoch >= self.total_epochs
        return False

    @property
    def fraction(self) -> float | None:
        """Progress 0..1 toward the target, when both are known."""
        if self.step is not None and self.target_steps:
            return min(1.0, self.step / self.target_steps)
        if self.epoch is not None and self.total_epochs:
            return min(1.0, self.epoch / self.total_epochs)
        return None

    def line_age(self, now: float) -> float | None:
        return None if self.last_line_at is None else max(0.0, now - self.last_line_at)


class TrainingTracker:
    """Folds log lines into :class:`TrainingProgress`; pure (time is passed in)."""

    #: Lines arriving this soon after a stream (re)started are the ``tail -n`` backlog.
    BACKLOG_S = 0.5
    #: ... and so are lines that follow those without a pause, up to this long after it.
    BURST_GAP_S = 0.05
    BACKLOG_MAX_S = 3.0
    RATE_POINTS = 32
    LOSS_HISTORY = 240
    RECENT_LINES = 8
    RECENT_CHARS = 500
    #: A step this far behind the newest is a drop (a possible restart), not a late line.
    RESTART_BACK_STEPS = 2

    def __init__(self, cfg: TrainingConfig, parser: LineParser | None = None) -> None:
        self.cfg = cfg
        self.parser = parser or LineParser(cfg.format, cfg.patterns)
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._seen_max = max(2000, 4 * cfg.tail_lines)
        self._stream_start: float | None = None
        self._prev_arrival: float | None = None
        self._prev_backlog = False
        self._last: TrainingRecord | None = None
        self._step: int | None = None
        self._epoch: float | None = None
        self._loss: float | None = None
        self._lr: float | None = None
        self._grad_norm: float | None = None
        self._tokens_per_s: float | None = None
        self._it_per_s: float | None = None
        self._log_total_steps: int | None = None
        self._log_total_epochs: float | None = None
        self._spe_inferred: float | None = None
        self._points: deque[tuple[float, int | None, float | None]] = deque(maxlen=self.RATE_POINTS)
        self._clock: str | None = None  # "line" once a record carried its own timestamp
        self._loss_history: deque[float] = deque(maxlen=self.LOSS_HISTORY)
        self._recent: deque[str] = deque(maxlen=self.RECENT_LINES)
        self.lines_seen = 0
        self.malformed = 0
        self.restarts = 0
        #: A record whose step (or epoch) went back, waiting to be confirmed as a restart.
        self._pending: tuple[TrainingRecord, float | None] | None = None
        self._restart_marked = False  # the trainer announced a (re)start
        #: Drops not confirmed (the old run went on): stray lines, never shown as the step.
        self.stray_records = 0
        self.last_line_at: float | None = None
        self.error: str | None = None

    # -- input ----------------------------------------------------------------------------
    def stream_started(self, at: float) -> None:
        """A (re)started tail: lines in the next :attr:`BACKLOG_S` are its backlog."""
        self._stream_start = at

    def _is_backlog(self, arrival: float) -> bool:
        """Whether a line is part of the burst ``tail -n`` sends when it (re)starts."""
        if self._stream_start is None:
            self._stream_start = arrival
        since = arrival - self._stream_start
        backlog = since <= self.BACKLOG_S or (
            self._prev_backlog and since <= self.BACKLOG_MAX_S
            and arrival - (self._prev_arrival or arrival) <= self.BURST_GAP_S
        )
        self._prev_backlog, self._prev_arrival = backlog, arrival
        return backlog

    def set_error(self, message: str | None) -> None:
        self.error = message

    def skipped_line(self, arrival_time: float, size: int | None = None) -> None:
        """A line too long to read was skipped: count it as malformed and show that it was."""
        self.lines_seen += 1
        self.malformed += 1
        self.last_line_at = arrival_time
        how_long = f"of {size:,} characters " if size is not None else ""
        self._recent.append(f"[a log line {how_long}was skipped: longer than the "
                            f"{MAX_LINE_CHARS >> 20} MiB line limit]")

    def feed(self, line: str, arrival_time: float) -> None:
        cleaned = strip_ansi(line).rstrip()
        if not cleaned.strip():
            return
        backlog = self._is_backlog(arrival_time)
        parsed: ParsedLine | None = None
        if cleaned in self._seen:
            if not backlog:
                # chatter may repeat word for word; a step's record never does
                parsed = self.parser.parse(cleaned)
                rec = parsed.record
                backlog = rec is not None and (rec.step is not None or rec.time is not None)
            if backlog:
                self._seen.move_to_end(cleaned)
                return  # the re-tail of a line we already had
        self._seen[cleaned] = None
        if len(self._seen) > self._seen_max:
            self._seen.popitem(last=False)
        self.lines_seen += 1
        self.last_line_at = arrival_time
        shown = display_line(cleaned)
        if shown:
            self._recent.append(shown if len(shown) <= self.RECENT_CHARS else
                                shown[: self.RECENT_CHARS - 1] + "…")
        if parsed is None:
            parsed = self.parser.parse(cleaned)
        if _RESTART_MARKER.search(cleaned):
            self._restart_marked = True
        if parsed.kind is LineKind.MALFORMED:
            self.malformed += 1
        elif parsed.record is not None:
            self._take(parsed.record, None if backlog else arrival_time)

    # -- restarts ----------------------------------------------------------------------------
    # A step (or, for epoch-only logs, an epoch) that goes back is a restart only when
    # confirmed: by the trainer's own start/resume line (``_RESTART_MARKER``) before or on it,
    # or by the next record continuing upwards from it while staying below the old run
    # (``p < next <= old - RESTART_BACK_STEPS``). If the next record is back at the old
    # run's position instead, the drop was a stray line: it never becomes the current step.

    def _drop(self, rec: TrainingRecord) -> bool:
        if rec.step is not None and self._step is not None:
            return self._step - rec.step > self.RESTART_BACK_STEPS
        if rec.step is None and rec.epoch is not None and self._epoch is not None:
            return rec.epoch < self._epoch
        return False

    def _take(self, rec: TrainingRecord, arrival: float | None) -> None:
        if self._pending is not None:
            self._settle(rec)
        if self._drop(rec):
            if not self._restart_marked:
                self._pending = (rec, arrival)
                return
            self._pending = None
            self._restart()
        if rec.step is not None or rec.epoch is not None:
            self._restart_marked = False
        self._apply(rec, arrival)

    def _settle(self, rec: TrainingRecord) -> None:
        """Decide the pending drop by the record that follows it."""
        assert self._pending is not None
        pending, pending_arrival = self._pending
        if rec.step is not None and pending.step is not None and self._step is not None:
            drop, nxt, old, late = pending.step, rec.step, self._step, self.RESTART_BACK_STEPS
        elif rec.step is None and pending.step is None and None not in (
                rec.epoch, pending.epoch, self._epoch):
            drop, nxt, old, late = pending.epoch, rec.epoch, self._epoch, 0  # type: ignore[assignment]
        else:
            return  # nothing to compare: still undecided
        if old - nxt <= late:  # back where the old run was: the drop was a stray line
            self._pending = None
            self.stray_records += 1
        elif nxt > drop:  # counting up from the drop: a restart
            self._pending = None
            self._restart()
            self._apply(pending, pending_arrival)

    def _apply(self, rec: TrainingRecord, arrival: float | None) -> None:
        if rec.total_steps is not None:
            self._log_total_steps = rec.total_steps
        if rec.total_epochs is not None:
            self._log_total_epochs = rec.total_epochs
        new_position = True
        if rec.step is not None and self._step is not None and rec.step <= self._step:
            if rec.step < self._step:
                return  # a late line for a step we are already past
            new_position = False  # the same step again, from another logger
        elif rec.step is None and rec.epoch is not None and self._epoch is not None:
            if rec.epoch == self._epoch:
                new_position = False
        elif rec.step is None and rec.epoch is None:
            new_position = False
        if new_position or self._last is None:
            self._last = rec
        elif rec.step is not None:
            self._last = rec.merged_with(self._last)
        if rec.step is not None:
            self._step = rec.step
        if rec.epoch is not None:
            self._epoch = rec.epoch
        for name in ("lr", "grad_norm", "tokens_per_s", "it_per_s"):
            value = getattr(rec, name)
            if value is not None:
                setattr(self, f"_{name}", value)
        if rec.loss is not None:
            self._loss = rec.loss
            if new_position and math.isfinite(rec.loss):
                self._loss_history.append(rec.loss)
        if rec.step and rec.epoch and rec.epoch % 1:
            self._spe_inferred = rec.step / rec.epoch
        if new_position:
            self._add_point(rec, arrival)

    def _add_point(self, rec: TrainingRecord, arrival: float | None) -> None:
        if rec.time is not None:
            if self._clock != "line":
                self._points.clear()
                self._clock = "line"
            t = rec.time
        elif self._clock == "line" or arrival is None:
            return
        else:
            self._clock = "arrival"
            t = arrival
        if self._points and t < self._points[-1][0]:
            self._points.clear()  # the clock went backwards: start measuring again
        self._points.append((t, rec.step, rec.epoch))

    def _restart(self) -> None:
        self.restarts += 1
        self._points.clear()
        self._it_per_s = None
        self._step = None
        self._epoch = None
        self._spe_inferred = None

    # -- output ---------------------------------------------------------------------------
    def _rate(self, which: str) -> float | None:
        """Steps (or epochs) per second between the oldest and newest point in the window."""
        i = 1 if which == "step" else 2
        pts = [(p[0], p[i]) for p in self._points if p[i] is not None]
        if len(pts) < 2:
            return None
        (t0, v0), (t1, v1) = pts[0], pts[-1]
        if t1 <= t0 or v1 <= v0:  # type: ignore[operator]
            return None
        return (v1 - v0) / (t1 - t0)  # type: ignore[operator]

    def steps_per_s(self) -> float | None:
        rate = self._rate("step")
        if rate is None and self._it_per_s:
            rate = self._it_per_s
        return rate

    def steps_per_epoch(self) -> float | None:
        if self.cfg.steps_per_epoch:
            return float(self.cfg.steps_per_epoch)
        if self._spe_inferred:
            return self._spe_inferred
        total_steps = self.cfg.total_steps or self._log_total_steps
        total_epochs = self.cfg.total_epochs or self._log_total_epochs
        if total_steps and total_epochs:
            return total_steps / total_epochs
        return None

    def progress(self, now: float) -> TrainingProgress:
        cfg = self.cfg
        total_epochs = cfg.total_epochs or self._log_total_epochs
        spe = self.steps_per_epoch()
        step = self._step
        if step is None and self._epoch is not None and spe:
            step = round(self._epoch * spe)
        epoch = self._epoch
        if epoch is None and step is not None and spe:
            epoch = step / spe
        steps_per_s = self.steps_per_s()
        if steps_per_s is None and self._step is None and spe:
            epochs_per_s = self._rate("epoch")
            steps_per_s = epochs_per_s * spe if epochs_per_s else None

        target: int | None = None
        label: str | None = None
        if cfg.total_steps:
            target, label = cfg.total_steps, f"{cfg.total_steps} steps"
        elif total_epochs and spe:
            target, label = round(total_epochs * spe), f"{total_epochs:g} epochs"
        elif self._log_total_steps:
            target, label = self._log_total_steps, f"{self._log_total_steps} steps"
        elif total_epochs:
            label = f"{total_epochs:g} epochs"

        eta_s: float | None = None
        eta_text: str | None = None
        if target is not None and step is not None:
            if step >= target:
                eta_s, eta_text = 0.0, f"done ({label})"
            elif steps_per_s:
                eta_s = (target - step) / steps_per_s
        elif label and total_epochs and epoch is not None:
            epochs_per_s = self._rate("epoch")
            if epoch >= total_epochs:
                eta_s, eta_text = 0.0, f"done ({label})"
            elif epochs_per_s:
                eta_s = (total_epochs - epoch) / epochs_per_s
        if eta_text is None and eta_s is not None:
            eta_text = f"{format_duration(eta_s)} to {label}"

        total_steps = cfg.total_steps or self._log_total_steps or target
        stalled = (self.last_line_at is not None
                   and now - self.last_line_at >= cfg.stall_warning_min * 60.0)
        return TrainingProgress(
            log_path=cfg.log_path, last=self._last, step=step, total_steps=total_steps,
            epoch=epoch, total_epochs=total_epochs, steps_per_epoch=spe, loss=self._loss,
            loss_history=tuple(self._loss_history), lr=self._lr, grad_norm=self._grad_norm,
            tokens_per_s=self._tokens_per_s, steps_per_s=steps_per_s, eta_s=eta_s,
            eta_target=label, eta_text=eta_text, target_steps=target,
            last_line_at=self.last_line_at, lines_seen=self.lines_seen, malformed=self.malformed,
            restarts=self.restarts, recent_lines=tuple(self._recent),
            stalled=stalled and not (target is not None and step is not None and step >= target),
            error=self.error,
        )


# --------------------------------------------------------------------------- the source

_TAIL_MISSING = re.compile(r"cannot open '?(?P<path>.*?)'? for reading: No such file or directory")
_TAIL_APPEARED = re.compile(r"has appeared|following new file|has become accessible")
_TAIL_CANNOT = re.compile(r"cannot open '?(?P<path>.*?)'? for reading: (?P<why>.+)")
# GNU tail -F when the file it follows is removed (or its folder, or its permissions change)
_TAIL_GONE = re.compile(r"has become inaccessible: (?P<why>.+)")


#: Errors that end when tail reports the file (re)appeared.
_TAIL_ERRORS = ("log file not found yet", "cannot read log file", "log deleted", "log unreadable")


def tail_error(stderr: str, path: str) -> str | None:
    """The operator-facing problem in ``tail -F``'s stderr, judged by its last message."""
    for line in reversed(stderr.strip().splitlines()):
        if _TAIL_APPEARED.search(line):
            return None
        if _TAIL_MISSING.search(line):
            return f"log file not found yet: {path}"
        m = _TAIL_CANNOT.search(line)
        if m:
            return f"cannot read log file {path}: {m.group('why').strip()}"
        m = _TAIL_GONE.search(line)
        if m:
            why = m.group("why").strip()
            if why == "No such file or directory":
                return (f"log deleted: {path} — no new lines until it is written again "
                        f"(was it moved, rotated away or removed?)")
            return f"log unreadable: {path}: {why} — check the file's permissions"
    return None


#: Longest log line read (as the local host's stream limit); longer ones are skipped, counted.
MAX_LINE_CHARS = STREAM_LINE_LIMIT


class TrainingSource:
    """Tails one training log over ``host`` and publishes :class:`TrainingProgress`.

    One ``tail -n <tail_lines> -F <log_path>`` runs for as long as the host stays up; after a
    drop it is started again, and the tracker's dedupe makes the re-tailed lines harmless.
    """

    def __init__(self, host: Host, cfg: TrainingConfig, *, interval_s: float = 1.0,
                 backoff_initial_s: float = 0.5, backoff_max_s: float = 15.0) -> None:
        self.host = host
        self.cfg = cfg
        self.interval_s = interval_s
        self.tracker = TrainingTracker(cfg)
        self._backoff_initial = backoff_initial_s
        self._backoff_max = backoff_max_s
        self._dirty = asyncio.Event()
        self._proc: StreamProcess | None = None
        self._oversized_seen = 0
        self.streams_started = 0
        self.job = JobWatch(host, cfg.kill, interval_s)

    @property
    def command(self) -> list[str]:
        return ["tail", "-n", str(self.cfg.tail_lines), "-F", self.cfg.log_path]

    def snapshot(self, now: float | None = None) -> TrainingProgress:
        return self.tracker.progress(time.time() if now is None else now)

    async def run(self, publish: Publish[TrainingProgress]) -> None:
        """Tail and publish until cancelled (an error in ``publish`` ends it too)."""
        tasks = {asyncio.ensure_future(self._tail_forever()),
                 asyncio.ensure_future(self._publisher(publish)),
                 asyncio.ensure_future(self.job.run(self._dirty.set))}
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _publisher(self, publish: Publish[TrainingProgress]) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._dirty.wait(), self.interval_s)
            self._dirty.clear()
            self._check_oversized()
            self._check_stderr()
            now = time.time()
            publish(Sample(self.job.apply(self.tracker.progress(now)), at=now, interval=self.interval_s))
            await asyncio.sleep(0.05)  # coalesce a burst of lines into one sample

    def _check_oversized(self) -> None:
        """Report lines the host's stream skipped for being over its line limit."""
        proc = self._proc
        if proc is None:
            return
        new = proc.oversized_lines - self._oversized_seen
        if new > 0:
            self._oversized_seen = proc.oversized_lines
            for _ in range(new):
                self.tracker.skipped_line(time.time())
            self._dirty.set()

    def _check_stderr(self) -> None:
        proc = self._proc
        if proc is None:
            return
        try:
            text = proc.stderr_text
        except Exception:
            return
        if not text.strip():
            return
        err = tail_error(text, self.cfg.log_path)
        if err is not None:
            self.tracker.set_error(err)
        elif _TAIL_APPEARED.search(text) and (self.tracker.error or "").startswith(_TAIL_ERRORS):
            self.tracker.set_error(None)

    async def _tail_forever(self) -> None:
        backoff = self._backoff_initial
        while True:
            await self.host.wait_connected()
            got_lines = False
            try:
                await self._precheck()
                async with self.host.stream(self.command) as proc:
                    self._proc = proc
                    self._oversized_seen = 0
                    self.streams_started += 1
                    self.tracker.stream_started(time.time())
                    async for line in proc.lines():
                        if not got_lines:  # the log is being read: earlier trouble is over
                            got_lines = True
                            self.tracker.set_error(None)
                        self._check_oversized()
                        if len(line) > MAX_LINE_CHARS:  # a host that passes long lines on
                            self.tracker.skipped_line(time.time(), len(line))
                        else:
                            self.tracker.feed(line, time.time())
                        if self.job.state == "stopped":
                            self.job.poke()  # a (re)started job?
                        self._dirty.set()
                    self._check_oversized()
                    rc = await proc.wait()
                    self._proc = None
                    if rc not in (0, None):
                        err = tail_error(proc.stderr_text, self.cfg.log_path)
                        last = (proc.stderr_text.strip().splitlines() or ["no output"])[-1]
                        self.tracker.set_error(err or f"`{proc.command}` exited {rc}: {last}")
                        self._dirty.set()
            except HostUnavailable:
                pass
            except (HostError, OSError) as err:
                self.tracker.set_error(f"training log stream failed: {err}")
                self._dirty.set()
            except ValueError as err:  # asyncio's line limit: a line without a newline
                self.tracker.set_error(f"training log line too long to read: {err}")
                self._dirty.set()
            finally:
                self._proc = None
            backoff = self._backoff_initial if got_lines else min(backoff * 2, self._backoff_max)
            await asyncio.sleep(backoff)

    async def _precheck(self) -> None:
        """Say "not found yet" before tail starts waiting for a missing file."""
        try:
            res = await self.host.run(["test", "-e", self.cfg.log_path], timeout=10.0)
        except (TimeoutError, OSError):
            return
        if res.exit_status == 1:
            self.tracker.set_error(f"log file not found yet: {self.cfg.log_path}")
        elif res.exit_status == 0 and (self.tracker.error or "").startswith(_TAIL_ERRORS[0]):
            self.tracker.set_error(None)
        self._dirty.set()
