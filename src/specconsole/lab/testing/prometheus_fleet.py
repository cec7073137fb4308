"""A Prometheus-scraped fleet on loopback: the DCGM exporter double, a real ``prometheus``
process (Debian package ``prometheus``) and a console config pointing at it.

Used by the Prometheus source's tests and by ``bench/fleet_scale.py``::

    from specconsole.lab.testing import prometheus_fleet
    lab = prometheus_fleet.start(workdir, hosts=1000, gpus=8, scrape_interval_s=5, sglang=True)
    lab.wait_scraped()                    # Prometheus holds a first scrape of every target
    cfg = prometheus_fleet.write_console_config(workdir / "console.toml", lab)  # hosts node-000...
    ...                                   # run the console / status against cfg
    lab.stop()

``sglang=True`` makes the double also serve each host's ``sglang:*`` series, so every host
row has tokens/s; the config's hosts are local serving hosts whose GPUs and SGLang metrics
both come from Prometheus (nothing per host runs in the console).

Everything listens on 127.0.0.1 at free ports; Prometheus keeps its TSDB in ``workdir``.
``lab.stop_prometheus()`` / ``lab.start_prometheus()`` take it down and bring it back on the
same port and storage (the outage tests). Every step prints what it does.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from specconsole.lab.files import toml_str  # a TOML (and YAML) basic string
from specconsole.lab.parts.state import free_port

PROMETHEUS_BINARIES = ("prometheus", "/usr/bin/prometheus")


def prometheus_binary() -> str | None:
    """The ``prometheus`` server binary, or None when it is not installed."""
    for name in PROMETHEUS_BINARIES:
        found = shutil.which(name)
        if found:
            return found
    return None


def _say(msg: str) -> None:
    print(f"prom-fleet: {msg}", file=sys.stderr, flush=True)


def _wait(check: object, what: str, timeout: float, proc: subprocess.Popen[bytes] | None = None,
          log: Path | None = None) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
            raise RuntimeError(f"{what} exited with {proc.returncode}: {tail}")
        try:
            if check():  # type: ignore[operator]
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{what} not ready after {timeout:g}s")


@dataclass
class PromLab:
    """The running exporter double and Prometheus (see :func:`start`)."""

    workdir: Path
    hosts: int
    gpus: int
    prefix: str
    scrape_interval_s: float
    exporter_url: str
    prometheus_port: int
    extra_targets: dict[str, str] = field(default_factory=dict)
    exporter: subprocess.Popen[bytes] | None = None
    prometheus: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.prometheus_port}"

    @property
    def host_names(self) -> list[str]:
        return [f"{self.prefix}{h:03d}" for h in range(self.hosts)]

    def start_prometheus(self, timeout: float = 60.0) -> None:
        binary = prometheus_binary()
        if binary is None:
            raise RuntimeError("prometheus is not installed (fix: apt-get install prometheus)")
        config = write_prometheus_config(self.workdir / "prometheus.yml", self.exporter_url,
                                         self.extra_targets, self.scrape_interval_s)
        log = self.workdir / "prometheus.log"
        _say(f"starting {binary} on {self.url} (storage {self.workdir / 'tsdb'}, log {log})")
        with log.open("ab") as out:
            self.prometheus = subprocess.Popen(
                [binary, f"--config.file={config}", f"--storage.tsdb.path={self.workdir / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{self.prometheus_port}", "--log.level=warn"],
                stdout=out, stderr=out, stdin=subprocess.DEVNULL)
        _wait(lambda: httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200,
              "prometheus", timeout, self.prometheus, log)

    def stop_prometheus(self) -> None:
        if self.prometheus is not None and self.prometheus.poll() is None:
            _say(f"stopping prometheus (pid {self.prometheus.pid})")
            self.prometheus.terminate()
            try:
                self.prometheus.wait(15)
            except subprocess.TimeoutExpired:
                self.prometheus.kill()
                self.prometheus.wait(5)
        self.prometheus = None

    def wait_scraped(self, timeout: float = 60.0, samples: int = 1) -> None:
        """Until Prometheus holds ``samples`` scrapes of every target (``up`` == 1)."""
        def ok() -> bool:
            expr = f"count_over_time(up[1h]) >= {samples} and up == 1"
            r = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=5).json()
            return len(r["data"]["result"]) >= 1 + len(self.extra_targets)
        _say(f"waiting until prometheus has {samples} scrape(s) of every target")
        _wait(ok, "the first scrapes", timeout)

    def stop(self) -> None:
        self.stop_prometheus()
        if self.exporter is not None and self.exporter.poll() is None:
            _say(f"stopping the DCGM exporter double (pid {self.exporter.pid})")
            self.exporter.terminate()
            try:
                self.exporter.wait(10)
            except subprocess.TimeoutExpired:
                self.exporter.kill()
                self.exporter.wait(5)
        self.exporter = None


def write_prometheus_config(path: Path, exporter_url: str, extra_targets: dict[str, str],
                            scrape_interval_s: float) -> Path:
    """A ``prometheus.yml``: the exporter double, plus one SGLang job per ``{host: base_url}``
    (each labelled ``Hostname: host``, as a real fleet's scrape config labels its targets)."""
    exporter = httpx.URL(exporter_url)
    lines = ["global:", f"  scrape_interval: {round(scrape_interval_s * 1000)}ms",
             f"  scrape_timeout: {round(max(0.4, min(10.0, scrape_interval_s * 0.8)) * 1000)}ms",
             "  evaluation_interval: 1m", "scrape_configs:",
             "  - job_name: dcgm", "    static_configs:",
             f"      - targets: [{toml_str(f'{exporter.host}:{exporter.port}')}]"]
    for host, url in extra_targets.items():
        u = httpx.URL(url)
        lines += [f"  - job_name: {toml_str('sglang-' + host)}", "    metrics_path: /metrics",
                  "    static_configs:", f"      - targets: [{toml_str(f'{u.host}:{u.port}')}]",
                  f"        labels: {{Hostname: {toml_str(host)}}}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def start_exporter(workdir: Path, hosts: int, gpus: int, prefix: str = "node-",
                   pattern: str = "static", sglang: bool = False,
                   timeout: float = 30.0) -> tuple[subprocess.Popen[bytes], str]:
    """The DCGM exporter double as a child process; returns it and its ``/metrics`` URL."""
    port = free_port()
    log = workdir / "dcgm-exporter.log"
    _say(f"starting the DCGM exporter double: {hosts} hosts x {gpus} GPUs on 127.0.0.1:{port}")
    with log.open("ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "specconsole.lab.doubles.dcgm_exporter",
                                 "--hosts", str(hosts), "--gpus", str(gpus), "--prefix", prefix,
                                 "--pattern", pattern, "--port", str(port),
                                 *(["--sglang"] if sglang else [])],
                                stdout=out, stderr=out, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/metrics"
    _wait(lambda: httpx.get(url, timeout=10).status_code == 200, "the DCGM exporter double",
          timeout, proc, log)
    return proc, url


def start(workdir: Path, *, hosts: int = 4, gpus: int = 8, prefix: str = "node-",
          scrape_interval_s: float = 1.0, sglang_targets: dict[str, str] | None = None,
          pattern: str = "static", sglang: bool = False) -> PromLab:
    """Start the exporter double and Prometheus scraping it (and ``sglang_targets``:
    ``{console host name: SGLang base URL}``); returns once Prometheus is ready. ``sglang``:
    the double also serves ``sglang:*`` series for each of its hosts (the bench's fleet)."""
    workdir.mkdir(parents=True, exist_ok=True)
    exporter, url = start_exporter(workdir, hosts, gpus, prefix, pattern, sglang)
    lab = PromLab(workdir, hosts, gpus, prefix, scrape_interval_s, url, free_port(),
                  dict(sglang_targets or {}), exporter=exporter)
    try:
        lab.start_prometheus()
    except BaseException:
        lab.stop()
        raise
    return lab


def write_console_config(path: Path, lab: PromLab, *, interval_s: float = 1.0,
                         timeout_s: float = 5.0, history_s: float = 3600.0,
                         serve_hosts: dict[str, str] | None = None,
                         state_dir: Path | None = None) -> Path:
    """A console config: every exporter host as a local serving host whose GPUs and SGLang
    metrics both come from Prometheus (``all_hosts = true``; nothing per host runs in the
    console), plus ``serve_hosts`` ({name: SGLang base URL}, also read from Prometheus, with
    no GPUs)."""
    state = state_dir or path.parent / "state"
    parts = [f"""[console]
refresh_s = 1.0
audit_log = {toml_str(state / "audit.log")}
state_dir = {toml_str(state)}

[prometheus]
url = {toml_str(lab.url)}
interval_s = {interval_s:g}
timeout_s = {timeout_s:g}
history_s = {history_s:g}
all_hosts = true
"""]
    for name in lab.host_names:
        parts.append(f"""[[hosts]]
name = "{name}"
role = "serve"
connect = "local"
[hosts.sglang]
base_url = "http://{name}:30000"
""")
    for name, url in (serve_hosts or {}).items():
        parts.append(f"""[[hosts]]
name = "{name}"
role = "serve"
connect = "local"
gpu.source = "none"
[hosts.sglang]
base_url = {toml_str(url)}
""")
    path.write_text("\n".join(parts))
    _say(f"wrote console config {path}: {len(lab.host_names)} GPU hosts, "
         f"{len(serve_hosts or {})} SGLang hosts, Prometheus {lab.url}")
    return path
