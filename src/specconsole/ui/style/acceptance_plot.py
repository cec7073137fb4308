"""Acceptance as operators read it, as plain text: a small column plot of the histogram of
accepted drafts per verify step and of acceptance by draft position, one or more series side by
side (the canary beside the fleet, a run beside its baseline).

Pure: lines of text (unicode blocks, no markup, no colour) from
:class:`~specconsole.sglang.acceptance.AcceptanceDetail` figures, never wider than ``width``
(80 by default). The console's action view and eval pane show them as they are; the headless
CLI prints them under the event line that carries the figures.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from specconsole.sglang.acceptance import NO_DETAIL, AcceptanceDetail, Series

_EIGHTHS = " ▁▂▃▄▅▆▇█"
_LABEL_W = 5  # "100% "


def _bar(value: float, top: float, height: int, row: int) -> str:
    """The glyph of a column ``value`` (of ``top``) in ``row`` (0 = the top one) of ``height``."""
    if value <= 0 or top <= 0:
        return " "
    eighths = round(min(1.0, value / top) * height * 8)
    fill = min(8, max(0, eighths - (height - 1 - row) * 8))
    if fill == 0 and row == height - 1:
        return _EIGHTHS[1]  # above zero: never drawn as nothing
    return _EIGHTHS[fill]


def _groups(n: int, per: int, room: int) -> int:
    """How many bins one column group holds so that ``n`` bins of ``per`` columns fit ``room``."""
    return max(1, math.ceil(n * per / max(per, room)))


def _chart(title: str, columns: Sequence[Sequence[float]], first: int, top: float, height: int,
           width: int, merge: str) -> list[str]:
    """A column chart: one column per series in each bin group, a space between groups."""
    nseries = len(columns)
    n = max((len(c) for c in columns), default=0)
    per = nseries + 1
    size = _groups(n, per, width - _LABEL_W - 1)
    groups = math.ceil(n / size) if n else 0
    values: list[list[float]] = []
    for col in columns:
        vals = []
        for g in range(groups):
            chunk = [col[i] if i < len(col) else 0.0 for i in range(g * size, min(n, (g + 1) * size))]
            vals.append(sum(chunk) if merge == "sum" else (sum(chunk) / len(chunk) if chunk else 0.0))
        values.append(vals)
    lines = [title[:width]]
    for row in range(height):
        label = f"{top * 100:>3.0f}%" if row == 0 else ""
        cells = "".join("".join(_bar(values[s][g], top, height, row) for s in range(nseries)) + " "
                        for g in range(groups))
        lines.append(f"{label:>{_LABEL_W - 1}} ┤{cells}".rstrip()[:width])
    lines.append(f"{'0%':>{_LABEL_W - 1}} └{'─' * (groups * per)}"[:width])
    ticks = [" "] * (groups * per)
    end = -1
    for g in range(groups):
        lo = first + g * size
        text = str(lo) if size == 1 else f"{lo}-{min(first + n - 1, lo + size - 1)}"
        at = g * per
        if at > end and at + len(text) <= len(ticks) + 2:
            ticks.extend(" " * max(0, at + len(text) - len(ticks)))
            ticks[at:at + len(text)] = text
            end = at + len(text)
    lines.append((" " * (_LABEL_W + 1) + "".join(ticks)).rstrip()[:width])
    return lines


def _nice_top(value: float) -> float:
    """The scale's top: the next 10 % at or above ``value`` (10 % at least, 100 % at most)."""
    return min(1.0, max(0.1, math.ceil(value * 10 - 1e-9) / 10))


def legend(series: Series, width: int = 80) -> list[str]:
    """One line a series: which column of a pair it is, its label and figures, shortened to fit
    ``width`` (the figures first, then the label, cut with …)."""
    marks = ["left", "right"] if len(series) == 2 else [f"#{i + 1}" for i in range(len(series))]
    out = []
    for i, (label, d) in enumerate(series):
        mark = f"{marks[i]}: " if len(series) > 1 else ""
        of = f", {d.requests} requests" if d.requests != 1 else ""
        tails = [f": accept length {d.accept_length:.2f} ({d.steps} verify steps{of})",
                 f": accept length {d.accept_length:.2f} ({d.steps} steps)", f": {d.accept_length:.2f}/step"]
        tail = next((t for t in tails if 2 + len(mark) + min(len(label), 12) + len(t) <= width), tails[-1])
        room = max(4, width - 2 - len(mark) - len(tail))
        name = label if len(label) <= room else label[:room - 1] + "…"
        out.append(f"  {mark}{name}{tail}"[:width])
    return out


def acceptance_plot(series: Series, *, width: int = 80, height: int = 3) -> list[str]:
    """The histogram of accepted drafts per verify step (% of steps) and acceptance by draft
    position (% of steps that accepted it), each series a column of every bin (the first on the
    left), then a legend line a series; at most ``width`` columns. No series: :data:`NO_DETAIL`."""
    if not series:
        return [NO_DETAIL]
    details: list[AcceptanceDetail] = [d for _, d in series]
    positions = max(d.positions for d in details)
    shares = [d.shares() + [0.0] * (positions + 1 - len(d.shares())) for d in details]
    by_pos = [d.by_position() + [0.0] * (positions - len(d.by_position())) for d in details]
    top = _nice_top(max((v for s in shares for v in s), default=0.0))
    lines = legend(series, width)
    lines += _chart("accepted drafts per verify step (% of steps)", shares, 0, top, height, width, "sum")
    if positions:
        lines += _chart("acceptance by draft position (% of steps accepting it)", by_pos, 1, 1.0, height, width,
                        "mean")
    return lines
