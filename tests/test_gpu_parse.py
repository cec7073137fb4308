"""Parsing nvidia-smi query output (formats.md is the authority) and classifying its failures."""

from __future__ import annotations

import pytest

from specconsole.formats import nvidia_smi as nvidia_smi_format
from specconsole.formats.nvidia_smi import (
    QUERY_APPS_FIELDS,
    QUERY_GPU_FIELDS,
    GpuParseError,
    GpuState,
    classify_failure,
    is_header,
    is_missing_cell,
    parse_app_line,
    parse_app_lines,
    parse_gpu_line,
    parse_gpu_lines,
    split_cells,
)

UUID = "GPU-5c1e8a0b-1d2e-3f40-5a6b-7c8d9e0f1a2b"
NOUNITS = f"0, {UUID}, NVIDIA H200, 97, 61, 131072, 143771, 612.40, 700.00, 71, 1980, P0"
UNITS = f"0, {UUID}, NVIDIA H200, 97 %, 61 %, 131072 MiB, 143771 MiB, 612.40 W, 700.00 W, 71, 1980 MHz, P0"
HEADER = (
    "index, uuid, name, utilization.gpu [%], utilization.memory [%], memory.used [MiB], "
    "memory.total [MiB], power.draw [W], power.limit [W], temperature.gpu, "
    "clocks.current.sm [MHz], pstate"
)
DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)


def test_query_fields_are_the_documented_ones():
    assert ",".join(QUERY_GPU_FIELDS) == (
        "index,uuid,name,utilization.gpu,utilization.memory,memory.used,memory.total,"
        "power.draw,power.limit,temperature.gpu,clocks.sm,pstate"
    )
    assert ",".join(QUERY_APPS_FIELDS) == "pid,process_name,used_memory,gpu_uuid"


@pytest.mark.parametrize("line", [NOUNITS, UNITS])
def test_parse_full_row_with_and_without_units(line):
    r = parse_gpu_line(line)
    assert (r.index, r.uuid, r.name, r.pstate) == (0, UUID, "NVIDIA H200", "P0")
    assert r.utilization_pct == 97.0 and r.memory_util_pct == 61.0
    assert r.memory_used_mib == 131072.0 and r.memory_total_mib == 143771.0
    assert r.power_draw_w == pytest.approx(612.40) and r.power_limit_w == 700.0
    assert r.temperature_c == 71.0 and r.sm_clock_mhz == 1980.0
    assert r.unavailable == {}
    assert r.memory_used_pct == pytest.approx(100 * 131072 / 143771)


def test_header_is_recognised_and_skipped():
    assert is_header(HEADER, QUERY_GPU_FIELDS)
    assert not is_header(NOUNITS, QUERY_GPU_FIELDS)
    readings, garbage = parse_gpu_lines([HEADER, UNITS, "", NOUNITS.replace("0, ", "1, ", 1)])
    assert [r.index for r in readings] == [0, 1] and garbage == 0
    assert is_header("pid, process_name, used_gpu_memory [MiB], gpu_uuid", QUERY_APPS_FIELDS)


@pytest.mark.parametrize("cell", ["[N/A]", "[Not Supported]", "[Insufficient Permissions]", "[Unknown Error]"])
def test_bracketed_cells_are_missing_never_zero(cell):
    assert is_missing_cell(cell)
    line = f"3, {UUID}, NVIDIA H200, {cell}, {cell}, 1024, 143771, {cell}, 700.00, 40, {cell}, {cell}"
    r = parse_gpu_line(line)
    assert r.index == 3 and r.memory_used_mib == 1024.0
    assert r.utilization_pct is None and r.memory_util_pct is None
    assert r.power_draw_w is None and r.sm_clock_mhz is None and r.pstate is None
    assert r.unavailable == {
        "utilization.gpu": cell, "utilization.memory": cell, "power.draw": cell,
        "clocks.sm": cell, "pstate": cell,
    }


def test_na_power_with_units():
    line = UNITS.replace("612.40 W", "[N/A]")
    r = parse_gpu_line(line)
    assert r.power_draw_w is None and r.unavailable == {"power.draw": "[N/A]"}
    assert r.power_limit_w == 700.0


def test_odd_numeric_cell_is_missing_not_a_crash():
    r = parse_gpu_line(NOUNITS.replace(", 71, ", ", Unknown Error, "))
    assert r.temperature_c is None and r.unavailable == {"temperature.gpu": "Unknown Error"}


@pytest.mark.parametrize("name", [
    "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    "Acme, Inc. Accelerator, rev 2",
])
def test_names_with_spaces_and_commas(name):
    line = f"1, {UUID}, {name}, 5, 1, 10, 97887, 30.12, 300.00, 35, 210, P8"
    r = parse_gpu_line(line)
    assert r.name == name and r.index == 1 and r.uuid == UUID
    assert r.memory_total_mib == 97887.0 and r.power_limit_w == 300.0 and r.pstate == "P8"


def test_split_cells_from_both_ends():
    assert split_cells("a, b, c, d", 3, 1) == ["a", "b, c", "d"]
    with pytest.raises(GpuParseError):
        split_cells("a, b", 3, 1)
    with pytest.raises(GpuParseError):
        split_cells("a, b, c, d", 3, None)


def test_garbage_lines_are_counted_and_skipped():
    lines = [
        NOUNITS,
        "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error",
        "Failed to initialize NVML: Driver/library version mismatch",
        "x, y, z",
        DRIVER,
        NOUNITS.replace("0, ", "zero, ", 1),  # right cell count, but no index
        "\x1b[31m\x00\xff garbage",
        NOUNITS.replace("0, ", "1, ", 1),
    ]
    readings, garbage = parse_gpu_lines(lines)
    assert [r.index for r in readings] == [0, 1]
    assert garbage == 6


def test_compute_app_lines():
    procs, garbage = parse_app_lines(
        [
            f"4242, /usr/bin/python3, 61000, {UUID}",
            f"4243, /usr/bin/python3, 61000 MiB, {UUID}",
            f"4244, [Insufficient Permissions], [N/A], {UUID}",
            f"4245, /opt/my, app/bin/python, 12, {UUID}",
            "No running processes found",
        ],
        uuid_to_index={UUID: 2},
    )
    assert garbage == 1
    assert [(p.pid, p.name, p.used_memory_mib, p.gpu_uuid, p.gpu_index) for p in procs] == [
        (4242, "/usr/bin/python3", 61000.0, UUID, 2),
        (4243, "/usr/bin/python3", 61000.0, UUID, 2),
        (4244, None, None, UUID, 2),
        (4245, "/opt/my, app/bin/python", 12.0, UUID, 2),
    ]
    assert parse_app_line("7, python, 1, GPU-unknown").gpu_index is None
    with pytest.raises(GpuParseError):
        parse_app_line("pid, process_name, used_gpu_memory [MiB], gpu_uuid")


def test_classify_no_driver():
    state, msg = classify_failure(9, DRIVER + "\n", "gpu-box-1")
    assert state is GpuState.NO_DRIVER
    assert "gpu-box-1" in msg and "driver" in msg and "fix:" in msg and "\n" not in msg


@pytest.mark.parametrize("status,text", [
    (127, "sh: 1: nvidia-smi: not found"),
    (127, "bash: line 1: nvidia-smi: command not found"),
    (127, ""),
])
def test_classify_not_installed(status, text):
    state, msg = classify_failure(status, text, "h2")
    assert state is GpuState.NOT_INSTALLED
    assert "h2" in msg and "not installed" in msg and "fix:" in msg


def test_classify_no_gpus():
    state, msg = classify_failure(6, "No devices were found\n", "h3")
    assert state is GpuState.NO_GPUS and "h3" in msg and "fix:" in msg


def test_classify_other_errors_keep_the_first_line():
    text = "\nFailed to initialize NVML: Driver/library version mismatch\nNVML library version: 570.1\n"
    state, msg = classify_failure(18, text, "h4", "nvidia-smi --query-gpu=index")
    assert state is GpuState.ERROR
    assert msg == (
        "h4: `nvidia-smi --query-gpu=index` exited 18: "
        "Failed to initialize NVML: Driver/library version mismatch"
    )
    state, msg = classify_failure(None, "", "h5")
    assert state is GpuState.ERROR and "h5" in msg and "without an exit status" in msg
    state, msg = classify_failure(-9, "", "h6")
    assert state is GpuState.ERROR and msg.endswith("exited -9: no output")


@pytest.mark.parametrize("cells", [
    ["0", "GPU-1", "NVIDIA H200", "57", "12", "20480", "143771", "345.67", "700.00", "55", "1980", "P0"],
    ["1", "GPU-1", "NVIDIA H200", " 57", "12", "20480", "143771", "345.67", "700.00", "55", "1980", "P0"],
    ["2", "GPU-1", "NVIDIA H200", "57 %", "12", "20480 MiB", "143771", "345.67 W", "700.00", "55", "1980", "P0"],
    ["3", "GPU-1", "NVIDIA H200", "[N/A]", "12", "", "143771", "[Not Supported]", "700.00", "55", "1980", "P0"],
    ["4", "GPU-1", "NVIDIA H200", "1.", "12", ".5", "1e3", "nan", "inf", "5_0", "-1", "[N/A]"],
    ["5", "[N/A]", "NVIDIA, H200", "57", "12", "20480", "143771", "345.67", "700.00", "55", "1980", "P0 "],
    ["²", "GPU-1", "NVIDIA H200", "57", "12", "20480", "143771", "345.67", "700.00", "55", "1980", "P0"],
])
def test_plain_row_fast_path_reads_what_the_general_path_reads(cells):
    """parse_gpu_line reads plain rows in one pass; every row reads as the general path reads it."""
    line = ", ".join(cells) + "\r\n"
    fast = nvidia_smi_format._parse_plain_gpu_line(line, QUERY_GPU_FIELDS)
    try:
        general = nvidia_smi_format._parse_general_gpu_line(line, QUERY_GPU_FIELDS)
    except (GpuParseError, ValueError) as err:
        assert fast is None, err
        return
    assert fast is None or fast == general
    assert parse_gpu_line(line) == general
    if cells[0] == "0":
        assert fast is not None  # the common row does take the fast path


@pytest.mark.parametrize("line", [
    NOUNITS + ", 42",                                                    # an extra cell at the end
    NOUNITS.replace("NVIDIA H200, 97, ", "NVIDIA H200, 97, 97, "),       # one in the middle
    NOUNITS.replace(f"0, {UUID}, ", f"0, 7, {UUID}, "),                  # one before the name
    NOUNITS.replace("NVIDIA H200, ", "NVIDIA H200, [N/A], "),             # a missing-value cell
    NOUNITS + ", " + NOUNITS.replace("0, ", "1, ", 1),                   # two rows glued together
])
def test_row_with_extra_cells_is_refused_not_realigned(line):
    """nvidia-smi does not quote: a row with more cells than fields is read as a name with
    commas only when the name's extra pieces are words, never values (a shifted row)."""
    with pytest.raises(GpuParseError, match="expected 12 cells, got"):
        parse_gpu_line(line)
    readings, garbage = parse_gpu_lines([line, NOUNITS])
    assert [r.index for r in readings] == [0] and garbage == 1


def test_compute_app_with_extra_value_cell_is_refused():
    with pytest.raises(GpuParseError, match="expected 4 cells, got 5"):
        parse_app_line(f"4242, /usr/bin/python3, 61000, 61000, {UUID}")
    assert parse_app_line(f"4242, python3, worker, 61000, {UUID}").name == "python3, worker"


def test_a_row_parser_reads_every_row_as_parse_gpu_line_does() -> None:
    """RowParser (a GPU's row after its last reads only the changed cells) against parse_gpu_line,
    over random rows of a few GPUs: common cells, odd ones ([N/A], padded, units, empty, a name with
    ', ', Unicode digits, junk), the same row again, and rows that do not parse at all."""
    import random

    from specconsole.formats.nvidia_smi import GpuParseError, RowParser, parse_gpu_line

    rng = random.Random(11)
    cells = {
        "index": ["0", "1", "2", "١", "x", "-1", " 1"],
        "num": ["0", "97", "97.5", "612.31", "[N/A]", "[Not Supported]", "", " 5", "5 ", "1e3", "5 W", "٥", "nan"],
        "uuid": ["GPU-0", "GPU-1", "", "[N/A]", " GPU-2"],
        "name": ["NVIDIA H200", "NVIDIA, H200", "[N/A]", ""],
        "pstate": ["P0", "P8", "[N/A]"],
    }
    kinds = ["index", "uuid", "name", "num", "num", "num", "num", "num", "num", "num", "num", "pstate"]
    def cell(kind: str) -> str:
        if rng.random() < 0.15:
            return rng.choice(cells[kind])  # anything, odd cells included
        return rng.choice(cells[kind][:4] if kind == "num" else cells[kind][:2])  # common cells, few values

    parser = RowParser()
    rows: list[str] = []
    seen: dict[str, object] = {}
    reused = 0
    for _ in range(20000):
        if rows and rng.random() < 0.3:
            line = rng.choice(rows[-8:])  # a row printed again
        else:
            line = ", ".join(cell(k) for k in kinds)
            if rng.random() < 0.02:
                line += ", 1"  # a cell too many
        rows.append(line)
        try:
            want: object = parse_gpu_line(line)
        except GpuParseError as err:
            want = ("refused", str(err))
        try:
            got: object = parser.parse(line)
        except GpuParseError as err:
            got = ("refused", str(err))
        assert got == want, line
        reused += got is seen.get(line)  # the same row again: the same reading, nothing read
        seen[line] = got
    assert reused > 200
