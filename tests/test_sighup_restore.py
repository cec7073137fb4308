"""SIGHUP while the terminal is still there restores it, as SIGTERM and SIGINT do (issue 24 item 13).

SIGHUP usually means the terminal went away (test_signals.py covers that), but anyone can send
it while the terminal lives (``kill -HUP``, a supervisor): the console used to leave the pane in
the alternate screen with mouse tracking on and the cursor hidden. Here the console runs in a
tmux pane under a shell that stays (so the pane outlives it); tmux itself says what state the
terminal was left in.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import wait_for
from specconsole.base.pids import alive

pytestmark = pytest.mark.usefixtures("lab_parts")  # starts lab parts itself

EXE = Path(sys.executable).parent / "specconsole"
#: what tmux reports for the pane: alternate screen, any mouse tracking, cursor shown
STATE = "#{alternate_on} #{mouse_any_flag} #{cursor_flag}"


class Tmux:
    """A private tmux server (never the user's)."""

    def __init__(self) -> None:
        self.base = ["tmux", "-L", f"specconsole-hup-{os.getpid()}-{uuid.uuid4().hex[:8]}", "-f", "/dev/null"]

    def __call__(self, *args: str) -> str:
        res = subprocess.run([*self.base, *args], capture_output=True, text=True, check=False)
        assert res.returncode == 0, f"tmux {args[:3]}: {res.stderr.strip()}"
        return res.stdout

    def kill_server(self) -> None:
        subprocess.run([*self.base, "kill-server"], capture_output=True, check=False)


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    if not shutil.which("tmux"):
        pytest.fail("tmux is required: apt-get install -y tmux (scripts/setup.sh does this)")
    server = Tmux()
    try:
        yield server
    finally:
        server.kill_server()


def child_of(parent: int) -> int | None:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
                return int(entry)
    return None


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM])
def test_a_signal_with_the_terminal_alive_leaves_it_as_it_was(tmux: Tmux, tmp_path: Path, sig: int) -> None:
    log = tmp_path / "train.jsonl"
    log.write_text('{"step": 1, "loss": 2.5}\n')
    config = tmp_path / "config.toml"
    config.write_text(f"""
[console]
audit_log = "{tmp_path / 'audit.log'}"
state_dir = "{tmp_path / 'state'}"

[[hosts]]
name = "local"
role = "train"
[hosts.gpu]
source = "none"
[hosts.training]
log_path = "{log}"
""")
    # the shell stays after the console: the pane (the terminal) lives on
    frame = tmp_path / "first-full-frame"  # written once the console is up, its signal handlers in place
    tmux("new-session", "-d", "-s", "c", "-x", "120", "-y", "40", "-e", f"SPECCONSOLE_FIRST_FRAME_FILE={frame}",
         f"{EXE} --config {config}; sleep 86400")
    shell = int(tmux("display-message", "-p", "-t", "c", "#{pane_pid}").strip())
    assert wait_for(lambda: child_of(shell) is not None, 30, step=0.1)
    pid = child_of(shell)
    assert pid is not None
    try:
        assert wait_for(frame.exists, 60, step=0.1), tmux("capture-pane", "-p", "-t", "c")
        assert tmux("display-message", "-p", "-t", "c", STATE).split()[:2] == ["1", "1"]  # the console's modes
        os.kill(pid, sig)
        assert wait_for(lambda: not alive(pid), 10, step=0.05), f"still running after {signal.Signals(sig).name}"
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    # back in the normal screen, mouse tracking off, cursor shown (tmux reads what was written
    # to the pane on its own schedule: it gets a moment)
    assert wait_for(lambda: tmux("display-message", "-p", "-t", "c", STATE).split() == ["0", "0", "1"], 5,
                    step=0.05), tmux("display-message", "-p", "-t", "c", STATE)
    assert f"{signal.Signals(sig).name} received" in (tmp_path / "audit.log").read_text()
