"""The lab's systemctl/journalctl shim on its own (no sshd): the journal cursor, systemctl3's
child-process search done in one read of /proc with the same answer as upstream's, and a restart
of a failing Restart= unit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import wait_for
from specconsole.lab.doubles import systemctl_shim


def _shim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specconsole.lab.doubles.systemctl_shim", *args],
                          capture_output=True, text=True, timeout=60)


def _journal(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _shim("--journal", str(root), "journalctl3", *args)


def test_a_follower_started_after_a_cursor_misses_no_line(tmp_path: Path) -> None:
    log = tmp_path / "var" / "log" / "journal" / "sglang.service.log"
    log.parent.mkdir(parents=True)
    old = "old 1\nold 2\n"
    log.write_text(old)
    shown = _journal(tmp_path, "-u", "sglang.service", "-n", "1", "--show-cursor", "--no-pager", "-o", "cat")
    assert shown.returncode == 0
    assert shown.stdout.splitlines() == ["old 2", f"-- cursor: off={len(old)}"]
    cursor = shown.stdout.splitlines()[-1].removeprefix("-- cursor: ")
    with log.open("a") as f:  # written after the cursor, before the follower starts: the race it closes
        f.write("Shutting down\n")
    follower = subprocess.Popen([sys.executable, "-m", "specconsole.lab.doubles.systemctl_shim", "--journal",
                                 str(tmp_path), "journalctl3", "-u", "sglang.service", "-f",
                                 f"--after-cursor={cursor}", "--no-pager"],
                                stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.3)
        with log.open("a") as f:
            f.write("Finished server process\n")
        assert follower.stdout is not None
        seen = [follower.stdout.readline().rstrip("\n") for _ in range(2)]
        assert seen == ["Shutting down", "Finished server process"]
    finally:
        follower.kill()
        follower.wait(5)


def test_an_empty_journal_has_a_cursor_at_its_start(tmp_path: Path) -> None:
    shown = _journal(tmp_path, "-u", "sglang.service", "-n", "1", "--show-cursor", "--no-pager")
    assert shown.returncode == 0 and shown.stdout == "-- cursor: off=0\n"


def test_the_child_search_finds_what_upstreams_finds(tmp_path: Path) -> None:
    from systemctl2 import systemctl3 as s3

    marker = tmp_path / "ready"
    # a tree three deep: sh -> sh -> sleep, plus a second child
    tree = subprocess.Popen(["sh", "-c", f"sh -c 'sleep 60 & sleep 60 & touch {marker}; wait' & sleep 60 & wait"],
                            start_new_session=True)  # its own process group: killed whole below
    try:
        assert wait_for(marker.exists, 10)
        ours = systemctl_shim._descendants(None, tree.pid)
        upstream = s3.Systemctl().pidlist_of(tree.pid)
        assert sorted(ours) == sorted(upstream) and len(ours) >= 5, (ours, upstream)
        assert ours[0] == tree.pid
    finally:
        os.killpg(tree.pid, signal.SIGKILL)
        tree.wait(5)

    def group_gone() -> bool:
        try:
            os.killpg(tree.pid, 0)
        except ProcessLookupError:
            return True
        return False

    assert wait_for(group_gone, 5)  # nothing of the tree left running


def _systemctl(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _shim(str(root), str(Path(sys.executable).parent / "systemctl3"), *args)


def _unit(root: Path, exec_start: str) -> None:
    path = root / "etc" / "systemd" / "system" / "crash.service"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"[Unit]\nDescription=test\n\n[Service]\nType=simple\nExecStart={exec_start}\n"
                    "Restart=on-failure\nRestartSec=2\n\n[Install]\nWantedBy=multi-user.target\n")


def test_a_restart_is_not_taken_for_a_crash_of_the_process_it_stopped(tmp_path: Path) -> None:
    """A rollback restarts a failing Restart=on-failure unit: the old process exits 1 on the stop's
    SIGTERM, and the supervisor that started it sees that exit late. The new process is not shown
    in auto-restart (for RestartSec, 2 s here) nor followed by a failure line in the journal."""
    root = tmp_path / "host"
    _unit(root, "/bin/sh -c 'trap \"exit 1\" TERM; while :; do sleep 0.05; done'")  # fails when stopped
    try:
        assert _systemctl(root, "start", "crash.service").returncode == 0
        log = root / "var" / "log" / "journal" / "crash.service.log"
        _unit(root, "/bin/sleep 300")  # the previous config, restored
        assert _systemctl(root, "daemon-reload").returncode == 0
        assert _systemctl(root, "restart", "crash.service").returncode == 0
        after = log.stat().st_size if log.exists() else 0
        shown = []
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            shown.append(_systemctl(root, "show", "--property=ActiveState", "--property=SubState",
                                    "--property=NRestarts", "--", "crash.service").stdout.split())
            time.sleep(0.1)
        assert all(sorted(s) == ["ActiveState=active", "NRestarts=0", "SubState=running"] for s in shown), shown
        late = log.read_text()[after:] if log.exists() else ""
        assert "FAILURE" not in late and "Scheduled restart" not in late, late
        assert _systemctl(root, "is-active", "crash.service").stdout.strip() == "active"
    finally:
        _systemctl(root, "stop", "crash.service")


def test_a_stop_cancels_the_pending_automatic_restart(tmp_path: Path) -> None:
    """A Restart=on-failure unit crashes and its supervisor waits RestartSec (2 s) to restart it;
    a ``stop`` in that wait cancels the restart (systemd's stop job replaces the restart job): the
    unit is not started again and its supervisor exits (issue 36: one started the lab's simulator
    after the lab's stop, and outlived the lab)."""
    root = tmp_path / "host"
    starts = tmp_path / "starts"
    _unit(root, f"/bin/sh -c 'echo started >> {starts}; sleep 0.5; exit 1'")
    supervisor = 0
    try:
        assert _systemctl(root, "start", "crash.service").returncode == 0
        supervisor = int((root / "run" / "crash.service.supervisor").read_text())
        assert wait_for(lambda: _systemctl(root, "is-active", "crash.service").stdout.strip() == "activating", 10)
        assert _systemctl(root, "stop", "crash.service").returncode == 0
        time.sleep(3.0)  # past RestartSec
        assert starts.read_text().splitlines() == ["started"]
        assert _systemctl(root, "is-active", "crash.service").stdout.strip() != "active"
        assert wait_for(lambda: not _alive(supervisor), 5), "the supervisor outlived the stop"
        assert "Scheduled restart" not in (root / "var" / "log" / "journal" / "crash.service.log").read_text()
    finally:
        _systemctl(root, "stop", "crash.service")
        if supervisor and _alive(supervisor):  # failed: it must not outlive the test either
            os.kill(supervisor, signal.SIGKILL)


def _alive(pid: int) -> bool:
    from specconsole.base.pids import alive

    return alive(pid)
