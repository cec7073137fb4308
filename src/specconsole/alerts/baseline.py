"""``eval.accept_len``: what the eval measured for the deployment a host serves now.

The baseline of a serving host is the newest *measured* run in the eval results store (not an
imported, published one: those are another team's drafter) whose deployment is the one the host
serves now: the same speculative algorithm (as ``/server_info`` reports it) and, where both say,
the same draft model. Its value is that run's mean acceptance length over its tasks. No such run
(or no ``/server_info`` yet): unknown, so a rule reading it does not fire.

The store is read at most every ``reload_s`` (a folder of JSON files), on the caller's thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from specconsole.eval.store import ResultStore

if TYPE_CHECKING:
    from specconsole.eval.schema import EvalRun
    from specconsole.monitor import HostStatus

#: how often the results folder is read again
RELOAD_S = 60.0


class EvalBaseline:
    """Callable on a :class:`HostStatus`: its eval baseline's mean acceptance length, or None."""

    def __init__(self, store: ResultStore | None = None, *, reload_s: float = RELOAD_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store or ResultStore()
        self.reload_s = reload_s
        self.clock = clock
        self._runs: list[EvalRun] = []
        self._loaded_at: float | None = None

    def runs(self) -> list[EvalRun]:
        now = self.clock()
        if self._loaded_at is None or now - self._loaded_at >= self.reload_s:
            self._loaded_at = now
            try:
                self._runs = [r for r in self.store.runs() if r.kind != "published"]
            except OSError:  # an unreadable folder: no baseline, until it can be read
                self._runs = []
        return self._runs

    def __call__(self, status: HostStatus) -> float | None:
        if status.sglang is None or status.sglang.value.info is None:
            return None
        info = status.sglang.value.info
        for run in reversed(self.runs()):  # newest first
            d = run.deployment
            if d.unknown or d.algorithm != info.algorithm:
                continue
            if d.draft_model and info.draft_model_path and d.draft_model != info.draft_model_path:
                continue
            return run.average("acceptance_length")
        return None
