"""A TEST DOUBLE of a running ``nvidia-smi --query-gpu ... -lms N`` stream, held in memory.

For tests and benches of the GPU source's reading (``NvidiaSmiSource._consume_gpus``) with no
process and no pipe: :class:`SmiLines` is a :class:`~specconsole.hosts.base.StreamProcess`
that delivers bursts of rows (one burst per loop iteration of the real tool, each row its own
read), a pause between bursts; :class:`SmiChunks`, each burst in one read, as SSH brings a frame
of the host-side filter. The rows are printed by the lab's nvidia-smi double
(:mod:`specconsole.lab.doubles.nvidia_smi`) for the console's own query: the real tool's format.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence

from specconsole.formats.nvidia_smi import QUERY_GPU_FIELDS
from specconsole.hosts.base import StreamProcess
from specconsole.lab.doubles.nvidia_smi import build_state, render


def query_gpu_rows(utils: Sequence[float], power_w: Sequence[float] | None = None) -> list[str]:
    """One ``--query-gpu`` burst (``csv,noheader,nounits``, the console's fields): a busy H200
    per entry of ``utils`` (its utilization in %), GPU ``i`` drawing ``power_w[i]`` W (310.5
    when not given)."""
    gpus = [{"index": i, "utilization_pct": u, "memory_util_pct": 12, "memory_used_mib": 20480,
             "power_draw_w": power_w[i] if power_w is not None else 310.5, "temperature_c": 55,
             "sm_clock_mhz": 1980, "pstate": "P0"} for i, u in enumerate(utils)]
    state, _apps = build_state({"gpus": gpus}, 0)
    return render("gpu", QUERY_GPU_FIELDS, state, [], False, 0.0)


class SmiLines(StreamProcess):
    """nvidia-smi's stdout as the source reads it: ``bursts`` of rows, ``pause_s`` after each;
    :attr:`burst_started` says when each burst began (``time.monotonic``)."""

    command = "nvidia-smi (lines in memory)"

    def __init__(self, bursts: Sequence[Sequence[str]], pause_s: float) -> None:
        self.bursts = bursts
        self.pause_s = pause_s
        self.burst_started: list[float] = []

    async def lines(self) -> AsyncIterator[str]:
        for burst in self.bursts:
            self.burst_started.append(time.monotonic())
            for line in burst:
                await asyncio.sleep(0)  # each line its own read, as from a pipe
                yield line
            await asyncio.sleep(self.pause_s)

    async def wait(self) -> int | None:
        return 0

    @property
    def stderr_text(self) -> str:
        return ""

    async def close(self) -> None:
        pass


class SmiChunks(SmiLines):
    """:class:`SmiLines` as SSH brings a framed stream: each burst in one read (one packet), its
    lines together (``line_batches``; ``lines`` gives them with no wait between them, as an SSH
    stream read a chunk at a time does)."""

    command = "framed nvidia-smi (chunks in memory)"

    async def line_batches(self) -> AsyncIterator[list[str]]:
        for burst in self.bursts:
            self.burst_started.append(time.monotonic())
            await asyncio.sleep(0)  # the packet's read
            yield list(burst)
            await asyncio.sleep(self.pause_s)

    def lines(self) -> AsyncIterator[str]:
        return self._batched_lines()
