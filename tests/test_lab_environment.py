"""The lab's lifecycle: ``down`` stops only what this lab started; a fresh lab starts clean."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import wait_for
from specconsole.base import paths
from specconsole.base.errors import ConfigError
from specconsole.base.pids import alive
from specconsole.lab.parts.environment import Lab, LabOptions
from specconsole.lab.procs import start_time

pytestmark = pytest.mark.usefixtures("lab_parts")  # starts lab parts itself

HOSTS_ONLY = LabOptions(trainer=False, sglang=False)


def ssh(lab: Lab, host: str, command: str) -> subprocess.Popen[bytes]:
    """A real SSH session to a lab host, as the console opens them."""
    h = lab.state.hosts[host]
    return subprocess.Popen(
        ["ssh", "-i", str(lab.keys / "client_ed25519"), "-o", f"UserKnownHostsFile={lab.keys / 'known_hosts'}",
         "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-p", str(h.port), f"root@{h.address}", command],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def remote_tails(lab: Lab) -> list[int]:
    """Pids of `tail -F` processes that run inside this lab's SSH sessions."""
    out = []
    mark = f"SPECCONSOLE_LAB_ROOT={lab.root('train')}".encode()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "cmdline").read_bytes().startswith(b"tail\0-F") and \
                        mark in (d / "environ").read_bytes().split(b"\0"):
                    out.append(int(d.name))
            except OSError:
                pass
    return out


@pytest.fixture
def two_labs() -> Iterator[tuple[Lab, Lab]]:
    """Two labs whose folders share a prefix: /tmp/.../lab and /tmp/.../lab2 (outside pytest's
    tmp_path on purpose: an operator's paths do not contain "pytest")."""
    if not Path("/usr/sbin/sshd").exists():
        pytest.fail("OpenSSH sshd is required: apt-get install -y openssh-server")
    base = Path(tempfile.mkdtemp(prefix="specconsole-labs-", dir="/tmp"))
    first, second = Lab(base / "lab", HOSTS_ONLY), Lab(base / "lab2", HOSTS_ONLY)
    try:
        first.up()
        second.up()
        yield first, second
    finally:
        second.down()
        first.down()
        shutil.rmtree(base, ignore_errors=True)


def test_down_leaves_a_lab_whose_folder_starts_with_the_same_name_running(two_labs: tuple[Lab, Lab]) -> None:
    first, second = two_labs
    sessions = [ssh(second, "train", f"tail -F {second.dir}/hosts/train/logs/x.log"),
                ssh(first, "train", f"tail -F {first.dir}/hosts/train/logs/x.log")]
    try:
        assert wait_for(lambda: remote_tails(second) and remote_tails(first)), "the SSH sessions did not start"
        second_tails, first_tails = remote_tails(second), remote_tails(first)
        second_sshd = [h.sshd_pid for h in second.state.hosts.values()]
        first_sshd = [h.sshd_pid for h in first.state.hosts.values()]

        Lab(first.dir).down()  # as `specconsole lab down --dir FIRST` does: from state.json

        assert not any(alive(p) for p in first_sshd + first_tails)
        assert all(alive(p) for p in second_sshd), "down of one lab killed the other lab's sshd"
        assert all(alive(p) for p in second_tails), "down of one lab killed a session of the other lab"
        assert Lab(second.dir).is_running() and not Lab(first.dir).is_running()
    finally:
        for s in sessions:
            s.kill()
            s.wait()


def test_state_records_each_pid_with_its_start_time(lab_hosts: Lab) -> None:
    state = json.loads((lab_hosts.dir / "state.json").read_text())
    for h in lab_hosts.state.hosts.values():
        assert h.sshd_pid is not None
        assert state["started"][str(h.sshd_pid)] == start_time(h.sshd_pid)


@pytest.mark.parametrize("recorded", ["other start time", "no start time"])
def test_down_does_not_kill_a_reused_pid(tmp_path: Path, recorded: str) -> None:
    """A recorded pid that now names another process (its start time differs, or none was
    recorded) is left alone."""
    lab = Lab(tmp_path / "lab", HOSTS_ONLY)
    lab.up()
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    try:
        real = lab.state.hosts["train"].sshd_pid
        lab.down()
        assert not alive(real)
        # state.json of a lab that ran before: its sshd pid was reused by an unrelated process
        state = json.loads((lab.dir / "state.json").read_text())
        state["hosts"]["train"]["sshd_pid"] = stranger.pid
        state["trainer_pid"] = stranger.pid
        if recorded == "other start time":
            state["started"] = {str(stranger.pid): (start_time(stranger.pid) or 0) - 100}
        else:
            state.pop("started", None)
        (lab.dir / "state.json").write_text(json.dumps(state))
        again = Lab(lab.dir)
        assert not again.is_running()
        again.down()
        assert alive(stranger.pid), "lab down killed a process the lab did not start"
    finally:
        stranger.kill()
        stranger.wait()


def test_a_fresh_lab_starts_from_a_clean_unit_and_no_old_training_log(tmp_path: Path) -> None:
    lab = Lab(tmp_path / "lab", HOSTS_ONLY)
    lab.up()
    lab.down()
    # what a demo session leaves: a deploy's drop-in (an old --port) and work folder, service
    # status and journal, a training log and pid file
    drop_in_dir = lab.unit_path.parent / "sglang.service.d"
    (drop_in_dir / ".specconsole" / "20261203-081345-beddff").mkdir(parents=True)
    (drop_in_dir / ".specconsole" / "20261203-081345-beddff" / "plan.json").write_text("{}")
    (drop_in_dir / "zz-specconsole-deploy.conf").write_text("[Service]\nExecStart=\nExecStart=/bin/sglang --port 1\n")
    serve = lab.root("serve")
    (serve / "run" / "sglang.service.status").write_text("ActiveState=active\n")
    (serve / "var" / "log" / "journal").mkdir(parents=True)
    (serve / "var" / "log" / "journal" / "sglang.service.log").write_text("old journal\n")
    lab.train_log.parent.mkdir(parents=True, exist_ok=True)
    lab.train_log.write_text('{"step": 262, "loss": 1.0}\nReceived SIGTERM at step 262, stopping training\n')
    lab.trainer_pid_file.write_text("4242\n")

    again = Lab(lab.dir, HOSTS_ONLY)
    again.up()
    try:
        assert not drop_in_dir.exists()
        assert not (serve / "run" / "sglang.service.status").exists()
        assert not (serve / "var" / "log" / "journal").exists()
        assert not lab.train_log.exists() and not lab.trainer_pid_file.exists()
        cat = subprocess.run([str(serve / "bin" / "systemctl"), "cat", "sglang.service"],
                             capture_output=True, text=True, timeout=60)
        assert [ln for ln in cat.stdout.splitlines() if ln.startswith("# /")] == [f"# {lab.unit_path}"]
        assert f"--port {again.state.sglang_port}" in cat.stdout.replace("'", "")
    finally:
        again.down()


def test_lab_status_and_the_console_find_the_demos_lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`specconsole demo` keeps its lab in its own folder; `lab status` looks there too (it said
    "running: false" while the demo ran). A config-less console command does not pick the lab
    silently: one line names where it looked and points at `specconsole demo` / --config."""
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k not in ("SPECCONSOLE_LAB_DIR", "SPECCONSOLE_CONFIG")}
    env["HOME"] = str(home)
    demo = Lab(home / ".local" / "state" / "specconsole" / "demo", HOSTS_ONLY)
    demo.up()
    try:
        res = subprocess.run([sys.executable, "-m", "specconsole", "lab", "status"], capture_output=True,
                             text=True, timeout=120, env=env)
        assert res.returncode == 0, res.stdout + res.stderr
        assert json.loads(res.stdout) == {"dir": str(demo.dir), "running": True, "config": str(demo.config_path)}

        from specconsole.cli import resolve_config_path

        monkeypatch.setenv("HOME", str(home))
        monkeypatch.delenv("SPECCONSOLE_LAB_DIR", raising=False)
        monkeypatch.delenv("SPECCONSOLE_CONFIG", raising=False)
        with pytest.raises(ConfigError) as err:
            resolve_config_path(None)
        assert "--config FILE" in str(err.value) and "specconsole demo" in str(err.value)
        assert str(paths.default_config_file()) in str(err.value)
    finally:
        demo.down()
    res = subprocess.run([sys.executable, "-m", "specconsole", "lab", "status"], capture_output=True,
                         text=True, timeout=120, env=env)
    assert res.returncode == 1 and json.loads(res.stdout)["running"] is False
