"""Config loading: the shipped example is valid; every kind of mistake names file, key and fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from specconsole.config import load_config
from specconsole.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]

MINIMAL = """
[[hosts]]
name = "gpu1"
role = "train"
connect = "ssh"
host = "gpu1.example"

[hosts.training]
log_path = "/data/train.log"
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.toml"
    p.write_text(text)
    return p


def test_example_config_describes_the_two_host_topology() -> None:
    cfg = load_config(ROOT / "configs" / "example.toml")
    train = [h for h in cfg.hosts if h.trains]
    serve = [h for h in cfg.hosts if h.serves]
    assert len(train) == 1 and len(serve) == 1
    assert train[0].training is not None and train[0].training.total_epochs == 6
    assert serve[0].sglang is not None and serve[0].sglang.tunnel is True
    assert serve[0].sglang.draft_model_path


def test_minimal_config_gets_defaults(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, MINIMAL))
    h = cfg.hosts[0]
    assert h.connect == "ssh" and h.port is None and h.gpu.source == "auto"
    assert h.training is not None and h.training.kill.grace_s == 30.0
    assert h.ssh.backoff_max_s == 15.0


@pytest.mark.parametrize(
    ("text", "key", "needle"),
    [
        ("[[hosts]\nname=1", None, "invalid TOML"),
        ("", "hosts", "no hosts configured"),
        (MINIMAL.replace('role = "train"', 'role = "trainer"'), "hosts[0] (gpu1).role", "must be one of"),
        (MINIMAL.replace('log_path', 'logpath'), "hosts[0] (gpu1).training.logpath", "did you mean 'log_path'"),
        (MINIMAL.replace('[hosts.training]\nlog_path = "/data/train.log"', ""), "hosts[0] (gpu1).training",
         "needs a [hosts.training]"),
        (MINIMAL.replace('host = "gpu1.example"', ""), "hosts[0] (gpu1).host", "needs a host"),
        (MINIMAL + "total_steps = -5\n", "hosts[0] (gpu1).training.total_steps", "must be positive"),
        (MINIMAL + "total_steps = \"many\"\n", "hosts[0] (gpu1).training.total_steps", "must be an integer"),
        (MINIMAL.replace('host = "gpu1.example"', 'host = "gpu1.example"\nport = 70000'), "hosts[0] (gpu1).port",
         "not a TCP port"),
        (MINIMAL + 'format = "regex"\n', "hosts[0] (gpu1).training.patterns", "needs patterns"),
        (MINIMAL + 'patterns = ["step (\\\\d+"]\n', "hosts[0] (gpu1).training.patterns", "invalid regular expression"),
        (MINIMAL + MINIMAL, "hosts[1].name", "duplicate host name"),
        (MINIMAL.replace('role = "train"', 'role = "serve"').replace("[hosts.training]\nlog_path = \"/data/train.log\"",
         '[hosts.sglang]\nbase_url = "localhost:30000"'), "hosts[0] (gpu1).sglang.base_url", "not an http(s) URL"),
        ("[consol]\n" + MINIMAL, "consol", "unknown top-level key"),
    ],
)
def test_bad_configs_name_file_key_and_fix(tmp_path: Path, text: str, key: str | None, needle: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    err = info.value
    assert err.path == str(path)
    assert err.key == key
    assert needle in str(err)
    assert "(fix: " in str(err) and "\n" not in str(err)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "nope.toml")


def test_cli_reports_bad_config_in_one_line_with_exit_2(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL.replace('role = "train"', 'role = 7'))
    res = subprocess.run([sys.executable, "-m", "specconsole", "status", "--config", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert str(path) in lines[0] and "role" in lines[0] and "fix:" in lines[0]
    assert "Traceback" not in res.stderr
