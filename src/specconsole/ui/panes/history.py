"""Short histories for the plots: one point per new sample (not per redraw), last few minutes."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from specconsole.formats.nvidia_smi import GpuSnapshot
from specconsole.monitor import HostStatus

KEEP = 600  # points; 10 min at 1 s samples, more than the widest plot shows


class Series:
    def __init__(self, keep: int = KEEP) -> None:
        self.points: deque[float | None] = deque(maxlen=keep)
        self.last_at: float | None = None
        self.first_at: float | None = None

    def add(self, at: float, value: float | None) -> None:
        if self.last_at is not None and at <= self.last_at:
            return  # the same sample seen again by another redraw
        self.last_at = at
        self.first_at = at if self.first_at is None else self.first_at
        self.points.append(value)

    def prepend(self, points: Iterable[tuple[float, float | None]]) -> None:
        """Earlier ``(at, value)`` points (a history from Prometheus) before the recorded ones."""
        first = self.first_at
        older = [(at, v) for at, v in points if first is None or at < first]
        if not older:
            return
        self.points = deque([v for _at, v in older] + list(self.points), maxlen=self.points.maxlen)
        self.first_at = older[0][0]
        self.last_at = older[-1][0] if self.last_at is None else self.last_at

    def extend(self, values: Iterable[float | None]) -> None:
        self.points.extend(values)

    def values(self) -> list[float | None]:
        return list(self.points)

    @property
    def latest(self) -> float | None:
        return self.points[-1] if self.points else None


def mean_utilization(gpu_snapshot: GpuSnapshot) -> float | None:
    values = [g.utilization_pct for g in gpu_snapshot.gpus if g.utilization_pct is not None]
    return sum(values) / len(values) if values else None


def tokens_per_s(status: HostStatus) -> tuple[str, float | None, float | None]:
    """The host's tokens/s for its history: generation (SGLang) on a serving host, else training.

    Returns ``(label, at, value)``; ``at`` is None when there is no sample yet.
    """
    if status.sglang is not None:
        metrics = status.sglang.value.metrics
        return "gen tok/s", status.sglang.at, metrics.tokens_per_s if metrics is not None else None
    if status.training is not None:
        return "train tok/s", status.training.at, status.training.value.tokens_per_s
    if "sglang" in status.expected:
        return "gen tok/s", None, None
    return "train tok/s", None, None


class History:
    """``history.series(host, kind)`` for kinds ``util``, ``tokens``, ``accept``."""

    def __init__(self, keep: int = KEEP) -> None:
        self.keep = keep
        self._series: dict[tuple[str, str], Series] = {}
        self._recorded: dict[str, tuple[object, object, object]] = {}

    def series(self, host: str, kind: str) -> Series:
        key = (host, kind)
        if key not in self._series:
            self._series[key] = Series(self.keep)
        return self._series[key]

    def seed(self, points: dict[tuple[str, str], list[tuple[float, float | None]]]) -> None:
        """Histories from before the console started: ``{(host, kind): [(at, value), ...]}``."""
        for (host, kind), pts in points.items():
            self.series(host, kind).prepend(pts)

    def record(self, status: HostStatus) -> None:
        if status.same_samples(self._recorded.get(status.name)):
            return  # nothing new since the last redraw (most hosts, most redraws)
        self._recorded[status.name] = status.samples
        if status.gpu is not None and status.gpu.value.gpus:
            self.series(status.name, "util").add(status.gpu.at, mean_utilization(status.gpu.value))
        _label, at, value = tokens_per_s(status)
        if at is not None:
            self.series(status.name, "tokens").add(at, value)
        if status.sglang is not None:
            metrics = status.sglang.value.metrics
            self.series(status.name, "accept").add(
                status.sglang.at, metrics.spec_accept_length if metrics is not None else None)
