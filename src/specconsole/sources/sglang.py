"""The SGLang data source: health, resolved server args and Prometheus metrics of a server.

:class:`SglangClient` speaks SGLang's HTTP API (``/health``, ``/server_info``, ``/metrics``,
``/generate``) and turns every failure into a one-line :class:`SglangError` naming the URL
and the fix. :class:`SglangSource` polls one server and publishes :class:`SglangSnapshot`
samples; it never raises for network errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from prometheus_client.parser import text_string_to_metric_families

from specconsole.config import SglangConfig
from specconsole.errors import HostError, SpecConsoleError
from specconsole.hosts.base import ConnState, Host
from specconsole.samples import Sample
from specconsole.sources import Publish
from specconsole.values import as_int


class ServerState(StrEnum):
    HEALTHY = "healthy"
    STARTING = "starting"
    DOWN = "down"
    ERROR = "error"
    #: The host itself cannot be reached (SSH down or reconnecting): SGLang's state is unknown.
    UNREACHABLE = "unreachable"


class SglangError(SpecConsoleError):
    """An SGLang call failed. ``kind``: refused, timeout, http, metrics_disabled,
    unauthorized, malformed, disconnected, transport. ``status_code`` is set for HTTP
    answers."""

    def __init__(self, kind: str, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status_code = status_code




def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return None if math.isnan(value) else value


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What ``/server_info`` says about the deployment.

    ``algorithm`` is as the server resolved it (SGLang reports NEXTN as ``EAGLE``).
    ``block_size`` is the DFLASH block (``speculative_dflash_block_size``, or the resolved
    ``speculative_num_draft_tokens`` for DFLASH). ``avg_accept_length`` averages
    ``internal_states[*].avg_spec_accept_length`` (None when absent or 0: no traffic yet).
    """

    version: str | None
    algorithm: str | None
    draft_model_path: str | None
    block_size: int | None
    num_draft_tokens: int | None
    draft_window: int | None
    model_path: str | None
    avg_accept_length: float | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ServerInfo:
        algo = data.get("speculative_algorithm")
        algo = algo.upper() if isinstance(algo, str) and algo else None
        ndt = as_int(data.get("speculative_num_draft_tokens"))
        block = as_int(data.get("speculative_dflash_block_size"))
        if block is None and algo == "DFLASH":
            block = ndt
        lengths = []
        states = data.get("internal_states")
        if isinstance(states, list):
            for item in states:
                if isinstance(item, dict):
                    v = _float(item.get("avg_spec_accept_length"))
                    if v is not None and v > 0:
                        lengths.append(v)
        draft = data.get("speculative_draft_model_path")
        model = data.get("model_path")
        version = data.get("version")
        return cls(
            version=str(version) if version is not None else None,
            algorithm=algo,
            draft_model_path=draft if isinstance(draft, str) else None,
            block_size=block,
            num_draft_tokens=ndt,
            draft_window=as_int(data.get("speculative_draft_window_size")),
            model_path=model if isinstance(model, str) else None,
            avg_accept_length=sum(lengths) / len(lengths) if lengths else None,
            raw=data,
        )


@dataclass(frozen=True, slots=True)
class SglangMetrics:
    """One ``/metrics`` scrape, aggregated over label sets (DP/TP ranks, models).

    Sums: throughput, running/queued requests, counters. Means: accept length and rate.
    Max: token_usage (the fullest rank is the bottleneck). ``tokens_per_s`` is the
    ``gen_throughput`` gauge, or, when the server has no such gauge, the rate of
    ``generation_tokens_total`` since the previous scrape (None on the first one).
    """

    gen_throughput: float | None
    tokens_per_s: float | None
    running_reqs: int | None
    queued_reqs: int | None
    spec_accept_length: float | None
    generation_tokens_total: float | None
    token_usage: float | None
    spec_accept_rate: float | None = None
    spec_verify_calls_total: float | None = None
    prompt_tokens_total: float | None = None
    num_requests_total: float | None = None


@dataclass(frozen=True, slots=True)
class SglangSnapshot:
    state: ServerState
    status_code: int | None
    error: str | None
    info: ServerInfo | None
    metrics: SglangMetrics | None
    at: float


# ---------------------------------------------------------------------------------------
# Prometheus parsing
# ---------------------------------------------------------------------------------------
_SUM = {
    "sglang:gen_throughput": "gen_throughput",
    "sglang:num_running_reqs": "running_reqs",
    "sglang:num_queue_reqs": "queued_reqs",
    "sglang:generation_tokens_total": "generation_tokens_total",
    "sglang:prompt_tokens_total": "prompt_tokens_total",
    "sglang:spec_verify_calls_total": "spec_verify_calls_total",
    "sglang:num_requests_total": "num_requests_total",
}
_MEAN = {
    "sglang:spec_accept_length": "spec_accept_length",
    "sglang:spec_accept_rate": "spec_accept_rate",
}
_MAX = {"sglang:token_usage": "token_usage"}


def parse_metrics(text: str) -> dict[str, float]:
    """Aggregate the SGLang series of a Prometheus text page (see :class:`SglangMetrics`).

    Raises ValueError on text that is not the Prometheus format.
    """
    sums: dict[str, float] = {}
    means: dict[str, list[float]] = {}
    maxes: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, value = sample.name, sample.value
            if value is None or math.isnan(value):
                continue
            if name in _SUM:
                key = _SUM[name]
                sums[key] = sums.get(key, 0.0) + value
            elif name in _MEAN:
                means.setdefault(_MEAN[name], []).append(value)
            elif name in _MAX:
                key = _MAX[name]
                maxes[key] = max(maxes.get(key, value), value)
    out = dict(sums)
    out.update({k: sum(v) / len(v) for k, v in means.items() if v})
    out.update(maxes)
    return out


# ---------------------------------------------------------------------------------------
# The client
# ---------------------------------------------------------------------------------------
class SglangClient:
    """Async client for one SGLang server. Every failure raises a one-line SglangError."""

    #: Scrapes closer together than this reuse the previous counter rate.
    MIN_RATE_INTERVAL_S = 0.05

    def __init__(self, base_url: str, *, timeout_s: float, api_key: str | None = None,
                 unit: str = "sglang.service", display_url: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        #: The URL messages name (a tunnel's local end means nothing to the operator).
        self.display_url = (display_url or base_url).rstrip("/")
        self.timeout_s = timeout_s
        self.unit = unit
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout_s,
                                       headers=headers, trust_env=False)
        self._last_gen: tuple[float, float] | None = None  # (monotonic, total)
        self._last_rate: float | None = None

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> SglangClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- plumbing -----------------------------------------------------------------------
    async def _request(self, method: str, path: str, *, timeout_s: float | None = None,
                       **kwargs: Any) -> httpx.Response:
        url = f"{self.display_url}{path}"
        timeout = self.timeout_s if timeout_s is None else timeout_s
        try:
            # httpx's timeout bounds each read, not the request: a server that drips a byte at a
            # time would never time out. The whole request, body included, gets one deadline.
            async with asyncio.timeout(timeout):
                return await self._http.request(method, path, timeout=timeout, **kwargs)
        except TimeoutError:
            raise SglangError(
                "timeout",
                f"SGLang at {url} did not answer within {timeout:g} s (total deadline, body included) — "
                f"is the server overloaded or stuck? check `journalctl -u {self.unit}`",
            ) from None
        except httpx.ConnectError as exc:
            if _refused(exc):
                raise SglangError(
                    "refused",
                    f"nothing listening at {self.display_url} — is the service running? "
                    f"`systemctl status {self.unit}`",
                ) from None
            raise SglangError("transport", f"cannot connect to {self.display_url}: "
                              f"{_one_line(exc)}") from None
        except httpx.TimeoutException:
            raise SglangError(
                "timeout",
                f"SGLang at {url} did not answer within {timeout:g} s — is the server overloaded or "
                f"stuck? check `journalctl -u {self.unit}`",
            ) from None
        except httpx.RemoteProtocolError as exc:
            raise SglangError("disconnected", f"{url} closed the connection without answering "
                              f"({_one_line(exc)})") from None
        except httpx.HTTPError as exc:
            raise SglangError("transport", f"{url}: {_one_line(exc)}") from None

    def _http_error(self, resp: httpx.Response, path: str) -> SglangError:
        url = f"{self.display_url}{path}"
        code = resp.status_code
        if code == 401:
            return SglangError("unauthorized", f"{url} answered 401 Unauthorized — set the "
                               "console's sglang api_key to the server's --api-key", code)
        detail = _error_detail(resp)
        msg = f"{url} answered {code} {resp.reason_phrase or ''}".rstrip()
        if detail:
            msg += f": {detail}"
        return SglangError("http", msg, code)

    @staticmethod
    def _json(resp: httpx.Response, url: str) -> Any:
        try:
            return resp.json()
        except (ValueError, UnicodeDecodeError) as exc:
            raise SglangError("malformed", f"{url} answered malformed JSON: {_one_line(exc)}",
                              resp.status_code) from None

    # -- API ----------------------------------------------------------------------------
    async def health(self) -> int:
        """200 when ready, 503 while starting or shutting down; anything else raises."""
        resp = await self._request("GET", "/health")
        if resp.status_code in (200, 503):
            return resp.status_code
        raise self._http_error(resp, "/health")

    async def server_info(self) -> ServerInfo:
        """``/server_info`` (falling back to the deprecated ``/get_server_info``)."""
        path = "/server_info"
        resp = await self._request("GET", path)
        if resp.status_code == 404:
            path = "/get_server_info"
            resp = await self._request("GET", path)
        if resp.status_code != 200:
            raise self._http_error(resp, path)
        data = self._json(resp, f"{self.display_url}{path}")
        if not isinstance(data, dict):
            raise SglangError("malformed", f"{self.display_url}{path} answered malformed JSON: "
                              f"expected an object, got {type(data).__name__}", 200)
        return ServerInfo.from_json(data)

    async def metrics(self) -> SglangMetrics:
        resp = await self._request("GET", "/metrics")
        now = time.monotonic()
        url = f"{self.display_url}/metrics"
        if resp.status_code == 404:
            raise SglangError("metrics_disabled",
                              f"{url}: metrics disabled: launch with --enable-metrics", 404)
        if resp.status_code != 200:
            raise self._http_error(resp, "/metrics")
        try:
            values = parse_metrics(resp.text)
        except ValueError as exc:
            raise SglangError("malformed", f"{url} answered malformed Prometheus text: "
                              f"{_one_line(exc)}", 200) from None
        gen_total = values.get("generation_tokens_total")
        rate = None
        if gen_total is not None:
            prev = self._last_gen
            if prev is not None and gen_total < prev[1]:
                prev = None  # the counter went back: the server restarted
            if prev is not None and now - prev[0] < self.MIN_RATE_INTERVAL_S:
                rate = self._last_rate  # too close to the last scrape to be meaningful
            else:
                if prev is not None:
                    rate = (gen_total - prev[1]) / (now - prev[0])
                self._last_gen = (now, gen_total)
            self._last_rate = rate
        gauge = values.get("gen_throughput")
        running, queued = values.get("running_reqs"), values.get("queued_reqs")
        return SglangMetrics(
            gen_throughput=gauge,
            tokens_per_s=gauge if gauge is not None else rate,
            running_reqs=int(running) if running is not None else None,
            queued_reqs=int(queued) if queued is not None else None,
            spec_accept_length=values.get("spec_accept_length"),
            generation_tokens_total=gen_total,
            token_usage=values.get("token_usage"),
            spec_accept_rate=values.get("spec_accept_rate"),
            spec_verify_calls_total=values.get("spec_verify_calls_total"),
            prompt_tokens_total=values.get("prompt_tokens_total"),
            num_requests_total=values.get("num_requests_total"),
        )

    async def generate(self, text: str, max_new_tokens: int, temperature: float = 0, *,
                       timeout_s: float | None = None) -> dict[str, Any]:
        """``POST /generate``; the answer's ``text`` and ``meta_info`` as SGLang sends them.

        ``timeout_s`` defaults to ``max(60, timeout_s of the client)``: generation takes
        longer than a health check.
        """
        body = {"text": text, "sampling_params": {"max_new_tokens": max_new_tokens,
                                                  "temperature": temperature}}
        limit = timeout_s if timeout_s is not None else max(60.0, self.timeout_s)
        resp = await self._request("POST", "/generate", json=body, timeout_s=limit)
        if resp.status_code != 200:
            raise self._http_error(resp, "/generate")
        data = self._json(resp, f"{self.display_url}/generate")
        if not isinstance(data, dict) or not isinstance(data.get("meta_info"), dict):
            raise SglangError("malformed", f"{self.display_url}/generate answered without "
                              "meta_info", 200)
        return data


def _refused(exc: BaseException) -> bool:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, ConnectionRefusedError):
            return True
        text = str(cur).lower()
        if "connection refused" in text or "errno 111" in text or "connect call failed" in text:
            return True
        cur = cur.__cause__ or cur.__context__
    return False


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())[:200]


def _error_detail(resp: httpx.Response) -> str:
    """SGLang's ``{"error": {"message": ...}}`` / FastAPI's ``{"detail": ...}``, or text."""
    try:
        data = resp.json()
    except (ValueError, UnicodeDecodeError):
        data = None
    msg: Any = None
    if isinstance(data, dict):
        err = data.get("error")
        msg = err.get("message") if isinstance(err, dict) else err
        msg = msg or data.get("detail") or data.get("message")
    if msg is None:
        with contextlib.suppress(Exception):
            msg = resp.text
    if not msg:
        return ""
    text = msg if isinstance(msg, str) else json.dumps(msg)
    return " ".join(text.split())[:160]


# ---------------------------------------------------------------------------------------
# The source
# ---------------------------------------------------------------------------------------
class SglangSource:
    """Polls one SGLang server every ``cfg.interval_s`` and publishes SglangSnapshot samples.

    Each poll: ``/health``; then, when healthy, ``/server_info`` (cached; refreshed every
    ``info_refresh_s`` and whenever the state changes) and ``/metrics``. With
    ``cfg.tunnel`` the URL's host:port is reached through ``host.reach`` (waiting for the
    host to connect first) and reached again after any failure, since a reconnect
    invalidates a tunnel. Without a tunnel the console talks to the URL directly.
    """

    def __init__(self, host: Host, cfg: SglangConfig, *, info_refresh_s: float = 10.0) -> None:
        self.host = host
        self.cfg = cfg
        self.info_refresh_s = info_refresh_s
        parts = urlsplit(cfg.base_url)
        self._scheme = parts.scheme or "http"
        self._url_host = parts.hostname or "127.0.0.1"
        self._url_port = parts.port or (443 if self._scheme == "https" else 80)
        self._path = parts.path.rstrip("/")
        self._client: SglangClient | None = None
        self._client_url: str | None = None
        self._info: ServerInfo | None = None
        self._info_at = 0.0
        self._last_state: ServerState | None = None

    async def run(self, publish: Publish[SglangSnapshot]) -> None:
        interval = max(0.05, float(self.cfg.interval_s))
        try:
            while True:
                started = time.monotonic()
                snap = await self.poll()
                publish(Sample(snap, snap.at, interval))
                delay = interval - (time.monotonic() - started)
                await asyncio.sleep(max(0.0, delay))
        finally:
            await self._drop_client()

    async def poll(self) -> SglangSnapshot:
        """One observation (never raises for network errors)."""
        if self.cfg.tunnel and not self.host.status.up:
            connecting = self.host.status.state is ConnState.CONNECTING  # the first attempt
            if not connecting or not await self.host.wait_connected(self.cfg.timeout_s):
                return self._unreachable(self._host_problem())
        try:
            client = await self._ensure_client()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # reaching the tunnel failed
            lost = await self._host_lost()
            if lost is not None:
                return self._unreachable(lost)
            return self._snap(ServerState.ERROR, None,
                              f"{self.host.name}: cannot reach {self.cfg.base_url}: "
                              f"{_one_line(exc)}")
        try:
            code = await client.health()
        except SglangError as exc:
            await self._after_failure()
            lost = await self._host_lost()
            return self._unreachable(lost) if lost is not None else self._failed(exc)
        if code == 503:
            return self._snap(ServerState.STARTING, 503, None)
        # healthy: server info (cached), metrics
        try:
            now = time.monotonic()
            if (self._info is None or self._last_state is not ServerState.HEALTHY
                    or now - self._info_at >= self.info_refresh_s):
                self._info = await client.server_info()
                self._info_at = now
        except SglangError as exc:
            await self._after_failure(transport_only=True, exc=exc)
            return self._failed(exc)
        try:
            metrics = await client.metrics()
        except SglangError as exc:
            if exc.kind == "metrics_disabled":
                return self._snap(ServerState.HEALTHY, 200, str(exc), self._info)
            await self._after_failure(transport_only=True, exc=exc)
            return self._failed(exc, self._info)
        return self._snap(ServerState.HEALTHY, 200, None, self._info, metrics)

    # -- helpers ------------------------------------------------------------------------
    def _failed(self, exc: SglangError, info: ServerInfo | None = None) -> SglangSnapshot:
        """DOWN when nothing answers: refused; through a tunnel, the forward closed or reset
        at once (the far end refused); directly, closed or reset while already down. One
        state for a stopped server, whichever way the connection failed; the detail is kept."""
        if exc.kind == "refused":
            return self._snap(ServerState.DOWN, None, str(exc))
        if exc.kind in ("disconnected", "transport"):
            why = "no answer" if exc.kind == "disconnected" else str(exc).split(": ", 1)[-1]
            hint = f"— is the service running? `systemctl status {self.cfg.unit}`"
            if self.cfg.tunnel:
                return self._snap(ServerState.DOWN, None, (
                    f"nothing listening at {self.cfg.base_url} (the tunnel through "
                    f"{self.host.name} closed at once: {why}) {hint}"))
            if self._last_state is ServerState.DOWN:
                return self._snap(ServerState.DOWN, None,
                                  f"nothing listening at {self.cfg.base_url} ({why}) {hint}")
        return self._snap(ServerState.ERROR, exc.status_code, str(exc), info)

    def _host_problem(self) -> str:
        status = self.host.status
        return status.last_error or f"the SSH connection is {status.state}"

    async def _host_lost(self) -> str | None:
        """Why the host itself cannot be reached, or None when it can.

        Through a tunnel, a failed request may be the connection going (its state follows a
        moment later), so on a change from a good state the host is asked directly: a trivial
        command must run. While SGLang is already down, the connection state is enough.
        """
        if self.host.status.state in (ConnState.RECONNECTING, ConnState.DOWN, ConnState.CLOSED):
            return self._host_problem()
        if not self.cfg.tunnel or self._last_state is ServerState.DOWN:
            return None
        try:
            await self.host.run(["true"], timeout=self.cfg.timeout_s)
        except (HostError, TimeoutError, OSError) as err:
            return str(err)
        return None

    def _unreachable(self, why: str) -> SglangSnapshot:
        name = self.host.name
        why = why.removeprefix(f"{name}: ")
        return self._snap(ServerState.UNREACHABLE, None,
                          f"host {name} is unreachable ({why}); SGLang's state is unknown until "
                          f"the connection is back")

    def _snap(self, state: ServerState, code: int | None, error: str | None,
              info: ServerInfo | None = None,
              metrics: SglangMetrics | None = None) -> SglangSnapshot:
        if info is None:
            self._info = None  # refetch once the server answers again
        self._last_state = state
        return SglangSnapshot(state, code, error, info, metrics, time.time())

    async def _ensure_client(self) -> SglangClient:
        if self.cfg.tunnel:
            if self._client is not None:
                return self._client
            local_host, local_port = await self.host.reach(self._url_host, self._url_port)
            netloc = f"[{local_host}]:{local_port}" if ":" in local_host else \
                f"{local_host}:{local_port}"
            url = urlunsplit((self._scheme, netloc, self._path, "", ""))
        else:
            url = self.cfg.base_url
        if self._client is None or self._client_url != url:
            await self._drop_client()
            shown = (f"{self.cfg.base_url} (tunnel through {self.host.name})"
                     if self.cfg.tunnel else self.cfg.base_url)
            self._client = SglangClient(url, timeout_s=self.cfg.timeout_s,
                                        api_key=self.cfg.api_key, unit=self.cfg.unit,
                                        display_url=shown)
            self._client_url = url
        return self._client

    async def _after_failure(self, *, transport_only: bool = False,
                             exc: SglangError | None = None) -> None:
        """Forget a tunnel after a failure so the next poll reaches the host again."""
        if not self.cfg.tunnel:
            return
        if transport_only and exc is not None and exc.kind not in (
            "refused", "timeout", "transport", "disconnected"
        ):
            return
        await self._drop_client()

    async def _drop_client(self) -> None:
        client, self._client, self._client_url = self._client, None, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.aclose()
