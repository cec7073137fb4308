"""A compositor that repaints only what changed (the console's screen, ``ConsoleScreen``, uses it).

Deleted in issue 20 (bench/compositor_ab.py measured a median 8 % saving, under its 15 % bar),
back in issue 34: those figures were taken while the host pane's hidden GPU summary made every
refresh lay the whole screen out (a full render either way); without that, the same bench at
200x50 saves 19-25 % of the UI's CPU per refresh, 33-37 % of the compositor's.

Textual (8.x) paints a partial update by rendering, in full, every widget whose *clip* overlaps
the bounding box of all the dirty regions. Inside a scroll container the clip is the container's
whole viewport, and the box of a summary-bar change plus a training-pane change is most of the
screen, so one second of new samples re-rendered every pane, the eval table and the events log,
each for all its lines (the screen's 50, the body's 48, ...), to use a few of them.

:class:`CroppingCompositor` renders, for a partial update, only the widgets whose visible part
(region ∩ clip) overlaps a dirty region and is not hidden there by widgets in front of it, and
of each only its first to last such row. No other widget or row can show in the update: its
spans lie inside the dirty regions, and Textual paints front to back, the first render of a cell
winning. So a container (the screen, the scroll body, a pane) whose dirty rows are all covered
by its children is not rendered at all: one changed GPU row used to render the screen's, the
body's and the pane's background for every row between the first and last change. The terminal
receives the same text (``tests/test_cropping_compositor.py`` compares it with Textual's compositor).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator

from textual._compositor import ChopsUpdate, Compositor
from textual.geometry import Region
from textual.strip import Strip


class CroppingCompositor(Compositor):
    """Renders, for a partial update, only the widgets and rows that show in its dirty regions."""

    _update_regions: tuple[Region, ...] = ()

    def render_partial_update(self) -> ChopsUpdate | None:
        self._update_regions = tuple(self._dirty_regions)  # Textual's own (tests/test_textual_hooks.py guards it)
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
        spans = _row_spans(crop, dirty)  # y -> the dirty x-spans of that row
        rows = sorted(spans)
        covered: dict[int, list[tuple[int, int]]] = {y: [] for y in rows}  # by widgets in front
        for widget, (region, clip) in self.visible_widgets.items():  # front to back, as Textual's
            visible = region.intersection(clip)
            # the dirty rows it spans (a bisect: most widgets span none), then their x-spans
            band = rows[bisect_left(rows, visible.y):bisect_left(rows, visible.bottom)] if visible else ()
            x0, x1 = visible.x, visible.right
            if not any(a < x1 and x0 < b for y in band for a, b in spans[y]):
                continue
            shown: list[int] = []  # rows where part of this widget's dirty spans is not covered
            for y in band:
                cover = covered[y]
                if any(_uncovered(max(a, x0), min(b, x1), cover) for a, b in spans[y]):
                    shown.append(y)
                _cover(cover, x0, x1)
            if not shown:
                continue
            # one render per widget (each costs more than a line): its first to last shown row
            top, bottom = shown[0], shown[-1] + 1
            part = Region(visible.x, top, visible.width, bottom - top)
            yield part, part, widget.render_lines(
                Region(visible.x - region.x, top - region.y, visible.width, bottom - top))


def _row_spans(crop: Region, dirty: tuple[Region, ...]) -> dict[int, list[tuple[int, int]]]:
    """For each row of the dirty regions (within ``crop``), their x-spans on it."""
    spans: dict[int, list[tuple[int, int]]] = {}
    for region in dirty:
        part = region.intersection(crop)
        if part:
            span = (part.x, part.right)
            for y in part.line_range:
                spans.setdefault(y, []).append(span)
    return spans


def _uncovered(a: int, b: int, cover: list[tuple[int, int]]) -> bool:
    """Whether some of ``[a, b)`` lies outside the sorted, disjoint spans ``cover`` (False when
    ``[a, b)`` itself is empty)."""
    for c0, c1 in cover:
        if a >= b:
            return False
        if c0 > a:
            return True
        a = max(a, c1)
    return a < b


def _cover(cover: list[tuple[int, int]], x0: int, x1: int) -> None:
    """Add ``[x0, x1)`` to the sorted, disjoint spans ``cover`` (merging what touches it)."""
    merged: list[tuple[int, int]] = []
    for c0, c1 in cover:
        if c1 < x0 or c0 > x1:
            merged.append((c0, c1))
        else:
            x0, x1 = min(x0, c0), max(x1, c1)
    merged.append((x0, x1))
    merged.sort()
    cover[:] = merged
