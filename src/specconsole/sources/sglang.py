"""The SGLang data source: polls one server's health, resolved server args and metrics.

:class:`SglangSource` publishes :class:`SglangSnapshot` samples and never raises for network
errors. The HTTP client, ``/server_info`` and ``/metrics`` reading live in
:mod:`specconsole.sglang`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urlsplit, urlunsplit

from specconsole.base.errors import HostError
from specconsole.base.http_body import MIB
from specconsole.base.samples import Sample
from specconsole.config import SglangConfig
from specconsole.hosts.base import ConnState, Host
from specconsole.sglang.client import SglangClient, SglangError, one_line
from specconsole.sglang.info import ServerInfo
from specconsole.sglang.logs import worker_facts, worker_log_command
from specconsole.sglang.metrics import SglangMetrics
from specconsole.sources import Publish

#: Re-exported for the UI and older imports; the client lives in :mod:`specconsole.sglang`.
__all__ = ["ServerInfo", "ServerState", "SglangClient", "SglangError", "SglangMetrics", "SglangSnapshot",
           "SglangSource"]


#: SglangError kinds where nothing answered (the server, or the way to it, is gone).
_NO_ANSWER = frozenset({"refused", "disconnected", "transport", "timeout"})


class ServerState(StrEnum):
    HEALTHY = "healthy"
    STARTING = "starting"
    DOWN = "down"
    ERROR = "error"
    #: The host itself cannot be reached (SSH down or reconnecting): SGLang's state is unknown.
    UNREACHABLE = "unreachable"
    #: ``health = "generate"``: ``/health_generate`` timed out or failed while ``/health``
    #: answers 200: the HTTP server is up, the scheduler runs no requests.
    HUNG = "hung"


@dataclass(frozen=True, slots=True)
class SglangSnapshot:
    state: ServerState
    status_code: int | None
    error: str | None
    info: ServerInfo | None
    metrics: SglangMetrics | None
    at: float
    #: what the speculative worker logged at start-up (DDTREE: block_size, tree_budget), from the journal
    worker: tuple[tuple[str, str], ...] = ()


# ---------------------------------------------------------------------------------------
# The source
# ---------------------------------------------------------------------------------------
class SglangSource:
    """Polls one SGLang server every ``cfg.interval_s`` and publishes SglangSnapshot samples.

    Each poll: ``/health``; then, when healthy, ``/server_info`` (cached; refreshed every
    ``info_refresh_s`` and whenever the state changes) and ``/metrics``. While the server is
    healthy and its ``/metrics`` answers, ``/health`` is asked only every
    ``cfg.health_interval_s``: SGLang's ``/health`` runs a one-token generation when the server
    is idle (unless ``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0``), which a console polling
    every second must not cause; a ``/metrics`` that fails is reported at once, and every poll
    asks ``/health`` again until the server is healthy.

    With ``cfg.health = "generate"`` the check is ``/health_generate`` instead (a one-token
    generation through the scheduler, ``cfg.health_generate_timeout_s`` to answer), at the same
    cadence. When it does not go through (a timeout, a 503, an error) ``/health`` is asked: 200
    there is HUNG (the HTTP server answers, the scheduler does not), 503 STARTING, no answer the
    usual DOWN/ERROR; a hung server's samples are due every ``health_generate_timeout_s`` +
    ``timeout_s``, the time one such check may take. With
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
        self._worker: tuple[tuple[str, str], ...] = ()
        self._worker_of: object = None  # the server start (startup_time) the worker facts belong to
        self._last_state: ServerState | None = None
        self._health_at: float | None = None  # monotonic time of the last /health that said 200
        self._metrics_read = False  # the last snapshot carries /metrics (set by _snap)

    async def run(self, publish: Publish[SglangSnapshot]) -> None:
        interval = max(0.05, float(self.cfg.interval_s))
        try:
            while True:
                started = time.monotonic()
                snap = await self.poll()
                due = interval
                if snap.state is ServerState.HUNG:  # each poll waits out /health_generate
                    due = max(interval, self.cfg.health_generate_timeout_s + self.cfg.timeout_s)
                publish(Sample(snap, snap.at, due))
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
                              f"{one_line(exc)}")
        now = time.monotonic()
        if self._health_due(now):
            checked = await (self._check_generate(client) if self.cfg.health == "generate"
                             else self._check_plain(client))
            if checked is not None:
                return checked
            self._health_at = now
        # healthy: server info (cached), metrics
        info_problem: str | None = None
        try:
            if (self._info is None or self._last_state is not ServerState.HEALTHY
                    or now - self._info_at >= self.info_refresh_s):
                self._info = await client.server_info()
                await self._read_worker(self._info)
                self._info_at = now
        except SglangError as exc:
            await self._after_failure(transport_only=True, exc=exc)
            if exc.kind in _NO_ANSWER:
                return self._failed(exc)
            # the server answered /health (and may answer /metrics): healthy, its details unknown
            self._info, info_problem = None, str(exc)
        try:
            metrics = await client.metrics()
        except SglangError as exc:
            if exc.kind == "metrics_disabled":
                return self._snap(ServerState.HEALTHY, 200, info_problem or str(exc), self._info)
            await self._after_failure(transport_only=True, exc=exc)
            return self._failed(exc, self._info)
        return self._snap(ServerState.HEALTHY, 200, info_problem, self._info, metrics)

    # -- health ---------------------------------------------------------------------------
    async def _check_plain(self, client: SglangClient) -> SglangSnapshot | None:
        """``/health``: None when it answered 200, else the snapshot to publish."""
        try:
            code = await client.health()
        except SglangError as exc:
            await self._after_failure()
            lost = await self._host_lost()
            return self._unreachable(lost) if lost is not None else self._failed(exc)
        if code == 503:
            return self._snap(ServerState.STARTING, 503, None)
        return None

    async def _check_generate(self, client: SglangClient) -> SglangSnapshot | None:
        """``/health_generate``: None when it answered 200; else ``/health`` decides between
        HUNG (200), STARTING (503) and the usual failures (no answer)."""
        limit = self.cfg.health_generate_timeout_s
        try:
            code: int | None = await client.health_generate(limit)
        except SglangError as exc:
            if exc.kind == "refused":  # nothing listening: /health cannot answer either
                return await self._check_plain(client)
            code, what = exc.status_code, _generate_failure(exc, limit)
        else:
            if code == 200:
                return None
            what = f"answered {code}"
        checked = await self._check_plain(client)
        if checked is not None:
            return checked  # STARTING, DOWN, ERROR, UNREACHABLE: /health says it all
        return self._snap(ServerState.HUNG, code, (
            f"{client.display_url}/health_generate {what} while /health answers 200 — the "
            f"scheduler runs no requests (hung?); check `journalctl -u {self.cfg.unit}`, then "
            f"`systemctl restart {self.cfg.unit}`"), self._info)

    # -- helpers ------------------------------------------------------------------------
    def _health_due(self, now: float) -> bool:
        """Ask ``/health`` this poll: unless the server was healthy at the last poll, its
        ``/metrics`` answered then, and the last ``/health`` is under ``health_interval_s`` old."""
        return (self._last_state is not ServerState.HEALTHY or not self._metrics_read
                or self._health_at is None or now - self._health_at >= self.cfg.health_interval_s)

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
        self._metrics_read = metrics is not None
        return SglangSnapshot(state, code, error, info, metrics, time.time(),
                              self._worker if info is not None else ())

    async def _read_worker(self, info: ServerInfo) -> None:
        """Once per server start: the worker's start-up facts from the unit's journal."""
        key = (info.raw.get("startup_time"), info.algorithm)
        if key == self._worker_of:
            return
        self._worker_of, self._worker = key, ()
        cmd = worker_log_command(self.cfg.unit, info.algorithm or "")
        if cmd is None:
            return
        try:
            res = await self.host.run(cmd, timeout=self.cfg.timeout_s)
        except (HostError, TimeoutError, OSError):
            self._worker_of = None  # try again at the next refresh
            return
        self._worker = worker_facts(res.stdout, info.algorithm or "")
        if not self._worker:
            self._worker_of = None  # not in the journal (yet): look again at the next refresh

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
                                        display_url=shown,
                                        max_body_bytes=round(self.cfg.max_body_mib * MIB),
                                        max_metrics_bytes=round(self.cfg.max_metrics_mib * MIB))
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


def _generate_failure(exc: SglangError, limit: float) -> str:
    """What a failed ``/health_generate`` did, as the end of "URL/health_generate ..."."""
    if exc.kind == "timeout":
        return f"did not answer within {limit:g} s"
    if exc.kind == "disconnected":
        return "closed the connection without answering"
    if exc.status_code is not None:
        return f"answered {exc.status_code}"
    return f"failed ({str(exc).split(': ', 1)[-1]})"
