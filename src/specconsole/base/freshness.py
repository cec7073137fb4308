"""When a sample counts as stale: a threshold with hysteresis, so delivery jitter cannot flap it.

A value expected every ``interval`` s turns stale once its age exceeds :data:`STALE_AFTER` x
``interval`` (two deliveries missed and half of the next), and turns fresh again only once its age
is below :data:`FRESH_BELOW` x ``interval`` (a sample arrived about on time). Between the two the
previous state holds. At the usual 1 s interval: stale after 2.5 s, fresh again under 1.5 s.

Why: the console redraws every second and samples arrive every second, so a sample's age at a
redraw sits anywhere from 0 to a little over 1 s. A single threshold just above the interval
(the old ``interval + 0.5 s``) was crossed by ordinary jitter, and each crossing toggled a pane's
``-stale`` class, which restyles the whole pane (30-41 % of the console's CPU at 200 hosts). With
hysteresis one late delivery never marks a host stale, a host that misses two does, and it stays
marked until it delivers on time again.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from specconsole.base.samples import Sample

#: Stale once the age exceeds this many intervals ...
STALE_AFTER = 2.5
#: ... and fresh again only once it is below this many.
FRESH_BELOW = 1.5


def stale_next(was_stale: bool, age: float, interval: float) -> bool:
    """The stale state after seeing ``age``, given the state before (the hysteresis rule)."""
    interval = interval if interval > 0 else 1.0
    if was_stale:
        return age >= FRESH_BELOW * interval
    return age > STALE_AFTER * interval


class Staleness:
    """Remembers each value's stale state (by any key, e.g. ``(host, "gpu")``) between redraws.

    ``check`` is idempotent for the same age: two panes asking about the same key in one redraw
    get the same answer.
    """

    def __init__(self) -> None:
        self._stale: dict[Hashable, bool] = {}

    def check(self, key: Hashable, sample: Sample[Any] | None, now: float) -> bool:
        """Whether ``sample`` is stale now (no sample at all: stale)."""
        if sample is None:
            self._stale.pop(key, None)
            return True
        state = stale_next(self._stale.get(key, False), sample.age(now), sample.interval)
        self._stale[key] = state
        return state

    def forget(self, key: Hashable) -> None:
        self._stale.pop(key, None)
