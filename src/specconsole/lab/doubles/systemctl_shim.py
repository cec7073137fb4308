"""The lab hosts' ``systemctl``: docker-systemctl-replacement, with systemd's own ``cat`` output.

docker-systemctl-replacement (``systemctl3``) runs real unit files, drop-ins included, without
systemd; the lab roots it at the host's folder with ``--root``. Two read-only verbs print less
than real systemd does, so this shim answers them in systemd's format and hands every other
verb to systemctl3 unchanged:

- ``systemctl cat UNIT``: each file that makes up the unit, the unit file first, then its
  drop-ins in order, each preceded by ``# /path/of/file`` and separated by a blank line;
- ``systemctl show -p FragmentPath|DropInPaths UNIT`` (and ``--value``), and ``NRestarts``;
  ``--value`` with any other property (systemctl3 has no ``--value``: ``show -p MainPID --value``).

docker-systemctl-replacement honours ``Restart=`` only when it runs as the container's init
(PID 1), which the lab's hosts do not have. So for a unit with ``Restart=on-failure`` (or
``always``/``on-abnormal``) ``start``/``restart`` run systemctl3 under a small supervisor
that does what systemd does: it is the service's parent (a child subreaper), sees its real
exit status, writes systemd's journal lines (``UNIT: Main process exited, code=exited,
status=1/FAILURE``, ``Failed with result 'exit-code'``, ``Scheduled restart job, restart
counter is at N``), shows the unit as ``activating``/``auto-restart`` until it restarts it
after ``RestartSec`` (at most 5 times in 10 s, then ``Start request repeated too quickly``)
and counts ``NRestarts``. A later ``start``/``restart`` takes the unit over, as systemd's cancels
a pending automatic restart: the earlier supervisor then neither restarts its failed process nor
reports its failure (systemd would have logged it before that restart returned; seen late, it
would read as a crash of the new process). A ``stop`` cancels it too (systemd's stop job replaces
the pending restart job): the unit's owner becomes ``stopped``, so no supervisor starts the unit
after it, and one whose own start raced the stop stops what it started (issue 36: a supervisor
restarting a crash-looping unit started its simulator after the lab's ``systemctl stop``).

``journalctl -f -n 0`` follows only new lines, as systemd's does (journalctl3 shows 10 old
lines for ``-n 0``), and ``--show-cursor``/``--after-cursor`` work as systemd's do (a cursor here
is a byte offset in the unit's journal file).

systemctl3 runs in this process (:func:`run_systemctl3`), not as a second interpreter, and is
paced as systemd is rather than in whole seconds (:func:`_tune`):

- the host's system counts as booted (no half-second "system not running" wait per start/stop);
- a start looks 0.1 s, not 0.5 s, for a service that dies at once (systemd's ``Type=simple``
  start does not wait at all);
- a stop sees the service gone within 50 ms (systemd is told at once; systemctl3 looks once a
  second);
- the search for a service's child processes reads ``/proc`` until a pass finds no new one
  (systemctl3 reads it 100 times).

Its verdicts, files and journal are unchanged. A restart of a service that stops at once takes
~0.3 s, not 2.4 s, and a fifth of the CPU.

Usage (written into each lab host's ``bin/systemctl`` and ``bin/journalctl``):
``python -m specconsole.lab.doubles.systemctl_shim ROOT SYSTEMCTL3 ARGS...``,
``python -m specconsole.lab.doubles.systemctl_shim --journal ROOT JOURNALCTL3 ARGS...``
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from specconsole.lab.procs import descendants

PR_SET_CHILD_SUBREAPER = 36
CLEAN_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE}


def unit_files(root: Path, unit: str) -> list[Path]:
    if "." not in unit:
        unit += ".service"
    base = root / "etc" / "systemd" / "system"
    main = base / unit
    if not main.exists():
        return []
    drop_dir = base / f"{unit}.d"
    drop_ins = sorted(drop_dir.glob("*.conf")) if drop_dir.is_dir() else []
    return [main, *drop_ins]


def cat(root: Path, units: list[str]) -> int:
    chunks = []
    for unit in units:
        files = unit_files(root, unit)
        if not files:
            print(f"No files found for {unit}.", file=sys.stderr)
            return 1
        for f in files:
            chunks.append(f"# {f}\n{f.read_text()}")
    print("\n".join(c.rstrip("\n") + "\n" for c in chunks), end="")
    return 0


def show(root: Path, args: list[str]) -> int | None:
    """Answer ``show -p FragmentPath,DropInPaths``; None means "not ours, pass it on"."""
    props: list[str] = []
    value_only = "--value" in args
    rest = [a for a in args if a != "--value"]
    units = []
    i = 0
    while i < len(rest):
        a = rest[i]
        if a in ("-p", "--property"):
            props += rest[i + 1].split(",")
            i += 2
            continue
        if a.startswith("--property="):
            props += a.split("=", 1)[1].split(",")
        elif not a.startswith("-"):
            units.append(a)
        i += 1
    restarting = len(units) == 1 and _auto_restart_file(root, units[0]).exists()
    if len(units) == 1 and ("NRestarts" in props or (restarting and {"ActiveState", "SubState"} & set(props))):
        ours = {"NRestarts": str(nrestarts(root, units[0]))}
        if restarting:   # between a crash and its automatic restart, as systemd shows it
            ours.update(ActiveState="activating", SubState="auto-restart")
        rest_props = [p for p in props if p not in ours]
        if rest_props:
            print(systemctl3_output(root, ["show", units[0], *(f"--property={p}" for p in rest_props),
                                           *(["--value"] if value_only else [])]), end="")
        for p in props:
            if p in ours:
                print(ours[p] if value_only else f"{p}={ours[p]}")
        return 0
    if value_only and not (props and set(props) <= {"FragmentPath", "DropInPaths"} and len(units) == 1):
        # systemctl3 has no --value: systemd's ``show -p MainPID --value UNIT`` prints the value alone
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = run_systemctl3(root, ["show", *rest])
        print("".join(ln.split("=", 1)[-1] + "\n" for ln in out.getvalue().splitlines()), end="")
        return rc
    if not props or not set(props) <= {"FragmentPath", "DropInPaths"} or len(units) != 1:
        return None
    files = unit_files(root, units[0])
    values = {"FragmentPath": str(files[0]) if files else "",
              "DropInPaths": " ".join(str(f) for f in files[1:])}
    for p in props:
        print(values[p] if value_only else f"{p}={values[p]}")
    return 0


_SYSTEMCTL3 = ""


class _FinePolls:
    """``time`` for systemctl3's stop: its once-a-second look at whether the killed processes are
    gone becomes one every 50 ms (its deadline, TimeoutStopSec, is kept: that loop counts time,
    not looks); shorter sleeps are unchanged."""

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        time.sleep(0.05 if seconds >= 1 else seconds)


def _descendants(self: object, pid: int | None) -> list[int]:
    """systemctl3's ``pidlist_of``: ``pid`` and its descendants, found from one read of /proc
    (upstream scans /proc PROC_MAX_DEPTH times even after a pass adds nothing)."""
    return [pid, *descendants(pid)] if pid else []


def _tune(s3: Any, root: Path) -> None:
    """Pace systemctl3 as systemd is (see the module's docstring); mark ``root``'s system booted."""
    s3._root = str(root)
    ctl = s3.Systemctl()
    if not Path(ctl.get_status_file_from(ctl.sysinit_target())).exists():
        # the host's first systemctl: its system is up, as a real host's is
        ctl.sysinit_status(ActiveState="active", SubState="running")
    s3.MinimumYield = 0.1  # a start looks this long for a process that dies at once (systemd: not at all)
    s3.Systemctl.pidlist_of = _descendants
    kill = s3.Systemctl.do_kill_unit_from

    def do_kill_unit_from(self: object, conf: object) -> bool:
        s3.time = _FinePolls()
        try:
            return bool(kill(self, conf))
        finally:
            s3.time = time

    s3.Systemctl.do_kill_unit_from = do_kill_unit_from


def run_systemctl3(root: Path, args: list[str]) -> int:
    """docker-systemctl-replacement's ``systemctl --root=ROOT ARGS...``, run in this process."""
    from systemctl2 import systemctl3 as s3

    _tune(s3, root)
    sys.argv = [_SYSTEMCTL3, f"--root={root}", *args]
    return int(s3.main() or 0)


def systemctl3_output(root: Path, args: list[str]) -> str:
    """What :func:`run_systemctl3` prints for ``args``."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        run_systemctl3(root, args)
    return out.getvalue()


def _unit_name(unit: str) -> str:
    return unit if "." in unit else unit + ".service"


def service_setting(root: Path, unit: str, key: str, default: str) -> str:
    """The last ``key=`` of the unit's [Service] section, drop-ins included."""
    value = default
    for f in unit_files(root, unit):
        section = ""
        for line in f.read_text().splitlines():
            line = line.strip()
            if line.startswith("["):
                section = line
            elif section == "[Service]" and line.startswith(f"{key}="):
                value = line.split("=", 1)[1].strip()
    return value


def _state_file(root: Path, unit: str) -> Path:
    return root / "run" / f"{_unit_name(unit)}.nrestarts"


def _auto_restart_file(root: Path, unit: str) -> Path:
    """Present while the supervisor is between a crash and the automatic restart."""
    return root / "run" / f"{_unit_name(unit)}.auto-restart"


def _owner_file(root: Path, unit: str) -> Path:
    """The pid of the supervisor whose start or restart is the unit's latest."""
    return root / "run" / f"{_unit_name(unit)}.supervisor"


#: what the owner file says after an explicit ``stop``: no supervisor owns the unit
STOPPED = "stopped"


def _owner(root: Path, unit: str) -> str:
    with contextlib.suppress(OSError):
        return _owner_file(root, unit).read_text().strip()
    return ""


def cancel_restarts(root: Path, unit: str) -> None:
    """``stop``: cancel every pending automatic restart of ``unit`` (its owner becomes :data:`STOPPED`)."""
    if unit_files(root, unit):
        _owner_file(root, unit).parent.mkdir(parents=True, exist_ok=True)
        _owner_file(root, unit).write_text(f"{STOPPED}\n")
        _auto_restart_file(root, unit).unlink(missing_ok=True)


def _owns(root: Path, unit: str) -> bool:
    """Whether this supervisor still has the unit: a later ``start``/``restart`` took it over."""
    with contextlib.suppress(OSError):
        return _owner_file(root, unit).read_text().strip() == str(os.getpid())
    return False


def nrestarts(root: Path, unit: str) -> int:
    with contextlib.suppress(OSError, ValueError):
        return int(_state_file(root, unit).read_text().strip() or 0)
    return 0


def journal(root: Path, unit: str, line: str) -> None:
    """Append a systemd-style line to the unit's journal (docker-systemctl-replacement's log)."""
    log = root / "var" / "log" / "journal" / f"{_unit_name(unit)}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    now = time.time()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1000):03d}"
    with log.open("a") as f:
        f.write(f"[{stamp}] {_unit_name(unit)}: {line}\n")


def _plain(root: Path, systemctl3: str, args: list[str]) -> list[str]:
    """The command line of systemctl3 alone (paced, but without this module's supervisor)."""
    return [sys.executable, "-m", "specconsole.lab.doubles.systemctl_shim", "--plain", str(root), systemctl3, *args]


def supervise(root: Path, systemctl3: str, args: list[str], unit: str) -> int:
    """``start``/``restart`` a ``Restart=`` unit and stay its parent to restart it on failure."""
    read_end, write_end = os.pipe()
    if os.fork():                      # the caller's systemctl: wait for systemctl3's status
        os.close(write_end)
        with os.fdopen(read_end, "rb") as r:
            data = r.read().strip()
        return int(data) if data.lstrip(b"-").isdigit() else 1
    os.close(read_end)
    os.setsid()
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    _state_file(root, unit).parent.mkdir(parents=True, exist_ok=True)
    _state_file(root, unit).write_text("0\n")   # an explicit start resets the counter, as systemd does
    _owner_file(root, unit).write_text(f"{os.getpid()}\n")
    # ... and cancels a pending automatic restart: an earlier supervisor between a crash and its
    # restart must not show the freshly started unit as activating/auto-restart
    _auto_restart_file(root, unit).unlink(missing_ok=True)
    rc = subprocess.call(_plain(root, systemctl3, args))
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.write(write_end, str(rc).encode())
    os.close(write_end)
    policy = service_setting(root, unit, "Restart", "no")
    delay = float(re.sub(r"[^0-9.]", "", service_setting(root, unit, "RestartSec", "0.1")) or 0.1)
    starts: list[float] = []
    while True:
        try:
            _pid, status = os.wait()
        except ChildProcessError:
            return 0                    # no service process left to watch
        if os.WIFEXITED(status):
            code = os.WEXITSTATUS(status)
            clean, what = code == 0, f"code=exited, status={code}/{'SUCCESS' if code == 0 else 'FAILURE'}"
            result = "exit-code"
        else:
            sig = signal.Signals(os.WTERMSIG(status))
            clean, what, result = sig in CLEAN_SIGNALS, f"code=killed, status={sig.value}/{sig.name[3:]}", "signal"
        if clean:
            journal(root, unit, "Deactivated successfully.")
            continue
        if not _owns(root, unit):
            # a later start/restart took the unit over while this process was failing: systemd would
            # have logged its exit before that restart returned; this supervisor may see it late, and a
            # late line or auto-restart state would read as a crash of the new process, so it stays silent
            continue
        will_restart = policy in ("on-failure", "always", "on-abnormal") and bool(unit_files(root, unit))
        marker = _auto_restart_file(root, unit)
        if will_restart:
            marker.touch()
            if not _owns(root, unit):   # taken over meanwhile: the new owner cleared the marker first
                marker.unlink(missing_ok=True)
                continue
        try:
            journal(root, unit, f"Main process exited, {what}")
            journal(root, unit, f"Failed with result '{result}'.")
            if not will_restart:
                continue
            time.sleep(delay)
            if not _owns(root, unit):
                continue                    # a start/restart took it over meanwhile (e.g. a rollback)
            state = subprocess.run(_plain(root, systemctl3, ["is-active", unit]), capture_output=True, text=True)
            if state.stdout.strip() == "active":
                continue                    # someone started it meanwhile (e.g. a rollback)
            starts = [t for t in starts if time.monotonic() - t < 10] + [time.monotonic()]
            if len(starts) > 5:
                journal(root, unit, "Start request repeated too quickly.")
                continue
            n = nrestarts(root, unit) + 1
            _state_file(root, unit).write_text(f"{n}\n")
            journal(root, unit, f"Scheduled restart job, restart counter is at {n}.")
            subprocess.call(_plain(root, systemctl3, ["start", unit]))
            if _owner(root, unit) == STOPPED:   # a stop came while it started: it wins, as systemd's would
                subprocess.call(_plain(root, systemctl3, ["stop", unit]))
        finally:
            marker.unlink(missing_ok=True)


def journalctl(root: Path, journalctl3: str, args: list[str]) -> int:
    """``journalctl -u UNIT -f -n 0`` (new lines only), ``-u UNIT -n N --show-cursor`` (the last N
    lines, then ``-- cursor: off=BYTES``) and ``-u UNIT -f --after-cursor=off=BYTES`` (what came after
    that cursor, then new lines) as systemd's journalctl does them; anything else is journalctl3's."""
    follow = any(a in ("-f", "--follow") for a in args)
    lines = None
    for i, a in enumerate(args):
        if a in ("-n", "--lines") and i + 1 < len(args):
            lines = args[i + 1]
        elif a.startswith("--lines="):
            lines = a.split("=", 1)[1]
    unit = next((args[i + 1] for i, a in enumerate(args) if a in ("-u", "--unit") and i + 1 < len(args)), "")
    after = next((a.split("=", 1)[1] for a in args if a.startswith("--after-cursor=")), None)
    log = root / "var" / "log" / "journal" / f"{_unit_name(unit)}.log"
    if unit and "--show-cursor" in args and not follow and (lines or "").isdigit():
        data = log.read_bytes() if log.exists() else b""
        kept = data.splitlines(keepends=True)[-int(lines or 0):] if int(lines or 0) else []
        sys.stdout.write(b"".join(kept).decode("utf-8", "replace"))
        sys.stdout.write(f"-- cursor: off={len(data)}\n")
        return 0
    if follow and unit and after is not None and after.startswith("off=") and after[4:].isdigit():
        os.execvp("tail", ["tail", "-c", f"+{int(after[4:]) + 1}", "-F", str(log)])
    if follow and lines == "0" and unit:
        os.execvp("tail", ["tail", "-n", "0", "-F", str(log)])
    os.execv(journalctl3, [journalctl3, f"--root={root}", *args])
    return 127  # pragma: no cover


def main(argv: list[str]) -> int:
    global _SYSTEMCTL3
    if argv and argv[0] == "--journal":
        return journalctl(Path(argv[1]), argv[2], argv[3:])
    plain = bool(argv) and argv[0] == "--plain"
    root, systemctl3, args = Path(argv[plain]), argv[plain + 1], argv[plain + 2:]
    _SYSTEMCTL3 = systemctl3
    if plain:
        return run_systemctl3(root, args)
    verb = next((a for a in args if not a.startswith("-")), "")
    if verb in ("start", "restart"):
        units = [a for a in args[args.index(verb) + 1:] if not a.startswith("-")]
        if len(units) == 1 and unit_files(root, units[0]) and \
                service_setting(root, units[0], "Restart", "no") in ("on-failure", "always", "on-abnormal"):
            return supervise(root, systemctl3, args, units[0])
    if verb == "stop":
        for unit in (a for a in args[args.index(verb) + 1:] if not a.startswith("-")):
            cancel_restarts(root, unit)
    if verb == "is-active":
        units = [a for a in args[args.index(verb) + 1:] if not a.startswith("-")]
        if len(units) == 1 and _auto_restart_file(root, units[0]).exists():
            print("activating")
            return 3
    if verb == "cat":
        return cat(root, [a for a in args[args.index("cat") + 1:] if not a.startswith("-")])
    if verb == "show":
        answered = show(root, args[args.index("show") + 1:])
        if answered is not None:
            return answered
    return run_systemctl3(root, args)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
