"""Processes on this machine, read from ``/proc``: start time, children, process trees (whether one runs:
``specconsole.base.pids.alive``); and the lab's daemons: started in their own session and reaped, signalled, waited for.

The lab uses these to stop exactly what it started; tests and bench scripts use them to check
that nothing was left behind.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from specconsole.base.pids import alive


class _SshdHost(Protocol):
    @property
    def sshd_pid(self) -> int | None: ...


class _Hosts(Protocol):
    @property
    def hosts(self) -> Mapping[str, _SshdHost]: ...


class WithSshds(Protocol):
    """What :func:`sessions` reads of a lab (a ``Lab``): its hosts' sshd pids."""

    @property
    def state(self) -> _Hosts: ...


def stat_fields(pid: int) -> list[str] | None:
    """``/proc/PID/stat`` after the command name (field 3, the state, first), or None when gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> int | None:
    """A process's start time in clock ticks after boot (``/proc/PID/stat`` field 22), or None."""
    fields = stat_fields(pid)
    try:
        return int(fields[19]) if fields is not None else None
    except (IndexError, ValueError):
        return None


def children_map() -> dict[int, list[int]]:
    """Every process's children, by parent pid (one pass over ``/proc``)."""
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        fields = stat_fields(int(d.name))
        with contextlib.suppress(IndexError, ValueError, TypeError):
            kids.setdefault(int(fields[1]), []).append(int(d.name))  # type: ignore[index]
    return kids


def children(pid: int) -> list[int]:
    """The direct children of ``pid``."""
    return children_map().get(pid, [])


def descendants(*pids: int) -> list[int]:
    """Every process below ``pids`` (children, their children, ...), parents before children."""
    kids = children_map()
    out: list[int] = []
    todo = list(pids)
    while todo:
        for child in kids.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def sessions(lab: WithSshds) -> list[int]:
    """Live processes under the lab's sshds: a session per connection and each stream's commands."""
    sshds = [h.sshd_pid for h in lab.state.hosts.values() if h.sshd_pid]
    return [pid for pid in descendants(*sshds) if alive(pid)]


def with_environ(needle: bytes) -> list[int]:
    """Live processes whose environment contains ``needle`` (e.g. ``b"MARK=run-42"``)."""
    found: list[int] = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError):
                if needle in (d / "environ").read_bytes() and alive(int(d.name)):
                    found.append(int(d.name))
    return found


def spawn(argv: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
    """Start a lab daemon in its own session and reap it when it exits, so that a long-lived
    parent (``specconsole demo``, a test run) never keeps it as ``<defunct>``."""
    proc = subprocess.Popen(argv, start_new_session=True, **kwargs)  # type: ignore[call-overload]
    threading.Thread(target=proc.wait, name=f"reap-{proc.pid}", daemon=True).start()
    return proc  # type: ignore[no-any-return]


def send_signal(pid: int, sig: int) -> None:
    """``os.kill``, quiet when the process is gone or not ours to signal."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def wait_dead(pids: list[int], timeout: float) -> bool:
    """Whether every one of ``pids`` has ended within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return not any(alive(p) for p in pids)
