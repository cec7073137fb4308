"""One line per replica while a rollout runs: state, current step, elapsed, latest heartbeat, gate.

:class:`Board` reads the rollout's :class:`~specconsole.actions.rollout.run.Replica` objects (their
state and gate figures) and the step events it is fed (each replica's current step, when it
started, its latest heartbeat or result), and renders one line per replica at any width::

    serve    promoted    rejoin the router   6.1s  acc 5.25/5.10 450/437 tok/s     (this / baseline)
    serve2   deploying   wait for health     3.2s  … waiting for /health (last: HTTP 503) for 0.8s
    serve3   waiting     -                      -

The action view shows :meth:`Board.lines`; 8 replicas fit on an 80x24 screen (more scroll).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specconsole.steps import StepEvent

if TYPE_CHECKING:
    from specconsole.actions.rollout.gate import Figures
    from specconsole.actions.rollout.run import Replica


@dataclass
class _Seen:
    step: str = "-"
    since: float | None = None   # when the replica's part began (time.time)
    ended: float | None = None
    last: str = ""


class Board:
    def __init__(self, replicas: list[Replica], baseline: Figures | None = None) -> None:
        self.replicas = replicas
        self.baseline = baseline
        self.seen: dict[str, _Seen] = {r.name: _Seen() for r in replicas}

    def feed(self, event: StepEvent) -> None:
        s = self.seen.get(event.host)
        if s is None:
            return
        if s.since is None:
            s.since = event.at
        if event.kind == "step":
            s.step = event.step or event.message
        if event.kind in ("heartbeat", "result", "info", "warning", "error", "step", "done", "failed"):
            s.last = ("… " if event.kind == "heartbeat" else "") + event.message
        s.ended = event.at if event.kind in ("done", "failed") else None

    def line(self, r: Replica, width: int = 80, now: float | None = None) -> str:
        s = self.seen[r.name]
        now = time.time() if now is None else now
        elapsed = "-" if s.since is None else f"{(s.ended or now) - s.since:.1f}s"
        w = self.name_width
        head = f"{r.name[:w]:{w}} {r.state[:11]:11} {s.step[:17]:17} {elapsed:>6}  "
        tail = self.gate_text(r) or s.last
        text = head + tail.replace("\n", " ")
        return text if len(text) <= width else text[: width - 1] + "…"

    @property
    def name_width(self) -> int:
        """The longest replica name, 8 to 12 columns."""
        return max(8, min(12, max((len(r.name) for r in self.replicas), default=8)))

    def gate_text(self, r: Replica) -> str:
        f, b = r.figures, self.baseline
        if f is None:
            return ""
        if b is None:
            return f"acc {f.accept_len:.2f} {f.tok_s:.0f} tok/s"
        return f"acc {f.accept_len:.2f}/{b.accept_len:.2f} {f.tok_s:.0f}/{b.tok_s:.0f} tok/s"

    def lines(self, width: int = 80, now: float | None = None) -> list[str]:
        return [self.line(r, width, now) for r in self.replicas]
