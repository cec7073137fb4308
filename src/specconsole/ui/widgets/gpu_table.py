"""The host pane's GPU table: a line-based widget that redraws only the rows that changed.

Textual's ``DataTable`` drops its whole render cache on every ``update_cell`` and renders each
cell through Rich again: with utilization, power and temperature changing every second that was
19-36 % of the idle console's CPU. Here each row is one cached line, built from segments (no
markup, no Rich layout), rebuilt only when one of its cells changed; a changed row repaints its
own line. Looks like the ``DataTable`` it replaces (a bold muted header, one space of padding
either side of each cell, columns as wide as their widest cell).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget

PAD = 1


class RowKey(str):
    """A row's key (``gpu-0``); ``.value`` as DataTable's row keys have."""

    __slots__ = ()

    @property
    def value(self) -> str:
        return str(self)


class GpuTable(Widget):
    """Columns ``(key, label)``; rows of Rich :class:`Text` cells (their plain text, style and
    justification are used)."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"gpu-table--header"}
    DEFAULT_CSS = """
    GpuTable { height: auto; width: 1fr; }
    GpuTable > .gpu-table--header { color: $text-muted; text-style: bold; }
    """

    def __init__(self, columns: Sequence[tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.columns = tuple(columns)
        self.rows: dict[RowKey, tuple[Text, ...]] = {}
        self._order: list[RowKey] = []
        self._widths = [cell_len(label) for _key, label in self.columns]
        self._lines: dict[RowKey, tuple[object, Strip]] = {}
        self._header: tuple[object, Strip] | None = None
        self._base: Style | None = None
        self.lines_rendered = 0

    def get_row(self, key: str) -> list[Text]:
        return list(self.rows[RowKey(key)])

    def put_row(self, key: str, cells: tuple[Text, ...]) -> bool:
        """Add or update a row; True when it is new. Only its line is repainted, unless a column
        had to widen (then every line)."""
        row = RowKey(key)
        added = row not in self.rows
        self.rows[row] = cells
        if added:
            self._order.append(row)
        widths = [max(w, cell_len(c.plain)) for w, c in zip(self._widths, cells, strict=False)]
        if widths != self._widths or added:
            self._widths = widths
            self._lines.clear()
            self._header = None
            self.refresh(layout=added)
        else:
            self.refresh_line(self._order.index(row) + 1)
        return added

    def sort(self, key: Callable[[tuple[Text, ...]], Any]) -> None:
        self._order.sort(key=lambda k: key(self.rows[k]))
        self.refresh()

    def refresh_line(self, y: int) -> None:
        self.refresh(Region(0, y, self.size.width, 1))

    def get_content_width(self, container: Size, viewport: Size) -> int:
        return sum(self._widths) + 2 * PAD * len(self._widths)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._order) + 1

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._lines.clear()
        self._header = None
        self._base = None

    def _base_style(self) -> Style:
        """The widget's own Rich style (walks every ancestor: kept until the styles change)."""
        if self._base is None:
            self._base = self.rich_style
        return self._base

    def _segments(self, values: Sequence[tuple[str, Style, str]], width: int) -> Strip:
        base = self._base_style()
        segments = []
        used = 0
        for (text, style, justify), col_width in zip(values, self._widths, strict=False):
            if cell_len(text) > col_width:
                text = set_cell_size(text, col_width - 1) + "…"
            gap = " " * (col_width - cell_len(text))
            text = gap + text if justify == "right" else text + gap
            segments.append(Segment(" " * PAD + text + " " * PAD, base + style))
            used += col_width + 2 * PAD
        if used < width:  # pad to the width (what crop_extend does, without its copies)
            segments.append(Segment(" " * (width - used), base))
            return Strip(segments, width)
        strip = Strip(segments, used)
        return strip if used == width else strip.crop_extend(0, width, base)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if y == 0:
            key: object = (width, tuple(self._widths))
            if self._header is None or self._header[0] != key:
                header = self.get_component_rich_style("gpu-table--header", partial=True)
                strip = self._segments([(label, header, "left") for _k, label in self.columns], width)
                self._header = (key, strip)
            return self._header[1]
        if y - 1 >= len(self._order):
            return Strip.blank(width, self.rich_style)
        row = self._order[y - 1]
        cells = self.rows[row]
        sig = (width, tuple((c.plain, str(c.style), c.justify) for c in cells))
        cached = self._lines.get(row)
        if cached is not None and cached[0] == sig:
            return cached[1]
        strip = self._segments([(c.plain, _style(c.style), str(c.justify or "left")) for c in cells], width)
        self._lines[row] = (sig, strip)
        self.lines_rendered += 1
        return strip


def _style(style: str | Style) -> Style:
    return style if isinstance(style, Style) else Style.parse(style) if style else Style()
