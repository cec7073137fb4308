"""Step events: how every action says what it is doing.

An action is plain async code that reports through a :class:`Steps`: each step starts with a
line, each remote command is shown exactly as run with its exit status, first output line and
elapsed time, and every wait longer than a second emits heartbeats saying what it waits for
and what it last saw. The CLI prints the events; the TUI shows them in its events pane; both
append them to the audit log through :class:`~specconsole.base.events.EventLog`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from specconsole.base.errors import HostUnavailable, SpecConsoleError
from specconsole.base.events import EventLog
from specconsole.hosts import CommandResult, Host
from specconsole.hosts.commands import Command, to_shell
from specconsole.sglang.acceptance import AcceptanceDetail

T = TypeVar("T")

Kind = Literal["step", "command", "result", "heartbeat", "info", "warning", "error", "done", "failed",
               "wait", "waited"]

#: During any wait a heartbeat follows this long after the last event: the promise is one status
#: line at least every second, and the margin absorbs a busy event loop.
#: Console-side wait loops (reconnect, progress queue) wake up this often to heartbeat, too.
HEARTBEAT_S = 0.5


@dataclass(frozen=True, slots=True)
class StepEvent:
    action: str
    kind: Kind
    message: str
    step: str = ""
    host: str = ""
    command: str | None = None
    exit_status: int | None = None
    elapsed_s: float = 0.0     # since the action started
    took_s: float | None = None  # this step or command's own duration
    at: float = field(default_factory=time.time)
    #: per-request acceptance detail the event's figures came from, a labelled series each (the
    #: smoke test's; the gate's new config beside the fleet's): the console and the CLI plot it
    acceptance: tuple[tuple[str, AcceptanceDetail], ...] = ()

    def line(self) -> str:
        """One printable line, e.g. ``[  1.2s] serve: restart: $ systemctl restart sglang``."""
        where = f"{self.host}: " if self.host else ""
        step = f"{self.step}: " if self.step and self.kind not in ("step",) else ""
        mark = {"command": "$ ", "heartbeat": "… ", "warning": "! ", "error": "✗ ", "failed": "✗ ",
                "done": "✓ ", "wait": "· ", "waited": "· "}.get(self.kind, "")
        took = f" ({self.took_s:.2f}s)" if self.took_s is not None and self.kind not in ("result", "wait", "waited") \
            else ""
        return f"[{self.elapsed_s:6.1f}s] {where}{step}{mark}{self.message}{took}"


Emit = Callable[[StepEvent], None]


class Steps:
    """The reporter an action writes to. ``emit`` receives every :class:`StepEvent`."""

    def __init__(self, action: str, emit: Emit, host: str = "") -> None:
        self.action = action
        self.emit_fn = emit
        self.host = host
        self.t0 = time.monotonic()
        self.step = ""
        self._step_t0 = self.t0
        self._last_at = self.t0  # when the last event was emitted (monotonic)
        self._waiting: tuple[str, float] | None = None  # (for what, since when): the operator's turn
        self.events: list[StepEvent] = []

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def emit(self, kind: Kind, message: str, **extra: object) -> StepEvent:
        event = StepEvent(self.action, kind, message, step=self.step, host=str(extra.pop("host", self.host)),
                          elapsed_s=self.elapsed(), **extra)  # type: ignore[arg-type]
        self._last_at = time.monotonic()
        self.events.append(event)
        self.emit_fn(event)
        return event

    def begin(self, step: str, message: str | None = None) -> None:
        """Start a named step (closes the previous one's timing, or the operator's turn)."""
        self.resume()
        self.step = step
        self._step_t0 = time.monotonic()
        self.emit("step", message or step)

    def step_took(self) -> float:
        return time.monotonic() - self._step_t0

    @property
    def waiting(self) -> bool:
        """A dialog is waiting for the operator (between :meth:`hand_over` and :meth:`resume`)."""
        return self._waiting is not None

    def hand_over(self, what: str) -> None:
        """The host's part is done and a dialog now waits for the operator (``what``: ``your
        confirmation``). Closes the current step, so that no step's time counts the operator's
        reading time: the ``wait`` event ends it (its ``took_s`` is that step's own time). The wait
        ends at the next :meth:`begin`, :meth:`resume`, :meth:`done` or :meth:`failed`, which says
        how long it was (a ``waited`` event). A second call while waiting changes nothing."""
        if self._waiting is not None:
            return
        took = self.step_took() if self.step else None
        self.step = ""
        self._waiting = (what, time.monotonic())
        self.emit("wait", f"waiting for {what}", took_s=took)

    def resume(self) -> float | None:
        """End the operator's turn (if one is open): a ``waited`` event with how long it took."""
        if self._waiting is None:
            return None
        what, since = self._waiting
        self._waiting = None
        waited = time.monotonic() - since
        self.emit("waited", f"waited {waited:.1f} s for {what}", took_s=waited)
        return waited

    def info(self, message: str) -> None:
        self.emit("info", message)

    def warn(self, message: str) -> None:
        self.emit("warning", message)

    def error(self, message: str) -> None:
        self.emit("error", message)

    def done(self, message: str) -> None:
        self.resume()
        self.emit("done", message, took_s=self.elapsed())

    def failed(self, message: str) -> None:
        self.resume()
        self.emit("failed", message, took_s=self.elapsed())

    async def run(self, host: Host, cmd: Command, *, timeout: float = 30.0, input: str | None = None,
                  summary: Callable[[CommandResult], str] | None = None) -> CommandResult:
        """Run ``cmd`` on ``host``, reporting the exact command line, its outcome and duration.

        A command that takes longer than a second gets heartbeats while it runs. A command
        whose exit status never arrived (the connection dropped) is reported as such.
        """
        line = to_shell(cmd)
        self.emit("command", line, command=line, host=host.name)
        task = asyncio.ensure_future(host.run(cmd, timeout=timeout, input=input))
        started = time.monotonic()
        await self._beat_while(task, lambda: f"waiting for `{shorten(line)}` on {host.name}", started)
        try:
            res = task.result()
        except HostUnavailable as err:
            self.emit("result", f"exit status unknown: {str(err).splitlines()[0] if str(err) else 'connection lost'}",
                      command=line, took_s=time.monotonic() - started, host=host.name)
            raise
        if res.exit_status is None:
            self.emit("result", f"exit status unknown: the connection to {host.name} dropped before "
                      f"`{shorten(line)}` reported one (it may or may not have run)",
                      command=line, took_s=res.elapsed_s, host=host.name)
            return res
        text = summary(res) if summary else _first_line(res)
        self.emit("result", f"exit {res.exit_status} in {res.elapsed_s:.2f}s{': ' + text if text else ''}",
                  command=line, exit_status=res.exit_status, took_s=res.elapsed_s, host=host.name)
        return res

    async def _beat_while(self, task: asyncio.Future[T], what: Callable[[], str], started: float) -> None:
        """Wait for ``task``; whenever :data:`HEARTBEAT_S` passes without an event, say ``what()``."""
        while not task.done():
            due = self._last_at + HEARTBEAT_S
            await asyncio.wait({task}, timeout=max(0.0, due - time.monotonic()))
            if not task.done() and time.monotonic() >= self._last_at + HEARTBEAT_S:
                self.emit("heartbeat", f"{what()} ({time.monotonic() - started:.1f}s)")

    async def watch(self, awaitable: Awaitable[T], what: str) -> T:
        """Await anything (a connect, a local wait) with heartbeats saying ``what``."""
        task = asyncio.ensure_future(awaitable)
        await self._beat_while(task, lambda: what, time.monotonic())
        return task.result()

    async def wait_for(self, what: str, probe: Callable[[], Awaitable[tuple[bool, str]]], *,
                       timeout: float, every: float = 1.0) -> bool:
        """Poll ``probe`` until it reports done or ``timeout`` passes, with heartbeats.

        ``probe`` returns ``(done, seen)``; ``seen`` is what the heartbeat says it last saw. The
        heartbeats keep coming while a probe itself is slow.
        """
        started = time.monotonic()
        seen = ""

        def beat() -> str:
            return f"waiting for {what} (up to {timeout:g}s): {seen or 'checking'}"

        while True:
            task = asyncio.ensure_future(probe())
            await self._beat_while(task, beat, started)
            done, seen = task.result()
            if done:
                return True
            waited = time.monotonic() - started
            if waited >= timeout:
                return False
            pause = asyncio.ensure_future(asyncio.sleep(min(every, max(0.05, timeout - waited))))
            await self._beat_while(pause, beat, started)


class AuditRefused(SpecConsoleError):
    """A kill or deploy refused because its audit record cannot be written (fail closed)."""

    exit_code = 3


def require_audit(events: EventLog, what: str, *, allow_unaudited: bool) -> str | None:
    """Before an action changes a host: raise :class:`AuditRefused` when ``events`` cannot write
    its audit record, unless ``allow_unaudited`` (``--no-audit``); then return the problem (to
    say that the action runs without a record), else ``None``."""
    problem = events.check_audit()
    if problem is None or allow_unaudited:
        return problem
    raise AuditRefused(f"{what}: refused: {problem}, so there would be no record of it; nothing on any host "
                       f"was touched (fix: set console.audit_log to a writable file, or pass --no-audit "
                       f"to act without a record)")


def audit(events: EventLog, also: Emit | None = None) -> Emit:
    """An ``emit`` that records each step event in the event log (pane + audit file)."""

    def emit(event: StepEvent) -> None:
        level = {"failed": "error", "error": "error", "warning": "warning"}.get(event.kind, "step")
        events.emit(event.message if event.kind != "command" else f"$ {event.message}",
                    event.host or event.action, level,  # type: ignore[arg-type]
                    action=event.action, kind=event.kind, step=event.step, command=event.command,
                    exit_status=event.exit_status, elapsed_s=round(event.elapsed_s, 3), took_s=event.took_s,
                    **({"acceptance": [{"label": label, **d.to_json()} for label, d in event.acceptance]}
                       if event.acceptance else {}))
        if also is not None:
            also(event)

    return emit


def shorten(line: str, width: int = 60) -> str:
    """``line`` cut to ``width`` characters, ending in … when cut."""
    return line if len(line) <= width else line[: width - 1] + "…"


def _first_line(res: CommandResult) -> str:
    text = (res.stdout.strip() or res.stderr.strip()).splitlines()
    if not text:
        return ""
    more = f" (+{len(text) - 1} lines)" if len(text) > 1 else ""
    return shorten(text[0], 100) + more
