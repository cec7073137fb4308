"""The recorder: every sample, connection change and event of a fleet, written off the UI's loop.

The fleet's change listeners and the event log's subscription only append a record to a deque
(cheap, thread-safe). A writer thread wakes every ``flush_s`` (0.5 s), encodes what came, appends
one block (:mod:`specconsole.recorder.store`), refreshes the tmux state file and, in a folder
recording, starts a new segment every hour and deletes segments older than the retention. A kill
-9 loses at most the records of the last ``flush_s``.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specconsole.base.events import Event, EventLog
from specconsole.recorder.records import FleetState, Record, event_record, host_record, sample_record
from specconsole.recorder.store import SEGMENT_GLOB, BlockWriter
from specconsole.recorder.tmux import summary

if TYPE_CHECKING:
    from specconsole.config import Config
    from specconsole.monitor import Fleet

#: the most records one flush may lose (a kill -9 between two flushes)
FLUSH_S = 0.5
#: a keyframe (the whole fleet, a fresh compression stream) this often: where a replay can start
KEYFRAME_S = 60.0
#: a folder recording starts a new segment file this often (retention deletes whole segments)
SEGMENT_S = 3600.0
#: the tmux state file is rewritten when its facts change, and at least this often (its age says
#: whether a console is still recording)
STATE_EVERY_S = 5.0
#: ... and its facts are looked at no more often than this (tmux asks every status-interval: 15 s
#: by default, 5 in the README's example; at 200 hosts a look costs a third of a block's encoding)
STATE_MIN_S = 5.0


class Recorder:
    """Records ``fleet`` and ``events`` into ``path``: one file, or (``folder=True``) hourly
    segments in a folder, the ones older than ``retention_h`` deleted. ``state_file``: where
    ``status --tmux`` reads the fleet's one-line summary (rewritten at most every flush)."""

    def __init__(self, path: str | os.PathLike[str], *, folder: bool = False, retention_h: float | None = None,
                 state_file: str | os.PathLike[str] | None = None, config_text: str | None = None,
                 flush_s: float = FLUSH_S, keyframe_s: float = KEYFRAME_S, segment_s: float = SEGMENT_S,
                 clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path).expanduser()
        self.folder = folder
        self.retention_s = retention_h * 3600 if retention_h else None
        self.state_file = Path(state_file).expanduser() if state_file else None
        self.meta: dict[str, Any] = {"config": config_text, "version": 1}
        self.flush_s, self.keyframe_s, self.segment_s = flush_s, keyframe_s, segment_s
        self.clock = clock
        self.pending: deque[Record] = deque()
        self.state = FleetState()  # the writer thread's: what the records written so far say
        self.error: str | None = None
        self.blocks = 0
        self.bytes = 0
        self._fleet: Fleet | None = None
        self._writer: BlockWriter | None = None
        self._segment_t0 = 0.0
        self._last_key = 0.0
        self._last_line: str | None = None
        self._state_at = 0.0  # when the facts were last looked at
        self._written_at = 0.0  # when the file was last written
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._on_error: Callable[[str], None] | None = None

    # -- the loop's side: listeners only append -------------------------------------------
    def attach(self, fleet: Fleet, events: EventLog | None = None) -> None:
        """Record ``fleet`` (its samples and connections) and ``events`` (default: the fleet's)."""
        self._fleet = fleet
        now = self.clock()
        for status in fleet.statuses():
            self.pending.append(host_record(now, status))
            self.pending.append([now, "connection", status.name, status.connection])
        fleet.subscribe(self._changed)
        (events or fleet.events).subscribe(self._event)

    def _changed(self, host: str, kind: str) -> None:
        fleet = self._fleet
        assert fleet is not None
        monitor = fleet.monitors.get(host)
        if monitor is None:
            return
        if kind == "connection":
            self.pending.append([self.clock(), "connection", host, monitor.host.status])
            return
        sample = monitor.samples.get(kind)
        if sample is not None:
            self.pending.append(sample_record(self.clock(), host, kind, sample))

    def _event(self, event: Event) -> None:
        self.pending.append(event_record(event))

    def add(self, record: Record) -> None:
        """A record from elsewhere (tests, the bench)."""
        self.pending.append(record)

    # -- the writer thread ----------------------------------------------------------------
    def start(self, on_error: Callable[[str], None] | None = None) -> None:
        """Start the writer thread; ``on_error`` hears the first write problem (once)."""
        self._on_error = on_error
        self._thread = threading.Thread(target=self._run, name="recorder", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.flush_s):
            self.flush()
        self.flush(final=True)

    def stop(self, timeout: float = 2.0) -> None:
        """Write what is left and stop (bounded: a stuck disk is left behind after ``timeout``)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        else:
            self.flush(final=True)
        if self._writer is not None and (self._thread is None or not self._thread.is_alive()):
            self._writer.close()
            self._writer = None

    def flush(self, final: bool = False) -> None:
        """Write the records that came since the last flush as one block (the writer thread's);
        ``final``: the last one, which also writes the tmux facts as they are now."""
        records: list[Record] = []
        pending = self.pending
        while pending:
            records.append(pending.popleft())
        now = self.clock()
        try:
            if records:
                self._write(records, now)
            self._write_state(now, final)
        except OSError as err:
            if self.error is None:
                self.error = f"recorder: cannot write {self.path}: {err.strerror or err}; not recording"
                if self._on_error is not None:
                    self._on_error(self.error)

    def _write(self, records: list[Record], now: float) -> None:
        if self.error is not None:
            return
        records.sort(key=lambda r: r[0])
        for record in records:
            self.state.apply(record)
        writer = self._open(now)
        keyframe = writer.needs_keyframe or now - self._last_key >= self.keyframe_s
        if keyframe:
            self._last_key = now
            records = self.state.keyframe(records[0][0], self.meta) + [r for r in records if r[1] == "event"]
        events = sum(1 for r in records if r[1] == "event")
        self.bytes += writer.write(records, keyframe=keyframe, events=events)
        self.blocks += 1

    def _open(self, now: float) -> BlockWriter:
        if self._writer is not None and self.folder and now - self._segment_t0 >= self.segment_s:
            self._writer.close()
            self._writer = None
            self._prune(now)
        if self._writer is None:
            if self.folder:
                stamp = datetime.fromtimestamp(now).strftime("%Y%m%d-%H%M%S")
                self._writer = BlockWriter(self.path / f"rec-{stamp}.screc")
                self._prune(now)
            else:
                self._writer = BlockWriter(self.path)
            self._segment_t0 = now
        return self._writer

    def _prune(self, now: float) -> None:
        """Delete the segments whose newest record is older than the retention (by mtime)."""
        if self.retention_s is None:
            return
        current = self._writer.path if self._writer is not None else None
        for segment in self.path.glob(SEGMENT_GLOB):
            with contextlib.suppress(OSError):
                if segment != current and now - segment.stat().st_mtime > self.retention_s:
                    segment.unlink()

    def _write_state(self, now: float, final: bool = False) -> None:
        """The tmux line's facts, atomically (a temp file renamed), when they changed."""
        if self.state_file is None or (now - self._state_at < STATE_MIN_S and not final):
            return
        self._state_at = now
        facts = summary(self.state.statuses(), self.state.worst_alert(), now)
        line = json.dumps(facts, sort_keys=True)
        if line == self._last_line and now - self._written_at < STATE_EVERY_S:
            return
        self._last_line, self._written_at = line, now
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_name(f".{self.state_file.name}.{os.getpid()}")
        tmp.write_text(json.dumps({"at": now, "recording": str(self.path), **facts}))
        os.replace(tmp, self.state_file)


def start_recording(config: Config, fleet: Fleet, path: str | None = None,
                    on_error: Callable[[str], None] | None = None) -> Recorder:
    """Record ``fleet``: into ``path`` (one file: ``status --watch --record FILE``), else into the
    config's ``recorder.path`` folder with its retention (the console). The config file's text
    goes into the recording, so a replay lays the console out as it was."""
    text = None
    with contextlib.suppress(OSError, UnicodeDecodeError):
        text = Path(config.path).expanduser().read_text(encoding="utf-8")
    settings = config.recorder.resolved(config.console.state_dir)
    assert settings.path is not None
    if path is not None:
        recorder = Recorder(path, state_file=settings.state_file, config_text=text)
    else:
        recorder = Recorder(settings.path, folder=True, retention_h=settings.retention_h,
                            state_file=settings.state_file, config_text=text)
    recorder.attach(fleet)
    recorder.start(on_error)
    return recorder
