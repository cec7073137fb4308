"""Reading a fleet from Prometheus: the HTTP API client, the PromQL the console asks, and the
conversion of the answers into the same samples the SSH sources publish.

For fleets already scraped by Prometheus: GPUs from NVIDIA's DCGM exporter
(``DCGM_FI_DEV_GPU_UTIL``, ``DCGM_FI_DEV_FB_USED``, ``DCGM_FI_DEV_FB_FREE``,
``DCGM_FI_DEV_FB_RESERVED`` where the exporter has it, ``DCGM_FI_DEV_POWER_USAGE``,
``DCGM_FI_DEV_GPU_TEMP``; labels ``gpu``, ``UUID``, ``modelName``,
``Hostname``) and SGLang's ``sglang:*`` metrics. Every query covers the WHOLE fleet; the
answers are split per host by the host label (``[prometheus] host_label``, then ``hostname``,
then the host part of ``instance``), mapped to console host names by ``host_map``, a host's
``name`` or its SSH ``host``.

Every failure is a :class:`PrometheusError` whose message is one line naming Prometheus, the
URL and, where there is one, the fix. An answer is read within one total deadline
(``timeout_s``, body included) and streamed with a size cap (``max_body_mib``, 64 MiB).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import httpx
import msgspec

from specconsole.base.errors import SpecConsoleError
from specconsole.base.http_body import MIB, BodyTooLarge, mib_text, read_capped
from specconsole.config import Config, HostConfig, PrometheusConfig
from specconsole.formats.nvidia_smi import GpuReading, GpuSnapshot, GpuState
from specconsole.sources.sglang import ServerState, SglangMetrics, SglangSnapshot

#: DCGM field -> (GpuReading attribute, the nvidia-smi field name used in ``unavailable``).
DCGM_FIELDS: dict[str, tuple[str, str]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("utilization_pct", "utilization.gpu"),
    "DCGM_FI_DEV_FB_USED": ("memory_used_mib", "memory.used"),
    "DCGM_FI_DEV_FB_FREE": ("memory_free_mib", "memory.total"),
    "DCGM_FI_DEV_POWER_USAGE": ("power_draw_w", "power.draw"),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", "temperature.gpu"),
}
UTIL = "DCGM_FI_DEV_GPU_UTIL"
#: The driver's reserved memory (dcgm-exporter's default-counters.csv has it; older counters
#: files do not): FREE does not count it, so memory.total = USED + FREE + RESERVED.
FB_RESERVED = "DCGM_FI_DEV_FB_RESERVED"
#: The SGLang series the console reads and how ranks/models are combined per host.
SGLANG_SUM = ("gen_throughput", "num_running_reqs", "num_queue_reqs", "generation_tokens_total",
              "prompt_tokens_total", "spec_verify_calls_total", "num_requests_total")
SGLANG_MEAN = ("spec_accept_length", "spec_accept_rate")
SGLANG_MAX = ("token_usage",)
#: Window of the rate() that stands in for tokens/s when a server has no gen_throughput gauge.
RATE_WINDOW = "1m"

Labels = dict[str, str]


class _Series(msgspec.Struct):
    metric: dict[str, str]
    value: tuple[float, str] = (0.0, "NaN")
    values: list[tuple[float, str]] = []


class _Data(msgspec.Struct):
    resultType: str
    result: list[_Series] = []


class _Body(msgspec.Struct):
    status: str
    data: _Data | None = None
    errorType: str = "error"
    error: str = ""


_DECODER = msgspec.json.Decoder(_Body)


class PrometheusError(SpecConsoleError):
    """A Prometheus query failed; ``str()`` is one line naming Prometheus and its URL."""


# ------------------------------------------------------------------------------ the client
class PrometheusClient:
    """The two calls of Prometheus's HTTP API the console needs: instant and range queries."""

    def __init__(self, url: str, *, timeout_s: float, max_body_bytes: int = 64 * MIB) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.max_body_bytes = max_body_bytes
        self._client = httpx.AsyncClient(base_url=self.url, timeout=timeout_s, trust_env=False)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def query(self, expr: str) -> list[tuple[Labels, float, float]]:
        """``/api/v1/query``: ``(labels, timestamp, value)`` per series of the instant vector."""
        data = await self._get("/api/v1/query", {"query": expr}, "vector")
        return [(item.metric, item.value[0], float(item.value[1])) for item in data.result]

    async def query_range(self, expr: str, start: float, end: float,
                          step: float) -> list[tuple[Labels, list[tuple[float, float]]]]:
        """``/api/v1/query_range``: ``(labels, [(timestamp, value), ...])`` per series."""
        data = await self._get("/api/v1/query_range", {
            "query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"},
            "matrix")
        return [(item.metric, [(t, float(v)) for t, v in item.values]) for item in data.result]

    async def _get(self, path: str, params: dict[str, str], kind: str) -> _Data:
        where = f"Prometheus at {self.url}"
        try:
            # httpx's timeout bounds each read; the whole answer, body included, gets one deadline
            async with asyncio.timeout(self.timeout_s):
                async with self._client.stream("GET", path, params=params) as resp:
                    content = await read_capped(resp, self.max_body_bytes)
        except BodyTooLarge as exc:
            raise PrometheusError(f"{where}{path} answered more than {mib_text(exc.limit)}; raise "
                                  "[prometheus] max_body_mib or check what answers there") from None
        except TimeoutError:
            raise PrometheusError(f"{where} did not answer within {self.timeout_s:g}s (total "
                                  "deadline, body included) — raise [prometheus] timeout_s or "
                                  "check its load") from None
        except httpx.ConnectError as err:
            raise PrometheusError(f"{where} is unreachable ({_one_line(err) or 'connection refused'})"
                                  " — is it running? check [prometheus] url") from None
        except httpx.TimeoutException:
            raise PrometheusError(f"{where} did not answer within {self._client.timeout.read}s "
                                  "— raise [prometheus] timeout_s or check its load") from None
        except httpx.HTTPError as err:
            raise PrometheusError(f"{where}: {type(err).__name__}: {_one_line(err)}") from None
        try:
            body = _DECODER.decode(content)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise PrometheusError(f"{where} answered HTTP {resp.status_code} that is not the "
                                  "Prometheus API — check [prometheus] url") from None
        if body.status != "success":
            raise PrometheusError(f"{where} refused a query (HTTP {resp.status_code}, "
                                  f"{body.errorType}): {_one_line(body.error)}")
        if body.data is None or body.data.resultType != kind:
            got = body.data.resultType if body.data is not None else "nothing"
            raise PrometheusError(f"{where} answered a {got} for {params['query']!r}, not a {kind}")
        return body.data


def _one_line(value: object) -> str:
    return " ".join(str(value).split())


# ------------------------------------------------------------------------------ queries
@dataclass(frozen=True)
class Queries:
    """The PromQL the console sends: a few queries per refresh for the whole fleet."""

    host_label: str = "Hostname"

    @property
    def by_host(self) -> str:
        labels = dict.fromkeys((self.host_label, "hostname", "instance"))
        return ", ".join(labels)

    def gpu_util(self) -> str:
        """Utilization of every GPU: asked every refresh."""
        return f"max by ({self.by_host}, gpu) (DCGM_FI_DEV_GPU_UTIL)"

    def gpu_values(self) -> str:
        """Memory, power and temperature of every GPU: every ``detail_every`` refreshes."""
        names = "|".join([*(n for n in DCGM_FIELDS if n != UTIL), FB_RESERVED])
        return f'max by (__name__, {self.by_host}, gpu) ({{__name__=~"{names}"}})'

    def gpu_labels(self) -> str:
        return f"group by ({self.by_host}, gpu, UUID, modelName) (DCGM_FI_DEV_FB_USED)"

    def sglang(self) -> list[tuple[str, str]]:
        """``(aggregation, query)`` pairs; the aggregation is applied across ranks per host."""
        def sel(names: Iterable[str]) -> str:
            return "{__name__=~\"sglang:(" + "|".join(names) + ")\"}"
        return [
            ("sum", f"sum by (__name__, {self.by_host}) ({sel(SGLANG_SUM)})"),
            ("mean", f"avg by (__name__, {self.by_host}) ({sel(SGLANG_MEAN)})"),
            ("max", f"max by (__name__, {self.by_host}) ({sel(SGLANG_MAX)})"),
            ("rate", f"sum by ({self.by_host}) (rate(sglang:generation_tokens_total[{RATE_WINDOW}]))"),
        ]

    def history(self) -> dict[str, str]:
        """The plots' series (kind -> query) for ``query_range`` at start-up."""
        return {
            "util": f"avg by ({self.by_host}) (DCGM_FI_DEV_GPU_UTIL)",
            "tokens": f"sum by ({self.by_host}) (sglang:gen_throughput)",
            "tokens_rate": f"sum by ({self.by_host}) (rate(sglang:generation_tokens_total[{RATE_WINDOW}]))",
            "accept": f"avg by ({self.by_host}) (sglang:spec_accept_length)",
        }


# ------------------------------------------------------------------------------ host names
class HostNames:
    """Maps a series' labels to a console host name (or None for a host not in the config)."""

    def __init__(self, cfg: PrometheusConfig, hosts: Iterable[HostConfig]) -> None:
        self.label = cfg.host_label
        self._index: dict[str, str] = {}
        for h in hosts:
            if h.host:
                self._index.setdefault(h.host, h.name)
        for h in hosts:
            self._index[h.name] = h.name
        self._index.update(cfg.host_map)
        self.unknown: set[str] = set()
        self._resolved: dict[str, str | None] = {}

    def __call__(self, labels: Mapping[str, str]) -> str | None:
        name = labels.get(self.label) or labels.get("hostname") or labels.get("instance")
        if not name:
            return None
        try:
            return self._resolved[name]
        except KeyError:
            pass
        found = self._index.get(name)
        if found is None and name == labels.get("instance"):  # "host:port": try the host
            found = self._index.get(name.rsplit(":", 1)[0].strip("[]"))
        if found is None:
            self.unknown.add(name)
        self._resolved[name] = found
        return found


def uses_prometheus(config: Config, host: HostConfig, kind: str) -> bool:
    """Whether ``host`` reads ``kind`` ("gpu" or "sglang") from the [prometheus] server."""
    prom = config.prometheus
    if prom is None:
        return False
    if kind == "gpu":
        return host.gpu.source == "prometheus" or (prom.all_hosts and host.gpu.source == "auto")
    if kind == "sglang":
        if not (host.serves and host.sglang):
            return False
        return host.sglang.source == "prometheus" or (prom.all_hosts and host.sglang.source == "auto")
    return False


# ------------------------------------------------------------------------------ conversion
GpuFields = dict[str, dict[int, dict[str, float]]]
GpuIdentities = dict[tuple[str, int], tuple[str | None, str | None]]


def gpu_fields(values: list[tuple[Labels, float, float]], names: HostNames,
               metric_name: str | None = None) -> GpuFields:
    """``{host: {gpu index: {DCGM field: value}}}`` from a vector (``metric_name`` names the
    field when the series carry no ``__name__``)."""
    fields: GpuFields = {}
    index_of = _GPU_INDEX
    label, resolved = names.label, names._resolved  # names(metric), its cache hit inlined
    for metric, _t, value in values:
        if value != value:  # NaN
            continue
        key = metric.get(label) or metric.get("hostname") or metric.get("instance")
        host = resolved[key] if key in resolved else names(metric)
        gpu = metric.get("gpu", "")
        index = index_of.get(gpu) if gpu in index_of else _gpu_index(metric)
        if host is None or index is None:
            continue
        name = metric_name or metric.get("__name__", "")
        per_host = fields.get(host)
        if per_host is None:
            per_host = fields[host] = {}
        per_gpu = per_host.get(index)
        if per_gpu is None:
            per_host[index] = {name: value}
        else:
            per_gpu[name] = value
    return fields


def gpu_identities(labels: list[tuple[Labels, float, float]], names: HostNames) -> GpuIdentities:
    """``{(host, gpu index): (UUID, modelName)}`` from the labels query."""
    ident: GpuIdentities = {}
    for metric, _t, _v in labels:
        host, index = names(metric), _gpu_index(metric)
        if host is not None and index is not None:
            ident[(host, index)] = (metric.get("UUID") or None, metric.get("modelName") or None)
    return ident


def gpu_snapshots(util: GpuFields, detail: GpuFields | None, ident: GpuIdentities,
                  at: float) -> dict[str, GpuSnapshot]:
    """One :class:`GpuSnapshot` per console host with utilization series (the GPUs present);
    ``detail`` adds memory, power and temperature (None: not asked yet), ``ident`` UUID and
    model."""
    out = {}
    none: dict[int, dict[str, float]] = {}
    nothing: dict[str, float] = {}
    no_id: tuple[str | None, str | None] = (None, None)
    why = "not in Prometheus" if detail is not None else "not read yet"
    for host, gpus in util.items():
        more = detail.get(host, none) if detail is not None else none
        readings = tuple(_reading(i, more.get(i, nothing), gpus[i].get(UTIL),
                                  ident.get((host, i), no_id), why) for i in sorted(gpus))
        out[host] = GpuSnapshot(GpuState.OK, readings, at=at)
    return out


_GPU_INDEX: dict[str, int | None] = {}


def _gpu_index(labels: Mapping[str, str]) -> int | None:
    gpu = labels.get("gpu", "")
    index = _GPU_INDEX.get(gpu)
    if index is None and gpu not in _GPU_INDEX:
        index = int(gpu) if gpu.isdigit() else None
        if len(_GPU_INDEX) < 4096:  # "0".."N": a few distinct strings in any real fleet
            _GPU_INDEX[gpu] = index
    return index


_DETAIL_FIELDS = len(DCGM_FIELDS) - 1  # all but utilization


def _reading(index: int, values: Mapping[str, float], util: float | None,
             ident: tuple[str | None, str | None], why: str = "not in Prometheus") -> GpuReading:
    """One GPU from its detail ``values`` (DCGM field -> value) and its utilization."""
    unavailable: dict[str, str] = {}
    reserved = values.get(FB_RESERVED)
    if len(values) - (reserved is not None) < _DETAIL_FIELDS or util is None:
        for metric, (attr, smi_field) in DCGM_FIELDS.items():
            if attr == "memory_free_mib" or metric in values or (metric == UTIL and util is not None):
                continue
            unavailable[smi_field] = f"[{metric} {why}]"
    used, free = values.get("DCGM_FI_DEV_FB_USED"), values.get("DCGM_FI_DEV_FB_FREE")
    total = used + free + (reserved or 0.0) if used is not None and free is not None else None
    if total is None:
        unavailable["memory.total"] = f"[DCGM_FI_DEV_FB_FREE {why}]"
    return GpuReading(index, ident[0], ident[1], util, None, used, total,
                      values.get("DCGM_FI_DEV_POWER_USAGE"), None,
                      values.get("DCGM_FI_DEV_GPU_TEMP"), None, None, unavailable)


def sglang_metrics(answers: list[tuple[str, list[tuple[Labels, float, float]]]],
                   names: HostNames) -> dict[str, SglangMetrics]:
    """One :class:`SglangMetrics` per console host with ``sglang:*`` series."""
    per_host: dict[str, dict[str, float]] = {}
    counts: dict[tuple[str, str], int] = {}
    for agg, vector in answers:
        for metric, _t, value in vector:
            host = names(metric)
            if host is None or math.isnan(value):
                continue
            key = "rate" if agg == "rate" else metric.get("__name__", "").removeprefix("sglang:")
            slot = per_host.setdefault(host, {})
            if agg == "sum" or agg == "rate":
                slot[key] = slot.get(key, 0.0) + value
            elif agg == "max":
                slot[key] = max(slot.get(key, value), value)
            else:  # several series for one host (several targets): the plain mean
                n = counts[(host, key)] = counts.get((host, key), 0) + 1
                slot[key] = slot.get(key, 0.0) + (value - slot.get(key, 0.0)) / n
    return {host: _metrics(v) for host, v in per_host.items()}


def _metrics(v: dict[str, float]) -> SglangMetrics:
    gauge = v.get("gen_throughput")
    running, queued = v.get("num_running_reqs"), v.get("num_queue_reqs")
    return SglangMetrics(
        gen_throughput=gauge, tokens_per_s=gauge if gauge is not None else v.get("rate"),
        running_reqs=int(running) if running is not None else None,
        queued_reqs=int(queued) if queued is not None else None,
        spec_accept_length=v.get("spec_accept_length"),
        generation_tokens_total=v.get("generation_tokens_total"),
        token_usage=v.get("token_usage"), spec_accept_rate=v.get("spec_accept_rate"),
        spec_verify_calls_total=v.get("spec_verify_calls_total"),
        prompt_tokens_total=v.get("prompt_tokens_total"),
        num_requests_total=v.get("num_requests_total"),
    )


def sglang_snapshot(metrics: SglangMetrics | None, error: str | None, at: float,
                    state: ServerState = ServerState.DOWN) -> SglangSnapshot:
    """HEALTHY with metrics while Prometheus has the server's series; ``state`` with why
    otherwise (DOWN: no series; ERROR: Prometheus itself failed, SGLang's state unknown)."""
    if metrics is not None:
        return SglangSnapshot(ServerState.HEALTHY, None, None, None, metrics, at)
    return SglangSnapshot(state, None, error, None, None, at)


def missing_gpu_error(host: str, url: str, label: str) -> str:
    return (f"{host}: no DCGM series in Prometheus at {url} for {label}={host!r} — is its "
            "dcgm-exporter scraped? (map other names with [prometheus] host_map)")


def missing_sglang_error(host: str, url: str, label: str) -> str:
    return (f"{host}: no sglang:* series in Prometheus at {url} for {label}={host!r} — is SGLang "
            "up with --enable-metrics and scraped? (map other names with [prometheus] host_map)")


def history_points(series: list[tuple[Labels, list[tuple[float, float]]]],
                   names: HostNames) -> dict[str, list[tuple[float, float | None]]]:
    """query_range answers -> per console host ``[(at, value), ...]`` in time order."""
    out: dict[str, list[tuple[float, float | None]]] = {}
    for metric, values in series:
        host = names(metric)
        if host is not None:
            pts = out.setdefault(host, [])
            pts.extend((t, None if math.isnan(v) else v) for t, v in values)
    for pts in out.values():
        pts.sort(key=lambda p: p[0])
    return out


def now() -> float:
    return time.time()
