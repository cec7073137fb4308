"""The local host's waits with a deadline (a command's run, a stream's close) never lose a
cancellation: on Python 3.11 ``asyncio.wait_for`` returns the result instead of raising when the
cancellation arrives as the awaited thing completes (the source would then carry on instead of
stopping). Real processes; the cancellation is delivered from inside the awaited call, at the
moment it completes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from conftest import wait_for
from specconsole.config import HostConfig
from specconsole.hosts import local
from specconsole.hosts.local import LocalHost, LocalStream

pytestmark = pytest.mark.timeout(60)


def _cancel_as_it_returns(method: Callable[..., Any], task: Callable[[], asyncio.Task[Any]]) -> Callable[..., Any]:
    """``method``, but cancelling ``task()`` just before it returns its result."""

    async def wrapped(*args: Any) -> Any:
        result = await method(*args)
        task().cancel()
        return result

    return wrapped


class CancelledAsTheCommandFinishes(LocalHost):
    """Cancels :attr:`caller` as the command's output is complete."""

    caller: asyncio.Task[Any]

    async def _spawn(self, line: str, stdin: int | None) -> asyncio.subprocess.Process:
        proc = await super()._spawn(line, stdin)
        proc.communicate = _cancel_as_it_returns(proc.communicate, lambda: self.caller)  # type: ignore[method-assign]
        return proc


async def test_run_keeps_a_cancellation_that_arrives_as_the_command_finishes() -> None:
    host = CancelledAsTheCommandFinishes(HostConfig(name="box", role="train"))
    host.caller = asyncio.ensure_future(host.run(["echo", "hi"], timeout=30))
    await asyncio.wait([host.caller], timeout=30)
    assert host.caller.cancelled()  # wait_for returned the CommandResult here


async def test_closing_a_stream_keeps_a_cancellation_that_arrives_as_its_process_exits() -> None:
    host = LocalHost(HostConfig(name="box", role="train"))
    async with host.stream(["sleep", "30"]) as stream:
        assert isinstance(stream, LocalStream)
        proc = stream._proc
        closing = asyncio.ensure_future(stream.close())
        proc.wait = _cancel_as_it_returns(proc.wait, lambda: closing)  # type: ignore[method-assign]
        await asyncio.wait([closing], timeout=30)
        assert closing.cancelled()  # wait_for let close() finish as if never cancelled
        assert proc.returncode is not None  # the SIGTERM still ended the process


async def test_run_returns_the_output_and_a_late_command_is_killed() -> None:
    host = LocalHost(HostConfig(name="box", role="train"))
    res = await host.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (res.exit_status, res.stdout, res.stderr) == (3, "out\n", "err\n")
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=r"box: `sleep 30` did not finish within 0.5s"):
        await host.run(["sleep", "30"], timeout=0.5)
    assert time.monotonic() - t0 < 20


async def test_a_stream_that_ignores_sigterm_is_killed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "STREAM_CLOSE_TIMEOUT_S", 0.3)
    host = LocalHost(HostConfig(name="box", role="train"))
    async with host.stream("trap '' TERM; echo ready; while :; do sleep 0.1; done") as stream:
        assert [line async for line in _first(stream.lines())] == ["ready"]
        assert isinstance(stream, LocalStream)
        proc = stream._proc
        await stream.close()
        assert proc.returncode == -9  # SIGKILL, after the SIGTERM it ignored


async def _first(lines: Any) -> Any:
    async for line in lines:
        yield line
        return


FOUR_MB = 4 * 1000 * 1000


async def read_a_4mb_line_without_newline(host: Any) -> None:
    """A stream whose second line is 4 MB with no newline (the command then hangs): the line is
    cut out as soon as it passes the limit, counted and its start kept, while the stream stays
    open, and reading it never holds more than a few reads' worth (tracemalloc's peak); a
    4 MB line that does end is cut out the same way and the next line comes through."""
    import tracemalloc

    junk = f"printf 'before\\n'; head -c {FOUR_MB} /dev/zero | tr '\\000' '\\001'"
    async with host.stream(f"{junk}; sleep 30") as stream:
        lines = aiter(stream.lines())
        assert await anext(lines) == "before"
        tracemalloc.start()
        try:
            pending = asyncio.ensure_future(anext(lines))
            await wait_for(lambda: stream.bytes_read >= 0.95 * FOUR_MB, 30, what="95% of the 4 MB line read",
                           step=0.05)
            _now, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        # (read up to the last, unfinished read: the reader waits there for more of the line)
        assert stream.bytes_read >= 0.95 * FOUR_MB and not pending.done()  # nothing yielded, still open
        assert stream.oversized_lines == 1 and stream.oversized_head == "\x01" * 200
        assert peak < FOUR_MB // 2, peak  # a few reads (and SSH's window), never the line
        pending.cancel()
    async with host.stream(f"{junk}; printf '\\nafter\\n'") as stream:
        assert [line async for line in stream.lines()] == ["before", "after"]
        assert stream.oversized_lines == 1


async def test_a_4mb_line_without_newline_is_cut_out_not_held() -> None:
    host = LocalHost(HostConfig(name="box", role="train"))
    await host.start()
    await read_a_4mb_line_without_newline(host)
