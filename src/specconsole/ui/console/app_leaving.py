"""Leaving the console: ``q``, SIGHUP/SIGTERM/SIGINT, the terminal going away.

:class:`Leaving` is held by :class:`~specconsole.ui.console.app.ConsoleApp` (``app.leaving``). Every way
out stops the monitors and the app together within the exit guard's deadline
(:class:`~specconsole.base.shutdown.ExitGuard`); ``q`` arms that deadline from the input thread
before the loop sees the key; a forced exit restores the terminal first.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import termios
import threading
from collections.abc import Callable
from typing import Any

from textual.app import App
from textual.driver import Driver

from specconsole.base.events import EventLog
from specconsole.base.shutdown import STOP_TIMEOUT_S, ExitGuard, kill_children, signal_name
from specconsole.ui.console.provider import StatusProvider
from specconsole.ui.console.quit_key import typing_text, with_quit_deadline

#: What a forced exit writes to a live terminal: what Textual's application mode turned on, off.
RESTORE_TERMINAL = (b"\x1b[?1000l\x1b[?1003l\x1b[?1015l\x1b[?1006l\x1b[?2004l\x1b[?7h\x1b[<u"
                    b"\x1b[?1049l\x1b[?25h\x1b[?1004l")


class Leaving:
    """The console's ways out.

    ``quit_key`` says which key quits now (``[keys]`` may remap it); ``stop_redraws`` is called
    once, when leaving starts (the loop then serves the exit). With ``handle_signals`` (the real
    console, not a test's) an :class:`ExitGuard` bounds every exit and the driver tells
    :meth:`quit_key_pressed` about each key from its input thread.
    """

    def __init__(self, app: App[Any], *, fleet: StatusProvider, events: EventLog,
                 quit_key: Callable[[], str | None], stop_redraws: Callable[[], None],
                 handle_signals: bool) -> None:
        self.app = app
        self.fleet = fleet
        self.events = events
        self.quit_key = quit_key
        self.stop_redraws = stop_redraws
        self.handle_signals = handle_signals
        #: SIGHUP/SIGTERM/SIGINT and q: leave within the guard's deadline whatever the loop is doing
        self.guard = ExitGuard(note=lambda m: events.record(m, level="warning"),
                               restore=self.restore_terminal) if handle_signals else None
        #: the ``specconsole`` command: on leaving, end the process once the terminal is restored
        self.leave_process = False
        self.exit_signal: int | None = None
        #: the monitors' stop, once leaving has started
        self.stopping: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._leaving: asyncio.Future[None] | None = None

    def install(self) -> None:
        """On mount: signals (with a guard) hand the exit to this loop."""
        self._loop = asyncio.get_running_loop()
        if self.guard is not None:
            self.guard.install(self._signal_received)

    def driver_class(self, base: type[Driver]) -> type[Driver]:
        return with_quit_deadline(base) if self.handle_signals else base

    def quit_key_pressed(self, key: str) -> None:
        """From the input thread, before the loop sees the key: q arms the exit deadline at once."""
        if self.guard is not None and key == self.quit_key() and not typing_text(self.app):
            self.guard.arm(0, "quit")

    def _signal_received(self, sig: int) -> None:
        """From the signal handler (any moment, main thread): hand the exit to the loop."""
        self.exit_signal = sig
        if sig == signal.SIGHUP and self.guard is not None:
            # the terminal is usually gone, and the loop may already be stuck writing to it: leave
            # at once. The kernel closes our connections as we exit (the hosts' watchdogs end the
            # streams); our local children are killed first. The terminal's modes are put back on
            # the way (best effort, bounded: a dead terminal refuses at once), for a SIGHUP sent
            # while it lives (``kill -HUP``) must not leave it in the alternate screen, mouse on.
            self.guard.force_exit(f"{signal_name(sig)} received: the terminal hung up or was told to; "
                                       "closing every connection and leaving")
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                self._loop.call_soon_threadsafe(
                    self.leave, 128 + sig, f"{signal_name(sig)} received; stopping the monitors and leaving")

    def leave(self, code: int, message: str | None) -> None:
        """Stop the monitors and the app together; the guard's deadline bounds the whole exit."""
        if self.stopping is not None:
            return
        if self.guard is not None:
            self.guard.arm(code, message or "quit")
        if message:
            self.events.emit(message, level="warning")
        self.stop_redraws()  # no more redraws: the loop now serves the exit
        self.stopping = asyncio.ensure_future(self.stop_fleet())
        if self.leave_process:
            self._leaving = asyncio.ensure_future(self._leave_process(code))
        else:
            self.app.exit(code)

    async def _leave_process(self, code: int) -> None:
        """The ``specconsole`` command's way out: the monitors stopped (bounded), the terminal
        restored as Textual's own exit does, our children gone, then the process ends at once,
        without tearing down every widget and object one by one (seconds at many hosts)."""
        assert self.stopping is not None
        await asyncio.wait([self.stopping], timeout=STOP_TIMEOUT_S + 0.3)
        driver = self.app._driver
        if driver is not None and self.exit_signal != signal.SIGHUP:  # after SIGHUP no terminal is left
            with contextlib.suppress(Exception):
                driver.stop_application_mode()  # input thread stopped, modes and screen restored
                driver.close()  # the output thread has written everything
        kill_children(self.guard.spare if self.guard else frozenset())
        for stream in (sys.__stdout__, sys.__stderr__):
            with contextlib.suppress(Exception):
                stream.flush()  # type: ignore[union-attr]
        os._exit(code)

    async def stopped(self) -> None:
        """On unmount: the monitors stopped (started now if no way out has), within their deadline."""
        stopping = self.stopping or asyncio.ensure_future(self.stop_fleet())
        await asyncio.wait([stopping], timeout=STOP_TIMEOUT_S + 0.5)  # the fleet's stop is bounded too

    async def stop_fleet(self) -> None:
        try:
            await self.fleet.stop()
        except Exception as err:  # leaving must not fail
            self.events.record(f"stopping the monitors failed: {err!r}", level="error")

    def restore_terminal(self) -> None:
        """Best effort before a forced exit: the terminal's modes as they were (never blocks long)."""
        driver = self.app._driver
        attrs, fd = getattr(driver, "attrs_before", None), getattr(driver, "fileno", None)
        if attrs is None or not isinstance(fd, int):
            return
        with contextlib.suppress(termios.error, OSError):
            termios.tcsetattr(fd, termios.TCSANOW, attrs)

        def write() -> None:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                os.write(sys.__stderr__.fileno(), RESTORE_TERMINAL)  # type: ignore[union-attr]

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        writer.join(0.2)
