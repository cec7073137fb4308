"""The demo driven in tmux as an operator would: scripts/tmux-smoke.sh --quick (send-keys, capture-pane).

It starts `specconsole demo` at 160x48, sees GPU rows, tokens/s and the training step on screen,
quits with q, and checks that no process of the demo is left running. Killing training with k and
deploying DFLASH window 16 with d in tmux (with /server_info, the state lines, a clean quit and
nothing left running) is tests/test_tmux_story.py's run, so the demo's k/d story runs once."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("lab_parts")  # starts lab parts itself

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(420)
def test_demo_in_tmux_end_to_end() -> None:
    if not shutil.which("tmux"):
        pytest.fail("tmux is required: apt-get install -y tmux (scripts/setup.sh does this)")
    exe = Path(sys.executable).parent / "specconsole"
    res = subprocess.run(["bash", str(ROOT / "scripts" / "tmux-smoke.sh"), "--quick"], capture_output=True, text=True,
                         timeout=400, env={**os.environ, "SPECCONSOLE": str(exe)})
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]
    for seen in ("saw GPU rows", "saw tokens/s", "saw the training step", "saw the demo to exit cleanly",
                 "OK: nothing of the demo is left running"):
        assert seen in res.stdout
