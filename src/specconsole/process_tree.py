"""The training job's process tree on a host: the process table, how the job's launchers are
found (pid file, systemd unit, pattern), their descendants.

Shared by the kill (:mod:`specconsole.actions.kill.training`) and the training source's running/stopped
check (:mod:`specconsole.sources.job`), so it sits below both.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shlex
from dataclasses import dataclass

from specconsole.base.errors import SpecConsoleError
from specconsole.config import KillConfig
from specconsole.hosts import CommandResult, Host
from specconsole.steps import Steps, shorten

PS_ARGV = ["ps", "-eww", "-o", "pid=,ppid=,pgid=,stat=,args="]


class KillError(SpecConsoleError):
    """The job could not be found or stopped; the message names pids and the fix."""


@dataclass(frozen=True, slots=True)
class Proc:
    pid: int
    ppid: int
    pgid: int
    stat: str
    args: str

    @property
    def zombie(self) -> bool:
        return self.stat.startswith("Z")



def parse_ps(text: str) -> dict[int, Proc]:
    procs: dict[int, Proc] = {}
    for line in text.splitlines():
        parts = line.split(None, 4)
        if len(parts) < 4 or not all(p.isdigit() for p in parts[:3]):
            continue
        pid, ppid, pgid = (int(x) for x in parts[:3])
        procs[pid] = Proc(pid, ppid, pgid, parts[3], parts[4] if len(parts) > 4 else "")
    return procs


def descendants(procs: dict[int, Proc], roots: list[int]) -> list[Proc]:
    kids: dict[int, list[int]] = {}
    for p in procs.values():
        kids.setdefault(p.ppid, []).append(p.pid)
    out, todo, seen = [], list(roots), set(roots)
    while todo:
        for child in kids.get(todo.pop(), []):
            if child not in seen:
                seen.add(child)
                out.append(procs[child])
                todo.append(child)
    return out


async def process_table(host: Host, steps: Steps) -> dict[int, Proc]:
    res = await steps.run(host, PS_ARGV, summary=lambda r: f"{len(r.stdout.splitlines())} processes")
    res.check(host.name)
    return parse_ps(res.stdout)


async def locate(host: Host, kill: KillConfig, steps: Steps, *,
                 together: bool = False) -> tuple[dict[int, Proc], list[int], str, str, str]:
    """The process table and the job's launcher pids, found as configured (the finder the kill
    and the training source's running/stopped check share): ``(procs, launchers, found_by,
    note, refused)``. ``together``: the pid file is read while the process table is, one round
    trip fewer (the training source's check, whose steps nobody reads one after the other; the
    kill's steps stay one at a time)."""
    pid_read: CommandResult | None = None
    if together and kill.pid_file:
        read = asyncio.ensure_future(steps.run(host, ["cat", "--", kill.pid_file]))
        try:
            procs = await process_table(host, steps)
        except BaseException:
            read.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await read
            raise
        pid_read = await read
    else:
        procs = await process_table(host, steps)
    launchers, found_by, note, refused = await _launchers(host, kill, procs, steps, pid_read)
    return procs, [p for p in launchers if p in procs and not procs[p].zombie], found_by, note, refused


async def _launchers(host: Host, kill: KillConfig, procs: dict[int, Proc], steps: Steps,
                     pid_read: CommandResult | None = None) -> tuple[list[int], str, str, str]:
    """(launcher pids, how they were found, why none were, why the pid file's pid was refused);
    ``pid_read``: the pid file as already read (``cat``), else it is read here."""
    refused = ""
    if kill.pid_file:
        res = pid_read if pid_read is not None else await steps.run(host, ["cat", "--", kill.pid_file])
        if res.ok and res.stdout.strip().isdigit():
            pid = int(res.stdout.strip())
            if pid in procs:
                refused = await _pid_file_mismatch(host, kill, procs[pid], steps)
                if not refused:
                    return [pid], f"pid file {kill.pid_file}", "", ""
                note = refused
            else:
                note = f"pid file {kill.pid_file} names pid {pid}, which is not running"
        else:
            note = f"pid file {kill.pid_file} {'is empty or not a pid' if res.ok else 'does not exist'}"
        if not kill.systemd_unit and not kill.pattern:
            return [], f"pid file {kill.pid_file}", note, refused
        steps.info(note + "; looking with the next method")
    first_note = note if kill.pid_file else ""
    if kill.systemd_unit:
        res = await steps.run(host, ["systemctl", "show", "-p", "MainPID", "--value", "--", kill.systemd_unit])
        pid = int(res.stdout.strip()) if res.ok and res.stdout.strip().isdigit() else 0
        if pid and pid in procs:
            return [pid], f"systemd unit {kill.systemd_unit}", first_note, ""
        note = f"unit {kill.systemd_unit} has no running MainPID"
        if not kill.pattern:
            return [], f"systemd unit {kill.systemd_unit}", first_note or note, refused
        first_note = first_note or note
        steps.info(note + "; looking with the next method")
    if not kill.pattern:
        raise KillError("no way to find the job: set training.kill.pid_file, systemd_unit or pattern")
    rx = re.compile(kill.pattern)
    ps_line = shlex.join(PS_ARGV)
    matching = {p.pid for p in procs.values() if rx.search(p.args) and ps_line not in p.args}
    roots = [pid for pid in sorted(matching) if procs[pid].ppid not in matching]
    if roots:
        return roots, f"pattern {kill.pattern!r}", first_note, ""
    return roots, f"pattern {kill.pattern!r}", first_note or f"no process matches {kill.pattern!r}", refused


#: A launcher's command line, when no pattern is configured: torchrun or its module forms.
TORCHRUN = re.compile(r"(^|[/\s])torchrun(\s|$)|torch\.distributed\.(run|launch)(\s|$)")
#: Seconds of slack between the pid file's mtime and the process's start (both whole seconds).
START_SLACK_S = 2


async def _pid_file_mismatch(host: Host, kill: KillConfig, proc: Proc, steps: Steps) -> str:
    """Why the pid file's process is not the job (a reused pid), or "" when it is.

    The process must look like the job (torchrun, or the configured pattern) and must not have
    started after the pid file was last written.
    """
    where = f"pid file {kill.pid_file} names pid {proc.pid} ({shorten(proc.args, 50)})"
    looks_like_job = bool(TORCHRUN.search(proc.args)) or bool(kill.pattern and re.search(kill.pattern, proc.args))
    if not looks_like_job:
        wanted = "torchrun" + (f" or {kill.pattern!r}" if kill.pattern else "")
        return f"{where}, which does not match {wanted}: a reused pid? not killing it"
    res = await steps.run(host, ["sh", "-c", 'date +%s; stat -c %Y -- "$1"; ps -o etimes= -p "$2"',
                                 "sh", str(kill.pid_file), str(proc.pid)])
    values = res.stdout.split()
    if not res.ok or len(values) != 3 or not all(v.isdigit() for v in values):
        return f"{where}, but its start time could not be compared with the file's: not killing it"
    now, written, running_s = (int(v) for v in values)
    started = now - running_s
    if started > written + START_SLACK_S:
        return (f"{where}, which started {started - written}s after the file was written: "
                f"the pid was reused; not killing it")
    return ""
