"""Timestamped samples: every value the console shows carries when it was observed."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Generic, TypeVar

T_co = TypeVar("T_co", covariant=True)

#: Slack added to a sample's interval before it counts as stale, so ordinary delivery
#: jitter (a 1 s stream line arriving 30 ms late) does not flicker the pane.
STALE_GRACE_S = 0.5


@dataclass(frozen=True, slots=True)
class Sample(Generic[T_co]):
    """A value observed at wall-clock time ``at`` (``time.time()``), expected every ``interval`` s."""

    value: T_co
    at: float
    interval: float

    def age(self, now: float | None = None) -> float:
        return max(0.0, (time.time() if now is None else now) - self.at)

    def is_stale(self, now: float | None = None) -> bool:
        return self.age(now) > self.interval + STALE_GRACE_S


def format_age(seconds: float) -> str:
    """Short human age: ``0.4s``, ``12s``, ``3m05s``, ``2h04m``, ``3d02h``."""
    if seconds < 10:
        return f"{seconds:.1f}s"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def format_duration(seconds: float) -> str:
    """Coarse duration for ETAs: ``45s``, ``12m``, ``3h 10m``, ``7d 2h``."""
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h {(s % 3600) // 60}m"
    return f"{s // 86400}d {(s % 86400) // 3600}h"


def format_bytes(count: float) -> str:
    """Short byte count: ``512 B``, ``64 KiB``, ``12.3 MiB``, ``1.02 GiB``."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift:
            value = count / (1 << shift)
            return f"{value:.3g} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return f"{count:.0f} B"
