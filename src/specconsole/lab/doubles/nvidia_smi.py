"""A TEST DOUBLE of ``nvidia-smi``: the lab's fake hosts have no GPU, so this stands in for it.

This is not NVIDIA's tool and talks to no driver. It reproduces the parts of the ``nvidia-smi``
CLI the console uses, with the output shapes of ``/work/shared/reference/formats.md`` (the
authority), driven by a JSON scenario file. Details formats.md does not spell out follow the
real tool as remembered, not as verified here: the header names ``clocks.current.sm [MHz]``
(for ``clocks.sm``) and ``used_gpu_memory [MiB]`` (for ``used_memory``), exit 6 for "No devices
were found", and the wording of the ``--format`` usage errors.

* ``--query-gpu=LIST`` and ``--query-compute-apps=LIST`` (also ``--query-gpu LIST``), with
  ``--format=csv[,noheader][,nounits]``: fields joined by ``", "`` in the order asked; with units
  the values read ``97 %``, ``131072 MiB``, ``612.40 W``, ``1980 MHz``; without ``noheader`` a
  first line names the fields (``index, uuid, name, utilization.gpu [%], ...``). Cells the
  scenario marks as ``"[N/A]"`` / ``"[Not Supported]"`` / ``"[Insufficient Permissions]"`` are
  printed as-is (no unit), as the real tool does. No compute apps prints nothing (csv header
  only, when asked for one).
* ``-lms N`` / ``--loop-ms=N`` / ``-l [S]`` / ``--loop=S``: repeat the query every N ms (S s,
  default 5) until killed; one long-lived process; stdout is flushed after each iteration; the
  header is printed once, before the first iteration.
* ``-i/--id=0,1``: restrict to those GPU indices (or UUIDs).
* ``-L`` / ``--list-gpus``: ``GPU 0: NVIDIA H200 (UUID: GPU-...)``.
* ``--help-query-gpu`` / ``--help-query-compute-apps``: the supported field names.
* Failures: an unknown query field exits 2 with ``Field "x" is not a valid field to query.``
  (whole query fails); a scenario with ``"driver": false`` exits 9 with the exact driver message
  on stdout; ``"gpus": []`` prints ``No devices were found`` and exits 6. A running loop re-reads
  the scenario and fails the same way when the driver "goes away".

Missing GPU fields take idle defaults; ``index`` defaults to the position and ``uuid`` to a
stable made-up value. With a ``workload``, every process in ``/proc`` whose command line
contains ``cmdline_contains`` (not this process or its ancestors) is a compute app on GPU
``LOCAL_RANK % n`` (from ``/proc/PID/environ``; otherwise round robin by pid); each busy GPU
adds ``memory_mib_per_process`` per process to ``memory.used`` and reports the workload's
utilization, power, temperature, clock and pstate (with a small deterministic jitter), until the
processes exit. The scenario file's format and the matching of a workload's processes:
:mod:`specconsole.lab.doubles.nvidia_smi_scenario`. Stdlib only, so it starts fast.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from specconsole.lab.doubles.nvidia_smi_scenario import Scenario, scan_workload, scenario_path

DRIVER_MESSAGE = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)
NO_DEVICES_MESSAGE = "No devices were found"

EXIT_NO_DRIVER = 9
EXIT_BAD_ARGS = 2
EXIT_NO_DEVICES = 6

GPU_DEFAULTS: dict[str, Any] = {
    "name": "NVIDIA H200",
    "memory_total_mib": 143771,
    "memory_used_mib": 0,
    "power_limit_w": 700,
    "power_draw_w": 74.8,
    "utilization_pct": 0,
    "memory_util_pct": 0,
    "temperature_c": 33,
    "sm_clock_mhz": 345,
    "pstate": "P8",
    "fan_speed_pct": "[N/A]",
    "driver_version": "570.133.20",
}


def _num(kind: str) -> Callable[[Any, bool], str]:
    """A formatter for a numeric cell: ``kind`` is the unit (``%``, ``MiB``, ``W``, ``MHz``, "")."""

    def fmt(value: Any, units: bool) -> str:
        if isinstance(value, str):
            return value
        text = f"{float(value):.2f}" if kind == "W" else str(round(float(value)))
        return f"{text} {kind}" if units and kind else text

    return fmt


def _text(value: Any, units: bool) -> str:
    return str(value)


# field name -> (header, scenario key, formatter). Aliases share an entry.
_GPU_FIELDS: dict[str, tuple[str, str, Callable[[Any, bool], str]]] = {
    "timestamp": ("timestamp", "_timestamp", _text),
    "driver_version": ("driver_version", "driver_version", _text),
    "count": ("count", "_count", _text),
    "index": ("index", "index", _text),
    "name": ("name", "name", _text),
    "gpu_name": ("name", "name", _text),
    "uuid": ("uuid", "uuid", _text),
    "gpu_uuid": ("uuid", "uuid", _text),
    "pci.bus_id": ("pci.bus_id", "pci_bus_id", _text),
    "gpu_bus_id": ("pci.bus_id", "pci_bus_id", _text),
    "fan.speed": ("fan.speed [%]", "fan_speed_pct", _num("%")),
    "pstate": ("pstate", "pstate", _text),
    "utilization.gpu": ("utilization.gpu [%]", "utilization_pct", _num("%")),
    "utilization.memory": ("utilization.memory [%]", "memory_util_pct", _num("%")),
    "memory.total": ("memory.total [MiB]", "memory_total_mib", _num("MiB")),
    "memory.used": ("memory.used [MiB]", "memory_used_mib", _num("MiB")),
    "memory.free": ("memory.free [MiB]", "_memory_free_mib", _num("MiB")),
    "temperature.gpu": ("temperature.gpu", "temperature_c", _num("")),
    "power.draw": ("power.draw [W]", "power_draw_w", _num("W")),
    "power.limit": ("power.limit [W]", "power_limit_w", _num("W")),
    "enforced.power.limit": ("enforced.power.limit [W]", "power_limit_w", _num("W")),
    "clocks.sm": ("clocks.current.sm [MHz]", "sm_clock_mhz", _num("MHz")),
    "clocks.current.sm": ("clocks.current.sm [MHz]", "sm_clock_mhz", _num("MHz")),
}

_APP_FIELDS: dict[str, tuple[str, str, Callable[[Any, bool], str]]] = {
    "timestamp": ("timestamp", "_timestamp", _text),
    "gpu_name": ("gpu_name", "_gpu_name", _text),
    "gpu_bus_id": ("gpu_bus_id", "_gpu_bus_id", _text),
    "gpu_serial": ("gpu_serial", "_gpu_serial", _text),
    "gpu_uuid": ("gpu_uuid", "gpu_uuid", _text),
    "pid": ("pid", "pid", _text),
    "process_name": ("process_name", "name", _text),
    "name": ("process_name", "name", _text),
    "used_gpu_memory": ("used_gpu_memory [MiB]", "used_memory_mib", _num("MiB")),
    "used_memory": ("used_gpu_memory [MiB]", "used_memory_mib", _num("MiB")),
}


def _made_up_uuid(index: int) -> str:
    h = hashlib.sha1(f"specconsole-nvidia-smi-double-{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _jitter(tick: int, salt: int, spread: float) -> float:
    """A small deterministic wobble in [-spread, spread]."""
    return spread * (((tick * 7 + salt * 13) % 11) - 5) / 5.0


# -- building one iteration -----------------------------------------------------------------
Row = dict[str, Any]


def build_state(data: dict[str, Any], tick: int) -> tuple[list[Row], list[Row]]:
    """The GPUs and compute apps as of now, from the scenario and (optionally) live processes."""
    gpus: list[dict[str, Any]] = []
    for pos, raw in enumerate(data.get("gpus") or []):
        gpu = {**GPU_DEFAULTS, **raw}
        gpu.setdefault("index", pos)
        gpu.setdefault("uuid", _made_up_uuid(int(gpu["index"])))
        gpu.setdefault("pci_bus_id", f"00000000:{0x18 + 0x10 * int(gpu['index']):02X}:00.0")
        gpus.append(gpu)
    by_index = {int(g["index"]): g for g in gpus}
    by_uuid = {str(g["uuid"]): g for g in gpus}

    apps: list[dict[str, Any]] = []
    for raw in data.get("processes") or []:
        app = dict(raw)
        owner = by_index.get(int(app["gpu_index"])) if "gpu_index" in app else None
        owner = owner or by_uuid.get(str(app.get("gpu_uuid", "")))
        if owner is None:
            continue
        app["gpu_uuid"] = owner["uuid"]
        app.setdefault("name", "python")
        app.setdefault("used_memory_mib", 0)
        app["_gpu"] = owner
        apps.append(app)

    workload = data.get("workload")
    if isinstance(workload, dict) and gpus:
        mem = workload.get("memory_mib_per_process", 1000)
        busy: dict[int, int] = {}
        for n, (pid, name, rank) in enumerate(scan_workload(workload)):
            # all_gpus: one process holding every GPU (a tensor-parallel server); nvidia-smi then
            # lists the pid once per GPU
            on = gpus if workload.get("all_gpus") else [gpus[(rank if rank is not None else n) % len(gpus)]]
            for gpu in on:
                apps.append({"pid": pid, "name": name, "used_memory_mib": mem,
                             "gpu_uuid": gpu["uuid"], "_gpu": gpu})
                busy[id(gpu)] = busy.get(id(gpu), 0) + 1
        jit = bool(workload.get("jitter", True))
        for gpu in gpus:
            count = busy.get(id(gpu), 0)
            if not count:
                continue
            salt = int(gpu["index"])
            if isinstance(gpu["memory_used_mib"], int | float) and isinstance(mem, int | float):
                gpu["memory_used_mib"] = min(
                    gpu["memory_used_mib"] + count * mem,
                    gpu["memory_total_mib"] if isinstance(gpu["memory_total_mib"], int | float)
                    else float("inf"),
                )
            for key, default, spread in (
                ("utilization_pct", 97, 2.0),
                ("memory_util_pct", 61, 3.0),
                ("power_draw_w", None, 12.0),
                ("temperature_c", 71, 1.0),
                ("sm_clock_mhz", 1980, 0.0),
            ):
                if isinstance(gpu.get(key), str):
                    continue  # "[N/A]" stays "[N/A]" whatever runs
                value = workload.get(key, default)
                if value is None:  # power: a share of the limit unless given
                    limit = gpu["power_limit_w"]
                    value = 0.875 * limit if isinstance(limit, int | float) else gpu[key]
                if jit and spread and isinstance(value, int | float):
                    value = value + _jitter(tick, salt, spread)
                if key in ("utilization_pct", "memory_util_pct") and isinstance(value, int | float):
                    value = max(0.0, min(100.0, value))
                if key == "power_draw_w" and isinstance(value, int | float):
                    limit = gpu["power_limit_w"]
                    if isinstance(limit, int | float):
                        value = min(value, limit)
                gpu[key] = value
            if not isinstance(gpu.get("pstate"), str) or not gpu["pstate"].startswith("["):
                gpu["pstate"] = workload.get("pstate", "P0")
    return gpus, apps


def _cell(obj: dict[str, Any], key: str, fmt: Callable[[Any, bool], str], units: bool) -> str:
    value = obj.get(key, "[N/A]")
    if value is None:
        value = "[N/A]"
    return fmt(value, units)


def render(
    kind: str, fields: Sequence[str], gpus: list[dict[str, Any]], apps: list[dict[str, Any]],
    units: bool, now: float,
) -> list[str]:
    table = _GPU_FIELDS if kind == "gpu" else _APP_FIELDS
    millis = int(now * 1000) % 1000
    stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(now)) + f".{millis:03d}"
    rows = gpus if kind == "gpu" else apps
    lines = []
    for row in rows:
        gpu = row if kind == "gpu" else row["_gpu"]
        extra = {
            "_timestamp": stamp,
            "_count": str(len(gpus)),
            "_gpu_name": gpu["name"],
            "_gpu_bus_id": gpu["pci_bus_id"],
            "_gpu_serial": str(1650000000000 + int(gpu["index"])),
        }
        if kind == "gpu":
            total, used = gpu["memory_total_mib"], gpu["memory_used_mib"]
            extra["_memory_free_mib"] = (
                total - used if isinstance(total, int | float) and isinstance(used, int | float)
                else "[N/A]"
            )
        merged = {**row, **extra}
        cells = []
        for name in fields:
            _, key, fmt = table[name]
            cells.append(_cell(merged, key, fmt, units))
        lines.append(", ".join(cells))
    return lines


# -- the CLI --------------------------------------------------------------------------------
class Usage(Exception):
    def __init__(self, message: str, code: int = EXIT_BAD_ARGS) -> None:
        super().__init__(message)
        self.code = code


def _take_value(argv: list[str], i: int, flag: str) -> tuple[str, int]:
    arg = argv[i]
    if "=" in arg and arg.startswith("--"):
        return arg.split("=", 1)[1], i + 1
    if i + 1 >= len(argv):
        raise Usage(f'Option "{flag}" requires a value.\n\nPlease run \'nvidia-smi -h\' for help.')
    return argv[i + 1], i + 2


def parse_args(argv: list[str]) -> dict[str, Any]:
    opts: dict[str, Any] = {"loop_s": None, "ids": None}
    i = 0
    while i < len(argv):
        arg = argv[i]
        name = arg.split("=", 1)[0] if arg.startswith("--") else arg
        if name in ("--query-gpu", "--query-compute-apps"):
            value, i = _take_value(argv, i, name)
            opts["query"] = ("gpu" if name == "--query-gpu" else "apps", value)
        elif name in ("--format",):
            value, i = _take_value(argv, i, name)
            opts["format"] = value
        elif name in ("-lms", "--loop-ms"):
            value, i = _take_value(argv, i, name)
            try:
                opts["loop_s"] = max(1, int(value)) / 1000.0
            except ValueError:
                raise Usage(f'Invalid value "{value}" for "{name}".') from None
        elif name in ("-l", "--loop"):
            if "=" in arg or (i + 1 < len(argv) and argv[i + 1].isdigit()):
                value, i = _take_value(argv, i, name)
            else:
                value, i = "5", i + 1
            try:
                opts["loop_s"] = float(max(1, int(value)))
            except ValueError:
                raise Usage(f'Invalid value "{value}" for "{name}".') from None
        elif name in ("-i", "--id"):
            value, i = _take_value(argv, i, name)
            opts["ids"] = [v.strip() for v in value.split(",") if v.strip()]
        elif name in ("-L", "--list-gpus"):
            opts["list"] = True
            i += 1
        elif name in ("--help-query-gpu", "--help-query-compute-apps"):
            opts["help_query"] = "gpu" if name == "--help-query-gpu" else "apps"
            i += 1
        elif name in ("-h", "--help"):
            opts["help"] = True
            i += 1
        else:
            raise Usage(
                "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."
            )
    return opts


def _check_fields(kind: str, spec: str) -> list[str]:
    table = _GPU_FIELDS if kind == "gpu" else _APP_FIELDS
    fields = [f.strip() for f in spec.split(",")]
    for f in fields:
        if f not in table:
            raise Usage(f'Field "{f}" is not a valid field to query.\n')
    return fields


def _parse_format(spec: str | None) -> tuple[bool, bool]:
    if spec is None:
        raise Usage('"--format" must be specified with "--query-*" options.\n')
    parts = [p.strip() for p in spec.split(",")]
    if "csv" not in parts or any(p not in ("csv", "noheader", "nounits") for p in parts):
        raise Usage(f'"{spec}" is not a valid format.\n')
    return "noheader" not in parts, "nounits" not in parts


def _select(gpus: list[dict[str, Any]], ids: list[str] | None) -> list[dict[str, Any]]:
    if ids is None:
        return gpus
    return [g for g in gpus if str(g["index"]) in ids or str(g["uuid"]) in ids]


def _failure(data: dict[str, Any]) -> tuple[int, str] | None:
    if not data.get("driver", True):
        return EXIT_NO_DRIVER, DRIVER_MESSAGE
    failure = data.get("failure")
    if isinstance(failure, dict):
        return int(failure.get("exit_code", 255)), str(failure.get("message", "Unknown Error"))
    if not data.get("gpus"):
        return EXIT_NO_DEVICES, NO_DEVICES_MESSAGE
    return None


def _with_garbage(kind: str, lines: list[str], data: dict[str, Any]) -> list[str]:
    """The scenario's ``garbage`` lines after (or, with ``"instead": true``, in place of) each
    ``--query-gpu`` iteration's rows, written as given (control characters, any length)."""
    garbage = data.get("garbage")
    if kind != "gpu" or not isinstance(garbage, dict) or data.get("silent"):
        return lines
    extra = [str(line) for line in garbage.get("lines", [])]
    return extra if garbage.get("instead") else [*lines, *extra]


def _out(lines: list[str]) -> None:
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts = parse_args(argv)
        if opts.get("help_query"):
            table = _GPU_FIELDS if opts["help_query"] == "gpu" else _APP_FIELDS
            kind = "--query-gpu" if opts["help_query"] == "gpu" else "--query-compute-apps"
            _out([f"List of valid properties to query for the switch \"{kind}\":", ""]
                 + [f'"{name}"' for name in table])
            return 0
        if opts.get("help") or ("query" not in opts and not opts.get("list")):
            _out([
                "NVIDIA System Management Interface -- test double (specconsole.lab.doubles.nvidia_smi)",
                "Supported: --query-gpu=, --query-compute-apps=,",
                "           --format=csv[,noheader][,nounits], -lms/--loop-ms=, -l/--loop=,",
                "           -i/--id=, -L, --help-query-gpu, --help-query-compute-apps",
            ])
            return 0
        query = opts.get("query")
        fields: list[str] = []
        header = units = False
        if query:
            fields = _check_fields(query[0], query[1])
            header, units = _parse_format(opts.get("format"))
    except Usage as err:
        _out([str(err)])
        return err.code

    scenario = Scenario(scenario_path())
    period = opts["loop_s"]
    tick = 0
    next_at = time.monotonic()
    try:
        while True:
            data = scenario.refresh()
            fail = _failure(data)
            if fail is not None:
                _out([fail[1]])
                return fail[0]
            gpus, apps = build_state(data, tick)
            gpus = _select(gpus, opts["ids"])
            if opts.get("list"):
                _out([f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})" for g in gpus])
                return 0
            assert query is not None
            kind = query[0]
            if kind == "apps":
                keep = {id(g) for g in gpus}
                apps = [a for a in apps if id(a["_gpu"]) in keep]
            lines = [] if data.get("silent") else render(kind, fields, gpus, apps, units, time.time())
            lines = _with_garbage(kind, lines, data)
            if header and tick == 0:
                table = _GPU_FIELDS if kind == "gpu" else _APP_FIELDS
                lines.insert(0, ", ".join(table[f][0] for f in fields))
            _out(lines)
            if period is None:
                return 0
            tick += 1
            next_at += period
            delay = next_at - time.monotonic()
            if delay < 0:  # fell behind (loaded machine): don't burst to catch up
                next_at = time.monotonic()
                delay = 0
            time.sleep(delay)
    except (BrokenPipeError, KeyboardInterrupt):
        # reader went away / interrupted: exit quietly like a killed nvidia-smi
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
