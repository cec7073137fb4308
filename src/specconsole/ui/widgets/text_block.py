"""A block of markup text that redraws only the lines that changed.

A pane's body is a few lines of markup, set again every second: most updates change one or two
lines (an age going from ``0.4s`` to ``1.4s``, a step counter). Textual's ``Static`` renders all
its lines again after any update, and a relayout of the screen when its height may have changed.
:class:`TextBlock` keeps each logical line's rendered strips (by its markup, at the widget's
width and styles), renders only new lines, repaints only the rows whose strips changed, and asks
for a relayout only when its height changed. Each line renders exactly as it would inside a
``Static`` with the same styles (``text-wrap``, ``text-overflow``, ``text-align``): through
Textual's own ``Visual.to_strips``.
"""

from __future__ import annotations

import re
from typing import Any, cast

from rich.segment import Segment
from rich.style import Style
from textual.content import Content, Span
from textual.css.styles import RulesMap
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.visual import Visual
from textual.widget import Widget

#: Rendered lines kept per block before it forgets all but the lines shown now.
CACHE_LINES = 64
#: Tag sequences whose span layout :func:`markup_content` remembers (all blocks together).
CACHE_LAYOUTS = 512


class TextBlock(Widget):
    """Markup text, set with :meth:`set`; repaints only the rows whose rendering changed."""

    DEFAULT_CSS = """
    TextBlock { height: auto; }
    """

    def __init__(self, text: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._text = text
        self._markup = text.split("\n")
        self._base: dict[str, list[Strip]] = {}  # a line's markup -> its strips as line 0, at _key
        self._rendered: dict[tuple[int, str], list[Strip]] = {}  # (line, markup) -> its strips there
        self._key: int | None = None  # the width the strips were made for (None: styles changed)
        self._strips: list[Strip] = []

    @property
    def text(self) -> str:
        return self._text

    def set(self, text: str) -> None:
        """Show ``text``; only the rows that render differently are repainted."""
        if text == self._text:
            return
        old = self._strips
        self._text, self._markup = text, text.split("\n")
        if not self.display:  # hidden (``display: none``): nothing to repaint, no layout to redo;
            self._key = None  # showing it again lays the screen out, which renders this text then
            return
        if self._key != self.size.width:  # not drawn yet at this size, or restyled
            self.refresh(layout=True)
            return
        new = self._lines()
        if len(new) != len(old):
            self.refresh(layout=True)
            return
        changed = [y for y, (a, b) in enumerate(zip(old, new, strict=True)) if a is not b]
        if changed:
            self.refresh(Region(0, changed[0], self.size.width, changed[-1] - changed[0] + 1))

    # -- rendering ---------------------------------------------------------------------------
    def _lines(self) -> list[Strip]:
        """The strips of every line at the current width and styles (rendered lines reused)."""
        width, style = self.size.width, self.visual_style
        if self._key != width:
            self._rendered.clear()
            self._base.clear()
            self._key = width
        if self.text_selection is not None:  # a selection spans lines: render them together
            self._strips = Visual.to_strips(self, self.render(), width, None, style) if width > 0 else []
            return self._strips
        rendered = self._rendered
        strips: list[Strip] = []
        for y, markup in enumerate(self._markup):
            lines = rendered.get((y, markup))
            if lines is None:
                # a line seen at another row (a log line moving up) keeps its rendering; only
                # the row in its selection offsets changes
                base = self._base.get(markup)
                if base is None:
                    base = Visual.to_strips(self, markup_content(markup), width, None, style) if width > 0 else []
                    base = self._base[markup] = base or [Strip.blank(width, style.rich_style)]
                lines = rendered[(y, markup)] = [_at_line(strip, y) for strip in base]
            strips.extend(lines)
        if len(rendered) > CACHE_LINES:  # keep what is shown now
            self._rendered = {(y, m): rendered[(y, m)] for y, m in enumerate(self._markup)}
            self._base = {m: self._base[m] for m in self._markup}
        self._strips = strips
        return strips

    def render(self) -> Content:
        """The whole text (what text selection and ``get_content_width`` read)."""
        return Content.from_markup(self._text)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if width != self.size.width:  # a layout at another width: measure without keeping it
            content = self.render()
            return content.get_height(cast("RulesMap", self.styles), width) if content.plain else 1
        return len(self._lines())

    def render_line(self, y: int) -> Strip:
        strips = self._strips if self._key == self.size.width else self._lines()
        if y < len(strips):
            return strips[y]
        return Strip.blank(self.size.width, self.visual_style.rich_style)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._key = None  # a new theme or class: render every line again

    def selection_updated(self, selection: Any) -> None:
        self._key = None  # the highlight is part of the rendered strips
        super().selection_updated(selection)


def _at_line(strip: Strip, y: int) -> Strip:
    """``strip`` (rendered as line 0 of its own) as line ``y`` of the block: the ``offset`` meta
    Textual's selection reads from each segment names the line of the whole text."""
    if y == 0:
        return strip
    segments = []
    for segment in strip:
        text, seg_style, control = segment
        offset = seg_style.meta.get("offset") if seg_style is not None else None
        if offset is not None:
            seg_style = seg_style + Style.from_meta({"offset": (offset[0], y)})  # type: ignore[operator]
        segments.append(Segment(text, seg_style, control))
    return Strip(segments, strip.cell_length)


_TAG = re.compile(r"(\[[^\[\]]*\])")
#: tags of a line -> its spans as (first run, end run, style), or None: parse such lines in full
_layouts: dict[tuple[str, ...], tuple[tuple[int, int, object], ...] | None] = {}


def markup_content(markup: str) -> Content:
    """``Content.from_markup(markup)``, without parsing the tags of a line whose tag sequence was
    seen before: a pane's line keeps its tags from one second to the next (``step [b]N[/]``)
    while the text between them changes, and Textual's markup parser costs about 0.5 ms a line.

    The spans of a tag sequence are learned once, by parsing it around runs of distinct lengths,
    as (first run, end run, style); a line with a backslash escape, a stray bracket, or a span
    that would be empty is parsed in full, as is a sequence whose probe did not parse as tags.
    """
    if "[" not in markup or "\\" in markup:
        return Content.from_markup(markup)
    parts = _TAG.split(markup)
    runs, tags = parts[0::2], tuple(parts[1::2])
    if any("[" in run or "]" in run for run in runs):
        return Content.from_markup(markup)
    if tags in _layouts:
        layout = _layouts[tags]
    else:
        if len(_layouts) >= CACHE_LAYOUTS:
            _layouts.clear()
        layout = _layouts[tags] = _learn(tags)
    if layout is None:
        return Content.from_markup(markup)
    ends = [0]
    for run in runs:
        ends.append(ends[-1] + len(run))
    spans = []
    for first, end, style in layout:
        start, stop = ends[first], ends[end]
        if start >= stop:  # Textual drops an empty span; parse such a line as it is
            return Content.from_markup(markup)
        spans.append(Span(start, stop, style))  # type: ignore[arg-type]
    if _ties(layout, ends):  # spans the probe kept apart start or end together: Textual orders those itself
        return Content.from_markup(markup)
    return Content("".join(runs), spans)


def _ties(layout: tuple[tuple[int, int, object], ...], ends: list[int]) -> bool:
    """Whether two spans that start (or end) at different runs in the probe share a position here
    (an empty run between their tags)."""
    for runs in ([first for first, _end, _style in layout], [end for _first, end, _style in layout]):
        at: dict[int, int] = {}
        for run in runs:
            if at.setdefault(ends[run], run) != run:
                return True
    return False


def _learn(tags: tuple[str, ...]) -> tuple[tuple[int, int, object], ...] | None:
    """The spans of ``tags`` as (first run, end run, style), from a probe line; None when the
    probe does not parse, or parses into other text than its runs (a bracket that is not a tag)."""
    runs = ["x" * (i + 1) for i in range(len(tags) + 1)]  # distinct lengths: every boundary is unique
    try:
        probe = Content.from_markup("".join(run + tag for run, tag in zip(runs, [*tags, ""], strict=True)))
    except Exception:  # a line that does not parse: Content.from_markup says why, each time
        return None
    if probe.plain != "".join(runs):
        return None
    at: dict[int, int] = {}
    offset = 0
    for index, run in enumerate(runs):
        at[offset] = index
        offset += len(run)
    at[offset] = len(runs)
    layout = []
    for span in probe.spans:
        if span.start not in at or span.end not in at:
            return None
        layout.append((at[span.start], at[span.end], span.style))
    return tuple(layout)
