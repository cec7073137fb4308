"""Small widgets: a labelled, fixed-scale bar plot on one line.

Textual's ``Sparkline`` scales every redraw to the min..max of what it shows, so a GPU idling at
96-98 % would look like a saw from empty to full. :class:`PlotRow` draws on a fixed scale
(0..``maximum``; 0..100 for utilization) or, when no maximum is given, on 0..the largest value
shown: the baseline is always zero, so a drop reads as a drop.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual.widget import Widget

BLOCKS = " ▁▂▃▄▅▆▇█"
MISSING = "·"



def bar_rows(values: Sequence[float | None], width: int, height: int, maximum: float | None,
             minimum: float | None = 0.0) -> list[str]:
    """The plot as ``height`` strings of ``width`` characters; newest value in the last column.

    ``maximum``/``minimum`` None: the largest/smallest value shown (a trend plot, e.g. loss).
    ``None`` (no reading) draws a dot on the bottom row; values are clamped to the scale.
    """
    width, height = max(0, width), max(1, height)
    data = list(values)[-width:] if width else []
    pad = width - len(data)
    finite = [v for v in data if v is not None and math.isfinite(v)]
    top = maximum if maximum is not None else max(finite, default=0.0)
    if minimum is None:
        low = min(finite, default=0.0)
        minimum = low - 0.1 * (top - low)  # the lowest value still shows a sliver
    span = top - minimum
    eighths: dict[float, int] = {}  # value -> its height in eighths (a plot repeats values)
    levels: list[int | None] = []  # per data column; None: no reading
    for value in data:
        if value is None or not math.isfinite(value):
            levels.append(None)
            continue
        level = eighths.get(value)
        if level is None:
            frac = 0.0 if span <= 0 else min(1.0, max(0.0, (value - minimum) / span))
            level = round(frac * height * 8)
            if value > minimum and level == 0:
                level = 1  # anything above zero shows
            eighths[value] = level
        levels.append(level)
    if height == 1:  # the plots' case: one character per column
        return [" " * pad + "".join(MISSING if e is None else BLOCKS[min(8, e)] for e in levels)]
    rows = [[" "] * width for _ in range(height)]
    for col, level in enumerate(levels, pad):
        if level is None:  # a gap inside the data (no reading then), not the empty left part
            rows[-1][col] = MISSING
            continue
        for row in range(height):
            rows[height - 1 - row][col] = BLOCKS[min(8, max(0, level - row * 8))]
    return ["".join(r) for r in rows]


class PlotRow(Widget):
    """``label  ▁▂▃▅▇█  value`` on one line: a name, a bar plot of the newest values that fit and
    the latest value as text. One widget, not three: at 1 Hz every plot repaints, and each widget
    a frame touches costs the compositor as much as its text does.

    Colours are component classes: ``.plot--label``, ``.plot--bar``, ``.plot--value`` (restyle
    per plot in TCSS, e.g. ``.plot.util > .plot--bar { color: $success; }``).
    """

    COMPONENT_CLASSES: ClassVar[set[str]] = {"plot--label", "plot--bar", "plot--value"}
    DEFAULT_CSS = """
    PlotRow { height: 1; }
    PlotRow > .plot--label { color: $text-muted; }
    PlotRow > .plot--bar { color: $primary; }
    """
    LABEL_WIDTH = 12
    VALUE_WIDTH = 16  # a space, then the value

    def __init__(self, label: str, *, maximum: float | None = None, minimum: float | None = 0.0,
                 id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.maximum = maximum
        self.minimum = minimum
        self._label = label
        self._value_text = ""
        self._values: tuple[float | None, ...] = ()
        self._line: tuple[object, Strip] | None = None
        self._styles: tuple[tuple[object, ...], tuple[Style, Style, Style]] | None = None

    @property
    def values(self) -> tuple[float | None, ...]:
        return self._values

    @property
    def label(self) -> str:
        return self._label

    @property
    def value_text(self) -> str:
        return self._value_text

    def show(self, values: Sequence[float | None], value_text: str, label: str | None = None) -> None:
        """Repaint only when the values, the value text or the label changed."""
        new = tuple(values)
        label = self._label if label is None else label
        if (new, value_text, label) != (self._values, self._value_text, self._label):
            self._values, self._value_text, self._label = new, value_text, label
            self.refresh()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._line = None

    def _part_styles(self) -> tuple[Style, Style, Style]:
        """Label, bar and value styles. Textual's own cache is cleared on every refresh and a full
        style walks every ancestor, so they are kept while the stylesheet keeps the same
        component styles (a theme or class change applies new ones)."""
        names = ("plot--label", "plot--bar", "plot--value")
        sources = tuple(self._component_styles.get(name) for name in names)  # what the stylesheet applied
        if self._styles is None or any(a is not b for a, b in zip(self._styles[0], sources, strict=True)):
            style = self.get_component_rich_style  # full styles: $text-muted needs its blend
            label, bar, value = (style(name) for name in names)
            self._styles = (sources, (label, bar, value))
            self._line = None
        return self._styles[1]

    def render_line(self, y: int) -> Strip:
        """The one line, as three styled segments (cached until something in it changes)."""
        width = self.size.width
        if y != 0:
            return Strip.blank(width, self.rich_style)
        styles = self._part_styles()
        key = (width, self._values, self._value_text, self._label)
        if self._line is not None and self._line[0] == key:
            return self._line[1]
        label_w = min(self.LABEL_WIDTH, width)
        value_w = min(self.VALUE_WIDTH, width - label_w)
        bar_w = max(0, width - label_w - value_w)
        (bar,) = bar_rows(self._values, bar_w, 1, self.maximum, self.minimum)
        label_style, bar_style, value_style = styles
        strip = Strip([Segment(_fit(self._label, label_w), label_style), Segment(bar, bar_style),
                       Segment(_fit(" " + self._value_text, value_w), value_style)], width)
        self._line = (key, strip)
        return strip


def _fit(text: str, width: int) -> str:
    """``text`` in exactly ``width`` cells: padded, or cut with an ellipsis."""
    if width <= 0:
        return ""
    return text.ljust(width) if len(text) <= width else text[:width - 1] + "…"
