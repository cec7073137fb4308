"""The lab's clean-up finds its programs by their marker, whatever paths their command lines name
(no lab needed): a lab under pytest's ``pytest-of-USER`` folder is cleaned up like any other."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import wait_for
from specconsole.base.pids import alive
from specconsole.lab.parts import environment
from specconsole.lab.parts.environment import LAB_ROOT_ENV, lab_leftovers


def test_a_marked_lab_program_under_a_pytest_folder_is_found_and_killed(tmp_path: Path) -> None:
    root = str(tmp_path / "pytest-of-someone" / "lab" / "hosts" / "serve")
    # a simulator's command line: the lab's module and a model path under pytest's tmp folder
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "specconsole.lab.doubles.sglang_sim",
                             "--model-path", f"{root}/models/Qwen3-8B"],
                            env={**os.environ, LAB_ROOT_ENV: root}, start_new_session=True)
    try:
        assert wait_for(lambda: any(line.startswith(f"{proc.pid} ") for line in lab_leftovers([root])), 5)
        assert lab_leftovers([root + "2"]) == []  # another lab's marker (a prefix of it) is not this one
        environment._kill_marked([root])
        assert proc.wait(5) == -9
        assert not alive(proc.pid) and lab_leftovers([root]) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
