"""Data sources: GPU, SGLang, training log. They know hosts and formats, never widgets.

Each source has an ``async def run(self, publish: Publish[T]) -> None`` that runs until
cancelled, survives its host dropping (waits for ``host.wait_connected()`` and starts again)
and calls ``publish(Sample(value, at, interval))`` with every new observation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from specconsole.samples import Sample

T = TypeVar("T")
Publish = Callable[[Sample[T]], None]
