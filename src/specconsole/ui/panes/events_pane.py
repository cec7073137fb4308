"""The events pane: the event log's lines, newest at the bottom."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, ClassVar

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Vertical
from textual.css.scalar import Scalar
from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from specconsole.base.events import Event, EventLog
from specconsole.base.values import printable
from specconsole.ui.style import formatting as fmt
from specconsole.ui.style.formatting import escape
from specconsole.ui.widgets.scroll import scroll_bindings

#: Rendered rows an event list keeps (about a screenful of rows at a few widths and themes).
STRIPS_KEPT = 512


class EventList(ScrollView, can_focus=True):
    """The events as lines: newest at the bottom, kept scrolled to the end unless scrolled up.

    Lines are styled when drawn (from the app's current theme) and wrapped to the width, the
    continuation rows indented under the message, so nothing is cut at 80 columns; a resize
    re-wraps them, a theme change simply redraws them.
    """

    BINDINGS: ClassVar[list[BindingType]] = [*scroll_bindings()]

    #: Continuation rows start under the message (after ``HH:MM:SS source   ``).
    INDENT = 18

    def __init__(self, keep: int = 1000, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.events: deque[Event] = deque(maxlen=keep)
        self._lines: deque[str] = deque(maxlen=keep)
        self._rows: list[tuple[int, str]] = []  # (index into _lines, text of one screen row)
        self._wrap_width = 0
        self._follow = True  # keep showing the newest line until the operator scrolls up
        self._strips: dict[tuple[str, str | None, int, Style], Strip] = {}  # see render_line
        #: told the number of screen rows; True when that changes the list's room (a new layout)
        self.rows_changed: Callable[[int], bool] | None = None

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        self._follow = new >= self.max_scroll_y - 1

    def _width(self) -> int:
        return max(20, self.scrollable_content_region.width or 0) if self.is_mounted else 0

    @classmethod
    def wrap(cls, line: str, width: int) -> list[str]:
        """``line`` as rows of at most ``width`` cells; continuation rows indented (0: no wrap)."""
        if width <= 0 or len(line) <= width:
            return [line]
        indent = cls.INDENT if width > cls.INDENT + 20 else 2
        rows, rest = [line[:width]], line[width:]
        room = width - indent
        while rest:
            rows.append(" " * indent + rest[:room])
            rest = rest[room:]
        return rows

    def _rewrap(self) -> bool:
        """Wrap every line at the width; True when the new rows needed no new layout (see below)."""
        width = self._width()
        self._wrap_width = width
        self._rows = [(i, row) for i, line in enumerate(self._lines) for row in self.wrap(line, width)]
        size, old = Size(width, len(self._rows)), self.virtual_size
        viewport = self.scrollable_content_region.height
        if (self.is_mounted and size != old and size.width == old.width and self.show_vertical_scrollbar
                and min(size.height, old.height) > viewport > 0):
            # more rows past the end of a list that scrolls already: its scrollbar and the room it
            # takes stay, so the screen needs no new layout (the virtual_size reactive asks for one,
            # a whole-screen reflow per event: two a second from a running action's heartbeats)
            self.set_reactive(EventList.virtual_size, size)
            self._scroll_update(size)
            settled = True
        else:
            self.virtual_size = size
            settled = False
        if self.rows_changed is not None and self.rows_changed(len(self._rows)):
            settled = False  # the pane grows: the list's own height is laid out anew
        return settled

    def on_resize(self) -> None:
        if self._width() != self._wrap_width:
            self._rewrap()
            if self._follow:
                self.call_after_refresh(self.scroll_end, animate=False, x_axis=False)
            self.refresh()

    def add(self, events: list[Event]) -> None:
        batch: list[Event] = []
        for event in events:  # a wait's latest heartbeat only (the audit log keeps each)
            if batch and same_wait(batch[-1], event):
                batch[-1] = event
            else:
                batch.append(event)
        if batch and self._replace_wait(batch[0]):
            batch = batch[1:]
        if not batch:
            return
        for event in batch:
            if self.events and same_wait(self.events[-1], event):  # the wait's latest heartbeat only
                self.events.pop()
                self._lines.pop()
            self.events.append(event)
            self._lines.append(printable(event.line()))  # a host's ESC or U+202E is shown, not obeyed
        settled = self._rewrap()
        if self._follow and settled:
            # its size is known already (no layout to wait for): to the end now, one frame, not two
            self.scroll_end(animate=False, x_axis=False, immediate=True)
        elif self._follow:  # after the new size is laid out, or the end is not the end yet
            self.call_after_refresh(self.scroll_end, animate=False, x_axis=False)
        self.refresh()

    def _replace_wait(self, event: Event) -> bool:
        """``event`` is the next heartbeat of the wait on the last line, wrapped to as many rows:
        its rows take the old ones' place and only they are drawn again (no rewrap, no scroll)."""
        if not self.events or not same_wait(self.events[-1], event) or self._wrap_width != self._width():
            return False
        line = printable(event.line())
        rows = self.wrap(line, self._wrap_width)
        index = len(self._lines) - 1
        first = len(self._rows) - len(rows)
        if first < 0 or self._rows[first][0] != index or (first and self._rows[first - 1][0] == index):
            return False  # the old line had another number of rows
        self.events[-1] = event
        self._lines[-1] = line
        self._rows[first:] = [(index, row) for row in rows]
        # those rows, left of the scrollbar (ScrollView.refresh_lines takes its column too: a render of it)
        self.refresh(Region(0, first - self.scroll_offset.y, self.scrollable_content_region.width, len(rows)))
        return True

    @property
    def lines(self) -> list[str]:
        return list(self._lines)

    def render_line(self, y: int) -> Strip:
        """One screen row. A row keeps its strip while its text, colour, width and base style do:
        each new line scrolls every row up one, and the rows shown do not change otherwise."""
        _scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.scrollable_content_region.width
        base = self.rich_style
        if index >= len(self._rows):
            return Strip.blank(width, base)
        palette: fmt.Palette = getattr(self.app, "palette", fmt.Palette())
        line_index, row = self._rows[index]
        level = self.events[line_index].level if line_index < len(self.events) else "info"
        color = {"error": palette.error, "warning": palette.warning, "step": palette.accent}.get(level)
        key = (row, color, width, base)
        strip = self._strips.get(key)
        if strip is None:  # one segment: the row is plain text (printable), one colour over the base style
            style = base + Style.parse(color) if color else base
            strip = Strip([Segment(row, style)], cell_len(row)).crop_extend(0, width, base)
            if len(self._strips) >= STRIPS_KEPT:
                self._strips.clear()
            self._strips[key] = strip
        return strip


def same_wait(shown: Event, new: Event) -> bool:
    """``new`` is a heartbeat of the same wait (host, action, step) as ``shown``: the events pane
    shows a wait's latest heartbeat in place of the one before (the audit log keeps each)."""
    data, before = new.data, shown.data
    return (data.get("kind") == "heartbeat" and before.get("kind") == "heartbeat" and shown.source == new.source
            and before.get("action") == data.get("action") and before.get("step") == data.get("step"))


class EventsPane(Vertical):
    """The event log (connections, errors, actions and their steps), newest at the bottom.

    It takes the room left under the other panes (``height: 1fr`` in console.tcss), at least its
    latest line, and never more than its lines: its ``max-height`` follows the number of rows it
    holds, so a quiet log is a short box, not a block of empty rows."""

    def __init__(self, events: EventLog, **kwargs: Any) -> None:
        super().__init__(classes="pane events-pane", **kwargs)
        self.events = events

    def compose(self) -> ComposeResult:
        self.border_title = "Events"
        if self.events.audit_path is not None:
            self.border_subtitle = escape(f"audit: {self.events.audit_path}")
        log = EventList(keep=self.events.recent.maxlen or 1000, classes="log")
        log.rows_changed = self._fit
        yield log

    def _fit(self, rows: int) -> bool:
        # its rows and the border; past the screen's height more makes no difference (no relayout)
        height = min(max(1, rows), max(1, self.app.size.height)) + self.styles.gutter.height
        if self.styles.max_height != Scalar.from_number(height):
            self.styles.max_height = height
            return True
        return False

    @property
    def lines(self) -> list[str]:
        return self.query_one(EventList).lines

    def flush(self, pending: deque[Event]) -> None:
        """Write the queued events (the app queues them as they are emitted, from any thread)."""
        logs = self.query(EventList)
        if not pending or not logs:  # no list: the console is closing (its widgets go first)
            return
        batch = []
        while pending:
            batch.append(pending.popleft())
        logs.first().add(batch)
