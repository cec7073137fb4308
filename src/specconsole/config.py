"""Console configuration: a TOML file listing hosts, how to reach them and what to watch.

Every validation error is a :class:`~specconsole.base.errors.ConfigError` naming the file, the key
and the fix; the CLI turns it into a one-line message and exit code 2.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit

import msgspec

from specconsole.alert_rules.rules import Alerting, AlertRule, resolve
from specconsole.base import paths
from specconsole.base.errors import ConfigError
from specconsole.base.validation import NOT_AN_OPTION, TOO_DEEP, Invalid, Text, convert, named_items, num, text
from specconsole.base.values import escape_char, printable, unsafe_char

Role = Literal["train", "serve", "both"]
GpuSource = Literal["auto", "nvidia-smi", "nvml", "prometheus", "none"]
#: where a host's SGLang metrics come from: "http" polls base_url; "prometheus" reads the
#: [prometheus] server; "auto" is "prometheus" when [prometheus] all_hosts = true, else "http"
SglangSource = Literal["auto", "http", "prometheus"]
LogFormat = Literal["auto", "json", "kv", "tqdm", "regex"]
#: how SGLang's liveness is checked: "plain" asks ``/health``; "generate" asks
#: ``/health_generate`` (a one-token generation through the scheduler), so a hung scheduler
#: behind a ``/health`` that still answers 200 shows as "hung"
SglangHealth = Literal["plain", "generate"]
ROLES: tuple[str, ...] = get_args(Role)
GPU_SOURCES: tuple[str, ...] = get_args(GpuSource)
SGLANG_SOURCES: tuple[str, ...] = get_args(SglangSource)
SGLANG_HEALTH: tuple[str, ...] = get_args(SglangHealth)
LOG_FORMATS: tuple[str, ...] = get_args(LogFormat)

DEFAULT_CONFIG_ENV = "SPECCONSOLE_CONFIG"


_OPTION_WHY = "a command on the host would read it as an option"
#: a systemd unit name given to ``systemctl``/``journalctl`` on the host
UnitName = Annotated[str, text(NOT_AN_OPTION, f"must be a unit name not beginning with '-' ({_OPTION_WHY})",
                               'use the unit\'s name, e.g. "sglang.service"', "non-empty, no leading -")]
#: a path on the host given to ``tail``, ``cat``, ``cd``...
RemotePath = Annotated[str, text(NOT_AN_OPTION, f"must be a path not beginning with '-' ({_OPTION_WHY})",
                                 'write it as an absolute path, or "./-name"', "non-empty, no leading -")]


def _positive(why: str, example: float | None = None) -> msgspec.Meta:
    """A number > 0; ``why`` says why 0 makes no sense."""
    return num(gt=0, why=why, example=example)


@dataclass(frozen=True)
class SshSettings:
    """SSH defaults; any host may override them. ``None`` means "as OpenSSH would"."""

    known_hosts: Text | None = None
    keepalive_s: Annotated[float, _positive("keepalives are how a dead host is noticed")] = 15.0
    connect_timeout_s: Annotated[float, _positive("0 would give up before connecting")] = 10.0
    backoff_initial_s: Annotated[float, _positive("0 would retry in a busy loop")] = 0.5
    backoff_max_s: Annotated[float, _positive("0 would retry in a busy loop")] = 15.0
    ssh_config: Text | None = None


@dataclass(frozen=True)
class GpuConfig:
    source: GpuSource = "auto"
    interval_s: Annotated[float, _positive("it is the time between two readings")] = 1.0
    #: nvidia-smi's rows sent on by a small python3 filter on the host (remote/smi_frames.py, given
    #: on its command line: nothing is written there), a burst a write, unchanged rows as "=", changed
    #: rows as their changed cells; false:
    #: nvidia-smi's own output (a host without python3 falls back to it by itself)
    frames: bool = True


#: ``training.kill.grace_s`` and ``kill-training --grace``: one declaration, one check
GraceSeconds = Annotated[float, num(ge=0, why="seconds from SIGTERM to SIGKILL; 0: at once", example=30)]


@dataclass(frozen=True)
class KillConfig:
    """How to find the training job: the first of pid_file, systemd_unit, pattern that is set.
    A kill acts only on what that one finds; a later one finding processes refuses the kill
    (:func:`specconsole.actions.kill.training.find_job`)."""

    pid_file: RemotePath | None = None
    systemd_unit: UnitName | None = None
    pattern: Text | None = None
    grace_s: GraceSeconds = 30.0


@dataclass(frozen=True)
class TrainingConfig:
    log_path: RemotePath
    format: LogFormat = "auto"
    patterns: tuple[str, ...] = ()
    total_steps: Annotated[int, _positive("the step count the ETA aims at", 33000)] | None = None
    total_epochs: Annotated[float, _positive("the epoch count the ETA aims at", 6)] | None = None
    steps_per_epoch: Annotated[int, _positive("it converts epochs to steps", 5500)] | None = None
    tail_lines: Annotated[int, _positive("it is how many past lines are read at start")] = 200
    stall_warning_min: Annotated[float, _positive("0 would flag every job as stalled")] = 10.0
    #: where the run saves checkpoints (default: where the log says it saved, else the log's folder)
    checkpoint_dir: RemotePath | None = None
    kill: KillConfig = field(default_factory=KillConfig)


@dataclass(frozen=True)
class SlurmConfig:
    """The training job is a Slurm job (``[hosts.slurm]``): read with squeue/scontrol/sacct and
    cancelled with scancel over the host's connection (:mod:`specconsole.sources.slurm`)."""

    #: which job: its name (the newest of that name and user), or its id (wins when both are set)
    job_name: Text | None = None
    job_id: Annotated[int, num(ge=1, why="it is a Slurm job id", example=1234)] | None = None
    #: whose job (squeue -u); default: any user's
    user: Text | None = None
    #: SLURM_CONF for the Slurm commands on the host (default: the host's own configuration)
    conf: RemotePath | None = None
    interval_s: Annotated[float, _positive("it is the time between two squeue polls")] = 5.0
    #: how long a kill waits for the job to reach CANCELLED after scancel
    cancel_timeout_s: Annotated[float, _positive("0 would give up at once")] = 60.0


@dataclass(frozen=True)
class SglangConfig:
    base_url: Text
    unit: UnitName = "sglang.service"
    tunnel: bool = False
    interval_s: Annotated[float, _positive("it is the time between two polls")] = 2.0
    timeout_s: Annotated[float, _positive("0 would fail every request")] = 3.0
    #: while healthy, how often ``/health`` (or ``/health_generate``) is asked (``/metrics`` is
    #: read every poll): SGLang's ``/health`` runs a one-token generation on an idle server
    health_interval_s: Annotated[float, _positive("it is the time between two health checks")] = 5.0
    #: "plain": ``/health``; "generate": ``/health_generate``, and a ``/health_generate`` that
    #: times out or fails while ``/health`` answers 200 is the state "hung"
    health: SglangHealth = "plain"
    #: how long ``/health_generate`` may take (a generation waits behind the running batch)
    health_generate_timeout_s: Annotated[float, _positive("0 would fail every check")] = 10.0
    draft_model_path: RemotePath | None = None
    api_key: Text | None = None
    source: SglangSource = "auto"
    #: the most ``/metrics`` may answer (read streamed; the rest is never read): a server, or a
    #: proxy in front of it, answering 200 MB must not make the console hold 200 MB
    max_metrics_mib: Annotated[float, _positive("0 would refuse every /metrics answer")] = 8.0
    #: the same for the JSON endpoints (``/health``, ``/server_info``; ``/generate`` gets this
    #: plus 64 bytes per requested token)
    max_body_mib: Annotated[float, _positive("0 would refuse every answer")] = 1.0
    #: the URL the router ([router]) knows this replica by (default: base_url)
    router_worker_url: Text | None = None


#: the rollout's default quality gate (``specconsole deploy --hosts``): the changed replica against
#: a not-yet-changed one, on the same prompts
DEFAULT_GATE = "accept_len>=0.95*baseline,tok_s>=0.9*baseline"


@dataclass(frozen=True)
class RouterConfig:
    """The sglang-router in front of the serving replicas: a rollout (``deploy --hosts``) takes
    each replica out of it, deploys, gates and puts it back."""

    url: Text
    #: how long a removed replica may take to finish its running requests; also the longest a
    #: replica stays out of the router when the console is gone (the host agent re-adds it)
    drain_timeout_s: Annotated[float, _positive("it bounds the drain")] = 60.0
    gate: Text = DEFAULT_GATE
    #: the gate's prompts: these tasks of the eval suite (default: all of the shipped coding suite)
    gate_tasks: tuple[Text, ...] = ()
    gate_max_new_tokens: Annotated[int, num(ge=1, le=32768, why="tokens per gate prompt", example=128)] = 256
    canary_wait_s: Annotated[float, num(ge=0, why="seconds to hold after the canary", example=30)] = 0.0
    timeout_s: Annotated[float, _positive("0 would fail every request")] = 5.0


@dataclass(frozen=True)
class HostConfig:
    name: Text
    role: Role
    connect: Literal["local", "ssh"] = "local"
    host: Text | None = None
    port: Annotated[int, num(ge=1, le=65535, what="a TCP port", why="22 is SSH's default", example=22)] | None = None
    user: Text | None = None
    identity_file: Text | None = None
    ssh: SshSettings = field(default_factory=SshSettings)
    gpu: GpuConfig = field(default_factory=GpuConfig)
    training: TrainingConfig | None = None
    sglang: SglangConfig | None = None
    #: the training job runs under Slurm (issue 32)
    slurm: SlurmConfig | None = None
    #: the login user is not root: a deploy runs its privileged part through ``sudo -n``
    sudo: bool = False

    @property
    def trains(self) -> bool:
        return self.role in ("train", "both")

    @property
    def serves(self) -> bool:
        return self.role in ("serve", "both")


def _state_dir() -> str:
    return str(paths.state_dir())


def _audit_log() -> str:
    return str(paths.state_dir() / "audit.log")


@dataclass(frozen=True)
class ConsoleSettings:
    refresh_s: Annotated[float, _positive("it is the time between two redraws")] = 1.0
    read_only: bool = False
    theme: Text | None = None
    audit_log: Text = field(default_factory=_audit_log)
    state_dir: Text = field(default_factory=_state_dir)
    #: fleet view (issue 13): more hosts than this open on the fleet table, one line per host
    fleet_threshold: Annotated[int, num(ge=0, why="it is a host count (0: always the fleet view)")] = 8


@dataclass(frozen=True)
class RecorderSettings:
    """The console's flight recorder (``specconsole replay``): hourly segment files in ``path``
    (default ``<console.state_dir>/recordings``), the ones older than ``retention_h`` deleted;
    ``state_file`` (default ``<console.state_dir>/tmux-status.json``): what ``status --tmux`` reads."""

    enabled: bool = True
    path: Text | None = None
    retention_h: Annotated[float, _positive("0 would delete every recording as it is written", 48)] = 48.0
    state_file: Text | None = None

    def resolved(self, state_dir: str) -> RecorderSettings:
        """``path`` and ``state_file`` filled in from the console's state folder."""
        return replace(self, path=self.path or str(Path(state_dir).expanduser() / "recordings"),
                       state_file=self.state_file or str(Path(state_dir).expanduser() / "tmux-status.json"))


LabelName = Annotated[str, text(r"^[A-Za-z_][A-Za-z0-9_]*$", "not a Prometheus label name",
                                   'use letters, digits and _, e.g. host_label = "Hostname"')]


@dataclass(frozen=True)
class PrometheusConfig:
    """A Prometheus server that scrapes the fleet (DCGM exporter, SGLang ``/metrics``).

    A host reads its GPUs from it with ``gpu.source = "prometheus"`` and its SGLang metrics with
    ``sglang.source = "prometheus"``; ``all_hosts = true`` makes both the default for every host
    whose source is "auto". SSH stays for logs, kill and deploy.
    """

    url: Text
    #: the label naming the host on DCGM/SGLang series; "hostname", then "instance" (its host
    #: part) are tried when a series lacks it.
    host_label: LabelName = "Hostname"
    #: Prometheus host name -> console host name, for names that differ.
    host_map: dict[str, Text] = field(default_factory=dict)
    all_hosts: bool = False
    #: DCGM exporter collects every 30 s by default and fleets scrape every 15-30 s: polling
    #: faster shows nothing new (and a 1,000-host fleet's answer is ~5 MB).
    interval_s: Annotated[float, _positive("it is the time between two fleet queries")] = 5.0
    timeout_s: Annotated[float, _positive("0 would fail every query")] = 5.0
    #: the most one query's answer may hold (a 1,000-host fleet's per-GPU answer is ~5 MB)
    max_body_mib: Annotated[float, _positive("0 would refuse every answer")] = 64.0
    history_s: Annotated[float, num(ge=0, why="how far back the plots start; 0: no history")] = 3600.0


@dataclass(frozen=True)
class ConfigFile:
    """The file as written: what :func:`parse_config` validates (``[ssh]`` is every host's default)."""

    console: ConsoleSettings = field(default_factory=ConsoleSettings)
    ssh: SshSettings = field(default_factory=SshSettings)
    keys: dict[str, Text] = field(default_factory=dict)
    hosts: tuple[HostConfig, ...] = ()
    prometheus: PrometheusConfig | None = None
    router: RouterConfig | None = None
    alerting: Alerting = field(default_factory=Alerting)
    alerts: tuple[AlertRule, ...] = ()
    recorder: RecorderSettings = field(default_factory=RecorderSettings)


@dataclass(frozen=True)
class Config:
    path: str
    hosts: tuple[HostConfig, ...]
    console: ConsoleSettings = field(default_factory=ConsoleSettings)
    keys: dict[str, str] = field(default_factory=dict)
    prometheus: PrometheusConfig | None = None
    router: RouterConfig | None = None
    alerting: Alerting = field(default_factory=Alerting)
    #: the alert rules in force: the shipped ones as [[alerts]] changed them, then the new ones
    #: (:func:`specconsole.alert_rules.rules.resolve`); a Config built in code gets the shipped ones
    alerts: tuple[AlertRule, ...] | None = None
    recorder: RecorderSettings = field(default_factory=RecorderSettings)

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


class _Reader:
    """Raises :class:`ConfigError` for one file."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, key: str | None, problem: str, fix: str) -> ConfigError:
        return ConfigError(self.path, key, problem, fix)


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
    except RecursionError:
        raise ConfigError(shown, None, *TOO_DEEP) from None
    return parse_config(data, shown)


def parse_config(data: dict[str, Any], path: str = "<config>") -> Config:
    r = _Reader(path)
    try:
        file = convert(data, ConfigFile, label=named_items)
    except Invalid as err:
        raise r.fail(err.key, err.problem, err.fix) from None
    if not file.hosts:
        raise r.fail("hosts", "no hosts configured", "add at least one [[hosts]] table with name and role")
    if file.prometheus is not None:
        _check_base_url(r, "prometheus.url", file.prometheus.url)
    if file.router is not None:
        _check_base_url(r, "router.url", file.router.url)
    hosts_raw = data["hosts"]
    hosts: list[HostConfig] = []
    seen: set[str] = set()
    for i, h in enumerate(file.hosts):
        _check_shown(r, named_items(data, ("hosts", i)), h)
        own_ssh = hosts_raw[i].get("ssh", {})
        # [ssh] is every host's default; what the host's own [hosts.ssh] sets wins
        ssh = replace(file.ssh, **{k: getattr(h.ssh, k) for k in own_ssh})
        hosts.append(_check_host(r, replace(h, ssh=ssh), named_items(data, ("hosts", i))))
        _check_prometheus_use(r, hosts[-1], named_items(data, ("hosts", i)), file.prometheus)
        if h.name in seen:
            raise r.fail(f"hosts[{i}].name", f"duplicate host name {h.name!r}", "give every host a unique name")
        seen.add(h.name)
    if file.alerting.webhook is not None:
        _check_base_url(r, "alerting.webhook", file.alerting.webhook)
    try:
        alerts = resolve(file.alerts, file.alerting.defaults, hosts=tuple(seen))
    except Invalid as err:
        raise r.fail(err.key, err.problem, err.fix) from None
    return Config(path=path, hosts=tuple(hosts), console=file.console, keys=dict(file.keys),
                  prometheus=file.prometheus, router=file.router, alerting=file.alerting, alerts=alerts,
                  recorder=file.recorder.resolved(file.console.state_dir))


def _check_shown(r: _Reader, prefix: str, host: HostConfig) -> None:
    """A host's name and address are printed and drawn everywhere: one holding a control or
    bidirectional character (ESC, newline, NUL, U+202E) would print as something else."""
    for key, value in (("name", host.name), ("host", host.host), ("user", host.user)):
        bad = unsafe_char(value) if value else None
        if value and bad:
            raise r.fail(f"{prefix}.{key}", f"holds the control character {escape_char(bad)} in "
                         f"'{printable(value)}' (it would print as something else)",
                         "use letters, digits, '-', '_' and '.', e.g. gpu1")


def _check_prometheus_use(r: _Reader, host: HostConfig, prefix: str,
                          prometheus: PrometheusConfig | None) -> None:
    """A host may only ask for Prometheus readings when a [prometheus] server is configured."""
    if prometheus is not None:
        return
    fix = 'add [prometheus] with url = "http://prometheus:9090"'
    if host.gpu.source == "prometheus":
        raise r.fail(f"{prefix}.gpu.source", "\"prometheus\" needs a [prometheus] section", fix)
    if host.sglang is not None and host.sglang.source == "prometheus":
        raise r.fail(f"{prefix}.sglang.source", "\"prometheus\" needs a [prometheus] section", fix)


def _check_host(r: _Reader, host: HostConfig, prefix: str) -> HostConfig:
    """What one field's declaration cannot say: rules between fields."""
    ssh, gpu, training, sglang = host.ssh, host.gpu, host.training, host.sglang
    if ssh.backoff_max_s < ssh.backoff_initial_s:
        raise r.fail(f"{prefix}.ssh.backoff_max_s",
                     f"{ssh.backoff_max_s:g} is below backoff_initial_s = {ssh.backoff_initial_s:g}",
                     f"use backoff_max_s >= {ssh.backoff_initial_s:g}")
    if training is not None:
        if training.format == "regex" and not training.patterns:
            raise r.fail(f"{prefix}.training.patterns", "format = \"regex\" needs patterns",
                         'add patterns = ["step (?P<step>\\\\d+) loss (?P<loss>[0-9.]+)"]')
        _check_patterns(r, f"{prefix}.training.patterns", training.patterns)
    if host.slurm is not None and not (host.slurm.job_name or host.slurm.job_id):
        raise r.fail(f"{prefix}.slurm", "[hosts.slurm] needs job_name or job_id",
                     'add job_name = "drafter-train" (or job_id = 1234)')
    if sglang is not None:
        _check_base_url(r, f"{prefix}.sglang.base_url", sglang.base_url)
        if sglang.router_worker_url is not None:
            _check_base_url(r, f"{prefix}.sglang.router_worker_url", sglang.router_worker_url)
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
    fix = f'write e.g. {key.rsplit(".", 1)[-1]} = "http://127.0.0.1:30000"'
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


def default_config_path() -> str | None:
    """The config to use when ``--config`` is absent: $SPECCONSOLE_CONFIG, then the user's file."""
    env = os.environ.get(DEFAULT_CONFIG_ENV)
    if env:
        return env
    user = paths.default_config_file()
    return str(user) if user.exists() else None
