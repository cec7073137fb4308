"""Capped doubling backoff: the one retry rhythm of every reconnecting stream and poller.

``initial, 2x, 4x ... capped at cap``; by default 0.5 s doubling to 15 s (the SSH supervisor
takes its values from ``[hosts.ssh]``).
"""

from __future__ import annotations

#: The first retry delay, seconds.
INITIAL_S = 0.5
#: The longest retry delay, seconds.
MAX_S = 15.0


def backoff_delay(attempt: int, initial: float = INITIAL_S, cap: float = MAX_S) -> float:
    """Delay before retry ``attempt`` (1-based): initial, 2x, 4x ... capped at ``cap``."""
    return min(cap, initial * float(2 ** max(0, attempt - 1)))


class Backoff:
    """A retry loop's delay: :meth:`next` hands out the current one and doubles the following
    (capped); :meth:`reset` starts over once the thing retried works again."""

    def __init__(self, initial: float = INITIAL_S, cap: float = MAX_S) -> None:
        self.initial = initial
        self.cap = cap
        self.current = initial

    def reset(self) -> float:
        """Back to the first delay (returned)."""
        self.current = self.initial
        return self.current

    def double(self) -> float:
        """Double the delay (capped) and return it."""
        self.current = min(self.current * 2, self.cap)
        return self.current

    def next(self) -> float:
        """The delay to wait now; the one after it is doubled (capped)."""
        delay = self.current
        self.double()
        return delay
