"""Which GPU source a host gets: ``nvidia-smi`` query streams on any host, NVML on the local one.

The two sources live in their own modules, both following the contract of
:mod:`specconsole.sources`; the readings and the query format are in
:mod:`specconsole.formats.nvidia_smi`:

* :class:`~specconsole.sources.nvidia_smi.NvidiaSmiSource` keeps ONE long-lived
  ``nvidia-smi --query-gpu=... -lms N`` process per host (plus one ``--query-compute-apps``
  process), never a process per sample.
* :class:`~specconsole.sources.nvml.NvmlSource` polls NVML (``nvidia-ml-py``) in a worker thread
  for the local machine.

:func:`make_gpu_source` picks one from the host's ``[gpu]`` config.
"""

from __future__ import annotations

import contextlib
import importlib

from specconsole.config import GpuConfig
from specconsole.hosts.base import Host
from specconsole.hosts.local import LocalHost
from specconsole.sources.nvidia_smi import NvidiaSmiSource
from specconsole.sources.nvml import NvmlSource


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
    if source in ("none", "prometheus"):  # "prometheus": the fleet's PrometheusPoller feeds it
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
