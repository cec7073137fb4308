"""The nvidia-smi test double, run as a real subprocess: CLI and output shapes per formats.md."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from conftest import wait_for
from specconsole.formats.nvidia_smi import (
    QUERY_APPS_FIELDS,
    QUERY_GPU_FIELDS,
    parse_app_lines,
    parse_gpu_lines,
)
from specconsole.lab.doubles.nvidia_smi import DRIVER_MESSAGE

GPU_Q = "--query-gpu=" + ",".join(QUERY_GPU_FIELDS)
APPS_Q = "--query-compute-apps=" + ",".join(QUERY_APPS_FIELDS)
U0 = "GPU-5c1e8a0b-1d2e-3f40-5a6b-7c8d9e0f1a2b"
U1 = "GPU-77aa0000-1111-2222-3333-444455556666"

SCENARIO = {
    "driver": True,
    "gpus": [
        {"index": 0, "name": "NVIDIA H200", "uuid": U0, "memory_total_mib": 143771,
         "memory_used_mib": 131072, "power_limit_w": 700, "power_draw_w": 612.4,
         "utilization_pct": 97, "memory_util_pct": 61, "temperature_c": 71, "sm_clock_mhz": 1980,
         "pstate": "P0"},
        {"index": 1, "name": "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
         "uuid": U1, "memory_total_mib": 97887, "memory_used_mib": 0, "power_limit_w": 300,
         "power_draw_w": "[N/A]", "utilization_pct": "[Not Supported]", "memory_util_pct": 0,
         "temperature_c": 35, "sm_clock_mhz": 210, "pstate": "P8"},
    ],
    "processes": [
        {"pid": 4242, "name": "/usr/bin/python3", "used_memory_mib": 131000, "gpu_index": 0},
        {"pid": 4343, "name": "[Insufficient Permissions]", "used_memory_mib": 512,
         "gpu_uuid": U1},
    ],
}


def write_scenario(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "scenario.json"
    write_scenario(path, SCENARIO)
    return path


def smi(scenario: Path, *args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NVIDIA_SMI_SCENARIO": str(scenario)}
    return subprocess.run([sys.executable, "-m", "specconsole.lab.doubles.nvidia_smi", *args],
                          capture_output=True, text=True, env=env, timeout=timeout)


class Loop:
    """A running ``-lms`` double whose stdout lines are read with a timeout."""

    def __init__(self, scenario: Path, *args: str) -> None:
        env = {**os.environ, "NVIDIA_SMI_SCENARIO": str(scenario)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "specconsole.lab.doubles.nvidia_smi", *args],
            stdout=subprocess.PIPE, text=True, env=env,
        )
        self.lines: queue.Queue[tuple[float, str | None]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put((time.monotonic(), line.rstrip("\n")))
        self.lines.put((time.monotonic(), None))

    def line(self, timeout: float = 10) -> tuple[float, str | None]:
        return self.lines.get(timeout=timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


def test_query_gpu_noheader_nounits_exact(scenario):
    r = smi(scenario, GPU_Q, "--format=csv,noheader,nounits")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == [
        f"0, {U0}, NVIDIA H200, 97, 61, 131072, 143771, 612.40, 700.00, 71, 1980, P0",
        f"1, {U1}, NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition, [Not Supported], 0, "
        "0, 97887, [N/A], 300.00, 35, 210, P8",
    ]


def test_query_gpu_with_header_and_units_exact(scenario):
    r = smi(scenario, GPU_Q, "--format=csv")
    assert r.returncode == 0
    assert r.stdout.splitlines() == [
        "index, uuid, name, utilization.gpu [%], utilization.memory [%], memory.used [MiB], "
        "memory.total [MiB], power.draw [W], power.limit [W], temperature.gpu, "
        "clocks.current.sm [MHz], pstate",
        f"0, {U0}, NVIDIA H200, 97 %, 61 %, 131072 MiB, 143771 MiB, 612.40 W, 700.00 W, 71, "
        "1980 MHz, P0",
        f"1, {U1}, NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition, [Not Supported], "
        "0 %, 0 MiB, 97887 MiB, [N/A], 300.00 W, 35, 210 MHz, P8",
    ]
    # and the console's parser reads the with-units form the same as the plain one
    readings, garbage = parse_gpu_lines(r.stdout.splitlines())
    plain, _ = parse_gpu_lines(smi(scenario, GPU_Q, "--format=csv,noheader,nounits")
                               .stdout.splitlines())
    assert garbage == 0 and readings == plain
    assert readings[1].power_draw_w is None and readings[1].unavailable == {
        "utilization.gpu": "[Not Supported]", "power.draw": "[N/A]"}


def test_query_compute_apps(scenario):
    r = smi(scenario, APPS_Q, "--format=csv")
    assert r.returncode == 0
    assert r.stdout.splitlines() == [
        "pid, process_name, used_gpu_memory [MiB], gpu_uuid",
        f"4242, /usr/bin/python3, 131000 MiB, {U0}",
        f"4343, [Insufficient Permissions], 512 MiB, {U1}",
    ]
    r = smi(scenario, APPS_Q, "--format=csv,noheader,nounits")
    procs, garbage = parse_app_lines(r.stdout.splitlines(), uuid_to_index={U0: 0, U1: 1})
    assert garbage == 0
    assert [(p.pid, p.name, p.used_memory_mib, p.gpu_index) for p in procs] == [
        (4242, "/usr/bin/python3", 131000.0, 0), (4343, None, 512.0, 1)]


def test_no_compute_apps_prints_nothing(tmp_path):
    path = tmp_path / "s.json"
    write_scenario(path, {**SCENARIO, "processes": []})
    r = smi(path, APPS_Q, "--format=csv,noheader,nounits")
    assert (r.returncode, r.stdout) == (0, "")


def test_list_gpus_and_help_query(scenario):
    r = smi(scenario, "-L")
    assert r.returncode == 0
    assert r.stdout.splitlines() == [
        f"GPU 0: NVIDIA H200 (UUID: {U0})",
        f"GPU 1: NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition (UUID: {U1})",
    ]
    r = smi(scenario, "--help-query-gpu")
    assert r.returncode == 0
    for f in QUERY_GPU_FIELDS:
        assert f'"{f}"' in r.stdout.splitlines()
    r = smi(scenario, "--help-query-compute-apps")
    for f in QUERY_APPS_FIELDS:
        assert f'"{f}"' in r.stdout.splitlines()


def test_id_selects_gpus(scenario):
    r = smi(scenario, "--query-gpu=index,name", "--format=csv,noheader", "-i", "1")
    assert r.stdout.splitlines() == ["1, NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"]


def test_unknown_field_fails_like_the_real_tool(scenario):
    r = smi(scenario, "--query-gpu=index,bogus.field,name", "--format=csv")
    assert r.returncode == 2
    assert r.stdout.splitlines()[0] == 'Field "bogus.field" is not a valid field to query.'


def test_no_driver(tmp_path):
    path = tmp_path / "s.json"
    write_scenario(path, {"driver": False})
    for args in ([GPU_Q, "--format=csv,noheader,nounits"], ["-L"],
                 [GPU_Q, "--format=csv,noheader,nounits", "-lms", "100"]):
        r = smi(path, *args)
        assert r.returncode == 9
        assert r.stdout == DRIVER_MESSAGE + "\n"
    assert DRIVER_MESSAGE == (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running."
    )


def test_no_devices(tmp_path):
    path = tmp_path / "s.json"
    write_scenario(path, {"driver": True, "gpus": []})
    r = smi(path, GPU_Q, "--format=csv,noheader,nounits")
    assert (r.returncode, r.stdout) == (6, "No devices were found\n")


@pytest.mark.parametrize("loop", [["-lms", "150"], ["--loop-ms=150"]])
def test_lms_loops_until_killed_and_rereads_the_scenario(scenario, loop):
    lp = Loop(scenario, "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits",
              *loop)
    try:
        got = [lp.line() for _ in range(6)]  # three iterations of two GPUs
        assert [line for _, line in got] == ["0, 97", "1, [Not Supported]"] * 3
        gap = got[2][0] - got[0][0]
        assert 0.05 < gap < 2.0  # a loop, paced by -lms, not a burst
        changed = json.loads(json.dumps(SCENARIO))
        changed["gpus"][0]["utilization_pct"] = 12
        del changed["gpus"][1]  # GPU 1 vanishes
        write_scenario(scenario, changed)
        seen: list[str | None] = []

        def picked_up() -> bool:  # the next line, paced by -lms: three in a row with the new value
            seen.append(lp.line()[1])
            return seen[-3:] == ["0, 12", "0, 12", "0, 12"]

        assert wait_for(picked_up, 10, step=0), f"scenario change not picked up: {seen[-10:]}"
        assert lp.proc.poll() is None  # still running: one long-lived process
    finally:
        lp.close()


def test_loop_with_header_prints_it_once(scenario):
    lp = Loop(scenario, "--query-gpu=index", "--format=csv", "-lms", "100")
    try:
        assert [lp.line()[1] for _ in range(5)] == ["index", "0", "1", "0", "1"]
    finally:
        lp.close()


def test_driver_going_away_ends_a_loop_with_exit_9(scenario):
    lp = Loop(scenario, "--query-gpu=index", "--format=csv,noheader", "-lms", "100")
    try:
        assert lp.line()[1] == "0"
        write_scenario(scenario, {**SCENARIO, "driver": False})
        lines = []
        while (line := lp.line()[1]) is not None:
            lines.append(line)
        assert lines[-1] == DRIVER_MESSAGE
        assert lp.proc.wait(10) == 9
    finally:
        lp.close()


def test_workload_tracks_real_processes(tmp_path):
    marker = f"fake-trainer-{uuid.uuid4().hex}"
    path = tmp_path / "s.json"
    write_scenario(path, {
        "gpus": [
            {"index": 0, "uuid": U0, "memory_used_mib": 500, "power_limit_w": 700},
            {"index": 1, "uuid": U1, "memory_used_mib": 500, "power_limit_w": 700},
        ],
        "workload": {"cmdline_contains": marker, "memory_mib_per_process": 61000,
                     "utilization_pct": 97, "require_env": ["LOCAL_RANK"]},
    })
    fields = "--query-gpu=index,memory.used,utilization.gpu,pstate"
    idle = smi(path, fields, "--format=csv,noheader,nounits").stdout.splitlines()
    assert idle == ["0, 500, 0, P8", "1, 500, 0, P8"]
    assert smi(path, APPS_Q, "--format=csv,noheader,nounits").stdout == ""

    code = "import time; time.sleep(60)"
    worker = subprocess.Popen([sys.executable, "-c", code, marker],
                              env={**os.environ, "LOCAL_RANK": "1"})
    launcher = subprocess.Popen([sys.executable, "-c", code, marker])  # no LOCAL_RANK: ignored
    try:
        apps: list[str] = []

        def listed() -> bool:  # the worker, once it has started (exec'd with its marker)
            apps[:] = smi(path, APPS_Q, "--format=csv,noheader,nounits").stdout.splitlines()
            return bool(apps)

        assert wait_for(listed, 10, what="the worker in the process list")
        assert len(apps) == 1
        pid, name, mem, gpu = apps[0].split(", ")
        assert (int(pid), mem, gpu) == (worker.pid, "61000", U1)
        assert name == os.path.realpath(sys.executable)
        busy = smi(path, fields, "--format=csv,noheader,nounits").stdout.splitlines()
        assert busy[0] == "0, 500, 0, P8"
        idx, used, util, pstate = busy[1].split(", ")
        assert (idx, used, pstate) == ("1", "61500", "P0") and 90 <= int(util) <= 100
    finally:
        worker.kill()
        launcher.kill()
        worker.wait()
        launcher.wait()
    assert smi(path, APPS_Q, "--format=csv,noheader,nounits").stdout == ""
    assert smi(path, fields, "--format=csv,noheader,nounits").stdout.splitlines() == idle


def test_starts_fast(scenario):
    t0 = time.monotonic()
    r = smi(scenario, GPU_Q, "--format=csv,noheader,nounits")
    assert r.returncode == 0
    assert time.monotonic() - t0 < 5  # generous: a loaded machine; typically ~60 ms


def test_scripted_failure(tmp_path):
    path = tmp_path / "s.json"
    msg = "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost."
    write_scenario(path, {**SCENARIO, "failure": {"exit_code": 15, "message": msg}})
    r = smi(path, GPU_Q, "--format=csv,noheader,nounits")
    assert (r.returncode, r.stdout) == (15, msg + "\n")
