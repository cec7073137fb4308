"""The host-side frame filter for nvidia-smi (remote/smi_frames.py) and the console's decoder: a burst a
write, rows unchanged since the burst before sent as "=", rows changed in a few cells as those cells,
nvidia-smi's own lines, errors and exit status passed through; and a GPU source on a host without
python3 falls back to nvidia-smi's own output."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from specconsole.config import GpuConfig, HostConfig
from specconsole.formats.nvidia_smi import GpuSnapshot, GpuState
from specconsole.hosts.local import LocalHost
from specconsole.remote.smi_frames import encode
from specconsole.sources.nvidia_smi import FRAMES_SCRIPT, NvidiaSmiSource, Unframer

pytestmark = pytest.mark.timeout(60)

ROW = "{i}, GPU-{i:08d}, NVIDIA H200, {u}, 12, 20480, 143771, 612.50, 700.00, 55, 1980, P0"


def decode(frames: bytes) -> list[list[str]]:
    """The bursts a framed output stands for."""
    decoder, bursts, burst = Unframer(), [], []
    for framed in frames.decode().split("\n")[:-1]:
        line = decoder.line(framed)
        if line is None:
            bursts.append(burst)
            burst = []
        else:
            burst.append(line)
    assert burst == [], "every burst is closed by its '.'"
    return bursts


def test_bursts_come_back_as_printed_with_only_changed_rows_sent() -> None:
    rng = random.Random(7)
    odd = ["=", ".", "\\", "=x", ".5", "\\n", "", "No devices were found"]
    bursts = []
    for _ in range(200):
        n = rng.choice([1, 2, 8, 8, 8])
        bursts.append([rng.choice(odd) if rng.random() < 0.1 else ROW.format(i=i, u=rng.choice([0, 50, 97]))
                       for i in range(n)])
    last: list[bytes] = []
    frames = b""
    for burst in bursts:
        raw = [line.encode() for line in burst]
        frame = encode(raw, last)
        sent = frame.split(b"\n")[:-2]
        unchanged = sum(1 for i, line in enumerate(raw) if i < len(last) and last[i] == line)
        assert sent.count(b"=") >= unchanged  # each row as it was goes out as "="
        frames += frame
        last = raw
    assert decode(frames) == bursts


def test_the_filter_writes_each_burst_at_once_and_passes_errors_and_the_exit_status(tmp_path: Path) -> None:
    smi = tmp_path / "nvidia-smi"  # three bursts, a row a write, then an error and exit 9
    smi.write_text("#!/bin/bash\n"
                   "for b in 1 2 3; do for g in 0 1 2 3; do echo \"$g, GPU-$g, NVIDIA H200, $((b == 3 ? 9 : 5)), "
                   "1\"; sleep 0.001; done; sleep 0.2; done\n"
                   "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.' >&2\n"
                   "exit 9\n")
    smi.chmod(0o755)
    proc = subprocess.run([sys.executable, str(FRAMES_SCRIPT), str(smi)], capture_output=True, timeout=30)
    assert proc.returncode == 9
    assert b"could not communicate with the NVIDIA driver" in proc.stderr
    frames = proc.stdout.decode().split(".\n")[:-1]
    assert len(frames) == 3, proc.stdout  # one frame a burst, though each row was a write of its own
    assert frames[1] == "=\n" * 4  # the second burst is the first again
    assert decode(proc.stdout)[2] == [f"{g}, GPU-{g}, NVIDIA H200, 9, 1" for g in range(4)]


APPS = "1234, python3, 61000, GPU-00000000"  # a compute-apps row


def fake_apps(tmp_path: Path, body: str) -> Path:
    """A compute-apps nvidia-smi whose run once (no ``-lms``) is ``body`` and whose loop prints
    nothing (no process); each invocation's arguments go to ``calls``."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/bash\n"
                   f"echo \"$*\" >> {tmp_path / 'calls'}\n"
                   "case \"$*\" in *-lms*) exec sleep 0.3;; esac\n" + body)
    smi.chmod(0o755)
    return smi


@pytest.mark.parametrize(("once", "frames"), [
    ("exit 0\n", [[]]),  # no process: an empty burst, at once
    (f"echo '{APPS}'; echo '.odd'\n", [[APPS, ".odd"]]),  # its rows, a line of its own escaped
])
def test_once_first_sends_the_query_run_once_as_a_burst_then_the_loop(
        tmp_path: Path, once: str, frames: list[list[str]]) -> None:
    smi = fake_apps(tmp_path, once)
    proc = subprocess.run([sys.executable, str(FRAMES_SCRIPT), "--once-first", str(smi),
                           "--query-compute-apps=pid", "-lms", "1000"], capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert decode(proc.stdout) == frames
    assert (tmp_path / "calls").read_text().splitlines() == ["--query-compute-apps=pid",
                                                            "--query-compute-apps=pid -lms 1000"]


def test_once_first_that_fails_says_so_sends_no_burst_and_starts_no_loop(tmp_path: Path) -> None:
    smi = fake_apps(tmp_path, "echo 'NVIDIA-SMI has failed because it could not communicate'\n"
                              "echo '=see the driver' ; exit 9\n")
    proc = subprocess.run([sys.executable, str(FRAMES_SCRIPT), "--once-first", str(smi),
                           "--query-compute-apps=pid", "-lms", "1000"], capture_output=True, timeout=30)
    assert proc.returncode == 9
    assert proc.stdout == b"NVIDIA-SMI has failed because it could not communicate\n\\=see the driver\n"
    lines = [Unframer().line(framed) for framed in proc.stdout.decode().splitlines()]
    assert lines == ["NVIDIA-SMI has failed because it could not communicate", "=see the driver"]
    assert (tmp_path / "calls").read_text().splitlines() == ["--query-compute-apps=pid"]


def test_the_filter_says_when_nvidia_smi_is_missing(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(FRAMES_SCRIPT), str(tmp_path / "nvidia-smi")],
                          capture_output=True, timeout=30)
    assert proc.returncode == 127 and proc.stdout == b""
    assert proc.stderr.decode().strip() == f"{tmp_path / 'nvidia-smi'}: No such file or directory"


async def test_a_host_without_python3_gets_nvidia_smi_s_own_output(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text("#!/bin/sh\necho 'sh: 1: python3: not found' >&2\nexit 127\n")
    (bin_dir / "nvidia-smi").write_text(
        "#!/bin/bash\ncase \"$*\" in *compute-apps*) exec sleep 3600;; esac\n"
        "while :; do echo '0, GPU-0, NVIDIA H200, 42, 12, 20480, 143771, 612.50, 700.00, 55, 1980, P0'; "
        "sleep 0.2; done\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    host = LocalHost(HostConfig(name="local", role="train"))
    await host.start()
    source = NvidiaSmiSource(host, GpuConfig(source="nvidia-smi", interval_s=0.2))
    assert source.frames
    seen: list[GpuSnapshot] = []
    task = asyncio.create_task(source.run(lambda s: seen.append(s.value)))
    try:
        for _ in range(100):
            if any(s.state is GpuState.OK for s in seen):
                break
            await asyncio.sleep(0.05)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await host.close()
    ok = [s for s in seen if s.state is GpuState.OK]
    assert ok and ok[0].gpus[0].utilization_pct == 42.0
    assert not source.frames and source.gpu_streams_started == 2
    assert all(s.state is GpuState.OK for s in seen), "the missing python3 is no error of the GPUs"


def test_the_filter_holds_no_more_than_its_bounds_of_a_flood(tmp_path: Path) -> None:
    """A flood of lines never quiet goes out a burst of BURST_LINES at a time, and a line with no
    end is cut to LINE_BYTES + 1 (the console reports such a line as over its limit)."""
    from specconsole.remote.smi_frames import BURST_LINES, LINE_BYTES

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/bash\nfor i in $(seq 1000); do echo \"junk $i\"; done\n"
                   + f"head -c {4 * LINE_BYTES} /dev/zero | tr '\\000' x\n")
    smi.chmod(0o755)
    proc = subprocess.run([sys.executable, str(FRAMES_SCRIPT), str(smi)], capture_output=True, timeout=30)
    assert proc.returncode == 0
    bursts = decode(proc.stdout)
    lines = [line for burst in bursts for line in burst]
    assert lines[:1000] == [f"junk {i}" for i in range(1, 1001)]
    assert lines[1000:] == ["x" * (LINE_BYTES + 1)]
    assert max(len(b) for b in bursts) <= BURST_LINES


@pytest.mark.parametrize("said, no_python", [
    ("sh: 1: python3: not found", True),  # dash
    ("bash: line 1: python3: command not found", True),
    ("setsid: failed to execute python3: No such file or directory", True),  # the stream wrapper's setsid
    ("pyenv: python3: command not found", True),
    ("nvidia-smi: No such file or directory", False),  # the filter ran: nvidia-smi is what is missing
    ("/opt/python3.11/bin/nvidia-smi: No such file or directory", False),
])
def test_only_a_missing_python3_turns_the_frames_off(said: str, no_python: bool) -> None:
    source = NvidiaSmiSource(LocalHost(HostConfig(name="box", role="train")), GpuConfig(interval_s=1.0))
    assert source._no_python(127, said) is no_python
    assert source.frames is not no_python
    assert not NvidiaSmiSource(LocalHost(HostConfig(name="box", role="train")),
                               GpuConfig(interval_s=1.0))._no_python(1, said)  # only exit 127


def test_rows_sent_as_their_changed_cells_read_as_whole_rows_do() -> None:
    """A row that changed in a few cells goes out as ``~P=V;...``; the decoder's rows, parsed with
    only those cells read (RowParser.parse_cells), give what parse_gpu_line gives for the row as
    nvidia-smi printed it: odd cells, rows reordered between bursts (the row before at a place is
    then another GPU's), cells with ';', a row with a cell too many, and rows that do not parse."""
    from specconsole.formats.nvidia_smi import GpuParseError, RowParser, parse_gpu_line

    rng = random.Random(5)
    odd = ["[N/A]", "", " 5", "5 W", "٥", "1;2", "=3", "~"]

    def row(i: int) -> str:
        util = rng.choice(["0", "50", "97.5"]) if rng.random() > 0.1 else rng.choice(odd)
        power = f"{rng.randint(100, 700)}.{rng.randint(10, 99)}" if rng.random() > 0.1 else rng.choice(odd)
        name = "NVIDIA, H200" if i == 3 else "NVIDIA H200"  # a name with ", ": one cell more, read by position
        line = f"{i}, GPU-{i:08d}, {name}, {util}, 12, 20480, 143771, {power}, 700.00, 55, 1980, P0"
        return line + ", 1" if rng.random() < 0.02 else line

    parser, decoder = RowParser(), Unframer()
    last: list[bytes] = []
    patches = patched_rows = 0
    for _ in range(3000):
        order = list(range(4))
        if rng.random() < 0.1:
            rng.shuffle(order)
        burst = [row(i) for i in order]
        raw = [line.encode() for line in burst]
        frame = encode(raw, last)
        patches += sum(1 for sent in frame.split(b"\n") if sent.startswith(b"~"))
        last = raw
        got_rows = [decoder.row(framed) for framed in frame.decode().split("\n")[:-1]]
        assert got_rows.pop() is None, "the burst's end"
        for line, (cells, base, changed) in zip(burst, got_rows, strict=True):
            assert ", ".join(cells) == line
            patched_rows += bool(changed)
            try:
                want: object = parse_gpu_line(line)
            except GpuParseError as err:
                want = ("refused", str(err))
            try:
                got: object = parser.parse_cells(cells, base, changed)
            except GpuParseError as err:
                got = ("refused", str(err))
            assert got == want, line
    assert patches > 5000 and patched_rows == patches


def test_a_patch_with_nothing_to_patch_is_a_line_of_its_own() -> None:
    """A ``~`` line with no row before it, or parts that are not P=V of a cell, is taken as it came
    (the GPU source refuses it as not a GPU row), and the stream goes on."""
    decoder = Unframer()
    assert decoder.row("~3=5") == (["~3=5"], None, ())
    assert decoder.row(".") is None
    assert decoder.row("~0=7") == (["7"], ["~3=5"], (0,))  # the row before was that line's
    for bad in ("~9=1", "~x=1", "~1", "~"):
        fresh = Unframer()
        fresh.row("a, b")
        fresh.row(".")
        assert fresh.row(bad) == ([bad], None, ())
    ok = Unframer()
    ok.row("a, b")
    ok.row(".")
    assert ok.row("~1=c") == (["a", "c"], ["a", "b"], (1,))
