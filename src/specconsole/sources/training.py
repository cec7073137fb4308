"""The training-log source: tail a drafter trainer's log and publish its progress.

Three layers, each usable alone:

* :mod:`specconsole.formats.training_log` (:class:`LineParser`, :func:`parse_line`) turns one
  raw log line into a :class:`ParsedLine` (pure parsing).
* :mod:`specconsole.sources.training_progress` (:class:`TrainingTracker`) folds lines into
  :class:`TrainingProgress`: dedupe, restarts, steps/s, ETA, stalls (pure; time is passed in).
* :class:`TrainingSource` (here) runs one long-lived ``tail -n N -F LOG`` on a host and
  publishes :class:`TrainingProgress` samples.

The parser's and tracker's names are re-exported here for existing callers.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from specconsole.base.backoff import INITIAL_S, MAX_S, Backoff
from specconsole.base.errors import HostError, HostUnavailable
from specconsole.base.samples import Sample
from specconsole.config import TrainingConfig
from specconsole.formats.training_log import (
    LineKind,
    LineParser,
    ParsedLine,
    TrainingRecord,
    canonical_key,
    display_line,
    parse_line,
    parse_number,
    parse_timestamp,
    strip_ansi,
)
from specconsole.sources import Publish
from specconsole.sources.checkpoints import CheckpointWatch
from specconsole.sources.job import JobWatch
from specconsole.sources.training_progress import MAX_LINE_CHARS, TrainingProgress, TrainingTracker

if TYPE_CHECKING:
    from specconsole.hosts.base import Host, StreamProcess

__all__ = [
    "MAX_LINE_CHARS", "LineKind", "LineParser", "ParsedLine", "TrainingProgress", "TrainingRecord",
    "TrainingSource", "TrainingTracker", "canonical_key", "display_line", "parse_line",
    "parse_number", "parse_timestamp", "strip_ansi", "tail_error",
]

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



#: How often the tail's lag is measured while lines flow (one ``stat`` on the host) ...
LAG_CHECK_S = 1.0
#: ... and while they do not (nothing read: the tail cannot be falling behind by much).
LAG_IDLE_CHECK_S = 15.0
#: Lines flow: at least this much was read since the last check.
LAG_FLOW_BYTES = 64 << 10
#: Past this far behind the log's end, the tail skips ahead to the newest lines.
SKIP_AHEAD_BYTES = 8 << 20
#: Reading a burst, the tail gives the event loop a turn this often (a stream's reads return
#: at once while data is buffered, so a flood would otherwise hold the loop for seconds).
YIELD_EVERY_LINES = 256


class TrainingSource:
    """Tails one training log over ``host`` and publishes :class:`TrainingProgress`.

    One ``tail -n <tail_lines> -F -- <log_path>`` runs for as long as the host stays up; after a
    drop it is started again, and the tracker's dedupe makes the re-tailed lines harmless.

    How far behind the tail is: the log's size (``stat -c %s -- LOG``, before each start and
    then every :data:`LAG_CHECK_S` while lines flow, every :data:`LAG_IDLE_CHECK_S` otherwise)
    minus where the reader is (the size at the start plus the stream's ``bytes_read``; the
    ``tail -n`` backlog makes that an underestimate by at most those lines, and the position is
    re-anchored whenever a check finds both the log and the reader standing still). It is
    published as ``behind_bytes``. Past :data:`SKIP_AHEAD_BYTES` (8 MiB: at a trainer's ~1 KB a
    step, thousands of steps, minutes of a burst to replay) the tail is restarted at the newest
    ``tail_lines`` lines instead of replaying the backlog, and ``skips``/``skip_note`` say so
    (the monitor turns a skip into an event). A flood of a gigabyte then costs a few seconds of
    reading, not minutes of a step shown as current while hundreds behind.
    """

    def __init__(self, host: Host, cfg: TrainingConfig, *, interval_s: float = 1.0,
                 backoff_initial_s: float = INITIAL_S, backoff_max_s: float = MAX_S) -> None:
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
        #: the log's size when the current tail started, minus what it sent before: the file
        #: position of the tail's first byte (see the class docstring); None when not known
        self._base: int | None = None
        self._skipping = False  # the current tail is being closed to skip ahead
        self.job = JobWatch(host, cfg.kill, interval_s)
        self.checkpoints = CheckpointWatch(host, cfg)

    @property
    def command(self) -> list[str]:
        return ["tail", "-n", str(self.cfg.tail_lines), "-F", "--", self.cfg.log_path]

    def snapshot(self, now: float | None = None) -> TrainingProgress:
        return self.tracker.progress(time.time() if now is None else now)

    async def run(self, publish: Publish[TrainingProgress]) -> None:
        """Tail and publish until cancelled (an error in ``publish`` ends it too)."""
        tasks = {asyncio.ensure_future(self._tail_forever()),
                 asyncio.ensure_future(self._publisher(publish)),
                 asyncio.ensure_future(self._watch_lag()),
                 asyncio.ensure_future(self.job.run(self._dirty.set)),
                 asyncio.ensure_future(self.checkpoints.run(self._dirty.set))}
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
            progress = replace(self.job.apply(self.tracker.progress(now)), checkpoints=self.checkpoints.listing)
            publish(Sample(progress, at=now, interval=self.interval_s))
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
        delays = Backoff(self._backoff_initial, self._backoff_max)
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
                    since_yield = 0
                    async for line in proc.lines():
                        since_yield += 1
                        if since_yield >= YIELD_EVERY_LINES:  # a burst: let the lag check, the
                            since_yield = 0  # publisher and the other hosts have the loop too
                            await asyncio.sleep(0)
                        if not got_lines:  # the log is being read: earlier trouble is over
                            got_lines = True
                            self.tracker.set_error(None)
                        self._check_oversized()
                        if len(line) > MAX_LINE_CHARS:  # a host that passes long lines on
                            self.tracker.skipped_line(time.time(), len(line))
                        else:
                            self.tracker.feed(line, time.time())
                            self.checkpoints.saw_line(line)
                        if self.job.state == "stopped":
                            self.job.poke()  # a (re)started job?
                        self._dirty.set()
                    self._check_oversized()
                    rc = await proc.wait()
                    self._proc = None
                    if self._skipping:  # closed by _skip_ahead: start again at once
                        self._skipping = False
                        continue
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
            await asyncio.sleep(delays.reset() if got_lines else delays.double())

    async def _precheck(self) -> None:
        """Say "not found yet" before tail starts waiting for a missing file; note the log's
        size, where the tail about to start stands (for :meth:`_watch_lag`)."""
        self._base = None
        size = await self._log_size()
        if size is None:
            self.tracker.set_error(f"log file not found yet: {self.cfg.log_path}")
        elif size >= 0:
            self._base = size
            if (self.tracker.error or "").startswith(_TAIL_ERRORS[0]):
                self.tracker.set_error(None)
        self._dirty.set()

    async def _log_size(self) -> int | None:
        """The log's size in bytes; None when it does not exist, -1 when that is not known."""
        try:
            res = await self.host.run(["stat", "-L", "-c", "%s", "--", self.cfg.log_path], timeout=10.0)
        except (TimeoutError, OSError):
            return -1
        out = res.stdout.strip()
        if res.exit_status == 0 and out.isdigit():
            return int(out)
        return None if res.exit_status == 1 and "No such file" in res.stderr else -1

    async def _watch_lag(self) -> None:
        """Measure how far behind the tail is; skip ahead past :data:`SKIP_AHEAD_BYTES`."""
        checked_read, checked_size, checked_at = -1, -1, 0.0
        while True:
            await asyncio.sleep(LAG_CHECK_S)
            proc = self._proc
            if proc is None or self._base is None or self._skipping:
                continue
            read = proc.bytes_read
            flowing = read - checked_read >= LAG_FLOW_BYTES or self.tracker.behind_bytes
            if not flowing and time.monotonic() - checked_at < LAG_IDLE_CHECK_S:
                continue
            try:
                size = await self._log_size()
            except HostError:
                continue
            if size is None or size < 0 or proc is not self._proc:
                continue
            read = proc.bytes_read
            position = self._base + read
            if size < position or (size == checked_size and read == checked_read):
                self._base = size - read  # caught up (or the log was truncated): re-anchored
                position = size
            checked_read, checked_size, checked_at = read, size, time.monotonic()
            behind = size - position
            self.tracker.set_behind(behind, time.time())
            self._dirty.set()
            if behind > SKIP_AHEAD_BYTES:
                await self._skip_ahead(proc, behind)

    async def _skip_ahead(self, proc: StreamProcess, behind: int) -> None:
        """Drop the backlog: restart the tail at the newest lines (and say so)."""
        self._skipping = True
        self.tracker.skipped_ahead(behind, self.cfg.tail_lines, time.time())
        self._dirty.set()
        await proc.close()  # its lines end; _tail_forever starts the next tail at once
