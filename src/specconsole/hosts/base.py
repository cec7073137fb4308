"""The host abstraction: run a command, stream a command's lines, reach a port.

Data sources and actions talk to a :class:`Host` and never know whether it is the local
machine or an SSH connection. Every method reports the exact command line it ran.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from enum import StrEnum

from specconsole.base.errors import CommandFailed, HostUnavailable
from specconsole.config import HostConfig
from specconsole.hosts.commands import Command, to_shell


class ConnState(StrEnum):
    CONNECTING = "connecting"
    CONNECTED = "connected"
    RECONNECTING = "reconnecting"
    DOWN = "down"
    CLOSED = "closed"
    #: Not connected, and not needed until an action asks: every sample of the host comes from
    #: Prometheus; the first command, stream, tunnel or wait_connected opens the connection.
    ON_DEMAND = "on_demand"


@dataclass(frozen=True, slots=True)
class Connection:
    """A host's connection state as shown in its pane and in ``status``."""

    state: ConnState
    since: float
    attempt: int = 0
    last_ok: float | None = None
    last_error: str | None = None
    next_retry_at: float | None = None

    @property
    def up(self) -> bool:
        return self.state is ConnState.CONNECTED


@dataclass(frozen=True, slots=True)
class CommandResult:
    command: str
    exit_status: int | None
    stdout: str
    stderr: str
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    def check(self, host: str) -> CommandResult:
        """Return self, or raise :class:`CommandFailed` naming the host, command and stderr."""
        if self.exit_status is None:
            raise CommandFailed(f"{host}: `{self.command}`: exit status unknown, the connection dropped "
                                f"before it reported one (it may or may not have run)")
        if not self.ok:
            last = (self.stderr.strip() or self.stdout.strip()).splitlines()[-1:] or ["no output"]
            raise CommandFailed(f"{host}: `{self.command}` exited {self.exit_status}: {last[0]}")
        return self


#: Longest stdout line a stream delivers: bytes from a local pipe, characters over SSH. A longer
#: line is cut out of the stream: counted in :attr:`StreamProcess.oversized_lines` as soon as it
#: passes the limit, its first :data:`OVERSIZED_HEAD` characters kept to say what it was, the
#: rest dropped as it is read (never held whole: a 4 MB line without a newline costs a few
#: reads of memory, not 4 MB). A trainer's longest JSON records fit well within it.
STREAM_LINE_LIMIT = 64 << 10
#: How much of an over-long line is kept (:attr:`StreamProcess.oversized_head`).
OVERSIZED_HEAD = 200


def line_limit_text() -> str:
    """The line limit as people read it (``64 KiB``)."""
    return f"{STREAM_LINE_LIMIT >> 10} KiB"


class StreamProcess(abc.ABC):
    """A long-lived command whose stdout is consumed line by line."""

    command: str
    #: Lines cut out for being longer than :data:`STREAM_LINE_LIMIT` (they are never yielded),
    #: counted as soon as a line passes the limit, while its rest is still being dropped.
    oversized_lines: int = 0
    #: The start of the latest such line (at most :data:`OVERSIZED_HEAD` characters).
    oversized_head: str = ""
    #: How much of stdout has been read so far (bytes locally, characters over SSH), over-long
    #: lines included: where in a followed file the reader is, give or take one read.
    bytes_read: int = 0

    def _oversized(self, head: str) -> None:
        self.oversized_lines += 1
        self.oversized_head = head[:OVERSIZED_HEAD]

    @abc.abstractmethod
    def lines(self) -> AsyncIterator[str]:
        """Stdout lines without their newline; ends when the command exits or the host drops."""

    async def line_batches(self) -> AsyncIterator[list[str]]:
        """:meth:`lines`, as the lists of lines that arrived together (a stream that reads a
        chunk at a time gives a chunk's complete lines; this default, a line at a time)."""
        async for line in self.lines():
            yield [line]

    async def _batched_lines(self) -> AsyncIterator[str]:
        """:meth:`lines` for a stream whose :meth:`line_batches` reads a chunk at a time."""
        async for batch in self.line_batches():
            for line in batch:
                yield line

    @abc.abstractmethod
    async def wait(self) -> int | None:
        """Exit status (None when the connection dropped before it was known)."""

    @property
    @abc.abstractmethod
    def stderr_text(self) -> str:
        """What the command wrote to stderr (complete once :meth:`wait` returned)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop the command (idempotent)."""


Listener = Callable[[Connection], None]


class Host(abc.ABC):
    """One machine the console watches. Subclasses: LocalHost, SshHost."""

    def __init__(self, config: HostConfig) -> None:
        self.config = config
        self.name = config.name
        self._status = Connection(ConnState.CONNECTING, since=time.time())
        self._listeners: list[Listener] = []
        self._connected = asyncio.Event()
        self._closed = asyncio.Event()

    # -- connection state -------------------------------------------------------------
    @property
    def status(self) -> Connection:
        return self._status

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def _set_status(self, **changes: object) -> None:
        new = replace(self._status, **changes)  # type: ignore[arg-type]
        if new.state != self._status.state:
            new = replace(new, since=time.time())
        self._status = new
        if new.state is ConnState.CONNECTED:
            self._connected.set()
        else:
            self._connected.clear()
        if new.state is ConnState.CLOSED:
            self._closed.set()
        for listener in list(self._listeners):
            listener(new)

    def start_on_demand(self) -> None:
        """Instead of :meth:`start`: connect only once something needs the host (the state
        reads ``on_demand`` until then)."""
        self._set_status(state=ConnState.ON_DEMAND)

    async def connect_on_demand(self) -> None:
        """Start connecting now if the host was left :meth:`start_on_demand` (else nothing)."""
        if self._status.state is ConnState.ON_DEMAND:
            self._set_status(state=ConnState.CONNECTING)
            await self.start()

    async def wait_connected(self, timeout: float | None = None) -> bool:
        """True once connected; False if ``timeout`` passed first (a host left
        :meth:`start_on_demand` starts connecting). Raises :class:`HostUnavailable` once the
        host is closed (nothing will connect it again), so that a source loop ends even if its
        cancellation was lost on the way out."""
        if self._connected.is_set():
            return True
        await self.connect_on_demand()
        waits = [asyncio.ensure_future(self._connected.wait()), asyncio.ensure_future(self._closed.wait())]
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        if self._connected.is_set():
            return True
        if self._closed.is_set():
            raise HostUnavailable(f"{self.name}: closed")
        return False

    # -- operations ---------------------------------------------------------------------
    @abc.abstractmethod
    async def start(self) -> None:
        """Begin connecting (returns at once; the connection is supervised in the background)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Close the connection and everything streaming over it."""

    def abort(self) -> None:  # noqa: B027 - a no-op unless the host holds a connection
        """Drop the connection now, without waiting (the last step of a bounded shutdown)."""

    @abc.abstractmethod
    async def run(self, cmd: Command, *, timeout: float = 30.0, input: str | None = None) -> CommandResult:
        """Run ``cmd`` to completion. Raises HostUnavailable when not connected, TimeoutError."""

    @abc.abstractmethod
    def _open_stream(self, cmd: Command) -> contextlib.AbstractAsyncContextManager[StreamProcess]:
        ...

    def stream(self, cmd: Command) -> contextlib.AbstractAsyncContextManager[StreamProcess]:
        """``async with host.stream(argv) as proc: async for line in proc.lines(): ...``"""
        return self._open_stream(cmd)

    async def check(self, cmd: Command, *, timeout: float = 30.0) -> CommandResult:
        """:meth:`run`, raising :class:`CommandFailed` on a non-zero exit."""
        return (await self.run(cmd, timeout=timeout)).check(self.name)

    @abc.abstractmethod
    async def reach(self, host: str, port: int) -> tuple[str, int]:
        """An address on this machine that reaches ``host:port`` as seen from the host
        (itself for a local host; a local end of an SSH tunnel for a remote one)."""

    @staticmethod
    def shell(cmd: Command) -> str:
        return to_shell(cmd)
