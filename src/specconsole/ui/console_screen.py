"""The console's main screen: Textual's Screen with a compositor that repaints only what changed.

Textual (8.x) paints a partial update by rendering, in full, every widget whose *clip* overlaps
the bounding box of all the dirty regions. Inside a scroll container the clip is the container's
whole viewport, and the box of a summary-bar change plus a training-pane change is most of the
screen, so one second of new samples re-rendered every pane, the eval table and the events log,
each for all its lines (the screen's 50, the body's 48, ...), to use a few of them.

:class:`CroppingCompositor` renders, for a partial update, only the widgets whose visible part
(region ∩ clip) overlaps a dirty region, and of each only its first to last dirty row. No
other widget or row can show in the update: its spans lie inside the dirty regions. The terminal
receives the same text (``tests/test_console_screen.py`` compares it with Textual's compositor).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator

from textual._compositor import ChopsUpdate, Compositor
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip


class CroppingCompositor(Compositor):
    """Renders, for a partial update, only the widgets and rows that show in its dirty regions."""

    _update_regions: tuple[Region, ...] = ()

    def render_partial_update(self) -> ChopsUpdate | None:
        self._update_regions = tuple(getattr(self, "_dirty_regions", ()))
        try:
            return super().render_partial_update()
        finally:
            self._update_regions = ()

    def _get_renders(self, crop: Region | None = None) -> Iterable[tuple[Region, Region, list[Strip]]]:
        dirty = self._update_regions
        if crop is None or not dirty:
            return super()._get_renders(crop)
        return self._dirty_renders(crop, dirty)

    def _dirty_renders(self, crop: Region, dirty: tuple[Region, ...]) -> Iterator[tuple[Region, Region, list[Strip]]]:
        rows = sorted({y for region in dirty for y in region.intersection(crop).line_range})
        for widget, (region, clip) in self.visible_widgets.items():  # front to back, as Textual's
            visible = region.intersection(clip)
            if not visible or not any(visible.overlaps(d) for d in dirty):
                continue
            # one render per widget (each costs more than a line): its first to last dirty row
            start, end = bisect_left(rows, visible.y), bisect_left(rows, visible.bottom)
            if start == end:
                continue
            top, bottom = rows[start], rows[end - 1] + 1
            part = Region(visible.x, top, visible.width, bottom - top)
            yield part, part, widget.render_lines(
                Region(visible.x - region.x, top - region.y, visible.width, bottom - top))


class ConsoleScreen(Screen[None]):
    """The default screen of the console, with :class:`CroppingCompositor`."""

    def __init__(self) -> None:
        super().__init__(id="_default")  # the id Textual gives its own default screen
        self._compositor = CroppingCompositor()
