"""The demo driven in tmux as an operator would: scripts/tmux-smoke.sh (send-keys, capture-pane).

It starts `specconsole demo`, sees GPU rows, tokens/s and the training step on screen, kills
training with k, deploys DFLASH window 16 with d (checking /server_info and the serving pane),
quits with q, and checks that no process of the demo is left running."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(420)
def test_demo_in_tmux_end_to_end() -> None:
    if not shutil.which("tmux"):
        pytest.fail("tmux is required: apt-get install -y tmux (scripts/setup.sh does this)")
    exe = Path(sys.executable).parent / "specconsole"
    res = subprocess.run(["bash", str(ROOT / "scripts" / "tmux-smoke.sh")], capture_output=True, text=True,
                         timeout=400, env={**os.environ, "SPECCONSOLE": str(exe)})
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]
    for seen in ("saw GPU rows", "saw tokens/s", "saw the training step", "saw the job stopped",
                 "/server_info: DFLASH, draft window 16", "saw the serving pane reporting window 16",
                 "OK: nothing of the demo is left running"):
        assert seen in res.stdout
