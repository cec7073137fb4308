"""One Prometheus poll for the whole fleet, feeding each host's GPU and SGLang samples.

:class:`PrometheusPoller` sends a few queries per refresh (``[prometheus] interval_s``, on a
fixed schedule) for ALL hosts at once and hands each host's part to that host's
:class:`FedSource`, which a :class:`~specconsole.monitor.HostMonitor` runs like any other
source: the samples are the same :class:`GpuSnapshot` / :class:`SglangSnapshot` types the SSH
and HTTP sources publish, so panes do not change. The poll loop runs while at least one fed
source runs (it starts with the first and stops with the last).

At start-up (and, if Prometheus is down then, after its first answer) ``query_range`` fetches
the last ``history_s`` of the plots' series; :meth:`PrometheusPoller.take_history` hands them
to the UI's history once.

When Prometheus cannot be queried every fed host gets an error sample naming Prometheus, the
URL and why, dated at the last good answer: the hosts read STALE with the reason until
Prometheus answers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from specconsole.base.events import EventLog
from specconsole.base.http_body import MIB
from specconsole.base.samples import Sample
from specconsole.config import Config, HostConfig
from specconsole.formats.nvidia_smi import GpuSnapshot, GpuState
from specconsole.sources import Publish
from specconsole.sources.prometheus import (
    UTIL,
    GpuFields,
    GpuIdentities,
    HostNames,
    Labels,
    PrometheusClient,
    PrometheusError,
    Queries,
    gpu_fields,
    gpu_identities,
    gpu_snapshots,
    history_points,
    missing_gpu_error,
    missing_sglang_error,
    sglang_metrics,
    sglang_snapshot,
    uses_prometheus,
)
from specconsole.sources.sglang import ServerState

#: GPU identity labels (UUID, model) are re-read this often, or when a new GPU shows up.
LABELS_REFRESH_S = 60.0
#: Memory, power and temperature are asked every this many polls (utilization every poll): at
#: 1,000 x 8 GPUs they are 32,000 series, and dcgm-exporter collects every 30 s by default.
DETAIL_EVERY = 3
#: Points per plot series fetched by query_range (the UI's history keeps 600).
HISTORY_POINTS = 600
EVENT_SOURCE = "prometheus"

Vector = list[tuple[Labels, float, float]]


class FedSource:
    """A host's GPU or SGLang source whose values come from the fleet's Prometheus poll."""

    def __init__(self, poller: PrometheusPoller, host: str, kind: str) -> None:
        self.poller, self.host, self.kind = poller, host, kind

    async def run(self, publish: Publish[Any]) -> None:
        self.poller.attach(self.host, self.kind, publish)
        try:
            await asyncio.Event().wait()  # the poller publishes; this only holds the place
        finally:
            await self.poller.detach(self.host, self.kind)


class PrometheusPoller:
    """Queries Prometheus for every fed host at once and publishes each host's samples."""

    def __init__(self, config: Config, events: EventLog | None = None) -> None:
        if config.prometheus is None:
            raise ValueError("PrometheusPoller needs a [prometheus] section")
        self.cfg = config.prometheus
        self.url = self.cfg.url.rstrip("/")
        self.events = events or EventLog()
        self.queries = Queries(self.cfg.host_label)
        self.names = HostNames(self.cfg, config.hosts)
        self.gpu_hosts = [h.name for h in config.hosts if uses_prometheus(config, h, "gpu")]
        self.sglang_hosts = [h.name for h in config.hosts if uses_prometheus(config, h, "sglang")]
        self._subs: dict[tuple[str, str], Publish[Any]] = {}
        self._latest: dict[tuple[str, str], Sample[Any]] = {}
        self._task: asyncio.Task[None] | None = None
        self._backfill: asyncio.Task[None] | None = None
        self._ident: GpuIdentities | None = None
        self._labels_at = 0.0
        self._detail: GpuFields | None = None
        self._detail_poll = 0
        self._seen_gpus: dict[str, set[int]] = {}
        self._pending_history: dict[tuple[str, str], list[tuple[float, float | None]]] = {}
        self._started = time.time()
        self.last_ok: float | None = None
        self.failure: str | None = None
        self.backfilled = False
        self.polls = 0
        self._told_unknown = False
        #: a sample is stale once the next poll should have answered (interval + timeout)
        self.sample_interval = float(self.cfg.interval_s) + float(self.cfg.timeout_s)
        self.last_poll_s: float | None = None

    # -- wiring -----------------------------------------------------------------------------
    def sources_for(self, host: HostConfig) -> dict[str, FedSource]:
        """The sources of ``host`` that Prometheus feeds (``gpu`` and/or ``sglang``)."""
        out = {}
        if host.name in self.gpu_hosts:
            out["gpu"] = FedSource(self, host.name, "gpu")
        if host.name in self.sglang_hosts:
            out["sglang"] = FedSource(self, host.name, "sglang")
        return out

    def attach(self, host: str, kind: str, publish: Publish[Any]) -> None:
        self._subs[(host, kind)] = publish
        latest = self._latest.get((host, kind))
        if latest is not None:
            publish(latest)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self.run(), name="prometheus-poll")

    async def detach(self, host: str, kind: str) -> None:
        self._subs.pop((host, kind), None)
        if not self._subs and self._task is not None:
            task, self._task = self._task, None
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, 2.0)

    def take_history(self) -> dict[tuple[str, str], list[tuple[float, float | None]]]:
        """The plots' history from ``query_range`` (``{(host, kind): [(at, value)]}``), once."""
        out, self._pending_history = self._pending_history, {}
        return out

    # -- the loop ---------------------------------------------------------------------------
    async def run(self) -> None:
        """Poll on a fixed schedule until cancelled (a slow answer skips ticks, never drifts)."""
        interval = float(self.cfg.interval_s)
        client = PrometheusClient(self.url, timeout_s=self.cfg.timeout_s,
                                  max_body_bytes=round(self.cfg.max_body_mib * MIB))
        self.events.emit(f"reading {len(self.gpu_hosts)} hosts' GPUs and "
                         f"{len(self.sglang_hosts)} SGLang servers from Prometheus at {self.url}",
                         EVENT_SOURCE)
        try:
            next_at = time.monotonic()
            if self.gpu_hosts:  # the first samples fast: utilization and SGLang, then the rest
                await self.poll(client, detail=False)
            while True:
                await self.poll(client)
                if not self.backfilled and self.failure is None and self.cfg.history_s > 0 \
                        and (self._backfill is None or self._backfill.done()):
                    self._backfill = asyncio.create_task(self.fetch_history(client))
                next_at += interval
                now = time.monotonic()
                if next_at < now:
                    next_at = now + interval - (now - next_at) % interval
                await asyncio.sleep(next_at - now)
        finally:
            if self._backfill is not None:
                self._backfill.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._backfill
            await client.aclose()

    async def poll(self, client: PrometheusClient, *, detail: bool = True) -> None:
        """One refresh of every fed host: a few queries, then each host's samples.
        ``detail=False`` skips memory, power, temperature and GPU identities (the first poll,
        so that the first samples come fast)."""
        self.polls += 1
        started = time.monotonic()
        calls: list[tuple[str, str]] = []
        if self.gpu_hosts:
            calls.append(("util", self.queries.gpu_util()))
            if detail and (self._detail is None or self.polls - self._detail_poll >= DETAIL_EVERY):
                calls.append(("detail", self.queries.gpu_values()))
            if detail and (self._ident is None or time.time() - self._labels_at > LABELS_REFRESH_S):
                calls.append(("labels", self.queries.gpu_labels()))
        if self.sglang_hosts:
            calls.extend(self.queries.sglang())
        answers = await asyncio.gather(*(client.query(q) for _k, q in calls),
                                       return_exceptions=True)
        for answer in answers:
            if isinstance(answer, asyncio.CancelledError):
                raise answer
            if isinstance(answer, BaseException):
                self._failed(str(answer) if isinstance(answer, PrometheusError)
                             else f"Prometheus at {self.url}: {type(answer).__name__}: {answer}")
                return
        self.last_poll_s = time.monotonic() - started
        got: dict[tuple[str, str], Vector] = {
            call: answer for call, answer in zip(calls, answers, strict=True)
            if not isinstance(answer, BaseException)}
        at = time.time()
        if self.gpu_hosts:
            self._publish_gpus({kind: got[(kind, q)] for kind, q in calls}, at)
        if self.sglang_hosts:
            found = sglang_metrics([(agg, got[(agg, q)]) for agg, q in calls
                                    if agg in ("sum", "mean", "max", "rate")], self.names)
            for host in self.sglang_hosts:
                m = found.get(host)
                error = None if m else missing_sglang_error(host, self.url, self.cfg.host_label)
                self._publish(host, "sglang", Sample(sglang_snapshot(m, error, at), at,
                                                     self.sample_interval))
        self._recovered(at)

    def _publish_gpus(self, got: dict[str, Vector], at: float) -> None:
        if "detail" in got:
            self._detail, self._detail_poll = gpu_fields(got["detail"], self.names), self.polls
        if "labels" in got:
            self._ident, self._labels_at = gpu_identities(got["labels"], self.names), time.time()
        util = gpu_fields(got["util"], self.names, UTIL)  # a GPU is present while it has util
        snaps = gpu_snapshots(util, self._detail, self._ident or {}, at)
        fresh_gpu = False
        for host in self.gpu_hosts:
            snap = snaps.get(host)
            seen = self._seen_gpus.setdefault(host, set())
            if snap is None:
                snap = GpuSnapshot(GpuState.ERROR, error=missing_gpu_error(
                    host, self.url, self.cfg.host_label), at=at)
            else:
                indices = {g.index for g in snap.gpus}
                fresh_gpu |= bool(indices - seen)
                seen |= indices
                missing = tuple(sorted(seen - indices))
                if missing:
                    snap = GpuSnapshot(GpuState.OK, snap.gpus, missing=missing, at=at)
            self._publish(host, "gpu", Sample(snap, at, self.sample_interval))
        if fresh_gpu and self.polls > 1:
            self._ident = self._detail = None  # a new GPU: its UUID, model and memory next time

    def _publish(self, host: str, kind: str, sample: Sample[Any]) -> None:
        self._latest[(host, kind)] = sample
        publish = self._subs.get((host, kind))
        if publish is not None:
            publish(sample)

    def _failed(self, why: str) -> None:
        """Every fed host: an error sample dated at the last good answer (so it reads STALE)."""
        if why != self.failure:
            self.events.emit(f"{why}; {len(self._subs)} fed samples go stale until it answers",
                             EVENT_SOURCE, "error")
        self.failure = why
        now = time.time()
        dated = self.last_ok if self.last_ok is not None else self._started
        for host in self.gpu_hosts:
            self._publish(host, "gpu", Sample(GpuSnapshot(GpuState.ERROR, error=why, at=now),
                                              dated, self.sample_interval))
        for host in self.sglang_hosts:
            snap = sglang_snapshot(None, why, now, ServerState.ERROR)
            self._publish(host, "sglang", Sample(snap, dated, self.sample_interval))

    def _recovered(self, at: float) -> None:
        if self.failure is not None:
            self.events.emit(f"Prometheus at {self.url} answers again", EVENT_SOURCE)
        self.failure = None
        self.last_ok = at
        if self.names.unknown and not self._told_unknown:
            self._told_unknown = True
            sample = ", ".join(sorted(self.names.unknown)[:3])
            self.events.emit(f"Prometheus at {self.url} has {len(self.names.unknown)} hosts not "
                             f"in the config (e.g. {sample}); add them or map them with "
                             "[prometheus] host_map", EVENT_SOURCE, "warning")

    # -- history ----------------------------------------------------------------------------
    async def fetch_history(self, client: PrometheusClient) -> None:
        """The plots' last ``history_s`` from ``query_range``, for :meth:`take_history`."""
        end = time.time()
        span = float(self.cfg.history_s)
        step = max(float(self.cfg.interval_s), span / HISTORY_POINTS)
        qs = self.queries.history()
        kinds = (["util"] if self.gpu_hosts else []) + \
            (["tokens", "tokens_rate", "accept"] if self.sglang_hosts else [])
        try:
            answers = await asyncio.gather(*(client.query_range(qs[k], end - span, end, step)
                                             for k in kinds))
        except PrometheusError as err:
            self.events.emit(f"no plot history: {err}", EVENT_SOURCE, "warning")
            return
        per_kind = {k: history_points(a, self.names) for k, a in zip(kinds, answers, strict=True)}
        pending: dict[tuple[str, str], list[tuple[float, float | None]]] = {}
        for host in self.gpu_hosts:
            if per_kind.get("util", {}).get(host):
                pending[(host, "util")] = per_kind["util"][host]
        for host in self.sglang_hosts:
            tokens = per_kind["tokens"].get(host) or per_kind["tokens_rate"].get(host)
            if tokens:
                pending[(host, "tokens")] = tokens
            if per_kind["accept"].get(host):
                pending[(host, "accept")] = per_kind["accept"][host]
        self._pending_history.update(pending)
        self.backfilled = True
        hosts = len({h for h, _k in pending})
        self.events.emit(f"plot history: the last {span / 60:g} min of {hosts} hosts from "
                         f"Prometheus at {self.url}", EVENT_SOURCE)


def make_poller(config: Config, events: EventLog | None = None) -> PrometheusPoller | None:
    """The fleet's poller when a [prometheus] server is configured and some host reads from it."""
    if config.prometheus is None:
        return None
    if not any(uses_prometheus(config, h, k) for h in config.hosts for k in ("gpu", "sglang")):
        return None
    return PrometheusPoller(config, events)
