"""Watching hosts: one monitor per host runs that host's sources and keeps their latest samples.

The TUI and ``specconsole status`` both read :class:`HostStatus` snapshots from a
:class:`Fleet`; neither knows how the values were obtained. A slow or dead host only ages its
own samples: every source runs in its own self-rescheduling task.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeGuard, TypeVar

from specconsole.base.events import EventLog
from specconsole.base.samples import Sample
from specconsole.base.shutdown import STOP_TIMEOUT_S
from specconsole.config import Config, HostConfig
from specconsole.formats.nvidia_smi import GpuSnapshot
from specconsole.hosts import Connection, ConnState, Host, make_host
from specconsole.hosts.address import ssh_address
from specconsole.sources import Publish, Source
from specconsole.sources.sglang import SglangSnapshot
from specconsole.sources.training import TrainingProgress

if TYPE_CHECKING:
    from specconsole.sources.prometheus_fleet import PrometheusPoller

T = TypeVar("T")

SOURCE_KINDS = ("gpu", "sglang", "training")

#: After a stop's timeout, how long aborted connections get to wind down before we move on.
ABORT_GRACE_S = 0.2

#: ``listener(host_name, kind)`` where kind is a source kind or "connection".
ChangeListener = Callable[[str, str], None]
#: Plot points from before now: ``{(host, kind): [(at, value), ...]}``.
HistoryPoints = dict[tuple[str, str], list[tuple[float, float | None]]]


@dataclass(frozen=True)
class HostStatus:
    """Everything known about one host right now; each value carries its own timestamp."""

    name: str
    role: str
    address: str
    connection: Connection
    gpu: Sample[GpuSnapshot] | None
    sglang: Sample[SglangSnapshot] | None
    training: Sample[TrainingProgress] | None
    expected: tuple[str, ...]

    @property
    def samples(self) -> tuple[object, object, object]:
        """The GPU, SGLang and training samples: the same objects until a source publishes."""
        return (self.gpu, self.sglang, self.training)

    def same_samples(self, seen: tuple[object, object, object] | None) -> bool:
        """``seen`` (an earlier :attr:`samples`) holds these very samples: nothing new since."""
        return seen is not None and all(a is b for a, b in zip(seen, self.samples, strict=True))

    @property
    def reachable(self) -> bool:
        """Connected, or read through Prometheus with SSH left on demand."""
        return self.connection.state in (ConnState.CONNECTED, ConnState.ON_DEMAND)

    @property
    def complete(self) -> bool:
        """Every source this host is configured for has published something meaningful: a
        training sample counts once the log's first lines arrived or the tail reported why not,
        and the job's processes were checked (running or stopped); GPU readings once the
        processes using the GPUs are known."""
        return self.filled(processes=True)

    def filled(self, *, processes: bool) -> bool:
        """:attr:`complete`, or with ``processes=False`` not waiting for the GPU process list
        (for a view that does not show it: the fleet view)."""
        samples = {"gpu": self.gpu, "sglang": self.sglang, "training": self.training}
        if any(samples.get(kind) is None for kind in self.expected):
            return False
        if processes and self.gpu is not None and not self.gpu.value.processes_known:
            return False
        if "training" in self.expected and self.training is not None:
            progress = self.training.value
            if not (progress.lines_seen or progress.error) or progress.state is None:
                return False
        return True


class HostMonitor:
    """Runs one host's connection and sources; holds their latest samples."""

    def __init__(self, config: HostConfig, host: Host | None = None,
                 events: EventLog | None = None, prometheus: PrometheusPoller | None = None) -> None:
        self.config = config
        self.prometheus = prometheus  # a PrometheusPoller feeding this host's gpu/sglang, or None
        self.host = host or make_host(config)
        self.events = events or EventLog()
        self._last_state: ConnState | None = None
        self._last_conn: Connection | None = None
        self.samples: dict[str, Sample[object]] = {}
        #: status() until a sample or the connection changes (redraws ask for 1,000s of hosts)
        self._status_cache: HostStatus | None = None
        self._fed: set[str] = set()  # the source kinds Prometheus feeds (set by _build_sources)
        self._skips_told = 0  # the training tail's skips ahead already told as events
        self._sources = self._build_sources()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self._listeners: list[ChangeListener] = []
        self.host.add_listener(self._connection_changed)

    def _build_sources(self) -> dict[str, Source[object]]:
        from specconsole.sources.gpu import make_gpu_source

        sources: dict[str, Source[object]] = {}
        fed = self.prometheus.sources_for(self.config) if self.prometheus is not None else {}
        self._fed = set(fed)
        gpu = fed.get("gpu") or make_gpu_source(self.host, self.config.gpu)
        if gpu is not None:
            sources["gpu"] = gpu
        if "sglang" in fed:
            sources["sglang"] = fed["sglang"]
        elif self.config.serves and self.config.sglang:
            from specconsole.sources.sglang import SglangSource

            sources["sglang"] = SglangSource(self.host, self.config.sglang)
        if self.config.trains and self.config.training and self.config.slurm:  # a Slurm job (issue 32)
            from specconsole.sources.slurm import SlurmTrainingSource

            sources["training"] = SlurmTrainingSource(self.host, self.config.training, self.config.slurm)
        elif self.config.trains and self.config.training:
            from specconsole.sources.training import TrainingSource

            sources["training"] = TrainingSource(self.host, self.config.training)
        return sources

    def _connection_changed(self, conn: Connection) -> None:
        self._status_cache = None
        seen, self._last_conn = self._last_conn, conn
        if seen is not None and replace(seen, last_ok=conn.last_ok) == conn:
            return  # only last_ok moved (every command does that): nothing to redraw for
        if conn.state is not self._last_state or conn.state is ConnState.RECONNECTING:
            name = self.config.name
            if conn.state is ConnState.CONNECTED:
                self.events.emit(f"connected to {self.status().address}", name)
            elif conn.state is ConnState.RECONNECTING and conn.next_retry_at is None:
                self.events.emit(f"reconnecting (attempt {conn.attempt}): {conn.last_error}", name, "warning")
            elif conn.state is ConnState.DOWN and self._last_state is not ConnState.DOWN:
                self.events.emit(f"down: {conn.last_error}", name, "error")
            self._last_state = conn.state
        self._changed("connection")

    @property
    def expected(self) -> tuple[str, ...]:
        return tuple(k for k in SOURCE_KINDS if k in self._sources)

    def subscribe(self, listener: ChangeListener) -> None:
        self._listeners.append(listener)

    def _changed(self, kind: str) -> None:
        for listener in list(self._listeners):
            listener(self.config.name, kind)

    def _publisher(self, kind: str) -> Publish[object]:
        def publish(sample: Sample[object]) -> None:
            value = sample.value
            if isinstance(value, TrainingProgress) and value.skips > self._skips_told:
                self._skips_told = value.skips  # the tail dropped a backlog: say so once
                self.events.emit(value.skip_note or "training log: skipped ahead", self.config.name, "warning")
            self.samples[kind] = sample
            self._status_cache = None
            self._changed(kind)

        return publish

    @property
    def on_demand(self) -> bool:
        """An SSH host whose every source Prometheus feeds: no connection until one is needed."""
        return self.config.connect == "ssh" and bool(self._sources) and set(self._sources) <= self._fed

    async def start(self) -> None:
        if self.on_demand:
            self.host.start_on_demand()
        else:
            await self.host.start()
        for kind, source in self._sources.items():
            self._tasks.append(asyncio.create_task(
                self._run_source(kind, source), name=f"{self.config.name}-{kind}"))

    async def _run_source(self, kind: str, source: Source[object]) -> None:
        """A source's loop; if it ever crashes, the error is kept and the loop restarted."""
        while not self._stopping:
            try:
                await source.run(self._publisher(kind))
                return
            except asyncio.CancelledError:
                raise
            except Exception as err:  # a bug in a source must not take the console down
                if self._stopping:  # e.g. the host is closed: a cancellation got lost on the way
                    return
                self.events.emit(f"{kind} source failed: {err!r}; restarting in 2 s",
                                 self.config.name, "error")
                await asyncio.sleep(2)

    async def stop(self) -> None:
        """Cancel the sources and close the host together (closing the connection ends every
        stream over it at once). Never swallows a cancellation of its own: bound it from outside."""
        self._stopping = True
        tasks, self._tasks = self._tasks, []
        closing = asyncio.ensure_future(self.host.close())  # first: the streams see the host closing
        for task in tasks:
            task.cancel()
        try:
            await asyncio.wait([*tasks, closing])
        finally:
            _retrieve([*tasks, closing])

    def abort(self) -> None:
        """Drop the host's connection now (a bounded stop's last step); the sources end with it."""
        for task in self._tasks:
            task.cancel()
        self.host.abort()

    def status(self) -> HostStatus:
        cached = self._status_cache
        if cached is not None and cached.connection is self.host.status:
            return cached
        c = self.config
        address = "local"
        if c.connect == "ssh":
            address = ssh_address(c)
        self._status_cache = HostStatus(
            name=c.name, role=c.role, address=address, connection=self.host.status,
            gpu=self.latest("gpu", GpuSnapshot), sglang=self.latest("sglang", SglangSnapshot),
            training=self.latest("training", TrainingProgress), expected=self.expected,
        )
        return self._status_cache

    def latest(self, kind: str, value_type: type[T]) -> Sample[T] | None:
        """The newest sample of source ``kind``, if it holds a ``value_type``."""
        sample = self.samples.get(kind)
        return sample if sample is not None and _holds(sample, value_type) else None


class Fleet:
    """All configured hosts' monitors."""

    def __init__(self, config: Config, events: EventLog | None = None) -> None:
        self.config = config
        self.events = events or EventLog()
        from specconsole.sources.prometheus_fleet import make_poller

        self.prometheus = make_poller(config, self.events)  # None without [prometheus]
        self.monitors = {h.name: HostMonitor(h, events=self.events, prometheus=self.prometheus)
                         for h in config.hosts}
        self.stopped = False  # stop() has run to its end

    def subscribe(self, listener: ChangeListener) -> None:
        for m in self.monitors.values():
            m.subscribe(listener)

    async def start(self) -> None:
        for m in self.monitors.values():
            await m.start()
        lazy = [m.config.name for m in self.monitors.values() if m.on_demand]
        if lazy:
            self.events.emit(f"{len(lazy)} SSH host(s) not connected at start ({', '.join(lazy[:3])}"
                             f"{', ...' if len(lazy) > 3 else ''}): every sample of theirs comes from "
                             "Prometheus; an action that needs one connects it first")

    async def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Stop every monitor at once, in at most about ``timeout`` s at any host count: whatever
        has not finished by then has its connection aborted and is left behind cancelled."""
        stops = [asyncio.ensure_future(m.stop()) for m in self.monitors.values()]
        if not stops:
            self.stopped = True
            return
        try:
            _, pending = await asyncio.wait(stops, timeout=timeout)
            if pending:
                for m in self.monitors.values():
                    m.abort()
                _, pending = await asyncio.wait(pending, timeout=ABORT_GRACE_S)
                for task in pending:
                    task.cancel()
            self.stopped = True
        finally:
            _retrieve(stops)

    def statuses(self) -> list[HostStatus]:
        return [m.status() for m in self.monitors.values()]

    def host(self, name: str) -> Host | None:
        """The host ``name``'s connection (the one its monitor reads through), if configured."""
        monitor = self.monitors.get(name)
        return monitor.host if monitor is not None else None

    def take_history(self) -> HistoryPoints:
        """The plots' history Prometheus' ``query_range`` brought, once (none without Prometheus)."""
        return self.prometheus.take_history() if self.prometheus is not None else {}

    async def first_snapshot(self, timeout: float) -> list[HostStatus]:
        """Wait until every host is complete or known unreachable, at most ``timeout`` s."""
        deadline = time.monotonic() + timeout
        pending = list(self.monitors.values())
        while time.monotonic() < deadline:
            # only the hosts not settled yet are looked at (cheap at hundreds of hosts); once
            # none is left, all are checked together, as a settled host may have moved on
            pending = [m for m in pending if not _settled(m.status())]
            if not pending:
                statuses = self.statuses()
                pending = [m for m, s in zip(self.monitors.values(), statuses, strict=True) if not _settled(s)]
                if not pending:
                    return statuses
            await asyncio.sleep(0.05)
        return self.statuses()


def _holds(sample: Sample[object], value_type: type[T]) -> TypeGuard[Sample[T]]:
    return isinstance(sample.value, value_type)


def _retrieve(tasks: Iterable[asyncio.Future[T]]) -> None:
    """Collect finished tasks' exceptions (a stop reports nothing; asyncio must not log them)."""
    for task in tasks:
        if task.done() and not task.cancelled():
            task.exception()


def _settled(status: HostStatus) -> bool:
    return status.complete or _given_up(status)


def _given_up(status: HostStatus) -> bool:
    return status.connection.state in (ConnState.DOWN, ConnState.CLOSED) or (
        status.connection.state is ConnState.RECONNECTING and status.connection.attempt >= 1
    )
