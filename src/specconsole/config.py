"""Console configuration: a TOML file listing hosts, how to reach them and what to watch.

Every validation error is a :class:`~specconsole.errors.ConfigError` naming the file, the key
and the fix; the CLI turns it into a one-line message and exit code 2.
"""

from __future__ import annotations

import difflib
import math
import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

from specconsole import paths
from specconsole.errors import ConfigError

Role = Literal["train", "serve", "both"]
ROLES: tuple[str, ...] = ("train", "serve", "both")
GPU_SOURCES: tuple[str, ...] = ("auto", "nvidia-smi", "nvml", "none")
LOG_FORMATS: tuple[str, ...] = ("auto", "json", "kv", "tqdm", "regex")

DEFAULT_CONFIG_ENV = "SPECCONSOLE_CONFIG"


def _num(default: float | None = None, *, gt: float | None = None, ge: float | None = None,
         le: float | None = None, why: str = "", what: str = "", example: float | None = None) -> Any:
    """A numeric setting and its allowed range, checked by the reader: every number has one.

    ``gt``/``ge``/``le`` are the bounds; ``why`` says in the error why the bound exists;
    ``what`` names the kind of value (``a TCP port``); ``example`` is the value the fix
    suggests (the default when there is one). ``inf`` and ``nan`` are refused for every number.
    """
    meta = {"gt": gt, "ge": ge, "le": le, "why": why, "what": what,
            "example": default if example is None else example}
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class SshSettings:
    """SSH defaults; any host may override them. ``None`` means "as OpenSSH would"."""

    known_hosts: str | None = None
    keepalive_s: float = _num(15.0, gt=0, why="keepalives are how a dead host is noticed")
    connect_timeout_s: float = _num(10.0, gt=0, why="0 would give up before connecting")
    backoff_initial_s: float = _num(0.5, gt=0, why="0 would retry in a busy loop")
    backoff_max_s: float = _num(15.0, gt=0, why="0 would retry in a busy loop")
    ssh_config: str | None = None


@dataclass(frozen=True)
class GpuConfig:
    source: str = "auto"
    interval_s: float = _num(1.0, gt=0, why="it is the time between two readings")


@dataclass(frozen=True)
class KillConfig:
    """How to find the training job: the first of pid_file, systemd_unit, pattern that is set."""

    pid_file: str | None = None
    systemd_unit: str | None = None
    pattern: str | None = None
    grace_s: float = _num(30.0, ge=0, why="seconds from SIGTERM to SIGKILL; 0: at once")


@dataclass(frozen=True)
class TrainingConfig:
    log_path: str
    format: str = "auto"
    patterns: tuple[str, ...] = ()
    total_steps: int | None = _num(gt=0, why="the step count the ETA aims at", example=33000)
    total_epochs: float | None = _num(gt=0, why="the epoch count the ETA aims at", example=6)
    steps_per_epoch: int | None = _num(gt=0, why="it converts epochs to steps", example=5500)
    tail_lines: int = _num(200, gt=0, why="it is how many past lines are read at start")
    stall_warning_min: float = _num(10.0, gt=0, why="0 would flag every job as stalled")
    kill: KillConfig = field(default_factory=KillConfig)


@dataclass(frozen=True)
class SglangConfig:
    base_url: str
    unit: str = "sglang.service"
    tunnel: bool = False
    interval_s: float = _num(2.0, gt=0, why="it is the time between two polls")
    timeout_s: float = _num(3.0, gt=0, why="0 would fail every request")
    draft_model_path: str | None = None
    api_key: str | None = None


@dataclass(frozen=True)
class HostConfig:
    name: str
    role: Role
    connect: Literal["local", "ssh"] = "local"
    host: str | None = None
    port: int | None = _num(ge=1, le=65535, what="a TCP port", why="22 is SSH's default",
                            example=22)
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
    refresh_s: float = _num(1.0, gt=0, why="it is the time between two redraws")
    read_only: bool = False
    theme: str | None = None
    audit_log: str = field(default_factory=lambda: str(paths.state_dir() / "audit.log"))
    state_dir: str = field(default_factory=lambda: str(paths.state_dir()))
    # -- fleet view (issue 13): more hosts than this open on the fleet table, one line per host
    fleet_threshold: int = _num(8, ge=0, why="it is a host count (0: always the fleet view)")


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
            kwargs[key] = self.value(full, value, names[key])
        try:
            return cls(**kwargs)
        except TypeError as err:
            missing = [n for n, f in names.items() if n not in kwargs and _required(f)]
            key = f"{prefix}.{missing[0]}" if missing and prefix else (missing[0] if missing else prefix)
            raise self.fail(key, "required key is missing", f"add {key} = ...") from err

    def value(self, key: str, value: Any, spec: Any) -> Any:
        ann = str(spec.type)
        if ann.startswith("tuple[str"):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise self.fail(key, "must be a list of strings", f'write {key.rsplit(".", 1)[-1]} = ["..."]')
            return tuple(value)
        if "float" in ann or "int" in ann:
            return self.number(key, value, integer="float" not in ann, spec=spec)
        if "bool" in ann:
            if not isinstance(value, bool):
                raise self.fail(key, f"must be true or false, got {value!r}", "write true or false")
            return value
        if "str" in ann:
            if not isinstance(value, str) or not value.strip():
                raise self.fail(key, f"must be a non-empty string, got {value!r}", 'write it in quotes, e.g. "x"')
            return value
        return value


    def number(self, key: str, value: Any, *, integer: bool, spec: Any) -> int | float:
        """A number within the field's declared range (see :func:`_num`); never inf or nan."""
        meta = spec.metadata
        example = f"e.g. {meta.get('example', spec.default):g}"
        if isinstance(value, bool) or not isinstance(value, int | float):
            kind = "an integer" if integer else "a number"
            raise self.fail(key, f"must be {kind}, got {value!r}", f"use {example}")
        if integer and not isinstance(value, int):
            raise self.fail(key, f"must be an integer, got {value!r}", f"use a whole number, {example}")
        if not math.isfinite(value):
            raise self.fail(key, f"must be a finite number, got {value!r}", f"use {example}")
        gt, ge, le = meta.get("gt"), meta.get("ge"), meta.get("le")
        bad = ((gt is not None and not value > gt) or (ge is not None and not value >= ge)
               or (le is not None and not value <= le))
        if bad:
            allowed = " and ".join(f"{op} {b:g}" for op, b in ((">", gt), (">=", ge), ("<=", le))
                                   if b is not None)
            problem = (f"not {meta['what']}: {value!r}" if meta.get("what") else
                       "must be positive" if gt == 0 and not le else f"must be {allowed}")
            if not meta.get("what"):
                problem += f", got {value!r}"
            why = f" ({meta['why']})" if meta.get("why") else ""
            raise self.fail(key, problem + why, f"use a value {allowed}, {example}")
        return value if integer else float(value)


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
    if ssh.backoff_max_s < ssh.backoff_initial_s:
        raise r.fail(f"{prefix}.ssh.backoff_max_s",
                     f"{ssh.backoff_max_s:g} is below backoff_initial_s = {ssh.backoff_initial_s:g}",
                     f"use backoff_max_s >= {ssh.backoff_initial_s:g}")
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
        _check_base_url(r, f"{prefix}.sglang.base_url", sglang.base_url)
    host = r.build(HostConfig, h, prefix, ssh=ssh, gpu=gpu, training=training, sglang=sglang)
    _choice(r, f"{prefix}.role", host.role, ROLES)
    _choice(r, f"{prefix}.connect", host.connect, ("local", "ssh"))
    if host.connect == "ssh" and not host.host:
        raise r.fail(f"{prefix}.host", "connect = \"ssh\" needs a host",
                     'add host = "name-or-address" (an ~/.ssh/config alias works)')
    if host.connect == "ssh" and gpu.source == "nvml":
        raise r.fail(f"{prefix}.gpu.source", "\"nvml\" reads the GPUs of the machine the console "
                     "runs on, not of an SSH host", 'set source = "nvidia-smi" (or "auto")')
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


def _check_base_url(r: _Reader, key: str, url: str) -> None:
    """An http(s) URL with a host and, if given, a valid port (what httpx and a tunnel need)."""
    fix = 'write e.g. base_url = "http://127.0.0.1:30000"'
    if not url.startswith(("http://", "https://")):
        raise r.fail(key, f"not an http(s) URL: {url!r}", fix)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as err:  # "Port out of range 0-65535", "Invalid IPv6 URL", ...
        raise r.fail(key, f"not a valid URL: {url!r} ({err})", fix) from None
    if not parts.hostname:
        raise r.fail(key, f"no host in {url!r}", fix)
    if port == 0:
        raise r.fail(key, f"port 0 in {url!r} is not a TCP port", "use a port 1-65535, e.g. 30000")


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
