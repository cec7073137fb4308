"""The fleet view: one line per host for fleets too big for a pane each.

- :class:`FleetTable` is a line-based widget of its own (Textual's line API): it keeps one
  rendered line per host and, on each redraw, repaints only the lines whose cells changed; lines
  off screen cost nothing until scrolled to. Its first line is the column header.
- :class:`FleetView` holds the head line (counts per state, the sort, the filter), the filter
  input (``/``) and the table; ``s`` cycles the sort (worst first is the default).
- :class:`FleetNavigator` decides what the console shows: past ``console.fleet_threshold``
  hosts the fleet view, and no per-host panes at all until Enter drills into one host (its host,
  serving and training panes are mounted then and removed on Escape); at or below it the usual
  panes, with ``f`` switching to the fleet view and back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Protocol

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.geometry import Size
from textual.message import Message
from textual.screen import Screen
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Input

from specconsole.base.values import printable
from specconsole.config import Config, HostConfig
from specconsole.monitor import HostStatus
from specconsole.ui.fleet.fleet_rows import (
    GAP,
    SORTS,
    Column,
    DerivedCache,
    FleetRow,
    fit_columns,
    fleet_row,
    order,
    summary_text,
)
from specconsole.ui.panes.pane_base import PerHostPane, View
from specconsole.ui.panes.per_host import per_host_panes
from specconsole.ui.style import formatting as fmt
from specconsole.ui.widgets.text_block import TextBlock


def fleet_mode(config: Config) -> bool:
    """Whether the console opens on the fleet view (more hosts than ``console.fleet_threshold``)."""
    return len(config.hosts) > config.console.fleet_threshold


# ------------------------------------------------------------------------------ the table

class FleetTable(ScrollView, can_focus=True):
    """The rows, the first line being the column header; the cursor follows its host when the
    order changes. Enter posts :class:`FleetTable.Selected`."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"fleet-table--cursor", "fleet-table--header"}
    DEFAULT_CSS = """
    FleetTable { background: transparent; scrollbar-size-vertical: 1; overflow-x: hidden; }
    FleetTable > .fleet-table--header { color: $text-muted; text-style: bold; }
    FleetTable > .fleet-table--cursor { background: $boost; text-style: bold; }
    FleetTable:focus > .fleet-table--cursor { background: $accent 30%; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "move(-1)", "Up", show=False),
        Binding("down", "move(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "move(-1000000)", "First", show=False),
        Binding("end", "move(1000000)", "Last", show=False),
        Binding("enter", "select", "Details", show=False),
    ]

    class Selected(Message):
        """Enter on a row: show that host's panes."""

        def __init__(self, host: str) -> None:
            super().__init__()
            self.host = host

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rows: list[FleetRow] = []
        self.cursor_host: str | None = None
        #: hosts marked (``m``) for a rollout across them (``R``)
        self.marked: set[str] = set()
        self.palette = fmt.Palette()
        self._columns: list[Column] = []
        self._width = 0
        self._lines: dict[str, tuple[object, Strip]] = {}  # host -> (what it was drawn from, line)
        self._styles: dict[tuple[str, bool], Style] = {}
        self.lines_rendered = 0  # how many row lines were built (a measure of the work done)

    # -- data ---------------------------------------------------------------------------
    @property
    def cursor(self) -> int:
        for i, row in enumerate(self.rows):
            if row.name == self.cursor_host:
                return i
        return 0

    def set_rows(self, rows: list[FleetRow], palette: fmt.Palette) -> None:
        """Show ``rows`` (already ordered); only lines whose host or cells changed are repainted."""
        if palette != self.palette:
            self.palette = palette
            self._styles.clear()
            self._lines.clear()
            self.refresh()
        old, self.rows = self.rows, rows
        if self.cursor_host is None or not any(r.name == self.cursor_host for r in rows):
            index = min(self._old_index(old), len(rows) - 1)
            self.cursor_host = rows[index].name if rows else None
        if len(rows) != len(old) or self._width == 0:
            self._relayout()
            self.refresh()
            return
        top = int(self.scroll_y)  # only the lines on screen: the others are drawn when scrolled to
        for i in range(top, min(len(rows), top + self.size.height)):
            if not old[i].same_line(rows[i]):
                self.refresh_lines(i + 1)
        names = {r.name for r in rows}
        for gone in [n for n in self._lines if n not in names]:
            del self._lines[gone]

    def _old_index(self, old: Sequence[FleetRow]) -> int:
        for i, row in enumerate(old):
            if row.name == self.cursor_host:
                return i
        return 0

    def _relayout(self) -> None:
        width = self.scrollable_content_region.width
        if width <= 0:
            return
        name_width = max((len(r.name) for r in self.rows), default=4)
        columns = fit_columns(width, name_width)
        if columns != self._columns or width != self._width:
            self._columns, self._width = columns, width
            self._lines.clear()
            self._styles.clear()
        self.virtual_size = Size(width, len(self.rows) + 1)

    def on_resize(self, _event: events.Resize) -> None:
        self._relayout()
        self.refresh()

    # -- keys ---------------------------------------------------------------------------
    def _move_to(self, index: int) -> None:
        if not self.rows:
            return
        before = self.cursor
        index = max(0, min(len(self.rows) - 1, index))
        self.cursor_host = self.rows[index].name
        self.refresh_lines(before + 1)
        self.refresh_lines(index + 1)
        height = max(1, self.scrollable_content_region.height - 1)  # the header takes a line
        if index < self.scroll_y:
            self.scroll_to(y=index, animate=False)
        elif index >= self.scroll_y + height:
            self.scroll_to(y=index - height + 1, animate=False)

    def action_move(self, delta: int) -> None:
        self._move_to(self.cursor + delta)

    def action_page(self, direction: int) -> None:
        self._move_to(self.cursor + direction * max(1, self.scrollable_content_region.height - 2))

    def toggle_mark(self) -> str | None:
        """Mark or unmark the host under the cursor (for a rollout); its name, or None."""
        host = self.cursor_host
        if host is None:
            return None
        self.marked ^= {host}
        self.refresh_lines(self.cursor + 1)
        return host

    def action_select(self) -> None:
        if self.cursor_host is not None:
            self.post_message(self.Selected(self.cursor_host))

    def on_click(self, event: events.Click) -> None:
        index = int(self.scroll_y) + event.y - 1
        if 0 <= index < len(self.rows):
            if self.rows[index].name == self.cursor_host and event.chain >= 2:
                self.action_select()
            self._move_to(index)

    # -- drawing ------------------------------------------------------------------------
    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles.clear()  # a theme change: every style again
        self._lines.clear()

    def _role_style(self, role: str, selected: bool) -> Style:
        """The base style (+ the cursor's) + a colour role, built once per theme."""
        key = (role, selected)
        found = self._styles.get(key)
        if found is None:
            base = self.rich_style
            if selected:
                base = base + self.get_component_rich_style("fleet-table--cursor")
            if role == "header":
                base = base + self.get_component_rich_style("fleet-table--header")
            p = self.palette
            colour = {"success": p.success, "warning": p.warning, "error": p.error}.get(role)
            extra = Style(color=colour) if colour else Style(dim=True) if role == "muted" else \
                Style(bold=True) if role == "bold" else Style()
            found = self._styles[key] = base + extra
        return found

    def _line(self, cells: Sequence[tuple[str, str]], selected: bool) -> Strip:
        """One line from (text, colour role) per column: segments made directly (no markup, no
        Rich rendering), each cell cut or padded to its column."""
        gap = Segment(" " * GAP, self._role_style("", selected))
        segments: list[Segment] = []
        for n, (col, (value, role)) in enumerate(zip(self._columns, cells, strict=True)):
            if n:
                segments.append(gap)
            if cell_len(value) > col.width:
                value = set_cell_size(value, col.width - 1) + "…"
            pad = " " * (col.width - cell_len(value))
            segments.append(Segment(pad + value if col.right else value + pad, self._role_style(role, selected)))
        used = sum(c.width for c in self._columns) + GAP * max(0, len(self._columns) - 1)
        if used < self._width:
            segments.append(Segment(" " * (self._width - used), self._role_style("", selected)))
        return Strip(segments, max(used, self._width)).crop(0, self._width)

    def render_line(self, y: int) -> Strip:
        if y == 0:
            return self._line([(c.label, "header") for c in self._columns], False)
        index = int(self.scroll_y) + y - 1
        if index >= len(self.rows):
            return Strip.blank(self._width, self._role_style("", False))
        row = self.rows[index]
        selected = row.name == self.cursor_host
        cells = row.cells
        if row.name in self.marked:  # marked for a rollout: a check before the name
            text, role = cells.get("name", (row.name, ""))
            cells = {**cells, "name": ("✓" + text, role)}
        cached = self._lines.get(row.name)
        if cached is not None and cached[0] == (cells, selected):
            return cached[1]
        strip = self._line([cells.get(c.key, ("", "")) for c in self._columns], selected)
        self._lines[row.name] = ((cells, selected), strip)
        self.lines_rendered += 1
        return strip


# ------------------------------------------------------------------------------ the view

class FleetView(Vertical):
    """Head line, filter input and table; :meth:`show` takes every host's status each redraw."""

    DEFAULT_CSS = """
    FleetView { height: 1fr; border: round $primary 60%; border-title-color: $text;
                border-title-style: bold; border-subtitle-color: $text-muted; padding: 0 1; }
    FleetView .fleet-head { height: 1; text-wrap: nowrap; text-overflow: ellipsis; }
    FleetView Input, FleetView Input:focus { border: none; height: 1; padding: 0 1; background: $boost; }
    FleetView FleetTable { height: 1fr; }
    """

    def __init__(self, config: Config, navigator: FleetNavigator | None = None,
                 key_of: Callable[[str], str | None] | None = None, **kwargs: Any) -> None:
        """``key_of``: the key bound to an action id (None: unbound), for the rollout keys' hint."""
        super().__init__(**kwargs)
        self.config = config
        self.key_of = key_of
        self.navigator = navigator  # the console's (sort, filter and Enter go through it)
        self.by_name: dict[str, HostConfig] = {h.name: h for h in config.hosts}
        self.sort = 0
        self.query_text = ""
        self.all_rows: list[FleetRow] = []
        self.derived = DerivedCache()  # each host's util/power/tokens until its next sample

    def compose(self) -> ComposeResult:
        self.border_title = "Fleet"
        self.border_subtitle = "⏎ details · s sort · / filter · f host panes" + self._rollout_hint()
        yield TextBlock("waiting for the first samples…", classes="fleet-head")
        yield Input(placeholder="filter: words every shown host must match (enter keeps it, esc clears)",
                    classes="fleet-filter")
        yield FleetTable(classes="fleet-table")

    def _rollout_hint(self) -> str:
        """`` · m mark · R roll out`` when a router is configured and both keys are bound (not read-only)."""
        if self.config.router is None or self.key_of is None:
            return ""
        mark, roll = self.key_of("fleet_mark"), self.key_of("rollout")
        return f" · {mark} mark · {roll} roll out" if mark and roll else ""

    def on_mount(self) -> None:
        self._close_filter()

    def _close_filter(self) -> None:
        """Hidden and out of the focus chain (a hidden input that got the focus would eat every
        key: q, k, d typed into it)."""
        box = self.query_one(Input)
        box.display = False
        box.can_focus = False

    @property
    def table(self) -> FleetTable:
        return self.query_one(FleetTable)

    def rows_for(self, statuses: Sequence[HostStatus], view: View) -> list[FleetRow]:
        """Every host's row (also while the view is hidden: the summary bar counts them)."""
        self.all_rows = [fleet_row(s, self.by_name.get(s.name), view.now, view.freshness, self.derived)
                         for s in statuses]
        self.derived.prune(statuses)
        return self.all_rows

    def show(self, view: View) -> None:
        """Draw :attr:`all_rows` (call after :meth:`rows_for`); nothing when hidden."""
        if not self.display:
            return
        shown = order(self.all_rows, self.sort, self.query_text)
        head = summary_text(self.all_rows) + f"  ·  sort: [b]{SORTS[self.sort][0]}[/]"
        if self.query_text:
            head += f"  ·  filter [b]{_escape(self.query_text)}[/]: {len(shown)} shown"
        self.query_one(".fleet-head", TextBlock).set(head)
        self.table.set_rows(shown, view.palette)

    def _redraw(self) -> None:
        if self.navigator is not None:
            self.navigator.console.refresh_panes()

    # -- sort and filter ------------------------------------------------------------------
    def cycle_sort(self) -> str:
        self.sort = (self.sort + 1) % len(SORTS)
        self._redraw()
        return SORTS[self.sort][0]

    def open_filter(self) -> None:
        box = self.query_one(Input)
        box.can_focus = True
        box.display = True
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.query_text = event.value.strip()
        self._redraw()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if not event.value.strip():
            self._close_filter()
        self.table.focus()

    def on_key(self, event: events.Key) -> None:
        box = self.query_one(Input)
        if event.key == "escape" and box.has_focus:
            event.stop()
            event.prevent_default()
            box.value = ""
            self._close_filter()
            self.query_text = ""
            self.table.focus()
            self._redraw()

    def on_fleet_table_selected(self, event: FleetTable.Selected) -> None:
        event.stop()
        if self.navigator is not None:
            self.run_worker(self.navigator.drill(event.host), group="fleet-nav", exit_on_error=False)


def _escape(text: str) -> str:
    return printable(text).replace("[", r"\[")


# ------------------------------------------------------------------------------ navigation

class NavigatorHost(Protocol):
    """What the fleet navigator uses of the console."""

    @property
    def config(self) -> Config: ...

    @property
    def main_screen(self) -> Screen[Any] | None: ...

    def refresh_panes(self) -> None: ...

    def panes_changed(self) -> None:
        """Per-host panes were mounted or removed."""


class FleetNavigator:
    """What the console's body shows: the fleet view, or host panes (all of them, or the one
    host drilled into). The app asks it which panes to draw; hidden ones are never drawn."""

    def __init__(self, console: NavigatorHost) -> None:
        self.console = console
        self.fleet_mode = fleet_mode(console.config)
        self.showing_fleet = self.fleet_mode
        self.detail: str | None = None  # the host drilled into
        self._mounted: list[Widget] = []  # fleet mode: that host's panes, removed on the way back
        self._view: FleetView | None = None

    @property
    def view(self) -> FleetView | None:
        """The fleet view (looked up once: a DOM query on every redraw costs)."""
        if self._view is None or not self._view.is_attached:
            screen = self.console.main_screen
            found = screen.query(FleetView) if screen is not None else None
            self._view = found.first() if found else None
        return self._view

    @property
    def body_shown(self) -> bool:
        return not self.showing_fleet

    def apply(self) -> None:
        """Show the fleet view or the body, as decided."""
        view, screen = self.view, self.console.main_screen
        if view is None or screen is None:
            return
        body = screen.query_one("#body")
        view.display = self.showing_fleet
        body.display = not self.showing_fleet
        view.table.can_focus = self.showing_fleet  # hidden: out of the focus chain
        if self.showing_fleet:
            view.table.focus()
        elif screen.focused is not None and view in screen.focused.ancestors_with_self:
            screen.set_focus(None)

    def rows(self, statuses: Sequence[HostStatus], view: View) -> list[FleetRow] | None:
        """Every host's row when the fleet view is in use (shown, or the console is in fleet mode)."""
        fleet = self.view
        if fleet is None or not (self.fleet_mode or self.showing_fleet):
            return None
        return fleet.rows_for(statuses, view)

    def show(self, view: View) -> None:
        fleet = self.view
        if fleet is not None and self.showing_fleet:
            fleet.show(view)

    def toggle(self) -> None:
        """``f``: the fleet view, or back to the host panes (in fleet mode: the host last drilled
        into, else the host under the cursor)."""
        if self.showing_fleet:
            view = self.view
            host = self.detail or (view.table.cursor_host if view is not None else None)
            if view is not None and host is not None:
                view.run_worker(self.drill(host), group="fleet-nav", exit_on_error=False)
            return
        self.showing_fleet = True
        self.apply()
        self.console.refresh_panes()

    async def drill(self, host: str) -> None:
        """Show ``host``'s panes (in fleet mode they are mounted now, only for that host)."""
        screen = self.console.main_screen
        assert screen is not None
        if self.fleet_mode and host != self.detail:
            await self._unmount_detail()
            panes = per_host_panes([h for h in self.console.config.hosts if h.name == host])
            hosts_box = screen.query_one("#hosts")
            hosts_box.set_classes("-n1")
            await hosts_box.mount_all(panes["hosts"])
            await screen.query_one("#middle").mount_all(panes["middle"])
            screen.query_one("#lower").set_class(not panes["middle"], "-solo")
            self._mounted = [*panes["hosts"], *panes["middle"]]
            self.console.panes_changed()
        self.detail = host
        self.showing_fleet = False
        self.apply()
        self.console.refresh_panes()
        pane = next((p for p in screen.query(PerHostPane) if p.host.name == host), None)  # its first
        if pane is not None:
            pane.call_after_refresh(pane.scroll_visible, animate=False, top=True)

    async def _unmount_detail(self) -> None:
        mounted, self._mounted = self._mounted, []
        for widget in mounted:
            await widget.remove()
        if mounted:
            self.console.panes_changed()

    def back(self) -> bool:
        """Escape: from a host's panes back to the fleet view (False when not in one)."""
        if self.showing_fleet or self.detail is None:
            return False
        self.showing_fleet = True
        self.apply()
        self.console.refresh_panes()
        return True
