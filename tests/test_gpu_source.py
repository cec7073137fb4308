"""The GPU sources against real processes: the nvidia-smi double on PATH through a LocalHost, and
NVML (the real pynvml, which finds no driver on this machine; a stand-in module for success)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import shlex
import signal
import subprocess
import sys
import types
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import wait_for
from specconsole.base.pids import alive
from specconsole.base.samples import Sample
from specconsole.config import GpuConfig, HostConfig
from specconsole.formats.nvidia_smi import GpuSnapshot, GpuState
from specconsole.hosts.local import LocalHost
from specconsole.sources.gpu import make_gpu_source, nvml_available
from specconsole.sources.nvidia_smi import NvidiaSmiSource
from specconsole.sources.nvml import NvmlSource

INTERVAL = 0.2
U0 = "GPU-00000000-aaaa-bbbb-cccc-000000000000"
U1 = "GPU-11111111-aaaa-bbbb-cccc-111111111111"


def gpu(index: int, **kw: Any) -> dict[str, Any]:
    return {"index": index, "uuid": [U0, U1][index], "name": "NVIDIA H200",
            "memory_total_mib": 143771, "memory_used_mib": 1000, "power_limit_w": 700,
            "power_draw_w": 80.5, "utilization_pct": 10, **kw}


@dataclass
class FakeSmi:
    scenario: Path
    invocations: Path

    def set(self, data: dict[str, Any]) -> None:
        tmp = self.scenario.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.scenario)  # atomic, as the double's docstring asks

    def calls(self, what: str = "--query-gpu") -> list[tuple[int, str]]:
        if not self.invocations.exists():
            return []
        out = []
        for line in self.invocations.read_text().splitlines():
            pid, _, args = line.partition(" ")
            if what in args:
                out.append((int(pid), args))
        return out


@pytest.fixture
def fake_smi(tmp_path, monkeypatch) -> FakeSmi:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    invocations = tmp_path / "invocations"
    wrapper = bindir / "nvidia-smi"
    # $$ is the pid nvidia-smi will have: exec keeps it
    wrapper.write_text(
        "#!/bin/sh\n"
        f'echo "$$ $*" >> {shlex.quote(str(invocations))}\n'
        f'exec {shlex.quote(sys.executable)} -m specconsole.lab.doubles.nvidia_smi "$@"\n'
    )
    wrapper.chmod(0o755)
    fake = FakeSmi(tmp_path / "scenario.json", invocations)
    fake.set({"driver": True, "gpus": [gpu(0)]})
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}")
    monkeypatch.setenv("NVIDIA_SMI_SCENARIO", str(fake.scenario))
    return fake


@pytest.fixture
async def host():
    h = LocalHost(HostConfig(name="gpu-box", role="train"))
    await h.start()
    yield h
    await h.close()


class Collector:
    def __init__(self) -> None:
        self.samples: list[Sample[GpuSnapshot]] = []
        self._new = asyncio.Event()

    def __call__(self, sample: Sample[GpuSnapshot]) -> None:
        self.samples.append(sample)
        self._new.set()

    async def wait_for(
        self, pred: Callable[[GpuSnapshot], bool], timeout: float = 15.0, start: int = 0
    ) -> Sample[GpuSnapshot]:
        """The first sample from index ``start`` on whose snapshot satisfies ``pred``."""
        async def scan() -> Sample[GpuSnapshot]:
            i = start
            while True:
                while i < len(self.samples):
                    if pred(self.samples[i].value):
                        return self.samples[i]
                    i += 1
                self._new.clear()
                await self._new.wait()
        try:
            return await asyncio.wait_for(scan(), timeout)
        except TimeoutError:
            tail = [(s.value.state, s.value.error, [g.index for g in s.value.gpus])
                    for s in self.samples[-5:]]
            raise AssertionError(f"no matching sample within {timeout}s; last: {tail}") from None


@contextlib.asynccontextmanager
async def running(source: Any):
    got = Collector()
    task = asyncio.create_task(source.run(got))
    try:
        yield got
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def all_gone(pids: list[int], timeout: float = 10.0) -> bool:
    """True once none of ``pids`` is alive (a killed process takes a moment to go)."""
    return await wait_for(lambda: not any(alive(pid) for pid in pids), timeout, what=f"pids {pids} to exit",
                          step=0.05)


def ok(snap: GpuSnapshot) -> bool:
    return snap.state is GpuState.OK


def smi_source(host: LocalHost) -> NvidiaSmiSource:
    src = make_gpu_source(host, GpuConfig(source="nvidia-smi", interval_s=INTERVAL))
    assert isinstance(src, NvidiaSmiSource)
    return src


# -- nvidia-smi through a LocalHost ---------------------------------------------------------------
async def test_stream_parsed_over_time_from_one_process(fake_smi, host):
    src = smi_source(host)
    async with running(src) as got:
        first = await got.wait_for(lambda s: ok(s) and s.gpus[0].utilization_pct == 10)
        reading = first.value.gpus[0]
        assert (reading.index, reading.uuid, reading.name) == (0, U0, "NVIDIA H200")
        assert reading.memory_total_mib == 143771 and reading.power_draw_w == pytest.approx(80.5)
        assert first.interval == INTERVAL and first.at == first.value.at
        n = len(got.samples)
        await got.wait_for(lambda s: True, start=n + 3)  # several more iterations
        fake_smi.set({"driver": True, "gpus": [gpu(0, utilization_pct=93, power_draw_w=612.4)]})
        busy = await got.wait_for(lambda s: ok(s) and s.gpus[0].utilization_pct == 93)
        assert busy.value.gpus[0].power_draw_w == pytest.approx(612.4)
        await got.wait_for(lambda s: True, start=len(got.samples) + 2)
    samples = got.samples
    assert all(s.value.state is GpuState.OK and len(s.value.gpus) == 1 for s in samples)
    assert len(samples) >= 7
    ats = [s.at for s in samples]
    assert ats == sorted(ats)
    # one long-lived query-gpu process for all those samples (and one compute-apps process)
    calls = fake_smi.calls("--query-gpu")
    assert len(calls) == 1 and src.gpu_streams_started == 1
    assert calls[0][1] == (
        "--query-gpu=index,uuid,name,utilization.gpu,utilization.memory,memory.used,"
        "memory.total,power.draw,power.limit,temperature.gpu,clocks.sm,pstate "
        "--format=csv,noheader,nounits -lms 200"
    )
    # the compute-apps query once (its empty burst says "no process"), then its one long-lived stream
    assert [args.endswith("-lms 200") for _pid, args in fake_smi.calls("--query-compute-apps")] == [False, True]
    # cancelling the source stops its processes
    assert await all_gone([pid for pid, _ in fake_smi.calls("--query")])


async def test_vanished_gpu_is_missing_and_comes_back(fake_smi, host):
    fake_smi.set({"driver": True, "gpus": [gpu(0), gpu(1)]})
    async with running(smi_source(host)) as got:
        both = await got.wait_for(lambda s: ok(s) and len(s.gpus) == 2)
        assert both.value.missing == ()
        fake_smi.set({"driver": True, "gpus": [gpu(0)]})
        gone = await got.wait_for(lambda s: ok(s) and s.missing == (1,))
        assert [g.index for g in gone.value.gpus] == [0]
        # every sample is either the whole set or GPU 0 with GPU 1 missing: no split batches
        for s in got.samples:
            assert [g.index for g in s.value.gpus] in ([0, 1], [0]), s
            assert s.value.missing == (() if len(s.value.gpus) == 2 else (1,))
        fake_smi.set({"driver": True, "gpus": [gpu(0), gpu(1)]})
        back = await got.wait_for(lambda s: ok(s) and len(s.gpus) == 2, start=len(got.samples))
        assert back.value.missing == ()
    assert len(fake_smi.calls("--query-gpu")) == 1


async def test_na_power_is_none_and_recorded(fake_smi, host):
    fake_smi.set({"driver": True,
                  "gpus": [gpu(0, power_draw_w="[N/A]", utilization_pct="[Not Supported]")]})
    async with running(smi_source(host)) as got:
        s = await got.wait_for(ok)
    g = s.value.gpus[0]
    assert g.power_draw_w is None and g.utilization_pct is None
    assert g.unavailable == {"power.draw": "[N/A]", "utilization.gpu": "[Not Supported]"}
    assert g.power_limit_w == 700.0 and g.memory_used_mib == 1000.0


async def test_no_driver_then_driver_back(fake_smi, host):
    fake_smi.set({"driver": False})
    async with running(smi_source(host)) as got:
        s = await got.wait_for(lambda s: s.state is GpuState.NO_DRIVER)
        assert s.value.gpus == () and s.value.error is not None
        assert "gpu-box" in s.value.error and "driver" in s.value.error
        assert "fix:" in s.value.error and "\n" not in s.value.error
        assert s.interval >= INTERVAL
        fake_smi.set({"driver": True, "gpus": [gpu(0)]})
        await got.wait_for(ok, start=got.samples.index(s))  # restarted after a backoff
    assert len(fake_smi.calls("--query-gpu")) >= 2


async def test_no_binary_is_not_installed(tmp_path, monkeypatch, host):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    async with running(smi_source(host)) as got:
        s = await got.wait_for(lambda s: s.state is not GpuState.OK)
    assert s.value.state is GpuState.NOT_INSTALLED
    assert "gpu-box" in s.value.error and "not installed" in s.value.error


async def test_other_failures_are_errors_with_the_tools_first_line(fake_smi, host):
    msg = "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost."
    fake_smi.set({"driver": True, "gpus": [gpu(0)], "failure": {"exit_code": 15, "message": msg}})
    async with running(smi_source(host)) as got:
        # the tool's line may first be reported as it is read ("not a GPU row: 'Unable to ...'"),
        # then with the exit status once the tool has ended (which comes first depends on the load)
        s = await got.wait_for(lambda v: v.state is not GpuState.OK and "exited" in (v.error or ""))
    assert all(msg in (x.value.error or "") for x in got.samples if x.value.state is not GpuState.OK)
    assert s.value.state is GpuState.ERROR
    assert s.value.error.startswith("gpu-box: `nvidia-smi --query-gpu=")
    assert s.value.error.endswith(f"exited 15: {msg}")


async def test_stream_that_dies_is_reported_and_restarted(fake_smi, host):
    async with running(smi_source(host)) as got:
        await got.wait_for(ok)
        [(pid, _)] = fake_smi.calls("--query-gpu")
        os.kill(pid, signal.SIGKILL)
        err = await got.wait_for(lambda s: s.state is GpuState.ERROR)
        # the host's shell reports the kill: `... exited 137: Killed` (or -9 without a shell)
        assert err.value.error.startswith("gpu-box: `nvidia-smi --query-gpu=")
        assert "exited 137" in err.value.error or "exited -9" in err.value.error
        await got.wait_for(ok, start=got.samples.index(err))
    assert len(fake_smi.calls("--query-gpu")) == 2


async def test_processes_follow_real_processes(fake_smi, host):
    marker = f"fake-trainer-{uuid.uuid4().hex}"
    fake_smi.set({"driver": True, "gpus": [gpu(0), gpu(1)],
                  "workload": {"cmdline_contains": marker, "memory_mib_per_process": 61000}})
    async with running(smi_source(host)) as got:
        idle = await got.wait_for(lambda s: ok(s) and len(s.gpus) == 2)
        assert idle.value.processes == ()
        worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker],
                                  env={**os.environ, "LOCAL_RANK": "1"})
        try:
            busy = await got.wait_for(lambda s: ok(s) and len(s.processes) == 1)
            [p] = busy.value.processes
            assert (p.pid, p.gpu_uuid, p.gpu_index, p.used_memory_mib) == (
                worker.pid, U1, 1, 61000.0)
            full = await got.wait_for(lambda s: ok(s) and s.gpus[1].memory_used_mib == 62000)
            assert full.value.gpus[0].memory_used_mib == 1000
        finally:
            worker.kill()
            worker.wait()
        n = len(got.samples)
        freed = await got.wait_for(lambda s: ok(s) and s.processes == () and
                                   s.gpus[1].memory_used_mib == 1000, start=n)
        assert freed.value.gpus[1].utilization_pct == 10


async def test_framed_bursts_go_out_at_their_end_with_their_processes(fake_smi, host, tmp_path, monkeypatch):
    """Through the frame filter, a burst goes out at its ``.``: the first one too, whose GPU count
    is not known yet (no quiet period: set to a minute here), and the readings held for the process
    list (its stream starts a second late here) go out when the compute-apps burst ends, not with
    the next GPU burst (ten seconds away)."""
    late = tmp_path / "late"
    late.mkdir()
    (late / "nvidia-smi").write_text(
        "#!/bin/sh\ncase \"$*\" in *compute-apps*) sleep 1;; esac\n"
        f"exec {shlex.quote(str(tmp_path / 'bin' / 'nvidia-smi'))} \"$@\"\n")
    (late / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{late}{os.pathsep}{os.environ['PATH']}")
    marker = f"fake-trainer-{uuid.uuid4().hex}"
    fake_smi.set({"driver": True, "gpus": [gpu(0), gpu(1)],
                  "workload": {"cmdline_contains": marker, "memory_mib_per_process": 61000}})
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker],
                              env={**os.environ, "LOCAL_RANK": "1"})
    try:
        src = make_gpu_source(host, GpuConfig(source="nvidia-smi", interval_s=10.0))
        assert isinstance(src, NvidiaSmiSource) and src.frames
        src.quiet_s = 60.0
        src.apps_silence_s = 60.0
        async with running(src) as got:
            full = await got.wait_for(lambda s: ok(s) and s.processes_known, timeout=8.0)
            assert not got.samples[0].value.processes_known  # the GPU rows came first, held
        assert [g.index for g in full.value.gpus] == [0, 1]
        assert [(p.pid, p.gpu_index) for p in full.value.processes] == [(worker.pid, 1)]
        assert len(fake_smi.calls("--query-gpu")) == 1  # the first burst of the one stream
    finally:
        worker.kill()
        worker.wait()


async def test_no_process_is_known_from_the_apps_query_run_once(fake_smi, host):
    """GPUs no process uses: nvidia-smi's compute-apps loop prints nothing, ever; the query run once
    first (through the frame filter) ends with an empty burst, so the first readings are complete at
    once, not after the loop's silence (set to a minute here) or the fallback (32 s at 10 s)."""
    fake_smi.set({"driver": True, "gpus": [gpu(0), gpu(1)]})
    src = make_gpu_source(host, GpuConfig(source="nvidia-smi", interval_s=10.0))
    assert isinstance(src, NvidiaSmiSource) and src.frames
    src.apps_silence_s = 60.0
    async with running(src) as got:
        full = await got.wait_for(lambda s: ok(s) and s.processes_known, timeout=8.0)
    assert [g.index for g in full.value.gpus] == [0, 1] and full.value.processes == ()


async def test_cancelling_leaves_nothing_running(fake_smi, host):
    async with running(smi_source(host)) as got:
        await got.wait_for(ok)
        await wait_for(lambda: len(fake_smi.calls("-lms")) >= 2, 10, what="the compute-apps stream up too")
    pids = [pid for pid, _ in fake_smi.calls("--query")]
    assert len(pids) == 3  # the two streams and the compute-apps query run once before its stream
    assert await all_gone(pids)


# -- choosing a source ----------------------------------------------------------------------------
async def test_make_gpu_source(host):
    def cfg(source: str) -> GpuConfig:
        return GpuConfig(source=source, interval_s=1.0)

    assert make_gpu_source(host, cfg("none")) is None
    assert isinstance(make_gpu_source(host, cfg("nvidia-smi")), NvidiaSmiSource)
    assert isinstance(make_gpu_source(host, cfg("nvml")), NvmlSource)
    auto = make_gpu_source(host, cfg("auto"))
    assert isinstance(auto, NvmlSource if nvml_available() else NvidiaSmiSource)
    with pytest.raises(ValueError, match="gpu-box"):
        make_gpu_source(host, cfg("bogus"))


async def test_auto_prefers_nvml_when_it_initialises(host, monkeypatch):
    fake, _ = fake_pynvml([{"name": "NVIDIA H200"}])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert isinstance(make_gpu_source(host, GpuConfig(source="auto")), NvmlSource)


# -- NVML -----------------------------------------------------------------------------------------
def test_gpu_module_does_not_import_pynvml():
    code = ("import sys, specconsole.sources.gpu as g; "
            "g.make_gpu_source; assert 'pynvml' not in sys.modules, 'imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


@pytest.mark.skipif(nvml_available(), reason="this machine has a working NVIDIA driver")
async def test_real_nvml_without_driver_is_no_driver():
    src = NvmlSource(GpuConfig(source="nvml", interval_s=INTERVAL), host_name="localbox")
    async with running(src) as got:
        s = await got.wait_for(lambda s: True)
    assert s.value.state is GpuState.NO_DRIVER
    assert s.value.gpus == () and "localbox" in s.value.error and "fix:" in s.value.error
    assert s.interval >= INTERVAL


MIB = 1024 * 1024


def fake_pynvml(gpus: list[dict[str, Any]], *,
                binding: str = "12.535") -> tuple[types.ModuleType, Counter[str]]:
    """A stand-in ``pynvml`` for the success path (this machine has no GPU). It keeps the real
    module's exception classes and constants (``NVMLError(NVML_ERROR_NOT_SUPPORTED)`` is a real
    ``NVMLError_NotSupported``) and NVML's units: bytes for memory, milliwatts for power.

    Memory as the driver gives it: the v1 struct's ``used`` counts the driver's reserved memory
    (``reserved_mib``) with the allocated memory (``used_mib``); the v2 struct
    (``nvmlDeviceGetMemoryInfo(h, version=nvmlMemory_v2)``, as in the real module) has them
    apart, ``free = total - reserved - used``. ``binding="old"`` is a binding older than 12.535
    (no ``version`` argument, no ``nvmlMemory_v2``); a GPU with ``"memory_v2"`` in
    ``unsupported``, or ``"v2_missing": True`` (a driver without ``nvmlDeviceGetMemoryInfo_v2``:
    ``NVMLError_FunctionNotFound``), answers only v1. ``limit_mw`` is the power management
    limit (nvidia-smi's power.limit), ``enforced_mw`` the enforced one."""
    real = importlib.import_module("pynvml")
    mod = types.ModuleType("pynvml")
    for k, v in vars(real).items():
        if k.startswith(("NVMLError", "NVML_")):
            setattr(mod, k, v)
    if binding != "old":
        mod.nvmlMemory_v2 = real.nvmlMemory_v2
    calls: Counter[str] = Counter()

    def check(h: int, what: str) -> dict[str, Any]:
        calls[what] += 1
        calls[f"{what}[{h}]"] += 1
        g = gpus[h]
        if g.get("lost"):
            raise real.NVMLError(real.NVML_ERROR_GPU_IS_LOST)
        if what in g.get("unsupported", ()):
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        return g

    def handle(i: int) -> int:
        calls["handle"] += 1
        if i >= len(gpus):
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        return i

    def util(h: int) -> Any:
        g = check(h, "util")
        return types.SimpleNamespace(gpu=g.get("util", 0), memory=g.get("mem_util", 0))

    def memory_v1(h: int) -> Any:
        g = check(h, "memory_v1")
        total = g.get("total_mib", 143771) * MIB
        used = (g.get("used_mib", 0) + g.get("reserved_mib", 565)) * MIB
        return types.SimpleNamespace(total=total, used=used, free=total - used)

    def memory(h: int, version: int | None = None) -> Any:
        if not version:
            return memory_v1(h)
        g = check(h, "memory_v2")
        if g.get("v2_missing"):
            raise real.NVMLError(real.NVML_ERROR_FUNCTION_NOT_FOUND)
        assert version == real.nvmlMemory_v2
        total = g.get("total_mib", 143771) * MIB
        used, reserved = g.get("used_mib", 0) * MIB, g.get("reserved_mib", 565) * MIB
        return types.SimpleNamespace(version=version, total=total, reserved=reserved,
                                     free=total - reserved - used, used=used)

    def procs(h: int) -> list[Any]:
        g = check(h, "procs")
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=mib * MIB)
                for pid, mib in g.get("procs", ())]

    def process_name(pid: int) -> str:
        calls["process_name"] += 1
        if pid == 4343:
            raise real.NVMLError(real.NVML_ERROR_NO_PERMISSION)
        return "/usr/bin/python3"

    mod.__dict__.update(
        nvmlInit=lambda: calls.update(["init"]),
        nvmlShutdown=lambda: calls.update(["shutdown"]),
        nvmlDeviceGetCount=lambda: len(gpus),
        nvmlDeviceGetHandleByIndex=handle,
        nvmlDeviceGetName=lambda h: check(h, "name").get("name", "NVIDIA H200"),
        nvmlDeviceGetUUID=lambda h: check(h, "uuid").get("uuid", [U0, U1][h]),
        nvmlDeviceGetUtilizationRates=util,
        nvmlDeviceGetMemoryInfo=memory_v1 if binding == "old" else memory,
        nvmlDeviceGetPowerUsage=lambda h: check(h, "power").get("power_mw", 80000),
        nvmlDeviceGetPowerManagementLimit=lambda h: check(h, "limit").get("limit_mw", 700000),
        nvmlDeviceGetEnforcedPowerLimit=lambda h: check(h, "enforced").get("enforced_mw", 700000),
        nvmlDeviceGetTemperature=lambda h, sensor: check(h, "temp").get("temp", 40),
        nvmlDeviceGetClockInfo=lambda h, clock: check(h, "clock").get("sm", 1980),
        nvmlDeviceGetPerformanceState=lambda h: check(h, "pstate").get("pstate", 0),
        nvmlDeviceGetComputeRunningProcesses=procs,
        nvmlSystemGetProcessName=process_name,
    )
    return mod, calls


async def test_nvml_success_path_with_a_stand_in_module(monkeypatch):
    gpus = [
        {"name": "NVIDIA H200", "util": 97, "mem_util": 61, "used_mib": 131072, "power_mw": 612400,
         "temp": 71, "pstate": 0, "unsupported": ("power",), "enforced_mw": 500000,
         "procs": [(4242, 131000), (4343, 512)]},
        {"name": "NVIDIA H200", "lost": False},
    ]
    fake, calls = fake_pynvml(gpus)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    src = NvmlSource(GpuConfig(source="nvml", interval_s=0.05), host_name="localbox")
    async with running(src) as got:
        first = await got.wait_for(ok)
        g0, g1 = first.value.gpus
        assert (g0.index, g0.uuid, g0.name, g0.pstate) == (0, U0, "NVIDIA H200", "P0")
        assert (g0.utilization_pct, g0.memory_util_pct) == (97.0, 61.0)
        # nvidia-smi's memory.used: allocated, without the 565 MiB the driver reserves
        assert (g0.memory_used_mib, g0.memory_total_mib) == (131072.0, 143771.0)
        assert src.memory_api == {0: "v2", 1: "v2"} and calls["memory_v1"] == 0
        assert g0.power_draw_w is None and g0.unavailable == {"power.draw": "[Not Supported]"}
        # nvidia-smi's power.limit is the management limit, not the (lower) enforced one
        assert g0.power_limit_w == 700.0 and g0.temperature_c == 71.0 and g0.sm_clock_mhz == 1980
        assert g1.power_draw_w == 80.0 and g1.unavailable == {}
        assert [(p.pid, p.name, p.used_memory_mib, p.gpu_uuid, p.gpu_index)
                for p in first.value.processes] == [
            (4242, "/usr/bin/python3", 131000.0, U0, 0), (4343, None, 512.0, U0, 0)]
        assert first.value.missing == () and first.interval == 0.05
        gpus[1]["lost"] = True
        lost = await got.wait_for(lambda s: ok(s) and s.missing == (1,))
        assert [g.index for g in lost.value.gpus] == [0]
        await got.wait_for(lambda s: True, start=len(got.samples) + 2)
    assert calls["init"] == 1 and calls["shutdown"] == 1
    assert calls["name"] == 2  # static facts fetched once per GPU
    assert calls["process_name"] == 2  # cached per pid
    # a handle per index, once; GPU 1's was dropped when it was lost and retried per poll
    assert calls["handle"] >= 2 and calls["handle"] <= 2 + calls["util"]
    assert src.polls >= 4


@pytest.mark.parametrize(("binding", "gpu1", "why"), [
    ("12.535", {"v2_missing": True}, "a driver without nvmlDeviceGetMemoryInfo_v2"),
    ("12.535", {"unsupported": ("memory_v2",)}, "v2 not supported on that GPU"),
    ("old", {}, "a binding older than 12.535 (no version argument, no nvmlMemory_v2)"),
])
async def test_nvml_memory_falls_back_to_v1_where_v2_is_missing(monkeypatch, binding, gpu1, why):
    """Where v2 cannot be read, v1 is: its used counts the reserved memory (what it is, said in
    memory_api), and v2 is not asked again for that GPU."""
    gpus = [{"used_mib": 1000, "reserved_mib": 565}, {"used_mib": 2000, "reserved_mib": 600, **gpu1}]
    fake, calls = fake_pynvml(gpus, binding=binding)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    src = NvmlSource(GpuConfig(source="nvml", interval_s=0.05), host_name="localbox")
    async with running(src) as got:
        await got.wait_for(ok)
        last = await got.wait_for(ok, start=len(got.samples) + 2)
    g0, g1 = last.value.gpus
    assert (g1.memory_used_mib, g1.memory_total_mib) == (2600.0, 143771.0), why
    assert g1.unavailable == {}
    if binding == "old":
        assert src.memory_api == {0: "v1", 1: "v1"} and g0.memory_used_mib == 1565.0
        assert calls["memory_v2"] == 0
    else:
        assert src.memory_api == {0: "v2", 1: "v1"} and g0.memory_used_mib == 1000.0
        assert calls["memory_v2[1]"] == 1 and calls["memory_v1[0]"] == 0  # v2 not asked again
        assert calls["memory_v2[0]"] >= 3 and calls["memory_v1[1]"] >= 3


async def test_nvml_driver_unloaded_mid_run(monkeypatch):
    fake, _ = fake_pynvml([{"name": "NVIDIA H200"}])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    src = NvmlSource(GpuConfig(source="nvml", interval_s=0.05))
    async with running(src) as got:
        await got.wait_for(ok)

        def gone() -> int:
            raise fake.NVMLError(fake.NVML_ERROR_DRIVER_NOT_LOADED)

        fake.nvmlDeviceGetCount = gone
        s = await got.wait_for(lambda s: s.state is GpuState.NO_DRIVER)
        assert "Driver Not Loaded" in s.value.error


# -- garbage and silence ---------------------------------------------------------------------------
JUNK = "\x1b[31m\x00\x7f binary junk"
NOT_A_ROW = "gpu-box: nvidia-smi printed a line that is not a GPU row: "


async def test_a_stream_of_garbage_is_reported_then_restarted(fake_smi, host):
    """Nothing but junk (control characters, a line over the 64 KiB limit): the reason is
    published (the line escaped and cut), not just an ageing sample, and the stream that never
    prints a row is restarted after its silence."""
    src = smi_source(host)
    src.silence_s = src._silence_wait = 1.0
    fake_smi.set({"driver": True, "gpus": [gpu(0)],
                  "garbage": {"instead": True, "lines": [JUNK, "y" * 100_000]}})
    async with running(src) as got:
        bad = await got.wait_for(lambda s: s.state is GpuState.ERROR and s.error.startswith(NOT_A_ROW))
        assert bad.value.gpus == () and "\n" not in bad.value.error
        assert bad.value.error in (NOT_A_ROW + repr(JUNK), NOT_A_ROW + "'" + "y" * 199 + "', cut out for "
                                   "being longer than the 64 KiB line limit")
        silent = await got.wait_for(lambda s: "printed no GPU row for 1 s; restarted it" in (s.error or ""))
        assert silent.value.state is GpuState.ERROR and NOT_A_ROW in silent.value.error
        await got.wait_for(lambda s: "printed no GPU row for 2 s" in (s.error or ""))  # the wait doubles
        assert src.gpu_streams_started >= 2 and src.silent_restarts >= 2
        fake_smi.set({"driver": True, "gpus": [gpu(0)]})
        good = await got.wait_for(ok, timeout=20)
        assert good.value.error is None and good.value.gpus[0].utilization_pct == 10
    assert len(fake_smi.calls("--query-gpu")) >= 3


async def test_a_hung_stream_is_reported_and_restarted(fake_smi, host):
    src = smi_source(host)
    src.silence_s = src._silence_wait = 1.0
    async with running(src) as got:
        await got.wait_for(ok)
        fake_smi.set({"driver": True, "gpus": [gpu(0)], "silent": True})
        hung = await got.wait_for(lambda s: s.state is GpuState.ERROR)
        assert hung.value.error == "gpu-box: nvidia-smi printed no GPU row for 1 s; restarted it"
        assert await all_gone([fake_smi.calls("--query-gpu")[0][0]])  # the hung one was ended
        fake_smi.set({"driver": True, "gpus": [gpu(0)]})
        await got.wait_for(ok, start=got.samples.index(hung))
    assert src.silent_restarts >= 1 and len(fake_smi.calls("--query-gpu")) >= 2


async def test_a_refused_row_among_good_ones_keeps_the_readings_and_says_so(fake_smi, host):
    """GPU 1's row has a cell too many every iteration: GPU 0 is still shown, and every snapshot
    from then on says a row was refused (no flicker back to a clean "ok" between iterations)."""
    fake_smi.set({"driver": True, "gpus": [gpu(0), gpu(1)]})
    async with running(smi_source(host)) as got:
        await got.wait_for(lambda s: ok(s) and len(s.gpus) == 2)
        extra = f"1, {U1}, NVIDIA H200, 10, 0, 1000, 143771, 80.50, 700.00, 33, 345, P8, 42"
        fake_smi.set({"driver": True, "gpus": [gpu(0)], "garbage": {"lines": [extra]}})
        first = await got.wait_for(lambda s: s.state is GpuState.ERROR)
        assert first.value.error == NOT_A_ROW + repr(extra)
        start = got.samples.index(first)
        await got.wait_for(lambda s: True, start=start + 8)
        later = [s.value for s in got.samples[start:]]
        assert all(s.state is GpuState.ERROR and s.error == first.value.error for s in later)
        assert all([g.index for g in s.gpus] == [0] and s.missing == (1,) for s in later if s.gpus)
        assert sum(1 for s in later if s.gpus) >= 6
        fake_smi.set({"driver": True, "gpus": [gpu(0), gpu(1)]})
        await got.wait_for(lambda s: ok(s) and len(s.gpus) == 2 and s.error is None, start=len(got.samples))
