"""Config loading: the shipped example is valid; every kind of mistake names file, key and fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from msgspec import inspect as mi

from specconsole.base.errors import ConfigError
from specconsole.config import (
    ConsoleSettings,
    GpuConfig,
    HostConfig,
    KillConfig,
    SglangConfig,
    SshSettings,
    TrainingConfig,
    load_config,
    parse_config,
)

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


SERVE = """
[[hosts]]
name = "s1"
role = "serve"
connect = "ssh"
host = "s1.example"
port = 2222

[hosts.sglang]
base_url = "http://127.0.0.1:30000"
"""
S = "hosts[0] (s1)"
G = "hosts[0] (gpu1)"


@pytest.mark.parametrize(
    ("text", "key", "needle"),
    [
        # URLs that used to end in a traceback when the sources started
        (SERVE.replace("127.0.0.1:30000", "127.0.0.1:99999"), f"{S}.sglang.base_url", "Port out of range"),
        (SERVE.replace("http://127.0.0.1:30000", "http://[::1"), f"{S}.sglang.base_url", "Invalid IPv6 URL"),
        (SERVE.replace("http://127.0.0.1:30000", "http://:30000"), f"{S}.sglang.base_url", "no host in"),
        (SERVE.replace("127.0.0.1:30000", "127.0.0.1:0"), f"{S}.sglang.base_url", "is not a TCP port"),
        # NVML reads the console's own machine
        (SERVE + '[hosts.gpu]\nsource = "nvml"\n', f"{S}.gpu.source", "not of an SSH host"),
        # zero where zero makes no sense
        ("[console]\nrefresh_s = 0\n" + MINIMAL, "console.refresh_s", "must be positive"),
        (MINIMAL + '[hosts.gpu]\ninterval_s = 0\n', f"{G}.gpu.interval_s", "must be positive"),
        (SERVE + "interval_s = 0\n", f"{S}.sglang.interval_s", "must be positive"),
        (SERVE + "timeout_s = 0\n", f"{S}.sglang.timeout_s", "must be positive"),
        (SERVE + 'health = "sometimes"\n', f"{S}.sglang.health", "must be one of generate, plain, got 'sometimes'"),
        (SERVE + "health_generate_timeout_s = 0\n", f"{S}.sglang.health_generate_timeout_s", "must be positive"),
        (SERVE + "max_metrics_mib = 0\n", f"{S}.sglang.max_metrics_mib", "must be positive"),
        ("[ssh]\nconnect_timeout_s = 0\n" + MINIMAL, "ssh.connect_timeout_s", "must be positive"),
        (MINIMAL + '[hosts.ssh]\nkeepalive_s = 0\n', f"{G}.ssh.keepalive_s", "must be positive"),
        (MINIMAL + '[hosts.ssh]\nbackoff_initial_s = 0\n', f"{G}.ssh.backoff_initial_s", "busy loop"),
        (MINIMAL + '[hosts.ssh]\nbackoff_max_s = 0.1\n', f"{G}.ssh.backoff_max_s",
         "below backoff_initial_s"),
        (MINIMAL + "stall_warning_min = 0\n", f"{G}.training.stall_warning_min", "must be positive"),
        (MINIMAL + "tail_lines = 0\n", f"{G}.training.tail_lines", "must be positive"),
        (MINIMAL + "total_epochs = 0\n", f"{G}.training.total_epochs", "must be positive"),
        (MINIMAL + "[hosts.training.kill]\ngrace_s = -1\n", f"{G}.training.kill.grace_s", "must be >= 0"),
        # never inf or nan
        (MINIMAL + "total_epochs = inf\n", f"{G}.training.total_epochs", "must be a finite number"),
        (MINIMAL + "stall_warning_min = nan\n", f"{G}.training.stall_warning_min", "must be a finite number"),
        (MINIMAL + "[hosts.training.kill]\ngrace_s = inf\n", f"{G}.training.kill.grace_s", "finite"),
        ("[console]\nrefresh_s = -inf\n" + MINIMAL, "console.refresh_s", "must be a finite number"),
        (MINIMAL + "steps_per_epoch = 5500.5\n", f"{G}.training.steps_per_epoch", "must be an integer"),
        (SERVE.replace("port = 2222", "port = 0"), f"{S}.port", "not a TCP port"),
    ],
)
def test_bad_values_are_one_line_errors(tmp_path: Path, text: str, key: str, needle: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    err = info.value
    assert (err.path, err.key) == (str(path), key)
    assert needle in str(err)
    assert "(fix: " in str(err) and "\n" not in str(err)


def test_zero_grace_and_fractional_epochs_are_allowed(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, MINIMAL + "total_epochs = 2.5\n[hosts.training.kill]\ngrace_s = 0\n"))
    t = cfg.hosts[0].training
    assert t is not None and t.total_epochs == 2.5 and t.kill.grace_s == 0.0


@pytest.mark.parametrize(
    "cls", [SshSettings, GpuConfig, KillConfig, TrainingConfig, SglangConfig, HostConfig, ConsoleSettings])
def test_every_number_declares_its_range(cls: type) -> None:
    """msgspec checks numbers against per-key bounds: no number may be left unbounded."""
    info = mi.type_info(cls)
    assert isinstance(info, mi.DataclassType)
    for f in info.fields:
        types = f.type.types if isinstance(f.type, mi.UnionType) else (f.type,)
        for t in types:
            t = t.type if isinstance(t, mi.Metadata) else t
            if isinstance(t, mi.IntType | mi.FloatType):
                assert any(b is not None for b in (t.gt, t.ge, t.le)), f"{cls.__name__}.{f.name} has no declared range"


def test_cli_reports_a_bad_url_in_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, SERVE.replace("http://127.0.0.1:30000", "http://[::1"))
    res = subprocess.run([sys.executable, "-m", "specconsole", "status", "--config", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.count("\n") == 1 and "base_url" in res.stderr and "fix:" in res.stderr


DEEP = {
    "an array 600 deep": "x = " + "[" * 600 + "]" * 600 + "\n",
    "an inline table 600 deep": "x = " + "{a = " * 600 + "1" + "}" * 600 + "\n",
    # parses (a dotted header is flat to the parser), then 1,500 nested dicts reach the validator
    "a table header 1500 deep": "[keys." + ".".join(["a"] * 1500) + "]\n",
}


@pytest.mark.parametrize("text", DEEP.values(), ids=list(DEEP))
def test_a_config_nested_hundreds_deep_is_one_line_not_a_traceback(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text + MINIMAL)
    res = subprocess.run([sys.executable, "-m", "specconsole", "status", "--config", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stderr[-300:]
    assert res.stdout == ""
    assert res.stderr.splitlines() == [f"specconsole: {path}: tables or arrays nested too deeply to read "
                                       "(hundreds of levels) (fix: flatten the file: these files nest a few "
                                       "levels at most)"]


OPERANDS = {
    "hosts[0] (gpu1).training.log_path": ("log_path", "path"),
    "hosts[0] (gpu1).training.checkpoint_dir": ("checkpoint_dir", "path"),
    "hosts[0] (gpu1).training.kill.pid_file": ("kill.pid_file", "path"),
    "hosts[0] (gpu1).training.kill.systemd_unit": ("kill.systemd_unit", "unit"),
    "hosts[0] (gpu1).sglang.unit": ("sglang.unit", "unit"),
    "hosts[0] (gpu1).sglang.draft_model_path": ("sglang.draft_model_path", "path"),
}


@pytest.mark.parametrize("key", OPERANDS)
def test_a_unit_or_remote_path_beginning_with_a_dash_is_refused(key: str) -> None:
    """``systemctl cat -Hroot@host`` and ``tail -F --pid=1`` read such a value as an option."""
    field, kind = OPERANDS[key]
    host: dict[str, object] = {"name": "gpu1", "role": "both", "training": {"log_path": "/x/train.jsonl"},
                               "sglang": {"base_url": "http://127.0.0.1:30000"}}
    table, _, name = field.rpartition(".")
    target = host["training"] if table in ("", "kill") else host["sglang"]
    assert isinstance(target, dict)
    if table == "kill":
        target = target.setdefault("kill", {})
    target[name] = "-Hroot@evil" if kind == "unit" else "--pid=1"
    with pytest.raises(ConfigError) as err:
        parse_config({"hosts": [host]}, "c.toml")
    assert err.value.key == key
    fix = 'use the unit\'s name, e.g. "sglang.service"' if kind == "unit" else \
        'write it as an absolute path, or "./-name"'
    assert str(err.value) == (f"c.toml: {key}: must be a {kind}{' name' if kind == 'unit' else ''} not beginning "
                              f"with '-' (a command on the host would read it as an option), got "
                              f"{target[name]!r} (fix: {fix})")
    target[name] = "./-odd" if kind == "path" else "x-y.service"  # a dash inside is fine
    parse_config({"hosts": [host]}, "c.toml")
