"""Leaving the console: ``q``, SIGHUP/SIGTERM/SIGINT, the terminal going away.

:class:`LeavingMixin` is part of :class:`~specconsole.ui.app.ConsoleApp`. Every way out stops
the monitors and the app together within the exit guard's deadline
(:class:`~specconsole.shutdown.ExitGuard`); ``q`` arms that deadline from the input thread
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
from typing import TYPE_CHECKING

from textual.app import App
from textual.driver import Driver

from specconsole.shutdown import STOP_TIMEOUT_S, kill_children, signal_name
from specconsole.ui.quit_key import typing_text, with_quit_deadline

if TYPE_CHECKING:
    from textual.timer import Timer

    from specconsole.events import EventLog
    from specconsole.shutdown import ExitGuard
    from specconsole.ui.provider import StatusProvider
    from specconsole.ui.registry import KeyPlan

    _AppBase = App[int]
else:
    _AppBase = object

#: What a forced exit writes to a live terminal: what Textual's application mode turned on, off.
RESTORE_TERMINAL = (b"\x1b[?1000l\x1b[?1003l\x1b[?1015l\x1b[?1006l\x1b[?2004l\x1b[?7h\x1b[<u"
                    b"\x1b[?1049l\x1b[?25h\x1b[?1004l")


class LeavingMixin(_AppBase):
    """The console's ways out; part of :class:`~specconsole.ui.app.ConsoleApp`, which sets these."""

    fleet: StatusProvider
    events: EventLog
    key_plan: KeyPlan
    handle_signals: bool
    #: the ``specconsole`` command: on leaving, end the process once the terminal is restored
    leave_process: bool
    #: SIGHUP/SIGTERM/SIGINT and q: leave within the guard's deadline whatever the loop is doing
    exit_guard: ExitGuard | None
    exit_signal: int | None
    _console_loop: asyncio.AbstractEventLoop | None
    _stopping: asyncio.Future[None] | None
    _refresh_timer: Timer | None
    _leaving: asyncio.Future[None] | None

    def action_quit(self) -> None:  # type: ignore[override]
        self._leave(0, None)

    def get_driver_class(self) -> type[Driver]:
        base = super().get_driver_class()
        return with_quit_deadline(base) if self.handle_signals else base

    def quit_key_pressed(self, key: str) -> None:
        """From the input thread, before the loop sees the key: q arms the exit deadline at once."""
        if self.exit_guard is not None and key == self.key_plan.key_of("quit") and not typing_text(self):
            self.exit_guard.arm(0, "quit")

    def _signal_received(self, sig: int) -> None:
        """From the signal handler (any moment, main thread): hand the exit to the loop."""
        self.exit_signal = sig
        if sig == signal.SIGHUP and self.exit_guard is not None:
            # the terminal is usually gone, and the loop may already be stuck writing to it: leave
            # at once. The kernel closes our connections as we exit (the hosts' watchdogs end the
            # streams); our local children are killed first. The terminal's modes are put back on
            # the way (best effort, bounded: a dead terminal refuses at once), for a SIGHUP sent
            # while it lives (``kill -HUP``) must not leave it in the alternate screen, mouse on.
            self.exit_guard.force_exit(f"{signal_name(sig)} received: the terminal hung up or was told to; "
                                       "closing every connection and leaving")
        if self._console_loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                self._console_loop.call_soon_threadsafe(
                    self._leave, 128 + sig, f"{signal_name(sig)} received; stopping the monitors and leaving")

    def _leave(self, code: int, message: str | None) -> None:
        """Stop the monitors and the app together; the guard's deadline bounds the whole exit."""
        if self._stopping is not None:
            return
        if self.exit_guard is not None:
            self.exit_guard.arm(code, message or "quit")
        if message:
            self.events.emit(message, level="warning")
        if self._refresh_timer is not None:  # no more redraws: the loop now serves the exit
            self._refresh_timer.stop()
        self._stopping = asyncio.ensure_future(self._stop_fleet())
        if self.leave_process:
            self._leaving = asyncio.ensure_future(self._leave_process(code))
        else:
            self.exit(code)

    async def _leave_process(self, code: int) -> None:
        """The ``specconsole`` command's way out: the monitors stopped (bounded), the terminal
        restored as Textual's own exit does, our children gone, then the process ends at once,
        without tearing down every widget and object one by one (seconds at many hosts)."""
        assert self._stopping is not None
        await asyncio.wait([self._stopping], timeout=STOP_TIMEOUT_S + 0.3)
        driver = self._driver
        if driver is not None and self.exit_signal != signal.SIGHUP:  # after SIGHUP no terminal is left
            with contextlib.suppress(Exception):
                driver.stop_application_mode()  # input thread stopped, modes and screen restored
                driver.close()  # the output thread has written everything
        kill_children(self.exit_guard.spare if self.exit_guard else frozenset())
        for stream in (sys.__stdout__, sys.__stderr__):
            with contextlib.suppress(Exception):
                stream.flush()  # type: ignore[union-attr]
        os._exit(code)

    async def _stop_fleet(self) -> None:
        try:
            await self.fleet.stop()
        except Exception as err:  # leaving must not fail
            self.events.record(f"stopping the monitors failed: {err!r}", level="error")

    def _restore_terminal(self) -> None:
        """Best effort before a forced exit: the terminal's modes as they were (never blocks long)."""
        driver = self._driver
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
