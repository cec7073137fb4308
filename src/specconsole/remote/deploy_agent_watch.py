"""How the deploy agent watches the service come up: standard library only.

Part of the host agent (:mod:`specconsole.remote.deploy_agent`): the console uploads this file
next to ``agent.py`` in the deploy's work folder, and the agent imports it from there. It holds
the waiting tools: an HTTP request with a *total* deadline, a thread that polls a function, and
:class:`UnitWatch`, which follows a restarting unit's journal and state and says when its new
main process died.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import queue
import re
import socket
import subprocess
import threading
import time
from typing import Any
from urllib.parse import urlsplit

#: systemd's journal lines for a service whose main process died (and is being restarted)
CRASH_LINE = re.compile(r"Main process exited, code=(?:exited, status=(?!0/)|dumped"
                        r"|killed, status=(?!15/TERM|2/INT|1/HUP|13/PIPE))"
                        r"|Failed with result|Scheduled restart job|Start request repeated too quickly")


def http_request(url: str, body: dict[str, Any] | None = None, timeout: float = 5.0) -> tuple[int, str]:
    """One HTTP request with a *total* deadline of ``timeout`` seconds (connect, headers and
    body together: a server dripping a byte a second is cut off). ``(status, text)``, or
    ``(0, "no answer (...)")``."""
    u = urlsplit(url)
    cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    try:
        conn = cls(u.hostname or "127.0.0.1", u.port, timeout=timeout)
    except (ValueError, OSError) as err:
        return 0, f"no answer ({err})"
    data = json.dumps(body).encode() if body is not None else None
    path = (u.path or "/") + (f"?{u.query}" if u.query else "")
    out: list[tuple[int, str]] = []

    def work() -> None:
        try:
            conn.request("POST" if data is not None else "GET", path, body=data,
                         headers={"Content-Type": "application/json"} if data is not None else {})
            r = conn.getresponse()
            out.append((r.status, r.read().decode("utf-8", "replace")))
        except Exception as err:
            out.append((0, f"no answer ({err or type(err).__name__})"))

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():  # still connecting or reading: cut it off
        with contextlib.suppress(OSError, AttributeError):
            conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        worker.join(1)
        return 0, f"no answer (no complete response within the {timeout:g}s deadline)"
    conn.close()
    return out[0] if out else (0, "no answer")


class Poller:
    """Runs ``fn`` over and over in a thread; :meth:`result` returns the latest answer."""

    def __init__(self, fn: Any, pause: float = 0.25) -> None:
        self.fn, self.pause = fn, pause
        self.answers: queue.Queue[Any] = queue.Queue()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stopping.is_set():
            self.answers.put(self.fn())
            self.stopping.wait(self.pause)

    def result(self, wait: float) -> Any:
        latest = None
        with contextlib.suppress(queue.Empty):
            latest = self.answers.get(timeout=wait)
            while True:
                latest = self.answers.get_nowait()
        return latest

    def stop(self) -> None:
        self.stopping.set()


def cursor_command(unit: str) -> list[str]:
    """The command that prints the journal's cursor after ``unit``'s latest line."""
    return ["journalctl", "-u", unit, "-n", "1", "--show-cursor", "--no-pager", "-o", "cat"]


def journal_cursor(unit: str) -> tuple[int | None, str | None]:
    """:func:`cursor_command`'s exit status (None: it did not run) and the cursor it printed (or None)."""
    try:
        res = subprocess.run(cursor_command(unit), capture_output=True, text=True, errors="replace", timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None, None
    for line in reversed(res.stdout.splitlines()):
        if line.startswith("-- cursor: "):
            return res.returncode, line[len("-- cursor: "):].strip() or None
    return res.returncode, None


class UnitWatch:
    """Follows a unit while it restarts: its journal (``journalctl -f``) and its state
    (``systemctl show``: ActiveState, SubState, MainPID, NRestarts), each in a thread, so
    heartbeats never wait on them. :meth:`crashed` says whether the new main process died."""

    PROPS = ("ActiveState", "SubState", "MainPID", "NRestarts")

    def __init__(self, unit: str, cursor: str | None = None) -> None:
        self.unit = unit
        self.cursor = cursor  # the journal follows from here (journal_cursor); None: new lines only
        self.lines: queue.Queue[str] = queue.Queue()
        self.last_line = ""
        self.state: dict[str, str] = {}
        self.crash_lines: list[str] = []
        self.after_restart = False
        self.restarted_at = 0.0
        self.base: dict[str, str] = {}
        self.proc: subprocess.Popen[str] | None = None
        self.poller: Poller | None = None

    def __enter__(self) -> UnitWatch:
        # from the cursor taken before, not from whenever the follower gets going: a restart that
        # stops the service at once must not lose its first lines ("Shutting down") to that race
        start = [f"--after-cursor={self.cursor}"] if self.cursor else ["-n", "0"]
        with contextlib.suppress(OSError):
            self.proc = subprocess.Popen(["journalctl", "-u", self.unit, "-f", *start, "--no-pager"],
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                         stdin=subprocess.DEVNULL, text=True, errors="replace")
            threading.Thread(target=self._read, daemon=True).start()
        self.poller = Poller(self._show, pause=0.2)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.poller:
            self.poller.stop()
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(2)

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip():
                self.lines.put(line.rstrip("\n"))

    def _show(self) -> tuple[float, dict[str, str]]:
        asked = time.monotonic()
        with contextlib.suppress(Exception):
            res = subprocess.run(["systemctl", "show", *(f"--property={p}" for p in self.PROPS), "--", self.unit],
                                 capture_output=True, text=True, timeout=10)
            return asked, dict(ln.split("=", 1) for ln in res.stdout.splitlines() if "=" in ln)
        return asked, {}

    def _refresh(self) -> None:
        got = self.poller.result(0) if self.poller is not None else None
        if not got or not got[1]:
            return
        asked, state = got
        if self.after_restart and asked < self.restarted_at:
            return  # asked before the restart returned: says nothing about the new process
        self.state = state
        if self.after_restart and not self.base and state.get("MainPID", "0") not in ("", "0"):
            self.base = dict(state)

    def journal_lines(self) -> list[str]:
        out: list[str] = []
        with contextlib.suppress(queue.Empty):
            while True:
                line = self.lines.get_nowait()
                out.append(line)
                self.last_line = line
                if self.after_restart and CRASH_LINE.search(line):
                    self.crash_lines.append(line)
        return out

    def restarted(self) -> None:
        """The restart command returned: from now on a dying main process is a crash."""
        self.after_restart = True
        self.restarted_at = time.monotonic()
        self.base = {}
        self.state = {}   # what was seen while it restarted says nothing about the new process

    def crashed(self) -> str | None:
        self._refresh()
        if self.crash_lines:
            return f"journal: {self.crash_lines[0][-120:]}"
        s, b = self.state, self.base
        if not self.after_restart or not s:
            return None
        if s.get("ActiveState") in ("failed", "inactive") or s.get("SubState") in ("auto-restart", "failed"):
            return f"the unit is {s.get('ActiveState')}/{s.get('SubState') or '?'}"
        if not b:
            return None
        if s.get("NRestarts", "").isdigit() and b.get("NRestarts", "").isdigit() \
                and int(s["NRestarts"]) > int(b["NRestarts"]):
            return f"NRestarts rose from {b['NRestarts']} to {s['NRestarts']}"
        if s.get("MainPID") != b.get("MainPID"):
            return f"the main PID changed from {b.get('MainPID')} to {s.get('MainPID') or 0}"
        return None

    def describe(self) -> str:
        self._refresh()
        s = self.state
        state = f"{s.get('ActiveState', '?')}/{s.get('SubState') or '?'}" if s else "state unknown"
        pid = f", main PID {s['MainPID']}" if s.get("MainPID") not in (None, "", "0") else ""
        last = self.last_line[-100:] if self.last_line else "(no journal line yet)"
        return f"service {state}{pid}; journal: {last}"
