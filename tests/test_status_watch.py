"""Headless ingestion and output at fleet scale (issue 13): the nvidia-smi stream is read without a
task or timer per line, ``status --watch --json`` serialises only samples that changed (and writes
exactly what ``json.dumps(status_json(...))`` wrote), and the watch loop ticks on a fixed schedule."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from typing import Any

import msgspec
import pytest

from conftest import wait_for
from sample_data import FROZEN_NOW, sample_statuses
from specconsole.base.errors import SpecConsoleError
from specconsole.base.samples import Sample
from specconsole.config import GpuConfig, HostConfig
from specconsole.formats.nvidia_smi import GpuReading, GpuSnapshot, GpuState
from specconsole.hosts.local import LocalHost
from specconsole.lab.testing.smi_stream import SmiLines, query_gpu_rows
from specconsole.report import status_json
from specconsole.sources.nvidia_smi import NvidiaSmiSource
from specconsole.status_watch import FixedTicks, StatusJsonLines, print_status

# ----------------------------------------------------------------------------------- JSON


def same_json(line: str, statuses: list[Any], now: float) -> bool:
    """``line`` is one line of compact JSON saying what ``status_json`` says."""
    parsed = json.loads(line)
    return line.encode() == msgspec.json.encode(parsed) and parsed == json.loads(json.dumps(status_json(statuses, now)))


def test_json_lines_say_what_status_json_says() -> None:
    lines = StatusJsonLines()
    for state in ("connected", "reconnecting"):
        from specconsole.hosts import ConnState

        statuses = sample_statuses(train_state=ConnState(state))
        for now in (FROZEN_NOW, FROZEN_NOW + 0.25, FROZEN_NOW + 7.0):  # ages move, stale flips
            assert same_json(lines.line(statuses, now), statuses, now)


def test_json_lines_non_finite_and_odd_values_match_too() -> None:
    odd = GpuReading(index=0, uuid=None, name="Ünïcode \"quoted\"", utilization_pct=float("nan"),
                     power_draw_w=float("inf"), unavailable={"power.draw": "[N/A]"})
    snap = GpuSnapshot(GpuState.OK, (odd,), missing=(3,), at=FROZEN_NOW)
    s = dataclasses.replace(sample_statuses()[1], gpu=Sample(snap, at=FROZEN_NOW - 1.23456, interval=1))
    line = StatusJsonLines().line([s], FROZEN_NOW)
    assert same_json(line, [s], FROZEN_NOW)
    gpu = json.loads(line)["hosts"][0]["gpu"]["value"]
    assert gpu["gpus"][0]["utilization_pct"] is None and gpu["gpus"][0]["power_draw_w"] is None
    assert gpu["gpus"][0]["name"] == 'Ünïcode "quoted"' and gpu["missing"] == [3]


def test_only_changed_samples_are_serialised_again() -> None:
    statuses = sample_statuses()
    lines = StatusJsonLines()
    lines.line(statuses, FROZEN_NOW)
    first = lines.serialised
    assert first == 4  # train: gpu + training; serve: gpu + sglang
    for tick in range(1, 6):  # nothing new: ages are rewritten, values are not
        lines.line(statuses, FROZEN_NOW + tick)
    assert lines.serialised == first
    train = statuses[0]
    assert train.gpu is not None
    fresh = Sample(train.gpu.value, at=FROZEN_NOW + 6, interval=1.0)
    statuses[0] = dataclasses.replace(train, gpu=fresh)
    line = lines.line(statuses, FROZEN_NOW + 6.5)
    assert lines.serialised == first + 1  # only the train host's new GPU sample
    assert json.loads(line)["hosts"][0]["gpu"]["age_s"] == 0.5
    assert same_json(line, statuses, FROZEN_NOW + 6.5)


# ------------------------------------------------------------------------------- schedule


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


async def test_ticks_keep_a_fixed_schedule_whatever_the_work_takes() -> None:
    clock = FakeClock()
    ticks = FixedTicks(1.0, clock=clock, sleep=clock.sleep)
    fired = []
    for work in (0.3, 0.05, 0.9, 0.0, 0.45):  # printing a snapshot takes this long
        clock.now += work
        due = await ticks.next()
        fired.append(round(clock.now, 6))
        assert clock.now == pytest.approx(due)
    assert fired == [101.0, 102.0, 103.0, 104.0, 105.0]  # start + k * interval: no drift
    assert ticks.skipped == 0


async def test_a_tick_more_than_an_interval_late_is_skipped_not_bunched() -> None:
    clock = FakeClock()
    ticks = FixedTicks(1.0, clock=clock, sleep=clock.sleep)
    await ticks.next()  # 101
    clock.now += 2.5  # a stall: 103.5 now
    await ticks.next()
    assert clock.now == pytest.approx(103.5)  # tick 3 (due 103) at once; tick 2 is skipped
    assert ticks.skipped == 1
    await ticks.next()
    assert clock.now == pytest.approx(104.0)  # back on the schedule


async def test_watch_needs_a_positive_interval() -> None:
    with pytest.raises(SpecConsoleError, match=r"--interval 0: must be more than 0 s \(fix:"):
        await print_status(None, as_json=True, watch=True, interval=0, timeout=1)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- ingestion

def smi_source() -> NvidiaSmiSource:
    src = NvidiaSmiSource(LocalHost(HostConfig(name="box", role="train")), GpuConfig(interval_s=0.2))
    src._apps_last_line = time.monotonic() + 3600  # the compute-apps stream "ran": no processes
    src._apps_running = False
    return src


async def test_gpu_lines_are_batched_without_a_task_per_line() -> None:
    src = smi_source()
    bursts = [query_gpu_rows([10 * b + i for i in range(8)]) for b in range(6)]
    published: list[Sample[GpuSnapshot]] = []
    loop = asyncio.get_running_loop()
    created: list[Any] = []
    default = loop.get_task_factory()

    def counting(lp: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> asyncio.Task[Any]:
        created.append(coro)
        return default(lp, coro, **kw) if default else asyncio.Task(coro, loop=lp, **kw)

    loop.set_task_factory(counting)  # type: ignore[arg-type]
    try:
        produced, junk, silent = await src._consume_gpus(SmiLines(bursts, pause_s=0.12), published.append)
    finally:
        loop.set_task_factory(default)
    assert produced and junk == [] and silent is None
    assert created == []  # the old reader task + wait_for per line made 50 here
    assert [len(s.value.gpus) for s in published] == [8] * 6
    assert [s.value.gpus[3].utilization_pct for s in published] == [10.0 * b + 3 for b in range(6)]


async def test_a_short_batch_is_published_after_the_quiet_period() -> None:
    src = smi_source()
    full = query_gpu_rows([50] * 8)
    short = query_gpu_rows([60] * 7)  # GPU 7 vanished
    published: list[Sample[GpuSnapshot]] = []
    batches: list[Any] = []
    original = NvidiaSmiSource._publish_batch

    def spy(self: NvidiaSmiSource, batch: list[GpuReading], at: float, publish: Any,
            error: str | None = None) -> None:
        batches.append(time.monotonic())
        original(self, batch, at, publish, error)

    src._publish_batch = spy.__get__(src)  # type: ignore[method-assign]
    stream = SmiLines([full, short, full], pause_s=0.5)
    await src._consume_gpus(stream, published.append)
    # the third burst reaches 7 (the count expected now) and is published, then again with GPU 7
    # back (the source's documented way; the old reader did the same)
    assert [len(s.value.gpus) for s in published] == [8, 7, 7, 8]
    assert published[1].value.missing == (7,) and published[-1].value.missing == ()
    # the short batch went out once the stream was quiet for quiet_s (0.05 s), not when the next
    # burst started (0.5 s later): the deadline is a loop timer, so this holds under any load
    assert stream.burst_started[1] < batches[1] < stream.burst_started[2]


@pytest.mark.serial  # asserts a time bound
async def test_first_readings_go_out_at_once_and_again_when_processes_are_known() -> None:
    """The first readings are not held back for the process list (the fleet view does not show
    it): they go out marked ``processes_known=False``, and again, with the processes, as soon as
    the apps stream's silence says "none" (1.5 intervals), not a batch later."""
    src = NvidiaSmiSource(LocalHost(HostConfig(name="box", role="train")), GpuConfig(interval_s=1.0))
    src._apps_running = True
    src._apps_started_at = started = time.monotonic()  # the compute-apps stream just started: silence so far
    published: list[Sample[GpuSnapshot]] = []
    came: list[float] = []

    def publish(sample: Sample[GpuSnapshot]) -> None:
        published.append(sample)
        came.append(time.monotonic() - started)

    stream = SmiLines([query_gpu_rows([50] * 8)], pause_s=0.0)
    batcher_task = asyncio.ensure_future(src._consume_gpus(stream, publish))
    await wait_for(lambda: published, 10, what="the first readings", step=0.01)
    assert [(len(s.value.gpus), s.value.processes_known) for s in published] == [(8, False)]
    await wait_for(lambda: len(published) >= 2, 10, what="the readings again with their processes", step=0.01)
    assert [(len(s.value.gpus), s.value.processes_known) for s in published] == [(8, False), (8, True)]
    # after 1.5 intervals of silence from the apps stream ("no processes"), not a batch (an interval) later
    assert 1.5 <= came[1] < 2.5, came
    assert published[1].value.processes == ()
    assert published[1].at == published[0].at  # the same readings, now with their processes
    await batcher_task


def test_a_host_is_complete_once_its_gpu_processes_are_known_filled_before() -> None:
    """One-shot ``status`` waits for :attr:`HostStatus.complete` (the process list included); the
    fleet view, which does not show processes, counts a host as filled without it."""
    serve = sample_statuses()[1]
    early = dataclasses.replace(serve, gpu=Sample(dataclasses.replace(serve.gpu.value, processes_known=False),
                                                  at=serve.gpu.at, interval=1.0))
    assert serve.complete and serve.filled(processes=False)
    assert not early.complete and early.filled(processes=False)
    out = json.loads(StatusJsonLines().line([early], FROZEN_NOW))
    assert out["hosts"][0]["gpu"]["value"]["processes_known"] is False
