"""GPU readings: ``nvidia-smi`` query streams on any host, NVML on the local one.

Values are never invented: a cell the GPU cannot report (``[N/A]``, ``[Not Supported]``,
``[Insufficient Permissions]``, anything matching ``^\\[.*\\]$``, or an NVML "not supported") is
``None`` on the reading and its raw text is recorded in ``GpuReading.unavailable``. A GPU that
was seen and is gone (vanished from the query, or NVML says "GPU is lost") is listed in
``GpuSnapshot.missing``. When readings cannot be had at all, ``GpuSnapshot.state`` says why
(``no_driver``, ``not_installed``, ``no_gpus``, ``error``) and ``error`` is a one-line message
naming the host and the fix.

Two sources, both following the contract of :mod:`specconsole.sources`:

* :class:`NvidiaSmiSource` keeps ONE long-lived ``nvidia-smi --query-gpu=... -lms N`` process per
  host (plus one ``--query-compute-apps`` process), never a process per sample.
* :class:`NvmlSource` polls NVML (``nvidia-ml-py``) in a worker thread for the local machine.

:func:`make_gpu_source` picks one from the host's ``[gpu]`` config.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import ModuleType
from typing import Any

from specconsole.backoff import Backoff
from specconsole.config import GpuConfig
from specconsole.errors import HostUnavailable
from specconsole.hosts.base import Host, StreamProcess
from specconsole.hosts.commands import to_shell
from specconsole.hosts.local import LocalHost
from specconsole.samples import Sample
from specconsole.sources import Publish

log = logging.getLogger(__name__)

#: The ``--query-gpu`` fields the console asks for, in this order.
QUERY_GPU_FIELDS: tuple[str, ...] = (
    "index", "uuid", "name", "utilization.gpu", "utilization.memory", "memory.used",
    "memory.total", "power.draw", "power.limit", "temperature.gpu", "clocks.sm", "pstate",
)
#: The ``--query-compute-apps`` fields the console asks for, in this order.
QUERY_APPS_FIELDS: tuple[str, ...] = ("pid", "process_name", "used_memory", "gpu_uuid")

DRIVER_MESSAGE_FRAGMENT = "couldn't communicate with the NVIDIA driver"


class GpuState(StrEnum):
    OK = "ok"
    NO_DRIVER = "no_driver"
    NOT_INSTALLED = "not_installed"
    NO_GPUS = "no_gpus"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU at one moment. ``None`` means "not reported", see ``unavailable[field]`` for why."""

    index: int
    uuid: str | None
    name: str | None
    utilization_pct: float | None = None
    memory_util_pct: float | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: float | None = None
    sm_clock_mhz: float | None = None
    pstate: str | None = None
    #: nvidia-smi field name (``power.draw``) -> the raw cell (``[N/A]``) for each missing value.
    unavailable: dict[str, str] = field(default_factory=dict)

    @property
    def memory_used_pct(self) -> float | None:
        if self.memory_used_mib is None or not self.memory_total_mib:
            return None
        return 100.0 * self.memory_used_mib / self.memory_total_mib


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A compute app holding a GPU (pids as the driver reports them: host pids in containers)."""

    pid: int
    name: str | None
    used_memory_mib: float | None
    gpu_uuid: str | None
    gpu_index: int | None = None


@dataclass(frozen=True, slots=True)
class GpuSnapshot:
    state: GpuState
    gpus: tuple[GpuReading, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    #: Indices seen earlier (by this source) that are absent now, or reported lost.
    missing: tuple[int, ...] = ()
    #: One-line operator message naming the host and the fix (None when state is ok).
    error: str | None = None
    at: float = 0.0

    @property
    def ok(self) -> bool:
        return self.state is GpuState.OK


# -- parsing ----------------------------------------------------------------------------------
class GpuParseError(ValueError):
    """A line that is not a query row (wrong cell count, no index/pid)."""


_MISSING_CELL = re.compile(r"^\[.*\]$")
_NUMBER = re.compile(r"^([-+]?\d+(?:\.\d+)?)(?:\s*(?:%|MiB|GiB|KiB|W|MHz|C))?$")

# field -> (GpuReading attribute, kind) where kind is "num" or "str"
_GPU_ATTRS: dict[str, tuple[str, str]] = {
    "uuid": ("uuid", "str"),
    "name": ("name", "str"),
    "utilization.gpu": ("utilization_pct", "num"),
    "utilization.memory": ("memory_util_pct", "num"),
    "memory.used": ("memory_used_mib", "num"),
    "memory.total": ("memory_total_mib", "num"),
    "power.draw": ("power_draw_w", "num"),
    "power.limit": ("power_limit_w", "num"),
    "enforced.power.limit": ("power_limit_w", "num"),
    "temperature.gpu": ("temperature_c", "num"),
    "clocks.sm": ("sm_clock_mhz", "num"),
    "clocks.current.sm": ("sm_clock_mhz", "num"),
    "pstate": ("pstate", "str"),
}
# header names nvidia-smi prints for a field when they differ from the field itself
_HEADER_NAMES: dict[str, str] = {"clocks.sm": "clocks.current.sm", "used_memory": "used_gpu_memory"}


def is_missing_cell(cell: str) -> bool:
    return bool(_MISSING_CELL.match(cell.strip()))


def parse_number(cell: str) -> float | None:
    """``"97"``, ``"97 %"``, ``"612.40 W"``, ``"131072 MiB"`` -> float; anything else -> None."""
    m = _NUMBER.match(cell.strip())
    return float(m.group(1)) if m else None


def split_cells(line: str, count: int, wide: int | None) -> list[str]:
    """Split a csv row on ``", "`` into exactly ``count`` cells.

    The cell at position ``wide`` (a name) may itself contain ``", "``: the cells before it are
    taken from the left, the cells after it from the right, and what remains is the name.
    """
    cells = [c.strip() for c in line.rstrip("\r\n").split(", ")]
    if len(cells) == count:
        return cells
    if len(cells) > count and wide is not None:
        after = count - wide - 1
        end = len(cells) - after
        return [*cells[:wide], ", ".join(cells[wide:end]), *cells[end:]]
    raise GpuParseError(f"expected {count} cells, got {len(cells)}: {line[:120]!r}")


def is_header(line: str, fields: Sequence[str]) -> bool:
    """True for the ``--format=csv`` header (``index, uuid, name, utilization.gpu [%], ...``)."""
    first = line.split(", ", 1)[0].strip().split(" [", 1)[0]
    return bool(fields) and first in (fields[0], _HEADER_NAMES.get(fields[0], fields[0]))


def parse_gpu_line(line: str, fields: Sequence[str] = QUERY_GPU_FIELDS) -> GpuReading:
    """One ``--query-gpu`` row (with or without units). Raises :class:`GpuParseError`."""
    if "index" not in fields:
        raise ValueError("the query must include the index field")
    wide = fields.index("name") if "name" in fields else None
    cells = split_cells(line, len(fields), wide)
    values: dict[str, Any] = {}
    unavailable: dict[str, str] = {}
    index: int | None = None
    for name, cell in zip(fields, cells, strict=True):
        if name == "index":
            if not cell.isdigit():
                raise GpuParseError(f"not a GPU index: {cell!r} in {line[:120]!r}")
            index = int(cell)
            continue
        attr = _GPU_ATTRS.get(name)
        if attr is None:
            continue
        key, kind = attr
        if is_missing_cell(cell) or cell == "":
            unavailable[name] = cell
            values[key] = None
        elif kind == "num":
            number = parse_number(cell)
            if number is None:
                unavailable[name] = cell  # an odd cell is "not reported", never a fake 0
            values[key] = number
        else:
            values[key] = cell
    assert index is not None
    values.setdefault("uuid", None)
    values.setdefault("name", None)
    return GpuReading(index=index, unavailable=unavailable, **values)


def parse_app_line(
    line: str,
    fields: Sequence[str] = QUERY_APPS_FIELDS,
    uuid_to_index: dict[str, int] | None = None,
) -> GpuProcess:
    """One ``--query-compute-apps`` row. Raises :class:`GpuParseError`."""
    wide = fields.index("process_name") if "process_name" in fields else None
    cells = split_cells(line, len(fields), wide)
    row = dict(zip(fields, cells, strict=True))
    pid_cell = row.get("pid", "")
    if not pid_cell.isdigit():
        raise GpuParseError(f"not a pid: {pid_cell!r} in {line[:120]!r}")
    name = row.get("process_name")
    mem = row.get("used_memory", row.get("used_gpu_memory"))
    uuid = row.get("gpu_uuid")
    name = None if name is None or is_missing_cell(name) or not name else name
    uuid = None if uuid is None or is_missing_cell(uuid) or not uuid else uuid
    used = None if mem is None or is_missing_cell(mem) else parse_number(mem)
    index = (uuid_to_index or {}).get(uuid) if uuid else None
    return GpuProcess(int(pid_cell), name, used, uuid, index)


def parse_gpu_lines(
    lines: Iterable[str], fields: Sequence[str] = QUERY_GPU_FIELDS
) -> tuple[list[GpuReading], int]:
    """All readings in ``lines`` (header and blank lines skipped) and the count of garbage lines."""
    out, garbage = [], 0
    for line in lines:
        if not line.strip() or is_header(line, fields):
            continue
        try:
            out.append(parse_gpu_line(line, fields))
        except GpuParseError:
            garbage += 1
    return out, garbage


def parse_app_lines(
    lines: Iterable[str], fields: Sequence[str] = QUERY_APPS_FIELDS,
    uuid_to_index: dict[str, int] | None = None,
) -> tuple[list[GpuProcess], int]:
    out, garbage = [], 0
    for line in lines:
        if not line.strip() or is_header(line, fields):
            continue
        try:
            out.append(parse_app_line(line, fields, uuid_to_index))
        except GpuParseError:
            garbage += 1
    return out, garbage


_NOT_FOUND = re.compile(r"(command not found|: not found|No such file or directory)", re.I)


def classify_failure(
    exit_status: int | None, output: str, host: str, command: str = "nvidia-smi"
) -> tuple[GpuState, str]:
    """Why an nvidia-smi run produced no readings: a state and a one-line message with a fix."""
    text = output.strip()
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if DRIVER_MESSAGE_FRAGMENT in text or (exit_status == 9 and "NVIDIA driver" in text):
        return GpuState.NO_DRIVER, (
            f"{host}: nvidia-smi couldn't communicate with the NVIDIA driver (exit "
            f"{exit_status}); fix: load/install the driver on {host} (check `nvidia-smi` there), "
            f"or set gpu.source = \"none\" for this host"
        )
    if exit_status == 127 or (exit_status in (None, 126, 127) and _NOT_FOUND.search(text)) or (
        "nvidia-smi" in first and "command not found" in first
    ):
        return GpuState.NOT_INSTALLED, (
            f"{host}: nvidia-smi is not installed or not on PATH (exit {exit_status}); fix: "
            f"install the NVIDIA driver utilities on {host}, or set gpu.source = \"none\" for "
            f"this host"
        )
    if "No devices were found" in text:
        return GpuState.NO_GPUS, (
            f"{host}: nvidia-smi found no GPUs; fix: check the GPUs are visible on {host} "
            f"(`nvidia-smi -L`; in a container, pass the devices with --gpus)"
        )
    if exit_status is None:
        detail = first or "the connection dropped before it finished"
        return GpuState.ERROR, f"{host}: `{command}` ended without an exit status: {detail}"
    return GpuState.ERROR, (
        f"{host}: `{command}` exited {exit_status}: {first or 'no output'}"
    )


def _error_snapshot(state: GpuState, message: str) -> GpuSnapshot:
    return GpuSnapshot(state=state, error=message, at=time.time())


# -- nvidia-smi ----------------------------------------------------------------------------------


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
    to a GPU index through the uuids of the latest query-gpu batch.

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
        self.quiet_s = min(0.2, max(0.05, 0.2 * self.interval))
        self.apps_silence_s = 1.5 * self.interval
        #: Counters for diagnostics and tests.
        self.gpu_streams_started = 0
        self.apps_streams_started = 0
        self.garbage_lines = 0
        self.last: GpuSnapshot | None = None
        self._seen: set[int] = set()
        self._expected: int | None = None
        self._uuid_to_index: dict[str, int] = {}
        self._apps_running = False
        self._apps_burst: list[GpuProcess] = []
        self._apps_last_line: float | None = None
        self._apps_started_at: float | None = None
        self._run_started = time.monotonic()

    def _apps_known(self) -> bool:
        """Whether the process list means something yet: the apps stream printed a burst, or has
        run silently for 1.5 intervals (no processes). A broken apps stream does not hold GPU
        readings back for more than a few intervals."""
        now = time.monotonic()
        if self._apps_last_line is not None:
            return True
        if self._apps_started_at is not None and now - self._apps_started_at > self.apps_silence_s:
            return True
        return now - self._run_started > 3 * self.interval + 2

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
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await apps

    # -- query-gpu stream --------------------------------------------------------------------
    async def _run_gpus(self, publish: Publish[GpuSnapshot]) -> None:
        backoff = Backoff()
        while True:
            await self.host.wait_connected()
            produced = False
            try:
                async with self.host.stream(self.gpu_argv) as proc:
                    self.gpu_streams_started += 1
                    produced, stdout_junk = await self._consume_gpus(proc, publish)
                    status = await proc.wait()
                    output = "\n".join([*stdout_junk, proc.stderr_text])
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
            snap = _error_snapshot(state, message)
            self.last = snap
            log.info("%s", message)
            delay = backoff.next()
            publish(Sample(snap, at=snap.at, interval=max(self.interval, delay)))
            await asyncio.sleep(delay)

    async def _consume_gpus(
        self, proc: StreamProcess, publish: Publish[GpuSnapshot]
    ) -> tuple[bool, list[str]]:
        """Read the stream until it ends; returns (published anything, first non-row lines)."""
        queue: asyncio.Queue[tuple[float, str] | None] = asyncio.Queue()

        async def reader() -> None:
            try:
                async for line in proc.lines():
                    queue.put_nowait((time.time(), line))
            finally:
                queue.put_nowait(None)

        task = asyncio.create_task(reader())
        junk: list[str] = []
        produced = False
        batch: list[GpuReading] = []
        batch_at = last_at = 0.0
        emitted = False

        def emit() -> None:
            nonlocal emitted, produced
            self._publish_batch(batch, batch_at, publish)
            emitted = produced = True

        try:
            while True:
                timeout = self.quiet_s if batch and not emitted else None
                try:
                    item = await asyncio.wait_for(queue.get(), timeout)
                except TimeoutError:
                    emit()
                    batch = []
                    continue
                if item is None:
                    break
                at, line = item
                if not line.strip() or is_header(line, QUERY_GPU_FIELDS):
                    continue
                try:
                    reading = parse_gpu_line(line, QUERY_GPU_FIELDS)
                except GpuParseError:
                    self.garbage_lines += 1
                    if len(junk) < 20:
                        junk.append(line)
                    continue
                if batch and (reading.index <= batch[-1].index or at - last_at > self.quiet_s):
                    if not emitted:
                        emit()
                    batch = []
                if not batch:
                    batch_at, emitted = at, False
                batch.append(reading)
                last_at = at
                if self._expected is not None and len(batch) >= self._expected:
                    emit()
            if batch and not emitted:
                emit()
        except BaseException:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            raise
        await task  # the reader is done: re-raises HostUnavailable & co.
        return produced, junk

    def _publish_batch(
        self, batch: list[GpuReading], at: float, publish: Publish[GpuSnapshot]
    ) -> None:
        by_index = {r.index: r for r in batch}
        gpus = tuple(by_index[i] for i in sorted(by_index))
        self._seen.update(by_index)
        self._expected = len(gpus)
        self._uuid_to_index = {g.uuid: g.index for g in gpus if g.uuid}
        if not self._apps_known():
            return  # the first readings wait (at most 1.5 intervals) until processes are known
        snap = GpuSnapshot(
            state=GpuState.OK, gpus=gpus, processes=self._current_processes(),
            missing=tuple(sorted(self._seen - by_index.keys())), error=None, at=at,
        )
        self.last = snap
        publish(Sample(snap, at=at, interval=self.cfg.interval_s))

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

    async def _run_apps(self) -> None:
        backoff = Backoff()
        while True:
            await self.host.wait_connected()
            started = time.monotonic()
            try:
                async with self.host.stream(self.apps_argv) as proc:
                    self.apps_streams_started += 1
                    self._apps_running = True
                    self._apps_started_at = time.monotonic()
                    async for line in proc.lines():
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
                self._apps_burst = []
                self._apps_last_line = None
                self._apps_started_at = None
            if time.monotonic() - started > 4 * self.interval + 2:
                backoff.reset()
            await asyncio.sleep(backoff.next())


# -- NVML ------------------------------------------------------------------------------------
_DRIVER_ERRORS = (
    "NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded", "NVMLError_Uninitialized",
)


def _is(nv: ModuleType, err: BaseException, *names: str) -> bool:
    classes = tuple(c for c in (getattr(nv, n, None) for n in names) if isinstance(c, type))
    return bool(classes) and isinstance(err, classes)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class _GpuLost(Exception):
    pass


class NvmlSource:
    """GPU readings of THIS machine through NVML (``nvidia-ml-py``, imported as ``pynvml``).

    ``pynvml`` is imported lazily, inside the worker thread of the first poll, never at module
    import. ``nvmlInit`` is called once (retried with backoff while it fails), handles are
    fetched once per index and cached, as are names and uuids; each poll runs in
    ``asyncio.to_thread`` every ``cfg.interval_s``. A field NVML cannot report
    (``NVMLError_NotSupported``, ``NoPermission``, ...) is ``None`` with ``unavailable[field] =
    "[Not Supported]"`` (nvidia-smi's field names and cell text). ``NVMLError_LibraryNotFound``
    or a driver that is not loaded gives ``no_driver``; ``NVMLError_GpuIsLost`` puts that GPU in
    ``missing``. Units are converted from NVML's (bytes, mW) to nvidia-smi's (MiB, W).
    """

    def __init__(self, cfg: GpuConfig, *, host_name: str = "localhost") -> None:
        self.cfg = cfg
        self.host_name = host_name
        self.interval = max(0.01, float(cfg.interval_s))
        self.polls = 0
        self.last: GpuSnapshot | None = None
        self._nv: ModuleType | None = None
        self._handles: dict[int, Any] = {}
        self._static: dict[int, tuple[str | None, str | None]] = {}
        self._proc_names: dict[int, str | None] = {}
        self._seen: set[int] = set()

    async def run(self, publish: Publish[GpuSnapshot]) -> None:
        backoff = Backoff()
        try:
            while True:
                started = time.monotonic()
                snap = await asyncio.to_thread(self.poll)
                if snap.ok:
                    backoff.reset()
                    delay, interval = self.interval, self.cfg.interval_s
                else:  # retry nvmlInit with a backoff; the sample stays fresh until then
                    delay = interval = max(self.interval, backoff.next())
                publish(Sample(snap, at=snap.at, interval=interval))
                await asyncio.sleep(max(0.0, started + delay - time.monotonic()))
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        nv, self._nv = self._nv, None
        self._handles.clear()
        if nv is not None:
            with contextlib.suppress(Exception):
                nv.nvmlShutdown()

    # -- one poll (blocking; runs in a worker thread) --------------------------------------------
    def poll(self) -> GpuSnapshot:
        self.polls += 1
        snap = self._poll()
        self.last = snap
        return snap

    def _fail(self, state: GpuState, detail: str) -> GpuSnapshot:
        fixes = {
            GpuState.NO_DRIVER: f"fix: load/install the NVIDIA driver on {self.host_name}, or set "
                                f"gpu.source = \"none\"",
            GpuState.NOT_INSTALLED: "fix: pip install nvidia-ml-py, or set gpu.source = "
                                    "\"nvidia-smi\"",
            GpuState.NO_GPUS: f"fix: check the GPUs are visible on {self.host_name} "
                              f"(`nvidia-smi -L`; in a container, pass them with --gpus)",
            GpuState.ERROR: "fix: check `nvidia-smi` on the host; set gpu.source = \"nvidia-smi\" "
                            "to compare",
        }
        return _error_snapshot(state, f"{self.host_name}: NVML: {detail}; {fixes[state]}")

    def _init(self) -> ModuleType | GpuSnapshot:
        if self._nv is not None:
            return self._nv
        try:
            nv = importlib.import_module("pynvml")
        except ImportError as err:
            return self._fail(GpuState.NOT_INSTALLED, f"cannot import pynvml ({err})")
        try:
            nv.nvmlInit()
        except nv.NVMLError as err:
            if _is(nv, err, *_DRIVER_ERRORS):
                return self._fail(GpuState.NO_DRIVER, f"{err} (nvmlInit)")
            return self._fail(GpuState.ERROR, f"nvmlInit failed: {err}")
        self._nv = nv
        self._handles.clear()
        return nv

    def _poll(self) -> GpuSnapshot:
        nv = self._init()
        if isinstance(nv, GpuSnapshot):
            return nv
        at = time.time()
        try:
            count = int(nv.nvmlDeviceGetCount())
            if count == 0:
                return self._fail(GpuState.NO_GPUS, "no devices")
            gpus: list[GpuReading] = []
            lost: set[int] = set()
            procs: list[GpuProcess] = []
            for index in range(count):
                try:
                    reading, apps = self._read(nv, index)
                except _GpuLost:
                    lost.add(index)
                    self._handles.pop(index, None)
                    continue
                gpus.append(reading)
                procs.extend(apps)
        except nv.NVMLError as err:
            if _is(nv, err, *_DRIVER_ERRORS):
                self.shutdown()
                return self._fail(GpuState.NO_DRIVER, str(err))
            return self._fail(GpuState.ERROR, str(err))
        present = {g.index for g in gpus}
        self._seen.update(present)
        missing = tuple(sorted((self._seen - present) | lost))
        alive = {p.pid for p in procs}
        for pid in list(self._proc_names):
            if pid not in alive:
                del self._proc_names[pid]
        return GpuSnapshot(GpuState.OK, tuple(gpus), tuple(procs), missing, None, at)

    def _read(self, nv: ModuleType, index: int) -> tuple[GpuReading, list[GpuProcess]]:
        unavailable: dict[str, str] = {}

        def get(fields: tuple[str, ...], fn: Any, *args: Any) -> Any:
            try:
                return fn(*args)
            except nv.NVMLError as err:
                if _is(nv, err, "NVMLError_GpuIsLost"):
                    raise _GpuLost from err
                if _is(nv, err, *_DRIVER_ERRORS):
                    raise
                for f in fields:
                    unavailable[f] = f"[{err}]"
                return None

        handle = self._handles.get(index)
        if handle is None:
            handle = get(("index",), nv.nvmlDeviceGetHandleByIndex, index)
            if handle is None:
                raise _GpuLost
            self._handles[index] = handle
        if index not in self._static:
            name = get(("name",), nv.nvmlDeviceGetName, handle)
            uuid = get(("uuid",), nv.nvmlDeviceGetUUID, handle)
            self._static[index] = (
                _text(name) if name is not None else None, _text(uuid) if uuid is not None else None
            )
        name, uuid = self._static[index]
        util = get(("utilization.gpu", "utilization.memory"), nv.nvmlDeviceGetUtilizationRates,
                   handle)
        mem = get(("memory.used", "memory.total"), nv.nvmlDeviceGetMemoryInfo, handle)
        power = get(("power.draw",), nv.nvmlDeviceGetPowerUsage, handle)
        limit = get(("power.limit",), nv.nvmlDeviceGetEnforcedPowerLimit, handle)
        temp = get(("temperature.gpu",), nv.nvmlDeviceGetTemperature, handle,
                   nv.NVML_TEMPERATURE_GPU)
        clock = get(("clocks.sm",), nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_SM)
        pstate = get(("pstate",), nv.nvmlDeviceGetPerformanceState, handle)
        if pstate is not None and not 0 <= int(pstate) <= 15:
            unavailable["pstate"] = "[Unknown]"
            pstate = None
        apps = get(("processes",), nv.nvmlDeviceGetComputeRunningProcesses, handle) or []
        reading = GpuReading(
            index=index, uuid=uuid, name=name,
            utilization_pct=float(util.gpu) if util is not None else None,
            memory_util_pct=float(util.memory) if util is not None else None,
            memory_used_mib=mem.used / 1048576 if mem is not None else None,
            memory_total_mib=mem.total / 1048576 if mem is not None else None,
            power_draw_w=power / 1000.0 if power is not None else None,
            power_limit_w=limit / 1000.0 if limit is not None else None,
            temperature_c=float(temp) if temp is not None else None,
            sm_clock_mhz=float(clock) if clock is not None else None,
            pstate=f"P{int(pstate)}" if pstate is not None else None,
            unavailable=unavailable,
        )
        procs = []
        for app in apps:
            used = getattr(app, "usedGpuMemory", None)
            procs.append(GpuProcess(
                pid=int(app.pid), name=self._process_name(nv, int(app.pid)),
                used_memory_mib=used / 1048576 if used is not None else None,
                gpu_uuid=uuid, gpu_index=index,
            ))
        return reading, procs

    def _process_name(self, nv: ModuleType, pid: int) -> str | None:
        if pid not in self._proc_names:
            try:
                self._proc_names[pid] = _text(nv.nvmlSystemGetProcessName(pid)) or None
            except nv.NVMLError:
                self._proc_names[pid] = None
        return self._proc_names[pid]


# -- choosing a source -----------------------------------------------------------------------
def nvml_available() -> bool:
    """True when ``pynvml`` imports and ``nvmlInit`` succeeds on this machine."""
    try:
        nv = importlib.import_module("pynvml")
        nv.nvmlInit()
    except Exception:
        return False
    with contextlib.suppress(Exception):
        nv.nvmlShutdown()
    return True


GpuSource = NvidiaSmiSource | NvmlSource


def make_gpu_source(host: Host, cfg: GpuConfig) -> GpuSource | None:
    """The GPU source for ``host`` per ``cfg.source``.

    ``"none"`` -> None; ``"nvml"`` -> :class:`NvmlSource` (local hosts only: NVML reads the
    machine it runs on); ``"nvidia-smi"`` -> :class:`NvidiaSmiSource`; ``"auto"`` -> NVML for a
    :class:`LocalHost` where ``nvmlInit`` works, else nvidia-smi.
    """
    source = cfg.source
    if source == "none":
        return None
    if source == "nvml":
        if not isinstance(host, LocalHost):
            raise ValueError(
                f"{host.name}: gpu.source = \"nvml\" reads the machine the console runs on; "
                f"use \"nvidia-smi\" or \"auto\" for a remote host"
            )
        return NvmlSource(cfg, host_name=host.name)
    if source == "nvidia-smi":
        return NvidiaSmiSource(host, cfg)
    if source == "auto":
        if isinstance(host, LocalHost) and nvml_available():
            return NvmlSource(cfg, host_name=host.name)
        return NvidiaSmiSource(host, cfg)
    raise ValueError(
        f"{host.name}: unknown gpu.source {source!r}; use auto, nvidia-smi, nvml or none"
    )
