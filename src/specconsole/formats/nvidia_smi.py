"""The nvidia-smi query format: the CSV fields the console asks for, their units, the parsed
readings, and why a run produced none.

Values are never invented: a cell the GPU cannot report (``[N/A]``, ``[Not Supported]``,
``[Insufficient Permissions]``, anything matching ``^\\[.*\\]$``, or an NVML "not supported") is
``None`` on the reading and its raw text is recorded in ``GpuReading.unavailable``. A GPU that
was seen and is gone (vanished from the query, or NVML says "GPU is lost") is listed in
``GpuSnapshot.missing``. When readings cannot be had at all, ``GpuSnapshot.state`` says why
(``no_driver``, ``not_installed``, ``no_gpus``, ``error``) and ``error`` is a one-line message
naming the host and the fix.

A row is read only when it has exactly one cell per query field: nvidia-smi does not quote, so
a GPU name with ``", "`` in it is recognised by the name's known position and the exact cell
count, and a row whose extra cells are values (not words of a name) is refused as not a GPU
row (:func:`split_cells`), never re-aligned.

Pure functions and data types, no I/O: the GPU sources (:mod:`specconsole.sources.nvidia_smi`,
:mod:`specconsole.sources.nvml`) and actions (``kill``) share them.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from enum import StrEnum
from typing import Any

from specconsole.base.values import quoted_line

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
    #: False for the first readings of a stream, published before the compute-apps stream has
    #: said which processes run (it is silent when none do: that takes 1.5 intervals to know).
    processes_known: bool = True

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
    c = cell.strip()
    return c[:1] == "[" and (c[-1:] == "]" and len(c) > 1) and bool(_MISSING_CELL.match(c))


def parse_number(cell: str) -> float | None:
    """``"97"``, ``"97 %"``, ``"612.40 W"``, ``"131072 MiB"`` -> float; anything else -> None."""
    c = cell.strip()
    whole, dot, frac = c.partition(".")
    if whole.isdecimal() and (not dot or frac.isdecimal()):  # the common unitless cell, no regex
        return float(c)
    m = _NUMBER.match(c)
    return float(m.group(1)) if m else None


def split_cells(line: str, count: int, wide: int | None) -> list[str]:
    """Split a csv row on ``", "`` into exactly ``count`` cells, or raise :class:`GpuParseError`.

    nvidia-smi does not quote, and a name may contain ``", "`` (formats.md: "rarely, commas").
    So a row with more cells than fields is read as such a name, the cell at position ``wide``,
    only when that is the one reading: the cells before it are taken from the left, the cells
    after it from the right, and every extra piece joined into the name must be a word, not a
    value (a number with or without unit, a ``[...]`` cell, an empty cell, a ``GPU-``/``MIG-``
    uuid). A row with an extra value anywhere (a cell too many, two rows glued together) is
    refused, never re-aligned: its values would all be shifted. Fewer cells: refused.
    """
    cells = [c.strip() for c in line.rstrip("\r\n").split(", ")]
    if len(cells) == count:
        return cells
    if len(cells) > count and wide is not None:
        after = count - wide - 1
        end = len(cells) - after
        pieces = cells[wide:end]
        if not any(_value_like(piece) for piece in pieces):
            return [*cells[:wide], ", ".join(pieces), *cells[end:]]
    raise GpuParseError(f"expected {count} cells, got {len(cells)}: {quoted_line(line, 120)}")


def _value_like(cell: str) -> bool:
    """A cell that reads as a value or an id, which no piece of a name with commas may be."""
    return (not cell or parse_number(cell) is not None or is_missing_cell(cell)
            or cell.startswith(("GPU-", "MIG-")))


def is_header(line: str, fields: Sequence[str]) -> bool:
    """True for the ``--format=csv`` header (``index, uuid, name, utilization.gpu [%], ...``)."""
    first = line.split(", ", 1)[0].strip().split(" [", 1)[0]
    return bool(fields) and first in (fields[0], _HEADER_NAMES.get(fields[0], fields[0]))


#: per field tuple: the name cell's position and, per cell, (field, attribute, kind) or None
_PLANS: dict[tuple[str, ...], tuple[int | None, tuple[tuple[str, str, str] | None, ...]]] = {}


def _plan(fields: Sequence[str]) -> tuple[int | None, tuple[tuple[str, str, str] | None, ...]]:
    key = tuple(fields)
    plan = _PLANS.get(key)
    if plan is None:
        if "index" not in key:
            raise ValueError("the query must include the index field")
        cells = tuple(
            ("index", "index", "index") if name == "index"
            else (name, *_GPU_ATTRS[name]) if name in _GPU_ATTRS else None
            for name in key
        )
        plan = _PLANS[key] = (key.index("name") if "name" in key else None, cells)
    return plan


#: per field tuple: the index cell's position and (position, attribute, is a number) per cell read
_FAST_PLANS: dict[tuple[str, ...], tuple[int, tuple[tuple[int, str, bool], ...]]] = {}


def _fast_plan(fields: Sequence[str]) -> tuple[int, tuple[tuple[int, str, bool], ...]]:
    key = tuple(fields)
    fast = _FAST_PLANS.get(key)
    if fast is None:
        _, plan = _plan(fields)
        fast = _FAST_PLANS[key] = (key.index("index"), tuple(
            (i, step[1], step[2] == "num") for i, step in enumerate(plan)
            if step is not None and step[2] != "index"))
    return fast


#: what :func:`_common_cell` gives for a cell the common row does not have
_UNCOMMON = object()


def _common_cell(cell: str, number: bool) -> Any:
    """A cell of the common row read (a plain number, or text without padding or ``[...]``), or
    :data:`_UNCOMMON`."""
    if number:
        whole, dot, frac = cell.partition(".")
        return float(cell) if whole.isdecimal() and (not dot or frac.isdecimal()) else _UNCOMMON
    return cell if cell and cell[0] != "[" and cell == cell.strip() else _UNCOMMON


def _parse_plain_gpu_line(line: str, fields: Sequence[str]) -> GpuReading | None:
    """The common row (every cell present, plain numbers, no padding, no ``", "`` in the name)
    in one pass; None for anything else, which :func:`parse_gpu_line`'s general path reads (to
    the same result where this one gives one)."""
    index_at, steps = _fast_plan(fields)
    cells = line.rstrip("\r\n").split(", ")
    if len(cells) != len(fields) or not cells[index_at].isdecimal():
        return None
    values: dict[str, Any] = {"uuid": None, "name": None}
    for at, key, number in steps:
        value = _common_cell(cells[at], number)
        if value is _UNCOMMON:
            return None
        values[key] = value
    return GpuReading(index=int(cells[index_at]), unavailable={}, **values)


class RowParser:
    """:func:`parse_gpu_line` for one stream, cheaper for rows that repeat: a common row (see
    :func:`_parse_plain_gpu_line`) after a common row of the same GPU index reads only the cells
    that changed and keeps the other values (the same reading when nothing changed). Gives what
    :func:`parse_gpu_line` gives for every row; raises :class:`GpuParseError` as it does."""

    def __init__(self, fields: Sequence[str] = QUERY_GPU_FIELDS) -> None:
        self.fields = tuple(fields)
        self._index_at, steps = _fast_plan(self.fields)
        #: per cell read: (its position in the row, the reading's argument it is, a number)
        self._steps = tuple((at, _READING_ARGS.index(key), number) for at, key, number in steps)
        #: a cell's position -> (the reading's argument it is, a number), for the cells read
        self._step_at = {at: (arg, number) for at, arg, number in self._steps}
        #: index cell -> its last common row: its cells, the reading's arguments, the reading
        self._last: dict[str, tuple[list[str], list[Any], GpuReading]] = {}

    def parse(self, line: str) -> GpuReading:
        return self.parse_cells(line.rstrip("\r\n").split(", "))

    def parse_cells(self, cells: list[str], base: list[str] | None = None,
                    changed: tuple[int, ...] = ()) -> GpuReading:
        """The row whose cells (``", "``-separated) are ``cells``. ``base``: the cells of a row
        that ``cells`` equals except at the positions ``changed`` (a framed stream's ``=`` and
        ``~``, :class:`~specconsole.sources.nvidia_smi.Unframer`); when it is this GPU's last
        row, only those cells are read, else every cell is compared."""
        index_at = self._index_at
        if len(cells) == len(self.fields):
            before = self._last.get(cells[index_at])
            if before is not None:
                if base is not None and before[0] is base and index_at not in changed:
                    after = self._patched(cells, changed, before)
                else:
                    after = self._changed(cells, before)
                if after is not None:
                    return after
        line = ", ".join(cells)
        reading = _parse_plain_gpu_line(line, self.fields)
        if reading is None:
            self._last.pop(cells[index_at] if len(cells) > index_at else "", None)
            return _parse_general_gpu_line(line, self.fields)
        if len(self._last) >= 1024:  # an index cell is a few digits: more is not a GPU's
            self._last.clear()
        self._last[cells[index_at]] = (cells, [getattr(reading, a) for a in _READING_ARGS], reading)
        return reading

    def _changed(self, cells: list[str], before: tuple[list[str], list[Any], GpuReading]) -> GpuReading | None:
        """``before``'s reading with the cells that differ read anew; None when one is not common."""
        old_cells, old_args = before[0], before[1]
        args: list[Any] | None = None
        for at, arg, number in self._steps:
            cell = cells[at]
            if cell == old_cells[at]:
                continue
            value = _common_cell(cell, number)
            if value is _UNCOMMON:
                return None
            if args is None:
                args = old_args.copy()
            args[arg] = value
        return self._keep(cells, before, args)

    def _patched(self, cells: list[str], changed: tuple[int, ...],
                 before: tuple[list[str], list[Any], GpuReading]) -> GpuReading | None:
        """``before``'s reading with the cells at ``changed`` read anew (the others are its own);
        None when one is not common."""
        args: list[Any] | None = None
        step_at = self._step_at
        for at in changed:
            step = step_at.get(at)
            if step is None:
                continue
            value = _common_cell(cells[at], step[1])
            if value is _UNCOMMON:
                return None
            if args is None:
                args = before[1].copy()
            args[step[0]] = value
        return self._keep(cells, before, args)

    def _keep(self, cells: list[str], before: tuple[list[str], list[Any], GpuReading],
              args: list[Any] | None) -> GpuReading:
        """The reading of ``args`` (``before``'s when None), kept as this GPU's last with ``cells``."""
        if args is None:
            if cells is not before[0]:
                self._last[cells[self._index_at]] = (cells, before[1], before[2])
            return before[2]
        reading = GpuReading(*args, {})  # type: ignore[call-arg]
        self._last[cells[self._index_at]] = (cells, args, reading)
        return reading


#: GpuReading's arguments before ``unavailable``, in order (RowParser builds readings from them)
_READING_ARGS = tuple(f.name for f in dataclass_fields(GpuReading) if f.name != "unavailable")


def parse_gpu_line(line: str, fields: Sequence[str] = QUERY_GPU_FIELDS) -> GpuReading:
    """One ``--query-gpu`` row (with or without units). Raises :class:`GpuParseError`."""
    plain = _parse_plain_gpu_line(line, fields)
    return plain if plain is not None else _parse_general_gpu_line(line, fields)


def _parse_general_gpu_line(line: str, fields: Sequence[str]) -> GpuReading:
    wide, plan = _plan(fields)
    cells = split_cells(line, len(plan), wide)
    values: dict[str, Any] = {"uuid": None, "name": None}
    unavailable: dict[str, str] = {}
    index: int | None = None
    for step, cell in zip(plan, cells, strict=True):
        if step is None:
            continue
        name, key, kind = step
        if kind == "index":
            if not cell.isdigit():
                raise GpuParseError(f"not a GPU index: {quoted_line(cell)} in {quoted_line(line, 120)}")
            index = int(cell)
        elif cell == "" or is_missing_cell(cell):
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
        raise GpuParseError(f"not a pid: {quoted_line(pid_cell)} in {quoted_line(line, 120)}")
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
    if len(first) > 200 or not first.isprintable():  # junk: escaped and cut, kept on one line
        first = quoted_line(first, 200)
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




def error_snapshot(state: GpuState, message: str) -> GpuSnapshot:
    return GpuSnapshot(state=state, error=message, at=time.time())
