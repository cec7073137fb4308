"""Leaving promptly, whatever state the process is in.

The console and ``status --watch`` stop on SIGHUP (the terminal went away), SIGTERM, SIGINT and
``q`` within :data:`EXIT_DEADLINE_S`, leaving nothing behind:

- :class:`ExitGuard` installs plain ``signal.signal`` handlers. They run in the main thread
  between two bytecodes even while the event loop is busy or blocked (a full terminal-output
  queue after the pty died, a long layout), unlike ``loop.add_signal_handler`` callbacks,
  which wait for the loop. The handler only hands the signal to the loop and arms the deadline.
- The orderly exit (stop the monitors, restore the terminal) runs on the loop, bounded.
- Once armed, the deadline is a ``SIGALRM`` timer: its handler runs in the main thread, which
  already holds the GIL, so it fires on time even when that thread is busy (a daemon thread is
  the backup, should the main thread be stuck in C code). If the process is still there it kills
  our child processes, notes why in the audit log and ``os._exit``\\ s; should even that be
  held up (the interpreter stuck in C with the GIL), faulthandler's watchdog thread, which runs
  without the GIL, ends the process shortly after. Local children are killed as soon as the exit
  is requested (they are read-only streams), so no path leaves them behind. Remote streams need
  nothing: the kernel closes our sockets, sshd closes the channels, and each stream's stdin
  watchdog ends its command.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

#: From the exit request until the process is gone, at most (the bar is 2 s).
EXIT_DEADLINE_S = 1.5
#: The orderly part's share: closing every host's connection and its streams. Issue 13's bar for
#: ``q`` is 1 s at 200 hosts, where closing 200 connections politely takes about that long on
#: 2 cores: what has not closed by then is aborted (the hosts' stdin watchdogs still end the
#: remote commands when the connection drops).
STOP_TIMEOUT_S = 0.5
#: The backup deadline thread fires this much after the main thread's SIGALRM would have.
BACKUP_AFTER_S = 0.3
#: And faulthandler's C watchdog (no GIL needed: a long GC or C call cannot hold it up) ends the
#: process this much after the deadline, whatever state it is in (exit status 1).
HARD_AFTER_S = 0.45
#: A forced exit that has clean-up to do (the demo stopping its lab) gets this long for it.
CLEANUP_LIMIT_S = 30.0

SIGNALS = (signal.SIGHUP, signal.SIGTERM, signal.SIGINT)


def signal_name(sig: int) -> str:
    return signal.Signals(sig).name


def child_pids() -> list[int]:
    """Our direct children that have not been reaped (so their pids cannot be reused)."""
    tasks = Path("/proc/self/task")
    with contextlib.suppress(OSError, ValueError):  # one small file per thread, when the kernel has them
        return sorted({int(pid) for t in tasks.iterdir() for pid in (t / "children").read_text().split()})
    me = os.getpid()
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == me:
                out.append(int(d.name))
    return out


def kill_children(spare: frozenset[int] = frozenset()) -> int:
    """SIGKILL every child process but ``spare`` and, for a child that leads its own process
    group (local streams start in a new session), that whole group. Returns how many."""
    kids = [pid for pid in child_pids() if pid not in spare]
    for pid in kids:
        with contextlib.suppress(OSError):
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
                continue
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return len(kids)


class ExitGuard:
    """Signal handlers that request an exit, and a hard deadline once an exit was requested.

    ``on_signal(sig)`` is called from the signal handler (main thread, any moment): it must only
    schedule work (``loop.call_soon_threadsafe``). Before a forced exit, from the deadline thread
    (the loop may be stuck), best effort and in this order: ``restore()`` undoes terminal
    changes, ``note(message)`` writes one audit line (no subscribers), ``cleanup()`` stops what
    the caller started (the demo's lab). :meth:`disarm` once the guarded part is over.
    """

    def __init__(self, *, deadline_s: float = EXIT_DEADLINE_S, note: Callable[[str], object] | None = None,
                 restore: Callable[[], None] | None = None, cleanup: Callable[[], None] | None = None) -> None:
        self.deadline_s = deadline_s
        self.note = note
        self.restore = restore
        self.cleanup = cleanup
        self.on_signal: Callable[[int], object] | None = None
        self.signal: int | None = None
        self.reason: str | None = None
        self.code = 0
        self.armed_at: float | None = None
        self._state = "idle"  # -> armed -> disarmed | forcing
        self._lock = threading.RLock()  # the signal handler may interrupt the main thread holding it
        self._previous: dict[int, object] = {}
        self._devnull: TextIO | None = None
        #: children that were there before (the demo's lab): a forced exit leaves them to ``cleanup``
        self.spare: frozenset[int] = frozenset()
        #: the children to spare, when taken before the guard's install: the console's hosts start
        #: before it (ui/console/start.py), and their local streams are not the demo's to stop
        self.spare_before: frozenset[int] | None = None

    # -- signals -------------------------------------------------------------------------------
    def install(self, on_signal: Callable[[int], object] | None = None) -> ExitGuard:
        self.on_signal = on_signal
        self.spare = frozenset(child_pids()) if self.spare_before is None else self.spare_before
        for sig in SIGNALS:
            with contextlib.suppress(ValueError, OSError):  # not the main thread: nothing to do
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def uninstall(self) -> None:
        for sig, previous in self._previous.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(sig, previous)  # type: ignore[arg-type]
        self._previous.clear()

    def _handle(self, sig: int, _frame: object) -> None:
        first = self.signal is None
        if first:
            self.signal = sig
        self.arm(128 + sig, f"{signal_name(sig)} received")
        if first and self.on_signal is not None:
            self.on_signal(sig)

    # -- the deadline --------------------------------------------------------------------------
    def arm(self, code: int, reason: str) -> None:
        """Start the deadline (once; later calls keep the first code and reason)."""
        with self._lock:
            if self._state != "idle":
                return
            self._state = "armed"
            self.armed_at = time.monotonic()
            self.code, self.reason = code, reason
        with contextlib.suppress(Exception):
            kill_children(self.spare)
        if threading.current_thread() is threading.main_thread():
            with contextlib.suppress(ValueError, OSError):
                signal.signal(signal.SIGALRM, self._alarm)
                signal.setitimer(signal.ITIMER_REAL, self.deadline_s)
        threading.Thread(target=self._deadline, name="specconsole-exit-deadline", daemon=True).start()
        with contextlib.suppress(Exception):
            self._devnull = open(os.devnull, "w")  # noqa: SIM115 - held until the process ends
            faulthandler.dump_traceback_later(self.deadline_s + HARD_AFTER_S, exit=True, file=self._devnull)

    def disarm(self) -> bool:
        """The guarded part finished in time: no forced exit (False if it is already under way)."""
        with self._lock:
            if self._state == "forcing":
                return False
            self._state = "disarmed"
        if threading.current_thread() is threading.main_thread():
            with contextlib.suppress(ValueError, OSError):
                signal.setitimer(signal.ITIMER_REAL, 0)
        if self._devnull is not None:
            faulthandler.cancel_dump_traceback_later()
        return True

    def finished(self) -> None:
        """The orderly part is done and the process is about to end: stop the SIGALRM timer,
        which would otherwise fire during interpreter teardown, after Python has put back the
        default action (the process then dies of SIGALRM, status -14, instead of 128 + signal).
        The backup thread and faulthandler stay armed until the process is gone."""
        if threading.current_thread() is threading.main_thread():
            with contextlib.suppress(ValueError, OSError):
                signal.setitimer(signal.ITIMER_REAL, 0)

    def _alarm(self, _sig: int, _frame: object) -> None:
        self._fire()

    def _deadline(self) -> None:
        assert self.armed_at is not None
        time.sleep(max(0.0, self.armed_at + self.deadline_s + BACKUP_AFTER_S - time.monotonic()))
        self._fire()

    def _fire(self) -> None:
        with self._lock:
            if self._state != "armed":
                return
            self._state = "forcing"
        self.force_exit()

    def force_exit(self, why: str | None = None, *, restore: bool = True) -> None:
        """Kill our children, restore the terminal, note ``why``, clean up, ``os._exit``: the
        deadline's last resort, and the whole exit when there is nothing to stop in order."""
        with self._lock:
            self._state = "forcing"
        why = why or (f"{self.reason or 'exit requested'}; not finished stopping after "
                      f"{self.deadline_s:g} s: leaving now")
        with contextlib.suppress(Exception):
            kill_children(self.spare)
        if restore and self.restore is not None:
            with contextlib.suppress(Exception):
                self.restore()
        if self.note is not None:
            with contextlib.suppress(Exception):
                self.note(why)
        if self.cleanup is not None:
            with contextlib.suppress(Exception):  # the demo stopping its lab takes a few seconds:
                faulthandler.cancel_dump_traceback_later()  # the hard stop must not cut it short
                out = self._devnull if self._devnull is not None else 2
                faulthandler.dump_traceback_later(CLEANUP_LIMIT_S, exit=True, file=out)
            with contextlib.suppress(Exception):
                self.cleanup()
        os._exit(self.code)
