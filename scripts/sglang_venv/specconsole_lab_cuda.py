"""The lab's CUDA double for SGLang's argument resolution (this machine has no GPU).

SGLang's resolution asks torch which accelerator the host has (``get_device()``, device count,
compute capability, memory) and decides defaults from the answer; on a machine without GPUs it
finds none and refuses. A real serving host answers "cuda". With ``SPECCONSOLE_LAB_CUDA`` set
(``COUNT:NAME:MEMORY_MIB:MAJOR.MINOR``, e.g. ``2:NVIDIA H200:143771:9.0``; the lab's sshd sets it
for its serving host), torch reports those GPUs once ``sglang.srt.arg_groups.pipeline`` (the
resolution pipeline) has been imported: SGLang's module-level imports still see a CPU machine
(so no CUDA kernel package is imported), resolution sees the lab's GPUs. Nothing else changes;
unset, this module does nothing. Loaded by ``specconsole_lab_cuda.pth`` in ``.venv-sglang``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Any

ENV = "SPECCONSOLE_LAB_CUDA"
_TRIGGER = "sglang.srt.arg_groups.pipeline"


def _spec() -> tuple[int, str, int, tuple[int, int]]:
    count, name, mib, cap = (os.environ.get(ENV) or "").split(":")
    major, minor = cap.split(".")
    return int(count), name, int(mib), (int(major), int(minor))


def pretend_cuda() -> None:
    """Make torch report the lab's GPUs."""
    import torch

    count, name, mib, cap = _spec()
    total = mib * 1024 * 1024

    class _Props:
        total_memory = total
        multi_processor_count = 132

    _Props.name = name  # type: ignore[attr-defined]
    _Props.major, _Props.minor = cap  # type: ignore[attr-defined]
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: count
    torch.cuda.get_device_capability = lambda device=None: cap
    torch.cuda.get_device_name = lambda device=None: name
    torch.cuda.get_device_properties = lambda device=None: _Props()
    torch.cuda.mem_get_info = lambda device=None: (total - 512 * 1024 * 1024, total)
    torch.version.cuda = torch.version.cuda or "12.8"


class _AfterPipeline(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != _TRIGGER:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            pretend_cuda()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> None:
    if os.environ.get(ENV):
        _spec()  # a malformed value fails here, loudly, not halfway through resolution
        sys.meta_path.insert(0, _AfterPipeline())
