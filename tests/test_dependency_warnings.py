"""The operator's stderr is specconsole's (issue 31): a dependency's warnings never reach it.

cryptography 51 made asyncssh 2.24 print ten ``CryptographyDeprecationWarning: DSA is deprecated``
lines at import, so every command's one clear line became eleven. The lock (requirements/dev.txt)
holds that cryptography, the newest release when it was made: each test below first shows, with
``SPECCONSOLE_DEBUG=1``, that this environment does warn, then that the command without it does not.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from conftest import wait_for
from specconsole import dependency_warnings
from specconsole.lab.parts.state import free_port

REPO = Path(__file__).resolve().parents[1]
WARNED = "CryptographyDeprecationWarning: DSA is deprecated"
#: what a dependency's warning on the terminal looks like (Python's warning format)
WARNING_TEXT = re.compile(r"Warning\b|deprecated", re.IGNORECASE)


def locked(name: str) -> str:
    """The version requirements/dev.txt pins ``name`` to."""
    found = re.search(rf"^{re.escape(name)}==(\S+)", (REPO / "requirements" / "dev.txt").read_text(), re.MULTILINE)
    assert found, f"{name} is not in requirements/dev.txt"
    return found.group(1)


def test_this_environment_is_the_lock_with_the_cryptography_that_warns() -> None:
    for name in ("cryptography", "asyncssh", "textual", "httpx"):
        assert importlib.metadata.version(name) == locked(name), f"{name}: .venv is not the lock (scripts/setup.sh)"
    major, minor = (int(p) for p in locked("cryptography").split(".")[:2])
    assert (major, minor) >= (51, 0), "the lock's cryptography predates the release that deprecated DSA"


@pytest.fixture
def config(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A config whose one host (train and serve) refuses SSH connections, and an environment with
    the user's folders in ``tmp_path``."""
    path = tmp_path / "config.toml"
    path.write_text(f"""
[console]
audit_log = "{tmp_path / 'audit.log'}"
[ssh]
connect_timeout_s = 5
[[hosts]]
name = "gpu-1"
role = "both"
connect = "ssh"
host = "127.0.0.1"
port = {free_port()}  # nothing listens there
user = "ops"
[hosts.sglang]
unit = "sglang.service"
base_url = "http://127.0.0.1:30000"
[hosts.training]
log_path = "/data/train.log"
[hosts.training.kill]
pattern = "torchrun"
""")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECCONSOLE_", "PYTHONWARNINGS"))}
    env.update(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_STATE_HOME=str(tmp_path / "state"))
    return path, env


@pytest.mark.parametrize(("command", "said"), [
    (["deploy", "--algorithm", "DFLASH", "--draft-window", "8", "--yes"], "specconsole: gpu-1: cannot connect to ops@"),
    (["kill-training", "--yes"], "specconsole: gpu-1: cannot connect to ops@"),
])
def test_a_refused_command_says_one_line_under_the_cryptography_that_warns(
        config: tuple[Path, dict[str, str]], command: list[str], said: str) -> None:
    path, env = config
    argv = [sys.executable, "-m", "specconsole", *command, "--config", str(path)]
    debug = subprocess.run(argv, capture_output=True, text=True, timeout=60, env={**env, "SPECCONSOLE_DEBUG": "1"})
    assert WARNED in debug.stderr, f"this run would not show the filter at work:\n{debug.stderr}"
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode != 0
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(said), lines[0]


def test_status_of_an_unreachable_host_prints_nothing_on_stderr(config: tuple[Path, dict[str, str]]) -> None:
    path, env = config
    res = subprocess.run([sys.executable, "-m", "specconsole", "status", "--config", str(path), "--timeout", "5"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 1 and "gpu-1" in res.stdout  # the host is shown, unreachable
    assert res.stderr == ""


def test_the_filter_is_by_category_and_module() -> None:
    class LibraryDeprecation(UserWarning):  # as cryptography.utils.CryptographyDeprecationWarning
        pass

    def shown(category: type[Warning], module: str) -> bool:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert dependency_warnings.quiet({})
            warnings.warn_explicit("DSA is deprecated", category, "x.py", 1, module=module, registry={})
        return bool(caught)

    assert not shown(LibraryDeprecation, "asyncssh.crypto.dsa")
    assert not shown(DeprecationWarning, "textual.widgets")
    assert not shown(FutureWarning, "torch")
    assert shown(LibraryDeprecation, "specconsole.hosts.ssh")  # ours are ours to see
    assert shown(LibraryDeprecation, "asyncsshx")  # a module that only starts with a dependency's name
    assert shown(RuntimeWarning, "asyncssh.connection")  # "coroutine was never awaited": not a library's say
    with warnings.catch_warnings():
        assert not dependency_warnings.quiet({"SPECCONSOLE_DEBUG": "1"})


def tmux_console(tmp_path: Path, config: Path, env: dict[str, str]) -> tuple[str, str]:
    """The console on ``config`` in a private tmux at 80x24: its first screen (both host panes
    drawn, the host marked down), and the terminal after ``q``."""
    if not shutil.which("tmux"):
        pytest.fail("tmux is required: apt-get install -y tmux (scripts/setup.sh does this)")
    tmp_path.mkdir(parents=True, exist_ok=True)
    sock, conf = tmp_path / "tmux.sock", tmp_path / "tmux.conf"
    conf.write_text("set -g status off\nset -g default-terminal xterm-256color\n")
    exe = Path(sys.executable).parent / "specconsole"
    env = {**env, "TERM": "xterm-256color"}

    def tmux(*args: str) -> str:
        return subprocess.run(["tmux", "-S", str(sock), "-f", str(conf), *args], capture_output=True, text=True,
                              timeout=20, env=env).stdout

    tmux("new-session", "-d", "-s", "w", "-x", "80", "-y", "24", f"{exe} --config {config}; echo CONSOLE-EXITED $?; "
         "sleep 600")
    try:
        seen: dict[str, str] = {}

        def first_screen() -> bool:
            seen["first"] = tmux("capture-pane", "-p", "-t", "w")
            return "cannot connect" in seen["first"] and "Quit" in seen["first"]

        assert wait_for(first_screen, 60, step=0.3), seen.get("first")
        time.sleep(1.5)  # the sources' first reconnects: whatever they import has been imported
        first = tmux("capture-pane", "-p", "-t", "w")
        tmux("send-keys", "-t", "w", "q")

        def exited() -> bool:
            seen["after"] = tmux("capture-pane", "-p", "-S", "-100", "-t", "w")
            return "CONSOLE-EXITED" in seen["after"]

        assert wait_for(exited, 30, step=0.3), seen.get("after")
        return first, seen["after"]
    finally:
        tmux("kill-server")


@pytest.mark.usefixtures("lab_parts")  # a real tmux
def test_the_consoles_first_screen_and_the_terminal_after_it_carry_no_warning(
        tmp_path: Path, config: tuple[Path, dict[str, str]]) -> None:
    path, env = config
    _, debug_after = tmux_console(tmp_path / "debug", path, {**env, "SPECCONSOLE_DEBUG": "1"})
    assert WARNED.split(":")[0] in debug_after.replace("\n", ""), debug_after  # this console does import asyncssh
    first, after = tmux_console(tmp_path / "plain", path, env)
    assert "gpu-1" in first and not WARNING_TEXT.search(first), first
    assert "CONSOLE-EXITED 0" in after and not WARNING_TEXT.search(after), after
