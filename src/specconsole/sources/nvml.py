"""GPU readings of the local machine through NVML (``nvidia-ml-py``), in nvidia-smi's units and
field names (:mod:`specconsole.formats.nvidia_smi`)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import time
from types import ModuleType
from typing import Any

from specconsole.base.backoff import Backoff
from specconsole.base.samples import Sample
from specconsole.config import GpuConfig
from specconsole.formats.nvidia_smi import (
    GpuProcess,
    GpuReading,
    GpuSnapshot,
    GpuState,
    error_snapshot,
)
from specconsole.sources import Publish

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

    The readings are nvidia-smi's: ``memory.used`` is the v2 memory struct's ``used`` (allocated
    memory, without the driver's reserved memory that the v1 struct counts as used), read with
    ``nvmlDeviceGetMemoryInfo(handle, version=nvmlMemory_v2)`` (nvidia-ml-py >= 12.535); where
    the binding or the driver has no v2 (no ``version`` argument, no ``nvmlMemory_v2``,
    ``NVMLError_FunctionNotFound``, ``NotSupported``, ``ArgumentVersionMismatch``) that GPU is
    read with v1 from then on (:attr:`memory_api` says which). ``power.limit`` is ``nvmlDeviceGetPowerManagementLimit``
    (the software limit nvidia-smi shows), not the enforced limit.
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
        #: GPU index -> "v2" or "v1": which memory struct its ``memory.used`` comes from
        self.memory_api: dict[int, str] = {}

    async def run(self, publish: Publish[GpuSnapshot]) -> None:
        backoff = Backoff()
        try:
            while True:
                started = time.monotonic()
                snap = await asyncio.to_thread(self.poll)
                if snap.ok:
                    backoff = Backoff()
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
        return error_snapshot(state, f"{self.host_name}: NVML: {detail}; {fixes[state]}")

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
        mem = get(("memory.used", "memory.total"), self._memory, nv, index, handle)
        power = get(("power.draw",), nv.nvmlDeviceGetPowerUsage, handle)
        limit = get(("power.limit",), nv.nvmlDeviceGetPowerManagementLimit, handle)
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

    def _memory(self, nv: ModuleType, index: int, handle: Any) -> Any:
        """The v2 memory struct (``used`` without reserved memory, as nvidia-smi shows it), or
        the v1 struct where this binding or driver has no v2 (remembered per GPU)."""
        version = getattr(nv, "nvmlMemory_v2", None)
        if version is not None and self.memory_api.get(index) != "v1":
            try:
                mem = nv.nvmlDeviceGetMemoryInfo(handle, version=version)
            except TypeError:  # a binding older than 12.535: no ``version`` argument
                pass
            except nv.NVMLError as err:
                if not _is(nv, err, "NVMLError_FunctionNotFound", "NVMLError_NotSupported",
                           "NVMLError_ArgumentVersionMismatch"):
                    raise
            else:
                self.memory_api[index] = "v2"
                return mem
        mem = nv.nvmlDeviceGetMemoryInfo(handle)
        self.memory_api[index] = "v1"
        return mem

    def _process_name(self, nv: ModuleType, pid: int) -> str | None:
        if pid not in self._proc_names:
            try:
                self._proc_names[pid] = _text(nv.nvmlSystemGetProcessName(pid)) or None
            except nv.NVMLError:
                self._proc_names[pid] = None
        return self._proc_names[pid]

