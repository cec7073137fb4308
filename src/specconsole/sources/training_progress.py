"""Training progress: fold parsed log lines into step, epoch, rate, ETA, restarts and stalls.

:class:`TrainingTracker` is pure: ``feed(line, arrival_time)`` and ``progress(now)``. It dedupes
re-tailed lines, detects restarts, measures steps/s and computes the ETA; it publishes
immutable :class:`TrainingProgress` snapshots.
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specconsole.base.samples import format_bytes, format_duration
from specconsole.config import TrainingConfig
from specconsole.formats.slurm import SlurmJob  # at run time: the recorder decodes TrainingProgress by its hints
from specconsole.formats.training_log import (
    LineKind,
    LineParser,
    ParsedLine,
    TrainingRecord,
    display_line,
    strip_ansi,
)
from specconsole.hosts.base import STREAM_LINE_LIMIT, line_limit_text

if TYPE_CHECKING:
    from specconsole.sources.checkpoints import CheckpointListing

#: Longest log line read (the hosts' stream limit); longer ones are skipped, counted.
MAX_LINE_CHARS = STREAM_LINE_LIMIT

#: A trainer announcing a (re)start: confirms that the next step going back is a restart.
_RESTART_MARKER = re.compile(
    r"\b(?:start(?:ing)?|restart(?:ing)?|resum(?:e|ed|ing))\s+(?:the\s+)?training\b"
    r"|\bresum(?:e|ed|ing)\s+from\b|\btotal\s+training\s+steps\b",
    re.IGNORECASE,
)



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
    #: the run's checkpoints (:mod:`specconsole.sources.checkpoints`); None until first listed
    checkpoints: CheckpointListing | None = None
    #: how far the tail is behind the log's end, in bytes (None until first measured)
    behind_bytes: int | None = None
    #: times the tail skipped ahead to the newest lines, the bytes it dropped, and what it said
    skips: int = 0
    skipped_bytes: int = 0
    skip_note: str | None = None
    #: the Slurm job, when the job runs under Slurm (:mod:`specconsole.sources.slurm`)
    slurm: SlurmJob | None = None

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
        self.behind_bytes: int | None = None
        self.skips = 0
        self.skipped_bytes = 0
        self.skip_note: str | None = None

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

    def set_behind(self, behind: int, at: float) -> None:
        """How far the tail is behind the log's end (measured at ``at``)."""
        self.behind_bytes = max(0, behind)

    def skipped_ahead(self, behind: int, lines: int, at: float) -> None:
        """The tail dropped ``behind`` bytes of backlog and starts again at the last ``lines``."""
        self.skips += 1
        self.skipped_bytes += behind
        self.behind_bytes = 0
        self.skip_note = (f"training log: the tail was {format_bytes(behind)} behind the log's end; "
                          f"skipped ahead to its last {lines} lines (the steps in between are not "
                          f"read)")
        self._recent.append(f"[skipped {format_bytes(behind)} of log lines to catch up]")

    def skipped_line(self, arrival_time: float, size: int | None = None) -> None:
        """A line too long to read was skipped: count it as malformed and show that it was."""
        self.lines_seen += 1
        self.malformed += 1
        self.last_line_at = arrival_time
        how_long = f"of {size:,} characters " if size is not None else ""
        self._recent.append(f"[a log line {how_long}was skipped: longer than the "
                            f"{line_limit_text()} line limit]")

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
            error=self.error, behind_bytes=self.behind_bytes, skips=self.skips,
            skipped_bytes=self.skipped_bytes, skip_note=self.skip_note,
        )
