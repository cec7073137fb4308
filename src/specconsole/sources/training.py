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

from specconsole.backoff import INITIAL_S, MAX_S, Backoff
from specconsole.config import TrainingConfig
from specconsole.errors import HostError, HostUnavailable
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
from specconsole.samples import Sample
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



class TrainingSource:
    """Tails one training log over ``host`` and publishes :class:`TrainingProgress`.

    One ``tail -n <tail_lines> -F <log_path>`` runs for as long as the host stays up; after a
    drop it is started again, and the tracker's dedupe makes the re-tailed lines harmless.
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
                    async for line in proc.lines():
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
