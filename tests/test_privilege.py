"""``sudo = true``: the config key, the sudoers rule, how the agent starts, and the liveness
check re-attaching relies on (real ``sh``, real processes; the lab tests are in
test_deploy_sudo.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from specconsole.actions.deploy.privilege import Privilege, agent_python, alive_argv, sudoers_rule
from specconsole.base.errors import ConfigError
from specconsole.config import HostConfig, load_config

SERVE = """
[[hosts]]
name = "serve"
role = "serve"
connect = "ssh"
host = "gpu2.example"
user = "alice"
{extra}

[hosts.sglang]
base_url = "http://127.0.0.1:30000"
"""


def _load(tmp_path: Path, extra: str) -> HostConfig:
    path = tmp_path / "c.toml"
    path.write_text(SERVE.format(extra=extra))
    return load_config(path).host("serve")


def test_sudo_is_a_per_host_bool_defaulting_to_false(tmp_path: Path) -> None:
    assert _load(tmp_path, "").sudo is False
    assert _load(tmp_path, "sudo = true").sudo is True
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, 'sudo = "yes"')
    assert "sudo" in str(err.value) and "\n" not in str(err.value)


def test_the_agent_starts_under_sudo_n_with_the_python_the_rule_names() -> None:
    priv = Privilege(sudo=True, user="alice", home="/home/alice", python="/usr/bin/python3")
    assert priv.agent_argv("python3") == ["sudo", "-n", "/usr/bin/python3"]
    assert priv.work_parent("sglang.service") == "/home/alice/.local/state/specconsole/deploy/sglang.service"
    assert sudoers_rule("alice", "/usr/bin/python3") == "alice ALL=(root) NOPASSWD: /usr/bin/python3"
    root = Privilege()
    assert root.agent_argv("/opt/venv/bin/python") == ["/opt/venv/bin/python"] and root.work_parent("u") is None
    assert agent_python(["/opt/venv/bin/python3.11", "-m", "sglang.launch_server"]) == "/opt/venv/bin/python3.11"
    assert agent_python(["/usr/local/bin/sglang", "serve"]) == "python3"


def _alive(pid: int | str) -> bool:
    argv = alive_argv(pid)
    return subprocess.run(argv, capture_output=True, timeout=30).returncode == 0


def test_alive_sees_running_processes_and_not_gone_or_bogus_ones() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert _alive(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert not _alive(proc.pid)
    assert _alive(1)    # init: another user's process for a non-root caller (kill -0 says EPERM)
    for bogus in ("", "12a", "-1", "$(true)"):
        assert not _alive(bogus)
