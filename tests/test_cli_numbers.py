"""Every number on the command line is checked like a config key (issue 24, items 2 and 4).

``deploy --health-timeout nan`` used to restart the live server and roll it back;
``kill-training --grace nan`` never escalated to SIGKILL. Each bad number is now refused with
one line on stderr and exit 2, before any host is contacted: the configured "host" here is a
listening socket on loopback, and it must never see a connection.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from specconsole.base.errors import ConfigError
from specconsole.base.validation import Invalid, option_value
from specconsole.config import parse_config


def config_for(tmp_path: Path, port: int) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(f"""
[console]
audit_log = "{tmp_path / 'audit.log'}"

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
""")
    return path


BAD = [
    (["deploy", "--health-timeout", "nan"], "--health-timeout: must be a finite number, got nan"),
    (["deploy", "--health-timeout", "-1"], "--health-timeout: must be > 0 and <= 86400, got -1"),
    (["deploy", "--health-timeout", "1e9"], "--health-timeout: must be > 0 and <= 86400, got 1000000000.0"),
    (["deploy", "--draft-window", "99999999999999999999"],
     "--draft-window: must be >= 1 and <= 1048576, got 99999999999999999999"),
    (["deploy", "--draft-window", "sixteen"], "--draft-window: must be an integer, got 'sixteen'"),
    (["deploy", "--block-size", "1.5"], "--block-size: must be an integer, got 1.5"),
    (["deploy", "--tree-budget", "0"], "--tree-budget: must be >= 1 and <= 1048576, got 0"),
    (["kill-training", "--grace", "nan"], "--grace: must be a finite number, got nan"),
    (["kill-training", "--grace=-inf"], "--grace: must be a finite number, got -inf"),
    (["kill-training", "--grace", "-1"], "--grace: must be >= 0, got -1"),
    (["status", "--interval", "0"], "--interval: must be positive, got 0"),
    (["status", "--timeout", "nan"], "--timeout: must be a finite number, got nan"),
    (["eval", "--concurrency", "0"], "--concurrency: must be >= 1 and <= 4096, got 0"),
    (["eval", "run", "--timeout", "nan"], "--timeout: must be a finite number, got nan"),
    (["eval", "run", "--max-new-tokens", "-5"], "--max-new-tokens: must be a positive integer, got -5"),
    (["lab", "up", "--sglang-startup", "nan"], "--sglang-startup: must be a finite number, got nan"),
]


@pytest.mark.parametrize(("argv", "message"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_a_bad_number_is_refused_in_one_line_before_any_host_is_contacted(
        tmp_path: Path, listener: socket.socket, argv: list[str], message: str) -> None:
    config = config_for(tmp_path, listener.getsockname()[1])
    res = subprocess.run([sys.executable, "-m", "specconsole", *argv, "--config", str(config), "--yes"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"specconsole: {message}"), res.stderr
    assert "(fix: use " in lines[0]
    assert res.stdout == ""
    with pytest.raises(BlockingIOError):  # nothing connected to the host
        listener.accept()
    assert not (tmp_path / "audit.log").exists()


def test_grace_on_the_command_line_and_in_the_config_get_the_same_words() -> None:
    from specconsole.config import GraceSeconds

    for raw, value in (("nan", float("nan")), ("-2.5", -2.5), ("-2", -2)):
        with pytest.raises(Invalid) as option:
            option_value(raw, GraceSeconds, "--grace")
        with pytest.raises(ConfigError) as config:
            parse_config({"hosts": [{"name": "t", "role": "train", "training": {
                "log_path": "/x", "kill": {"grace_s": value}}}]})
        assert option.value.key == "--grace" and config.value.key == "hosts[0] (t).training.kill.grace_s"
        assert option.value.problem == config.value.problem
        assert option.value.fix == config.value.fix


def test_good_numbers_pass_through_as_numbers() -> None:
    from specconsole.cli import build_parser

    args = build_parser().parse_args(["deploy", "--draft-window", "+16", "--block-size", "1048576",
                                      "--health-timeout", "90"])
    assert (args.draft_window, args.block_size, args.health_timeout) == (16, 1048576, 90.0)
    args = build_parser().parse_args(["kill-training", "--grace", "0"])
    assert args.grace == 0.0
