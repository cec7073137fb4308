"""Data sources: GPU, SGLang, training log. They know hosts and formats, never widgets.

Each source has an ``async def run(self, publish: Publish[T]) -> None`` that runs until
cancelled, survives its host dropping (waits for ``host.wait_connected()`` and starts again)
and calls ``publish(Sample(value, at, interval))`` with every new observation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from specconsole.base.samples import Sample

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
Publish = Callable[[Sample[T]], None]


class Source(Protocol[T_co]):
    """What a host monitor runs: ``run`` publishes samples of one value type until cancelled."""

    async def run(self, publish: Publish[T_co]) -> None: ...
