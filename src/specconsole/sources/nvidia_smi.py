"""GPU readings from ``nvidia-smi`` query streams on any host (one long-lived process per
query, never a process per sample). Formats and types: :mod:`specconsole.formats.nvidia_smi`."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import re
import time
from pathlib import Path

from specconsole.base.backoff import Backoff
from specconsole.base.errors import HostUnavailable
from specconsole.base.samples import Sample
from specconsole.base.values import quoted_line
from specconsole.config import GpuConfig
from specconsole.formats.nvidia_smi import (
    QUERY_APPS_FIELDS,
    QUERY_GPU_FIELDS,
    GpuParseError,
    GpuProcess,
    GpuReading,
    GpuSnapshot,
    GpuState,
    RowParser,
    classify_failure,
    error_snapshot,
    is_header,
    parse_app_line,
)
from specconsole.hosts.base import Host, StreamProcess, line_limit_text
from specconsole.hosts.commands import to_shell
from specconsole.sources import Publish

log = logging.getLogger(__name__)

#: the host-side filter that sends nvidia-smi's bursts as frames (``gpu.frames``)
FRAMES_SCRIPT = Path(__file__).resolve().parents[1] / "remote" / "smi_frames.py"
#: the most lines of one burst the decoder keeps (the filter sends at most 256)
MAX_BURST = 1024
#: what a host's shell (dash, bash, setsid, a pyenv shim) says when it has no python3; the filter
#: itself says "nvidia-smi: No such file or directory" when nvidia-smi is what is missing
_NO_PYTHON = re.compile(r"python3: (?:command )?not found|execute python3|python3: No such file")


@functools.cache
def frames_script() -> str:
    """The filter's source, as ``python3 -c`` runs it on the host."""
    return FRAMES_SCRIPT.read_text(encoding="utf-8")


#: a row as cells (what ``", "`` separates), the row at its place in the burst before when the frame
#: was made against it (``=``, ``~``), and the positions of the cells that differ from that row's
FramedRow = tuple[list[str], list[str] | None, tuple[int, ...]]


class Unframer:
    """The console's side of :mod:`specconsole.remote.smi_frames`: the rows of a framed stream
    back as nvidia-smi printed them. ``=`` is the row at its place in the burst before, ``~P=V;...``
    that row with cell P now V, ``.`` ends a burst (no row), ``\\`` escapes a line of nvidia-smi's
    own that starts so. A ``~`` with no row before it or a part that is not ``P=V`` for a cell of
    that row stands for itself (a line the GPU source then refuses as not a GPU row)."""

    def __init__(self) -> None:
        self.last: list[list[str]] = []
        self.burst: list[list[str]] = []

    def row(self, framed: str) -> FramedRow | None:
        """The row ``framed`` stands for; None for a burst's end."""
        if framed == ".":
            self.last, self.burst = self.burst, []
            return None
        at = len(self.burst)
        before = self.last[at] if at < len(self.last) else None
        row: FramedRow
        if framed == "=":
            row = (before, before, ()) if before is not None else ([""], None, ())
        elif framed[:1] == "~" and before is not None and (patched := _patched(framed, before)) is not None:
            row = patched
        else:
            row = ((framed[1:] if framed[:1] == "\\" else framed).split(", "), None, ())
        if at < MAX_BURST:  # the filter ends a burst at 256 lines; anything else is not kept
            self.burst.append(row[0])
        return row

    def line(self, framed: str) -> str | None:
        """The line nvidia-smi printed for ``framed``; None for a burst's end."""
        row = self.row(framed)
        return None if row is None else ", ".join(row[0])


def _patched(framed: str, before: list[str]) -> FramedRow | None:
    """``~P=V;...`` applied to ``before``; None when a part is not ``P=V`` for one of its cells."""
    cells = before.copy()
    changed = []
    n = len(cells)
    for part in framed[1:].split(";"):
        at, eq, value = part.partition("=")
        if not (eq and at.isdecimal()):
            return None
        i = int(at)
        if i >= n:
            return None
        cells[i] = value
        changed.append(i)
    return cells, before, tuple(changed)


#: A query-gpu stream silent this long (no GPU row) is restarted: 3 intervals, at least ...
SILENCE_MIN_S = 5.0
SILENCE_INTERVALS = 3
#: ... and the wait doubles after each silent start, up to this.
SILENCE_MAX_S = 60.0


class NvidiaSmiSource:
    """GPU readings from one long-lived ``nvidia-smi -lms`` stream per host.

    Streams (both via ``host.stream(argv)``, restarted only when they end):

    * ``nvidia-smi --query-gpu=<QUERY_GPU_FIELDS> --format=csv,noheader,nounits -lms <ms>``
    * ``nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_uuid
      --format=csv,noheader,nounits -lms <ms>``

    Grouping the query-gpu stream into one snapshot per iteration: nvidia-smi writes all GPUs
    of one iteration in index order in one burst, then sleeps for the interval. A batch is
    emitted as soon as it holds as many GPUs as the previous batch did (no added latency in the
    steady state); otherwise (first iteration, a GPU vanished) when the stream has been quiet
    for a short period (``quiet_s``: 20 % of the interval, 50-200 ms). A line whose index is not
    above the previous line's, or that follows a quiet period, starts a new batch. A GPU that
    shows up after its batch was emitted by count (a GPU came back) is added to that batch and
    the batch is published again. Each snapshot is stamped with the arrival time of its first
    line. Indices seen before but absent from a batch are its ``missing``.

    The compute-apps stream prints one burst per iteration and nothing at all when no process
    uses a GPU, so the process list is the latest burst while its last line is less than
    1.5 intervals old, and empty after that ("no processes" is silence). Processes are mapped
    to a GPU index through the uuids of the latest query-gpu batch. Readings that come before
    the process list means anything (the apps stream's first burst, or its first 1.5 intervals
    of silence) are published at once with ``processes_known=False``, and again with the
    processes as soon as they are known.

    A line that is not a GPU row (garbage, binary junk, a row with the wrong number of cells, a
    line cut out for passing the hosts' 64 KiB line limit) is refused and reported, never shown
    as readings: ``error`` says ``<host>: nvidia-smi printed a line that is not a GPU row: '…'``
    (the line cut to 160 characters, control characters escaped) and ``state`` is ``error``. A
    batch read while rows are being refused (in its iteration or the one before) is published
    with its readings, state ``error`` and that message, so the GPU pane and ``status --json``
    keep saying so for as long as it goes on; a stream printing nothing but garbage publishes
    the message alone (at most once per interval).

    A stream that prints no GPU row for ``silence_s`` (3 intervals, at least 5 s: nvidia-smi
    hung, or printing only garbage) is reported (``printed no GPU row for 5 s``) and restarted.
    Each restart of a stream that never printed a row doubles the wait, up to
    :data:`SILENCE_MAX_S` (a host whose first query takes tens of seconds, formats.md, still
    gets its readings), and a stream that printed rows sets it back.

    When the query-gpu stream ends (nvidia-smi exits, the host drops: ``HostUnavailable`` or
    the lines ending) the exit status and output are classified (:func:`classify_failure`), an
    error snapshot is published, and the stream is restarted after ``host.wait_connected()``
    and a backoff (0.5 s doubling to 15 s; reset once a stream produced readings). Error
    samples carry ``interval = max(cfg.interval_s, next backoff)`` so they do not read stale
    while the source is waiting to retry.
    """

    def __init__(self, host: Host, cfg: GpuConfig, *, binary: str = "nvidia-smi") -> None:
        self.host = host
        self.cfg = cfg
        self.interval = max(0.01, float(cfg.interval_s))
        ms = max(1, round(self.interval * 1000))
        self.gpu_argv: list[str] = [
            binary, "--query-gpu=" + ",".join(QUERY_GPU_FIELDS), "--format=csv,noheader,nounits",
            "-lms", str(ms),
        ]
        self.apps_argv: list[str] = [
            binary, "--query-compute-apps=" + ",".join(QUERY_APPS_FIELDS),
            "--format=csv,noheader,nounits", "-lms", str(ms),
        ]
        #: the streams go through the host-side frame filter (``gpu.frames``; off for good once the
        #: host turned out to have no python3)
        self.frames = cfg.frames
        #: the query-gpu rows' parser: a GPU's row reads only the cells that changed since its last
        self.rows_parser = RowParser(QUERY_GPU_FIELDS)
        self.quiet_s = min(0.2, max(0.05, 0.2 * self.interval))
        self.apps_silence_s = 1.5 * self.interval
        #: No GPU row for this long: the query-gpu stream is reported and restarted.
        self.silence_s = max(SILENCE_MIN_S, SILENCE_INTERVALS * self.interval)
        self._silence_wait = self.silence_s  # doubled after each start that printed no row
        #: Counters for diagnostics and tests.
        self.gpu_streams_started = 0
        self.apps_streams_started = 0
        self.garbage_lines = 0
        self.silent_restarts = 0
        self.last: GpuSnapshot | None = None
        self._seen: set[int] = set()
        self._expected: int | None = None
        self._uuid_to_index: dict[str, int] = {}
        self._apps_running = False
        self._apps_burst: list[GpuProcess] = []
        self._apps_last_line: float | None = None
        self._apps_started_at: float | None = None
        #: the stream's filter ended a burst (the query run once first: an empty one says "none")
        self._apps_burst_seen = False
        self._run_started = time.monotonic()
        #: the first readings while processes are not known yet, and the timer that publishes them
        self._held: tuple[tuple[GpuReading, ...], tuple[int, ...], float, Publish[GpuSnapshot],
                          str | None] | None = None
        self._held_timer: asyncio.TimerHandle | None = None

    def _apps_known(self) -> bool:
        """Whether the process list means something yet: the apps stream printed a burst (through
        the frame filter, an empty one too), or has run silently for 1.5 intervals (no processes).
        A broken apps stream does not hold GPU readings back for more than a few intervals."""
        now = time.monotonic()
        if self._apps_last_line is not None or self._apps_burst_seen:
            return True
        if self._apps_started_at is not None and now - self._apps_started_at > self.apps_silence_s:
            return True
        return now - self._run_started > 3 * self.interval + 2

    def _stream_argv(self, argv: list[str], *options: str) -> list[str]:
        """What runs on the host for the query ``argv``: it, or it under the frame filter (with
        the filter's ``options``)."""
        return ["python3", "-c", frames_script(), *options, *argv] if self.frames else argv

    def _no_python(self, status: int | None, output: str) -> bool:
        """The frame filter could not start (no python3 on the host): off for good, and True."""
        if self.frames and status == 127 and _NO_PYTHON.search(output):
            self.frames = False
            log.info("%s: no python3 for the frame filter; nvidia-smi's own output from now on", self.host.name)
            return True
        return False

    @property
    def command(self) -> str:
        """The exact query-gpu command line (what the pane shows as "the remote command")."""
        return to_shell(self.gpu_argv)

    async def run(self, publish: Publish[GpuSnapshot]) -> None:
        self._run_started = time.monotonic()
        apps = asyncio.create_task(self._run_apps(), name=f"gpu-apps-{self.host.name}")
        try:
            await self._run_gpus(publish)
        finally:
            apps.cancel()
            self._drop_held()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await apps

    # -- query-gpu stream --------------------------------------------------------------------
    async def _run_gpus(self, publish: Publish[GpuSnapshot]) -> None:
        backoff = Backoff()
        while True:
            await self.host.wait_connected()
            produced = False
            try:
                async with self.host.stream(self._stream_argv(self.gpu_argv)) as proc:
                    self.gpu_streams_started += 1
                    produced, stdout_junk, silent = await self._consume_gpus(proc, publish)
                    if silent is None:
                        status = await proc.wait()
                        output = "\n".join([*stdout_junk, proc.stderr_text])
                if silent is None and not produced and self._no_python(status, output):
                    continue  # at once, without the filter
                if silent is not None:  # the stream is closed (killed): restart it
                    state, message = GpuState.ERROR, silent
                    self.silent_restarts += 1
                else:
                    state, message = classify_failure(status, output, self.host.name, self.command)
            except HostUnavailable as err:
                detail = str(err)
                if not detail.startswith(f"{self.host.name}:"):
                    detail = f"{self.host.name}: {detail or 'not connected'}"
                state, message = GpuState.ERROR, f"{detail}; GPU readings resume on reconnect"
            except Exception as err:  # any transport failure: report it, retry, never die
                state, message = GpuState.ERROR, f"{self.host.name}: `{self.command}` failed: {err}"
            if produced:
                backoff.reset()
            snap = error_snapshot(state, message)
            self.last = snap
            self._drop_held()  # readings held from the stream that ended are not news
            log.info("%s", message)
            delay = backoff.next()
            publish(Sample(snap, at=snap.at, interval=max(self.interval, delay)))
            await asyncio.sleep(delay)

    async def _consume_gpus(
        self, proc: StreamProcess, publish: Publish[GpuSnapshot]
    ) -> tuple[bool, list[str], str | None]:
        """Read the stream until it ends or falls silent; returns (published anything, first
        non-row lines, why it was given up as silent or None).

        Line-driven: each line is handled as it is read, with no task, queue or timer per line;
        the quiet period is one loop deadline per batch that is still incomplete, the silence
        one deadline per silence period (which closes the stream when it passes)."""
        wait = self._silence_wait
        batcher = _GpuBatcher(self, publish, asyncio.get_running_loop(), proc, wait)
        try:
            feed = batcher.feed
            row = Unframer().row if self.frames else None
            async for lines in proc.line_batches():  # the lines that came together: one time
                at = time.time()
                for line in lines:
                    if row is None:
                        feed(at, line.split(", "))
                    elif (got := row(line)) is not None:
                        feed(at, *got)
                    else:  # the filter's ``.``: the burst is whole
                        batcher.burst_end()
        except Exception:
            if batcher.closing is None:  # not the end of a stream closed for its silence
                batcher.cancel()
                raise
        except BaseException:
            batcher.cancel()
            raise
        if batcher.closing is None:
            batcher.finish()
            if batcher.produced:
                self._silence_wait = self.silence_s
            return batcher.produced, batcher.junk, None
        batcher.cancel()
        with contextlib.suppress(Exception):
            await batcher.closing
        self._silence_wait = self.silence_s if batcher.rows else min(SILENCE_MAX_S, 2 * wait)
        why = f"{self.host.name}: nvidia-smi printed no GPU row for {wait:g} s; restarted it"
        if batcher.refused_since_row is not None:
            why += f" ({batcher.refused_since_row})"
        log.info("%s", why)
        return batcher.produced, batcher.junk, why

    def _publish_batch(
        self, batch: list[GpuReading], at: float, publish: Publish[GpuSnapshot],
        error: str | None = None,
    ) -> None:
        by_index = {r.index: r for r in batch}
        gpus = tuple(by_index[i] for i in sorted(by_index))
        self._seen.update(by_index)
        self._expected = len(gpus)
        self._uuid_to_index = {g.uuid: g.index for g in gpus if g.uuid}
        missing = tuple(sorted(self._seen - by_index.keys()))
        if not self._apps_known():  # the first readings go out at once, marked "processes not
            self._publish_snapshot(gpus, missing, at, publish, error, processes_known=False)  # known yet"
            self._hold(gpus, missing, at, publish, error)  # and again as soon as processes are known
            return
        self._publish_snapshot(gpus, missing, at, publish, error)

    def _publish_snapshot(self, gpus: tuple[GpuReading, ...], missing: tuple[int, ...], at: float,
                          publish: Publish[GpuSnapshot], error: str | None = None, *,
                          processes_known: bool = True) -> None:
        self._drop_held()
        snap = GpuSnapshot(
            state=GpuState.OK if error is None else GpuState.ERROR, gpus=gpus,
            processes=self._current_processes() if processes_known else (),
            missing=missing, error=error, at=at, processes_known=processes_known,
        )
        self.last = snap
        publish(Sample(snap, at=at, interval=self.cfg.interval_s))

    def _publish_refusal(self, message: str, publish: Publish[GpuSnapshot]) -> None:
        """Lines that are not GPU rows and no readings to carry the news: the message alone."""
        snap = error_snapshot(GpuState.ERROR, message)
        self.last = snap
        self._drop_held()
        publish(Sample(snap, at=snap.at, interval=self.interval))

    def _apps_known_in(self) -> float:
        """Seconds until :meth:`_apps_known` turns true by silence alone."""
        now = time.monotonic()
        due = self._run_started + 3 * self.interval + 2
        if self._apps_started_at is not None:
            due = min(due, self._apps_started_at + self.apps_silence_s)
        return max(0.0, due - now) + 0.01

    def _hold(self, gpus: tuple[GpuReading, ...], missing: tuple[int, ...], at: float,
              publish: Publish[GpuSnapshot], error: str | None) -> None:
        """Keep the latest readings until processes are known and publish them again then (1.5
        intervals after the apps stream started, not with the batch after), with processes."""
        self._held = (gpus, missing, at, publish, error)
        if self._held_timer is None:
            self._held_timer = asyncio.get_running_loop().call_later(self._apps_known_in(), self._release_held)

    def _release_held(self) -> None:
        self._held_timer = None
        held = self._held
        if held is None:
            return
        if not self._apps_known():  # the apps stream (re)started meanwhile: its silence counts
            self._held_timer = asyncio.get_running_loop().call_later(self._apps_known_in(), self._release_held)
            return
        self._publish_snapshot(*held)

    def _drop_held(self) -> None:
        self._held = None
        if self._held_timer is not None:
            self._held_timer.cancel()
            self._held_timer = None

    # -- compute-apps stream -------------------------------------------------------------------
    def _current_processes(self) -> tuple[GpuProcess, ...]:
        last = self._apps_last_line
        if not self._apps_running or last is None:
            return ()
        if time.monotonic() - last > self.apps_silence_s + 0.1:
            return ()  # no burst for 1.5 intervals: nvidia-smi printed nothing, so no processes
        m = self._uuid_to_index
        return tuple(
            GpuProcess(p.pid, p.name, p.used_memory_mib, p.gpu_uuid,
                       m.get(p.gpu_uuid) if p.gpu_uuid else None)
            for p in self._apps_burst
        )

    def _apps_burst_end(self) -> None:
        """A framed compute-apps burst is whole: GPU readings held for the process list go out
        with it now, not at the hold's deadline or with the next GPU burst."""
        if self._held is not None and self._apps_known():
            self._publish_snapshot(*self._held)

    async def _run_apps(self) -> None:
        backoff = Backoff()
        while True:
            await self.host.wait_connected()
            started = time.monotonic()
            try:
                # once first: the query run once says "no process" by its empty burst; the loop
                # says that only by its silence (1.5 intervals)
                async with self.host.stream(self._stream_argv(self.apps_argv, "--once-first")) as proc:
                    self.apps_streams_started += 1
                    self._apps_running = True
                    self._apps_started_at = time.monotonic()
                    decode = Unframer().line if self.frames else None
                    async for got in proc.lines():
                        line = got if decode is None else decode(got)
                        if line is None:  # the filter's ``.``
                            self._apps_burst_seen = True
                            self._apps_burst_end()
                            continue
                        if not line.strip() or is_header(line, QUERY_APPS_FIELDS):
                            continue
                        try:
                            p = parse_app_line(line, QUERY_APPS_FIELDS)
                        except GpuParseError:
                            self.garbage_lines += 1
                            continue
                        now = time.monotonic()
                        last = self._apps_last_line
                        if last is None or now - last > self.quiet_s:  # a new iteration's burst
                            self._apps_burst = []
                        self._apps_burst.append(p)
                        self._apps_last_line = now
                    status = await proc.wait()
                    log.info("%s: `%s` ended (exit %s)", self.host.name, proc.command, status)
            except HostUnavailable:
                pass
            except Exception as err:
                log.warning("%s: compute-apps stream failed: %s", self.host.name, err)
            finally:
                self._apps_running = False
                self._apps_burst_seen = False
                self._apps_burst = []
                self._apps_last_line = None
                self._apps_started_at = None
            if time.monotonic() - started > 4 * self.interval + 2:
                backoff.reset()
            await asyncio.sleep(backoff.next())


class _GpuBatcher:
    """Groups query-gpu lines into one snapshot per nvidia-smi iteration (see
    :class:`NvidiaSmiSource`). ``feed`` is called for each line as it is read; a batch still short
    of the expected GPU count gets ONE deadline (``loop.call_at``, moved on only when lines keep
    coming), which emits it once the stream has been quiet for ``quiet_s``, or at the frame
    filter's ``.``, whichever comes first (:meth:`burst_end`). A refused line (not
    a GPU row) is carried by the batches of its iteration and the next; one that no batch
    carries gets one deadline too, which publishes it (with the iteration's readings, if they
    went out without it)."""

    def __init__(self, source: NvidiaSmiSource, publish: Publish[GpuSnapshot],
                 loop: asyncio.AbstractEventLoop, proc: StreamProcess, silence_s: float) -> None:
        self.source = source
        self.publish = publish
        self.loop = loop
        self.proc = proc
        self.quiet_s = source.quiet_s
        self.junk: list[str] = []
        self.produced = False
        self.rows = 0
        self.batch: list[GpuReading] = []
        self.batch_at = 0.0
        self.last_at = 0.0
        self.last_loop_time = 0.0
        #: when the latest GPU row (or the stream's start) was read, in loop time
        self.last_row_loop_time = loop.time()
        self.emitted = False
        self.emitted_error: str | None = None
        self.emitted_loop_time = 0.0
        self.timer: asyncio.TimerHandle | None = None
        #: Deadlines armed (for tests: at most one per incomplete batch, never one per line).
        self.deadlines = 0
        #: the refusal message of this iteration and of the one before (what batches carry)
        self.refused: str | None = None
        self.refused_before: str | None = None
        self.refused_since_row: str | None = None
        self.unreported = False  # a refusal no published snapshot carried yet
        self.refusal_timer: asyncio.TimerHandle | None = None
        self.refusal_published = -math.inf
        self.oversized_seen = proc.oversized_lines
        #: no GPU row for this long closes the stream (``closing``: that close)
        self.silence_s = silence_s
        self.silence_timer: asyncio.TimerHandle | None = loop.call_at(
            self.last_row_loop_time + silence_s, self._silence_check)
        self.closing: asyncio.Future[None] | None = None

    def feed(self, at: float, cells: list[str], base: list[str] | None = None,
             changed: tuple[int, ...] = ()) -> None:
        """One row (its cells; ``base`` and ``changed`` as :meth:`RowParser.parse_cells` takes them)."""
        src = self.source
        if self.proc.oversized_lines != self.oversized_seen:
            self.oversized_seen = self.proc.oversized_lines
            self.refuse(f"{quoted_line(self.proc.oversized_head)}, cut out for being longer than "
                        f"the {line_limit_text()} line limit", None)
        first = cells[0]
        if not first.isdecimal() and ((len(cells) == 1 and not first.strip())
                                      or is_header(first, QUERY_GPU_FIELDS)):
            return
        try:
            reading = src.rows_parser.parse_cells(cells, base, changed)
        except GpuParseError:
            line = ", ".join(cells)
            self.refuse(quoted_line(line, 160), line)
            return
        batch = self.batch
        if batch and (reading.index <= batch[-1].index or at - self.last_at > self.quiet_s):
            if not self.emitted:
                self.emit()
            self.batch = batch = []
        if not batch:
            self.batch_at, self.emitted = at, False
            self.refused_before, self.refused = self.refused, None  # a new iteration
        batch.append(reading)
        self.rows += 1
        self.refused_since_row = None
        self.last_at = at
        self.last_loop_time = self.last_row_loop_time = self.loop.time()
        if src._expected is not None and len(batch) >= src._expected:
            self.emit()
        elif not self.emitted and self.timer is None:
            self.deadlines += 1
            self.timer = self.loop.call_at(self.last_loop_time + self.quiet_s, self._quiet)

    def refuse(self, shown: str, line: str | None) -> None:
        """A line that is not a GPU row: counted, kept for the exit report, and reported."""
        src = self.source
        src.garbage_lines += 1
        if line is not None and len(self.junk) < 20:
            self.junk.append(line)
        message = f"{src.host.name}: nvidia-smi printed a line that is not a GPU row: {shown}"
        self.refused = self.refused_since_row = message
        self.unreported = True
        if self.refusal_timer is None:
            due = max(self.loop.time() + self.quiet_s, self.refusal_published + src.interval)
            self.refusal_timer = self.loop.call_at(due, self._report_refusal)

    def _report_refusal(self) -> None:
        self.refusal_timer = None
        message = self.refused or self.refused_before
        if not self.unreported or message is None:
            return
        recent = self.loop.time() - self.emitted_loop_time <= self.source.interval + self.quiet_s
        if self.batch and self.emitted and recent:
            if self.emitted_error is None:
                self.emit()  # this iteration's readings went out before the refusal: again, with it
            self.unreported = False
            return
        self.unreported = False
        self.refusal_published = self.loop.time()
        self.source._publish_refusal(message, self.publish)

    def _silence_check(self) -> None:
        """The silence deadline: moved on if a row came meanwhile, else the stream is closed
        (its lines then end, and the source restarts it)."""
        self.silence_timer = None
        due = self.last_row_loop_time + self.silence_s
        if self.loop.time() < due:
            self.silence_timer = self.loop.call_at(due, self._silence_check)
            return
        self.closing = asyncio.ensure_future(self.proc.close())

    def _quiet(self) -> None:
        self.timer = None
        if not self.batch or self.emitted:
            return
        due = self.last_loop_time + self.quiet_s
        if self.loop.time() < due:  # a line came meanwhile: the quiet period starts from it
            self.timer = self.loop.call_at(due, self._quiet)
            return
        self.emit()
        self.batch = []

    def emit(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        error = self.refused or self.refused_before
        self.source._publish_batch(self.batch, self.batch_at, self.publish, error)
        self.emitted = self.produced = True
        self.emitted_error, self.emitted_loop_time = error, self.loop.time()
        if error is not None:
            self.unreported = False

    def burst_end(self) -> None:
        """The frame filter's ``.``: the burst is whole, so its rows go out now (the first burst,
        whose GPU count is not known yet, and a short one need not wait ``quiet_s`` for more)."""
        if self.batch and not self.emitted:
            self.emit()

    def finish(self) -> None:
        """The stream ended: publish what is left."""
        if self.batch and not self.emitted:
            self.emit()
        self.cancel()

    def cancel(self) -> None:
        for timer in (self.timer, self.refusal_timer, self.silence_timer):
            if timer is not None:
                timer.cancel()
        self.timer = self.refusal_timer = self.silence_timer = None
