"""A forced exit that has clean-up to do (``specconsole demo`` stopping its lab after SIGHUP,
when tmux is killed) gets to finish it: the exit deadline's hard stop must not cut it short."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import signal, sys, time
    from pathlib import Path
    from specconsole.base.shutdown import ExitGuard, HARD_AFTER_S

    marker = Path(sys.argv[1])

    def cleanup():  # longer than the deadline plus the hard stop
        time.sleep(0.3 + 2 * (guard.deadline_s + HARD_AFTER_S))
        marker.write_text("stopped")

    guard = ExitGuard(deadline_s=0.3, cleanup=cleanup)
    guard.arm(128 + signal.SIGHUP, "SIGHUP received")
    guard.force_exit("SIGHUP received: the terminal is gone", restore=False)
""")


def test_forced_exit_runs_its_cleanup_to_the_end(tmp_path: Path) -> None:
    marker = tmp_path / "cleanup-done"
    res = subprocess.run([sys.executable, "-c", SCRIPT, str(marker)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 128 + 1, res.stderr
    assert marker.read_text() == "stopped"
