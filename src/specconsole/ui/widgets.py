"""Small widgets: a fixed-scale bar plot and a labelled plot row.

Textual's ``Sparkline`` scales every redraw to the min..max of what it shows, so a GPU idling at
96-98 % would look like a saw from empty to full. :class:`BarPlot` draws on a fixed scale
(0..``maximum``; 0..100 for utilization) or, when no maximum is given, on 0..the largest value
shown: the baseline is always zero, so a drop reads as a drop.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from rich.text import Text
from textual.app import ComposeResult, RenderResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widget import Widget
from textual.widgets import Static

BLOCKS = " ▁▂▃▄▅▆▇█"
MISSING = "·"


#: The scroll keys of a scrollable part, as (key, scroll action, description).
SCROLL_KEYS = (("up", "scroll_up", "Up"), ("down", "scroll_down", "Down"), ("pageup", "page_up", "Page up"),
               ("pagedown", "page_down", "Page down"), ("home", "scroll_home", "Top"), ("end", "scroll_end", "Bottom"))


def scroll_bindings(action: Callable[[str], str] = str) -> list[Binding]:
    """Hidden bindings of the scroll keys; ``action`` wraps each scroll action's name (e.g. to
    scroll a child: ``lambda a: f"scroll_body('{a}')"``)."""
    return [Binding(key, action(name), description, show=False) for key, name, description in SCROLL_KEYS]


def bar_rows(values: Sequence[float | None], width: int, height: int, maximum: float | None,
             minimum: float | None = 0.0) -> list[str]:
    """The plot as ``height`` strings of ``width`` characters; newest value in the last column.

    ``maximum``/``minimum`` None: the largest/smallest value shown (a trend plot, e.g. loss).
    ``None`` (no reading) draws a dot on the bottom row; values are clamped to the scale.
    """
    width, height = max(0, width), max(1, height)
    data = list(values)[-width:] if width else []
    pad = width - len(data)
    shown = [None] * pad + data
    finite = [v for v in data if v is not None and math.isfinite(v)]
    top = maximum if maximum is not None else max(finite, default=0.0)
    if minimum is None:
        low = min(finite, default=0.0)
        minimum = low - 0.1 * (top - low)  # the lowest value still shows a sliver
    span = top - minimum
    rows = [[" "] * width for _ in range(height)]
    for col, value in enumerate(shown):
        if value is None or not math.isfinite(value):
            if col >= pad:  # a gap inside the data (no reading then), not the empty left part
                rows[-1][col] = MISSING
            continue
        frac = 0.0 if span <= 0 else min(1.0, max(0.0, (value - minimum) / span))
        eighths = round(frac * height * 8)
        if value > minimum and eighths == 0:
            eighths = 1  # anything above zero shows
        for level in range(height):
            fill = min(8, max(0, eighths - level * 8))
            rows[height - 1 - level][col] = BLOCKS[fill]
    return ["".join(r) for r in rows]


class BarPlot(Widget):
    """A bar plot of the newest values that fit its width; restyle it in TCSS (``color``)."""

    DEFAULT_CSS = """
    BarPlot { height: 1; width: 1fr; }
    """

    def __init__(self, *, maximum: float | None = None, minimum: float | None = 0.0, name: str | None = None,
                 id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.maximum = maximum
        self.minimum = minimum
        self._values: tuple[float | None, ...] = ()

    @property
    def values(self) -> tuple[float | None, ...]:
        return self._values

    def set_values(self, values: Sequence[float | None]) -> None:
        new = tuple(values)
        if new != self._values:
            self._values = new
            self.refresh()

    def render(self) -> RenderResult:
        width, height = self.content_size.width, self.content_size.height
        return Text("\n".join(bar_rows(self._values, width, height, self.maximum, self.minimum)),
                    no_wrap=True, overflow="crop")


class PlotRow(Horizontal):
    """``label  ▁▂▃▅▇█  value``: a name, a :class:`BarPlot` and the latest value as text."""

    def __init__(self, label: str, *, maximum: float | None = None, minimum: float | None = 0.0,
                 id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._label = label
        self._maximum = maximum
        self._minimum = minimum
        self._value_text = ""

    def compose(self) -> ComposeResult:
        self._label_widget = Static(self._label, classes="plot-label")
        self._plot = BarPlot(maximum=self._maximum, minimum=self._minimum)
        self._value_widget = Static("", classes="plot-value")
        yield self._label_widget
        yield self._plot
        yield self._value_widget

    @property
    def plot(self) -> BarPlot:
        return self._plot

    def show(self, values: Sequence[float | None], value_text: str, label: str | None = None) -> None:
        self._plot.set_values(values)
        if value_text != self._value_text:
            self._value_text = value_text
            self._value_widget.update(value_text, layout=False)  # fixed width
        if label is not None and label != self._label:
            self._label = label
            self._label_widget.update(label, layout=False)
