"""Console configuration: a TOML file listing hosts, how to reach them and what to watch.

Every validation error is a :class:`~specconsole.errors.ConfigError` naming the file, the key
and the fix; the CLI turns it into a one-line message and exit code 2.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, TypeVar

from specconsole import paths
from specconsole.errors import ConfigError

Role = Literal["train", "serve", "both"]
ROLES: tuple[str, ...] = ("train", "serve", "both")
GPU_SOURCES: tuple[str, ...] = ("auto", "nvidia-smi", "nvml", "none")
LOG_FORMATS: tuple[str, ...] = ("auto", "json", "kv", "tqdm", "regex")

DEFAULT_CONFIG_ENV = "SPECCONSOLE_CONFIG"


@dataclass(frozen=True)
class SshSettings:
    """SSH defaults; any host may override them. ``None`` means "as OpenSSH would"."""

    known_hosts: str | None = None
    keepalive_s: float = 15.0
    connect_timeout_s: float = 10.0
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 15.0
    ssh_config: str | None = None


@dataclass(frozen=True)
class GpuConfig:
    source: str = "auto"
    interval_s: float = 1.0


@dataclass(frozen=True)
class KillConfig:
    """How to find the training job: the first of pid_file, systemd_unit, pattern that is set."""

    pid_file: str | None = None
    systemd_unit: str | None = None
    pattern: str | None = None
    grace_s: float = 30.0


@dataclass(frozen=True)
class TrainingConfig:
    log_path: str
    format: str = "auto"
    patterns: tuple[str, ...] = ()
    total_steps: int | None = None
    total_epochs: float | None = None
    steps_per_epoch: int | None = None
    tail_lines: int = 200
    stall_warning_min: float = 10.0
    kill: KillConfig = field(default_factory=KillConfig)


@dataclass(frozen=True)
class SglangConfig:
    base_url: str
    unit: str = "sglang.service"
    tunnel: bool = False
    interval_s: float = 2.0
    timeout_s: float = 3.0
    draft_model_path: str | None = None
    api_key: str | None = None


@dataclass(frozen=True)
class HostConfig:
    name: str
    role: Role
    connect: Literal["local", "ssh"] = "local"
    host: str | None = None
    port: int | None = None
    user: str | None = None
    identity_file: str | None = None
    ssh: SshSettings = field(default_factory=SshSettings)
    gpu: GpuConfig = field(default_factory=GpuConfig)
    training: TrainingConfig | None = None
    sglang: SglangConfig | None = None

    @property
    def trains(self) -> bool:
        return self.role in ("train", "both")

    @property
    def serves(self) -> bool:
        return self.role in ("serve", "both")


@dataclass(frozen=True)
class ConsoleSettings:
    refresh_s: float = 1.0
    read_only: bool = False
    theme: str | None = None
    audit_log: str = field(default_factory=lambda: str(paths.state_dir() / "audit.log"))
    state_dir: str = field(default_factory=lambda: str(paths.state_dir()))


@dataclass(frozen=True)
class Config:
    path: str
    hosts: tuple[HostConfig, ...]
    console: ConsoleSettings = field(default_factory=ConsoleSettings)
    keys: dict[str, str] = field(default_factory=dict)

    def host(self, name: str) -> HostConfig:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    @property
    def train_hosts(self) -> tuple[HostConfig, ...]:
        return tuple(h for h in self.hosts if h.trains and h.training)

    @property
    def serve_hosts(self) -> tuple[HostConfig, ...]:
        return tuple(h for h in self.hosts if h.serves and h.sglang)


# --------------------------------------------------------------------------- parsing

D = TypeVar("D")


class _Reader:
    """Reads one TOML table into a dataclass, rejecting unknown keys and wrong types."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, key: str | None, problem: str, fix: str) -> ConfigError:
        return ConfigError(self.path, key, problem, fix)

    def table(self, data: Any, key: str) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise self.fail(key, f"must be a table, got {type(data).__name__}", f"write [{key}]")
        return data

    def build(self, cls: type[D], data: dict[str, Any], prefix: str, **extra: Any) -> D:
        names = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
        kwargs: dict[str, Any] = dict(extra)
        for key, value in data.items():
            full = f"{prefix}.{key}" if prefix else key
            if key not in names or key in extra:
                close = difflib.get_close_matches(key, list(names), n=1)
                hint = f"did you mean '{close[0]}'?" if close else f"remove it (allowed: {', '.join(sorted(names))})"
                raise self.fail(full, "unknown key", hint)
            kwargs[key] = self.value(full, value, names[key].type)
        try:
            return cls(**kwargs)
        except TypeError as err:
            missing = [n for n, f in names.items() if n not in kwargs and _required(f)]
            key = f"{prefix}.{missing[0]}" if missing and prefix else (missing[0] if missing else prefix)
            raise self.fail(key, "required key is missing", f"add {key} = ...") from err

    def value(self, key: str, value: Any, annotation: Any) -> Any:
        ann = str(annotation)
        if ann.startswith("tuple[str"):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise self.fail(key, "must be a list of strings", f'write {key.rsplit(".", 1)[-1]} = ["..."]')
            return tuple(value)
        if "float" in ann and "int" not in ann:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise self.fail(key, f"must be a number, got {value!r}", "use e.g. 1.5")
            if value < 0:
                raise self.fail(key, f"must not be negative, got {value!r}", "use a value >= 0")
            return float(value)
        if "int" in ann and "float" in ann:  # int | float
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise self.fail(key, f"must be a positive number, got {value!r}", "use e.g. 6")
            return value
        if "int" in ann:
            if isinstance(value, bool) or not isinstance(value, int):
                raise self.fail(key, f"must be an integer, got {value!r}", "use a whole number, e.g. 22")
            if value <= 0:
                raise self.fail(key, f"must be positive, got {value}", "use a value > 0")
            return value
        if "bool" in ann:
            if not isinstance(value, bool):
                raise self.fail(key, f"must be true or false, got {value!r}", "write true or false")
            return value
        if "str" in ann:
            if not isinstance(value, str) or not value.strip():
                raise self.fail(key, f"must be a non-empty string, got {value!r}", 'write it in quotes, e.g. "x"')
            return value
        return value


def _required(f: Any) -> bool:
    from dataclasses import MISSING

    return f.default is MISSING and f.default_factory is MISSING


def _choice(r: _Reader, key: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise r.fail(key, f"must be one of {', '.join(choices)}, got {value!r}", f"set {key} = \"{choices[0]}\"")


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and validate a config file; raises :class:`ConfigError` with file, key and fix."""
    p = Path(path).expanduser()
    shown = str(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(shown, None, "file not found", "pass --config FILE, or copy configs/example.toml") from None
    except OSError as err:
        raise ConfigError(shown, None, f"cannot read: {err.strerror}", "check the path and its permissions") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(shown, None, "not UTF-8 text", "save the file as UTF-8 TOML") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(shown, None, f"invalid TOML: {err}", "correct the syntax at that line") from None
    return parse_config(data, shown)


def parse_config(data: dict[str, Any], path: str = "<config>") -> Config:
    r = _Reader(path)
    unknown = set(data) - {"console", "ssh", "hosts", "keys"}
    if unknown:
        key = sorted(unknown)[0]
        raise r.fail(key, "unknown top-level key", "allowed: [console], [ssh], [keys], [[hosts]]")
    console = r.build(ConsoleSettings, r.table(data.get("console", {}), "console"), "console")
    ssh_defaults = r.build(SshSettings, r.table(data.get("ssh", {}), "ssh"), "ssh")
    keys_raw = r.table(data.get("keys", {}), "keys")
    for k, v in keys_raw.items():
        if not isinstance(v, str) or not v:
            raise r.fail(f"keys.{k}", f"must be a key name string, got {v!r}", f'write {k} = "ctrl+k"')
    hosts_raw = data.get("hosts")
    if not hosts_raw:
        raise r.fail("hosts", "no hosts configured", "add at least one [[hosts]] table with name and role")
    if not isinstance(hosts_raw, list):
        raise r.fail("hosts", "must be an array of tables", "write each host as [[hosts]]")
    hosts: list[HostConfig] = []
    seen: set[str] = set()
    for i, h in enumerate(hosts_raw):
        hosts.append(_parse_host(r, r.table(h, f"hosts[{i}]"), i, ssh_defaults))
        if hosts[-1].name in seen:
            raise r.fail(f"hosts[{i}].name", f"duplicate host name {hosts[-1].name!r}", "give every host a unique name")
        seen.add(hosts[-1].name)
    return Config(path=path, hosts=tuple(hosts), console=console, keys=dict(keys_raw))


def _parse_host(r: _Reader, h: dict[str, Any], i: int, ssh_defaults: SshSettings) -> HostConfig:
    prefix = f"hosts[{i}]"
    name = h.get("name")
    if isinstance(name, str) and name:
        prefix = f"hosts[{i}] ({name})"
    h = dict(h)
    subtables: dict[str, Any] = {}
    for sub in ("ssh", "gpu", "training", "sglang"):
        if sub in h:
            subtables[sub] = r.table(h.pop(sub), f"{prefix}.{sub}")
    ssh_over = subtables.get("ssh", {})
    ssh = r.build(SshSettings, {**_asdict(ssh_defaults), **ssh_over}, f"{prefix}.ssh")
    gpu = r.build(GpuConfig, subtables.get("gpu", {}), f"{prefix}.gpu")
    _choice(r, f"{prefix}.gpu.source", gpu.source, GPU_SOURCES)
    training = None
    if "training" in subtables:
        t = dict(subtables["training"])
        kill = r.build(KillConfig, r.table(t.pop("kill", {}), f"{prefix}.training.kill"), f"{prefix}.training.kill")
        training = r.build(TrainingConfig, t, f"{prefix}.training", kill=kill)
        _choice(r, f"{prefix}.training.format", training.format, LOG_FORMATS)
        if training.format == "regex" and not training.patterns:
            raise r.fail(f"{prefix}.training.patterns", "format = \"regex\" needs patterns",
                         'add patterns = ["step (?P<step>\\\\d+) loss (?P<loss>[0-9.]+)"]')
        _check_patterns(r, f"{prefix}.training.patterns", training.patterns)
    sglang = None
    if "sglang" in subtables:
        sglang = r.build(SglangConfig, subtables["sglang"], f"{prefix}.sglang")
        if not sglang.base_url.startswith(("http://", "https://")):
            raise r.fail(f"{prefix}.sglang.base_url", f"not an http(s) URL: {sglang.base_url!r}",
                         'write e.g. base_url = "http://127.0.0.1:30000"')
    host = r.build(HostConfig, h, prefix, ssh=ssh, gpu=gpu, training=training, sglang=sglang)
    _choice(r, f"{prefix}.role", host.role, ROLES)
    _choice(r, f"{prefix}.connect", host.connect, ("local", "ssh"))
    if host.connect == "ssh" and not host.host:
        raise r.fail(f"{prefix}.host", "connect = \"ssh\" needs a host",
                     'add host = "name-or-address" (an ~/.ssh/config alias works)')
    if host.port is not None and not 0 < host.port < 65536:
        raise r.fail(f"{prefix}.port", f"not a TCP port: {host.port}", "use 1-65535 (22 is SSH's default)")
    if host.trains and training is None:
        raise r.fail(f"{prefix}.training", f"role {host.role!r} needs a [hosts.training] table",
                     'add [hosts.training] with log_path = "/path/to/train.log"')
    if host.serves and sglang is None:
        raise r.fail(f"{prefix}.sglang", f"role {host.role!r} needs a [hosts.sglang] table",
                     'add [hosts.sglang] with base_url = "http://127.0.0.1:30000"')
    if sglang and sglang.tunnel and host.connect != "ssh":
        raise r.fail(f"{prefix}.sglang.tunnel", "a tunnel needs connect = \"ssh\"",
                     "set tunnel = false for a local host")
    return host


def _check_patterns(r: _Reader, key: str, patterns: tuple[str, ...]) -> None:
    import re

    for p in patterns:
        try:
            rx = re.compile(p)
        except re.error as err:
            raise r.fail(key, f"invalid regular expression {p!r}: {err}",
                         "fix the pattern (Python re syntax)") from None
        if not rx.groupindex:
            raise r.fail(key, f"pattern {p!r} has no named groups", "name the fields, e.g. (?P<step>\\d+)")


def _asdict(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in fields(obj) if getattr(obj, f.name) is not None}


def default_config_path() -> str | None:
    """The config to use when ``--config`` is absent: $SPECCONSOLE_CONFIG, then the user's file."""
    env = os.environ.get(DEFAULT_CONFIG_ENV)
    if env:
        return env
    user = paths.default_config_file()
    return str(user) if user.exists() else None
