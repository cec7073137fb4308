"""The local machine as a host: same operations as SSH, run through ``/bin/sh -c``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator

from specconsole.hosts.base import OVERSIZED_HEAD, STREAM_LINE_LIMIT, CommandResult, ConnState, Host, StreamProcess
from specconsole.hosts.commands import Command, to_shell

#: Closing a stream: how long its process gets after SIGTERM before SIGKILL.
STREAM_CLOSE_TIMEOUT_S = 3.0


class LocalStream(StreamProcess):
    def __init__(self, proc: asyncio.subprocess.Process, command: str) -> None:
        self._proc = proc
        self.command = command
        self._stderr: list[bytes] = []
        self._stderr_task = asyncio.ensure_future(self._read_stderr())

    async def _read_stderr(self) -> None:
        """Collect stderr as it is written (a stream's complaints show while it runs)."""
        assert self._proc.stderr is not None
        while chunk := await self._proc.stderr.read(4096):
            self._stderr.append(chunk)

    async def lines(self) -> AsyncIterator[str]:
        """Lines up to STREAM_LINE_LIMIT bytes; a longer one is cut out (``oversized_lines``)."""
        reader = self._proc.stdout
        assert reader is not None
        while True:
            try:
                raw = await reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as end:  # EOF: the last line may lack its newline
                if end.partial:
                    self.bytes_read += len(end.partial)
                    yield end.partial.decode("utf-8", "replace").rstrip("\r\n")
                return
            except asyncio.LimitOverrunError as over:  # no newline within the limit
                head = await reader.readexactly(over.consumed)
                self._oversized(head[:OVERSIZED_HEAD].decode("utf-8", "replace"))
                self.bytes_read += len(head)
                await self._skip_line(reader)
                continue
            self.bytes_read += len(raw)
            yield raw.decode("utf-8", "replace").rstrip("\r\n")

    async def _skip_line(self, reader: asyncio.StreamReader) -> None:
        """Drop the rest of a line over the reader's limit, up to and including its newline (one
        limit's worth at a time, counted in ``bytes_read`` as it goes)."""
        while True:
            try:
                self.bytes_read += len(await reader.readuntil(b"\n"))
                return
            except asyncio.LimitOverrunError as over:  # still no newline within the limit
                self.bytes_read += len(await reader.readexactly(over.consumed))
            except asyncio.IncompleteReadError as end:
                self.bytes_read += len(end.partial)
                return

    async def wait(self) -> int | None:
        rc = await self._proc.wait()
        with contextlib.suppress(Exception):
            await self._stderr_task
        return rc

    @property
    def stderr_text(self) -> str:
        return b"".join(self._stderr).decode("utf-8", "replace")

    async def close(self) -> None:
        """SIGTERM to the stream's process group, SIGKILL after :data:`STREAM_CLOSE_TIMEOUT_S`."""
        try:
            if self._proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._proc.pid, signal.SIGTERM)
                # asyncio.wait, not wait_for: on 3.11 wait_for loses a cancellation that arrives as
                # the process exits (as SshStream.close does)
                exited = asyncio.ensure_future(self._proc.wait())
                try:
                    await asyncio.wait([exited], timeout=STREAM_CLOSE_TIMEOUT_S)
                finally:
                    exited.cancel()  # a no-op once it exited
                if self._proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(self._proc.pid, signal.SIGKILL)
                    await self._proc.wait()
        finally:
            self._stderr_task.cancel()


class LocalHost(Host):
    """Runs everything on this machine; always "connected"."""

    async def start(self) -> None:
        self._set_status(state=ConnState.CONNECTED, last_ok=time.time(), attempt=0)

    async def close(self) -> None:
        self._set_status(state=ConnState.CLOSED)

    async def _spawn(self, line: str, stdin: int | None) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", line,
            stdin=stdin, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True, limit=STREAM_LINE_LIMIT,
        )

    async def run(self, cmd: Command, *, timeout: float = 30.0, input: str | None = None) -> CommandResult:
        line = to_shell(cmd)
        t0 = time.monotonic()
        proc = await self._spawn(line, asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL)
        # asyncio.wait, not wait_for: on 3.11 wait_for loses a cancellation that arrives as the
        # command finishes (as SshStream.wait does)
        talk = asyncio.ensure_future(proc.communicate(input.encode() if input is not None else None))
        try:
            await asyncio.wait([talk], timeout=timeout)
        finally:
            talk.cancel()  # a no-op once it finished
        if not talk.done():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            raise TimeoutError(f"{self.name}: `{line}` did not finish within {timeout:g}s") from None
        out, err = talk.result()
        self._set_status(last_ok=time.time())
        return CommandResult(line, proc.returncode, out.decode("utf-8", "replace"),
                             err.decode("utf-8", "replace"), time.monotonic() - t0)

    @contextlib.asynccontextmanager
    async def _open_stream(self, cmd: Command) -> AsyncIterator[StreamProcess]:
        line = to_shell(cmd)
        stream = LocalStream(await self._spawn(line, asyncio.subprocess.DEVNULL), line)
        try:
            yield stream
        finally:
            await stream.close()

    async def reach(self, host: str, port: int) -> tuple[str, int]:
        return host, port
