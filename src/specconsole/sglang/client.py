"""SGLang's HTTP API (``/health``, ``/health_generate``, ``/server_info``, ``/metrics``,
``/generate``).

:class:`SglangClient` turns every failure into a one-line :class:`SglangError` naming the URL
and the fix. Every answer is read within one total deadline (``timeout_s``, body included) and
streamed with a size cap (:mod:`specconsole.base.http_body`): ``max_metrics_bytes`` (8 MiB) for
``/metrics``, ``max_body_bytes`` (1 MiB) for the JSON endpoints, and for ``/generate``
``max_body_bytes`` plus 64 bytes per requested token. A larger answer is an
``SglangError("too_large")`` naming the endpoint, the cap and the config key that raises it;
the rest of the body is never read.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import ssl
import time
from dataclasses import dataclass
from typing import Any

import httpx

from specconsole.base.errors import SpecConsoleError
from specconsole.base.http_body import MIB, BodyTooLarge, mib_text, read_capped
from specconsole.sglang.info import ServerInfo
from specconsole.sglang.metrics import SglangMetrics, parse_metrics


class SglangError(SpecConsoleError):
    """An SGLang call failed. ``kind``: refused, timeout, http, metrics_disabled,
    unauthorized, malformed, disconnected, transport, too_large. ``status_code`` is set for
    HTTP answers."""

    def __init__(self, kind: str, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status_code = status_code


#: Defaults of the body caps (``[hosts.sglang] max_body_mib`` / ``max_metrics_mib``).
MAX_BODY_BYTES = 1 * MIB
MAX_METRICS_BYTES = 8 * MIB
#: What one generated token may add to a ``/generate`` answer (its text, JSON-escaped, and its id).
GENERATE_BYTES_PER_TOKEN = 64


@dataclass(frozen=True, slots=True)
class Answer:
    """An HTTP answer whose body was read in full (within its cap)."""

    status_code: int
    reason_phrase: str
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.content)


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's default TLS context (certifi's CAs), made once per process and shared by every
    client: making one loads the CA bundle (30-90 ms of CPU), and a source makes a new client after
    each failed poll through a tunnel (every second while SGLang is down)."""
    return httpx.create_ssl_context(trust_env=False)


@functools.cache
def no_tls_context() -> ssl.SSLContext:
    """The context of a client of a plain ``http://`` server: it verifies like any (no CA loaded, so
    no TLS server would pass), and costs nothing to make. httpx makes a client's context when the
    client is made, and the CA bundle (``tls_context``) took 0.1 s of the console's first second
    for a server that never speaks TLS (issue 34)."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


class SglangClient:
    """Async client for one SGLang server. Every failure raises a one-line SglangError."""

    #: Scrapes closer together than this reuse the previous counter rate.
    MIN_RATE_INTERVAL_S = 0.05

    def __init__(self, base_url: str, *, timeout_s: float, api_key: str | None = None,
                 unit: str = "sglang.service", display_url: str | None = None,
                 max_body_bytes: int = MAX_BODY_BYTES,
                 max_metrics_bytes: int = MAX_METRICS_BYTES) -> None:
        self.base_url = base_url.rstrip("/")
        #: The URL messages name (a tunnel's local end means nothing to the operator).
        self.display_url = (display_url or base_url).rstrip("/")
        self.timeout_s = timeout_s
        self.unit = unit
        self.max_body_bytes = max_body_bytes
        self.max_metrics_bytes = max_metrics_bytes
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout_s, headers=headers,
                                       trust_env=False,
                                       verify=tls_context() if self.base_url.startswith("https:") else no_tls_context())
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
                       max_bytes: int | None = None, **kwargs: Any) -> Answer:
        url = f"{self.display_url}{path}"
        timeout = self.timeout_s if timeout_s is None else timeout_s
        limit = self.max_body_bytes if max_bytes is None else max_bytes
        try:
            # httpx's timeout bounds each read, not the request: a server that drips a byte at a
            # time would never time out. The whole request, body included, gets one deadline.
            async with asyncio.timeout(timeout):
                async with self._http.stream(method, path, timeout=timeout, **kwargs) as resp:
                    body = await read_capped(resp, limit)
                    return Answer(resp.status_code, resp.reason_phrase, body)
        except BodyTooLarge as exc:
            key = "max_metrics_mib" if path == "/metrics" else "max_body_mib"
            raise SglangError(
                "too_large",
                f"{url} answered more than {mib_text(exc.limit)}; raise hosts.sglang.{key} "
                f"or check what the server sends there",
            ) from None
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
                              f"{one_line(exc)}") from None
        except httpx.TimeoutException:
            raise SglangError(
                "timeout",
                f"SGLang at {url} did not answer within {timeout:g} s — is the server overloaded or "
                f"stuck? check `journalctl -u {self.unit}`",
            ) from None
        except httpx.RemoteProtocolError as exc:
            raise SglangError("disconnected", f"{url} closed the connection without answering "
                              f"({one_line(exc)})") from None
        except httpx.HTTPError as exc:
            raise SglangError("transport", f"{url}: {one_line(exc)}") from None

    def _http_error(self, resp: Answer, path: str) -> SglangError:
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
    def _json(resp: Answer, url: str) -> Any:
        try:
            return resp.json()
        except (ValueError, UnicodeDecodeError) as exc:
            raise SglangError("malformed", f"{url} answered malformed JSON: {one_line(exc)}",
                              resp.status_code) from None

    # -- API ----------------------------------------------------------------------------
    async def health(self) -> int:
        """200 when ready, 503 while starting or shutting down; anything else raises."""
        resp = await self._request("GET", "/health")
        if resp.status_code in (200, 503):
            return resp.status_code
        raise self._http_error(resp, "/health")

    async def health_generate(self, timeout_s: float) -> int:
        """``/health_generate``: a one-token generation through the scheduler (ignored while it is
        busy with other requests). 200 when it went through, 503 while starting or shutting
        down (or, in SGLang, when the generation did not come back in its own 20 s); anything
        else raises. ``timeout_s``: a generation may wait behind the running batch."""
        resp = await self._request("GET", "/health_generate", timeout_s=timeout_s)
        if resp.status_code in (200, 503):
            return resp.status_code
        raise self._http_error(resp, "/health_generate")

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
        resp = await self._request("GET", "/metrics", max_bytes=self.max_metrics_bytes)
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
                              f"{one_line(exc)}", 200) from None
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
        cap = self.max_body_bytes + GENERATE_BYTES_PER_TOKEN * max(0, max_new_tokens)
        resp = await self._request("POST", "/generate", json=body, timeout_s=limit, max_bytes=cap)
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


def one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())[:200]


def _error_detail(resp: Answer) -> str:
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

