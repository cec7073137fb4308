"""The real ``specconsole`` process in a tmux pane on the lab: SIGTERM and the terminal going away
(tmux killed: the pty closes, the kernel sends SIGHUP) both end it within seconds, through the
app's own exit (the monitors stop, the event is audited), leaving nothing running."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specconsole.lab.environment import Lab

pytestmark = pytest.mark.timeout(120)

EXE = Path(sys.executable).parent / "specconsole"


class Tmux:
    def __init__(self, tmp_path: Path) -> None:
        self.socket = f"specconsole-signals-{os.getpid()}-{tmp_path.name}"
        self.conf = tmp_path / "tmux.conf"
        self.conf.write_text("set -g remain-on-exit on\n")  # keep the pane to read its exit status

    def __call__(self, *args: str, check: bool = True) -> str:
        res = subprocess.run(["tmux", "-L", self.socket, "-f", str(self.conf), *args],
                             capture_output=True, text=True, check=False)
        if check and res.returncode != 0:
            raise AssertionError(f"tmux {args}: {res.stderr}")
        return res.stdout

    def pane(self, fmt: str) -> str:
        return self("display-message", "-p", "-t", "c", fmt).strip()


def own_config(lab: Lab, tmp_path: Path) -> Path:
    text = lab.config_path.read_text()
    text = re.sub(r"^audit_log = .*$", f'audit_log = "{tmp_path / "audit.log"}"', text, flags=re.M)
    text = re.sub(r"^state_dir = .*$", f'state_dir = "{tmp_path / "state"}"', text, flags=re.M)
    path = tmp_path / "console.toml"
    path.write_text(text)
    return path


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait(check, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return check()


@pytest.mark.parametrize("how", ["SIGTERM", "terminal-gone"])
def test_console_exits_cleanly(lab: Lab, tmp_path: Path, how: str) -> None:
    if not shutil.which("tmux"):
        pytest.fail("tmux is required: apt-get install -y tmux (scripts/setup.sh does this)")
    config = own_config(lab, tmp_path)
    tmux = Tmux(tmp_path)
    tmux("new-session", "-d", "-s", "c", "-x", "120", "-y", "40", f"exec {EXE} --config {config}")
    try:
        assert wait(lambda: tmux("capture-pane", "-p", "-t", "c").count("H200") >= 10, 45), \
            tmux("capture-pane", "-p", "-t", "c")
        pid = int(tmux.pane("#{pane_pid}"))
        assert alive(pid)
        t0 = time.monotonic()
        if how == "SIGTERM":
            os.kill(pid, signal.SIGTERM)
            assert wait(lambda: tmux.pane("#{pane_dead}") == "1", 15), "still running 15 s after SIGTERM"
            assert tmux.pane("#{pane_dead_status}") == str(128 + signal.SIGTERM)
            screen = tmux("capture-pane", "-p", "-t", "c")
            assert "Traceback" not in screen
        else:
            tmux("kill-server")  # the terminal goes away: the pty closes and the console gets SIGHUP
            assert wait(lambda: not alive(pid), 15), "still running 15 s after its terminal went away"
        took = time.monotonic() - t0
    finally:
        tmux("kill-server", check=False)
    expected = "SIGTERM" if how == "SIGTERM" else "SIGHUP"
    audit = (tmp_path / "audit.log").read_text()
    assert f"{expected} received; stopping the monitors and leaving" in audit
    assert took < 15
    # nothing of this console is left (it starts no children; its remote commands end with it)
    leftovers = [p for p in Path("/proc").iterdir() if p.name.isdigit() and str(config).encode()
                 in _cmdline(p)]
    assert leftovers == []


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""
