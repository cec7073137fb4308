"""Kill and deploy fail closed on the audit log (issue 24 item 9).

An unwritable ``audit_log`` used to be skipped silently: a kill ran with no record. Now the
headless commands and the console refuse before acting (before any host is contacted) unless
``--no-audit`` is given. The unwritable path is real: a file stands where the log's folder
should be, which no user (root included) can write through.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import wait_for
from specconsole.config import parse_config
from specconsole.lab.parts.environment import Lab
from specconsole.lab.parts.state import free_port
from specconsole.ui.console.app import ConsoleApp
from specconsole.ui.screens.deploy_form import DeployForm
from specconsole.ui.style.themes import BUNDLED_DIR, load_themes


@pytest.fixture
def unwritable(tmp_path: Path) -> Path:
    (tmp_path / "not-a-folder").write_text("a file, not a folder\n")
    return tmp_path / "not-a-folder" / "audit.log"


def config_text(audit_log: Path, port: int) -> str:
    return f"""
[console]
audit_log = "{audit_log}"

[ssh]
connect_timeout_s = 1

[[hosts]]
name = "gpu1"
role = "both"
connect = "ssh"
host = "127.0.0.1"
port = {port}
[hosts.training]
log_path = "/tmp/train.jsonl"
[hosts.training.kill]
pattern = "torchrun"
[hosts.sglang]
base_url = "http://127.0.0.1:30000"
"""


def specconsole(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specconsole", *argv], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("command", [["kill-training", "--yes"], ["deploy", "--algorithm", "DFLASH", "--yes"]])
def test_an_unwritable_audit_log_refuses_before_any_host_is_contacted(
        tmp_path: Path, unwritable: Path, listener: socket.socket, command: list[str]) -> None:
    config = tmp_path / "config.toml"
    config.write_text(config_text(unwritable, listener.getsockname()[1]))
    res = specconsole(*command, "--config", str(config))
    assert res.returncode == 3, res.stdout + res.stderr
    assert res.stdout == ""
    assert res.stderr.splitlines() == [
        f"specconsole: {command[0]}: refused: audit log {unwritable} is not writable (Not a directory), so there "
        f"would be no record of it; nothing on any host was touched (fix: set console.audit_log to a writable "
        f"file, or pass --no-audit to act without a record)"]
    with pytest.raises(BlockingIOError):  # nothing connected to the host
        listener.accept()


def test_a_dry_run_needs_no_audit_record(tmp_path: Path, unwritable: Path, listener: socket.socket) -> None:
    config = tmp_path / "config.toml"
    config.write_text(config_text(unwritable, listener.getsockname()[1]))
    res = specconsole("deploy", "--algorithm", "DFLASH", "--dry-run", "--config", str(config))
    assert "refused" not in res.stderr and "connecting to gpu1" in res.stdout, res.stdout + res.stderr
    listener.setblocking(True)
    listener.settimeout(5)
    listener.accept()[0].close()  # it went on to the host


def test_no_audit_acts_without_a_record_and_says_so(lab_hosts: Lab, tmp_path: Path, unwritable: Path) -> None:
    text = lab_hosts.config_path.read_text()
    config = tmp_path / "config.toml"
    config.write_text(re.sub(r"(?m)^audit_log = .*$", f'audit_log = "{unwritable}"', text))
    refused = specconsole("kill-training", "--yes", "--config", str(config))
    assert refused.returncode == 3 and "refused: audit log" in refused.stderr
    res = specconsole("kill-training", "--yes", "--no-audit", "--config", str(config))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "nothing to kill on train" in res.stdout
    assert res.stderr.splitlines() == [f"specconsole: kill-training: audit log {unwritable} is not writable "
                                       f"(Not a directory); going on without a record (--no-audit)"]


def console_config(tmp_path: Path, audit_log: Path) -> object:
    port = free_port()  # a port nothing listens on: the hosts stay unreachable
    return parse_config({
        "console": {"state_dir": str(tmp_path / "state"), "audit_log": str(audit_log)},
        "hosts": [{"name": "gpu1", "role": "both", "connect": "ssh", "host": "127.0.0.1", "port": port,
                   "user": "nobody", "ssh": {"known_hosts": str(tmp_path / "known_hosts")},
                   "training": {"log_path": "/tmp/train.jsonl", "kill": {"pattern": "torchrun"}},
                   "sglang": {"base_url": "http://127.0.0.1:30000"}}],
    }, "<test>")


@pytest.mark.parametrize(("key", "what"), [("k", "Kill training"), ("d", "Deploy")])
@pytest.mark.parametrize("no_audit", [False, True])
async def test_the_console_gates_kill_and_deploy_on_the_audit_log(
        tmp_path: Path, unwritable: Path, key: str, what: str, no_audit: bool) -> None:
    app = ConsoleApp(console_config(tmp_path, unwritable), themes=load_themes([BUNDLED_DIR]),  # type: ignore[arg-type]
                     no_audit=no_audit)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await pilot.pause()
        await pilot.press(key)
        expected = "gpu1 is not connected" if no_audit else f"{what}: refused"
        await wait_for(lambda: expected in app.screen_text(), 20, what=repr(expected), pilot=pilot)
        assert not isinstance(app.screen, DeployForm)
        messages = [e.message for e in app.events.recent]
        if no_audit:  # it went on (to the host, here unreachable), and said it has no record
            assert f"{what}: audit log {unwritable} is not writable (Not a directory); going on without a " \
                   f"record (--no-audit)" in messages
        else:
            assert any(m.startswith(f"{what}: refused: audit log {unwritable} is not writable") for m in messages)
            assert not any("not connected" in m for m in messages)  # it stopped before looking at the host
