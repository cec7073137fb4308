"""An import-only stand-in for torchvision, for running SGLang's argument parsing and resolution
on a CPU machine (scripts/setup.sh installs it into .venv-sglang).

PyPI's torchvision cannot load beside the CPU torch 2.13.0 used there, and text-only argument
resolution imports multimodal modules that import torchvision at module level without ever
calling it. Every ``torchvision.*`` module and name imports; any call raises.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

__version__ = "0.0.0+import-only"


class _Placeholder:
    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> _Placeholder:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Placeholder(f"{self._name}.{attr}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self._name}: torchvision is an import-only stand-in here")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)


def _module_getattr(module_name: str) -> Any:
    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(f"{module_name}.{name}")
    return __getattr__


class _Loader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name)
        module.__path__ = []  # a package: any submodule imports too
        module.__getattr__ = _module_getattr(spec.name)  # type: ignore[method-assign]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=True)
        return None


sys.meta_path.append(_Finder())
__getattr__ = _module_getattr(__name__)
