"""The run's checkpoints, a small table at the foot of the training pane.

One row per checkpoint folder, newest first: step, age, size and marks (``latest``, ``best``,
``no config.json`` when SGLang could not load it as a draft model). The row under the cursor
is what ``deploy_checkpoint`` (``D``) deploys. Hidden while there is no checkpoint to show (a
listing error shows as one line).
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from specconsole.base.samples import format_age
from specconsole.sources.checkpoints import Checkpoint, CheckpointListing
from specconsole.ui.panes.pane_base import PerHostPane
from specconsole.ui.style.formatting import escape


def size_text(size: int | None) -> str:
    """``1.2 GiB``, ``340 MiB``, ``12 KiB``; ``?`` when unknown."""
    if size is None:
        return "?"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit in ("B", "KiB") or value >= 100 else f"{value:.1f} {unit}"
        value /= 1024
    return "?"  # unreachable


def marks_text(ckpt: Checkpoint) -> str:
    marks = [m for m, on in (("latest", ckpt.is_latest), ("best", ckpt.is_best)) if on]
    if not ckpt.has_config:
        marks.append("no config.json")
    return " ".join(marks)


class CheckpointTable(Vertical):
    """The checkpoints of one training host; ``selected`` is the row under the cursor."""

    DEFAULT_CSS: ClassVar[str] = """
    CheckpointTable { height: auto; display: none; }
    CheckpointTable.-shown { display: block; }
    CheckpointTable .ckpt-title { height: 1; color: $text-muted; text-wrap: nowrap; text-overflow: ellipsis; }
    CheckpointTable DataTable { height: auto; max-height: 6; }
    """
    COLUMNS: ClassVar[tuple[tuple[str, str], ...]] = (
        ("step", "step"), ("age", "age"), ("size", "size"), ("marks", ""), ("name", "folder"))

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(classes="checkpoints", **kwargs)
        self.listing: CheckpointListing | None = None
        self._keys: list[str] = []
        self._cells: dict[str, tuple[str, ...]] = {}

    def compose(self) -> ComposeResult:
        yield Static("", classes="ckpt-title")
        table: DataTable[Text] = DataTable(cursor_type="row", zebra_stripes=False, id="checkpoint-table")
        for key, label in self.COLUMNS:
            table.add_column(label, key=key)
        yield table

    @property
    def table(self) -> DataTable[Text]:
        return self.query_one("#checkpoint-table", DataTable)

    def show(self, listing: CheckpointListing | None, now: float) -> None:
        if listing is None:
            return
        self.listing = listing
        count = len(listing.checkpoints)
        # nothing saved yet: no room taken; a listing error: its one line; else the table
        if self.has_class("-shown") != bool(count or listing.error):
            self.set_class(bool(count or listing.error), "-shown")
        if self.table.display != bool(count):
            self.table.display = bool(count)
        title = self.query_one(".ckpt-title", Static)
        if listing.error:
            title.update(f"[$error]{escape(listing.error)}[/]")
        elif count:
            best = (f"  ·  best by {escape(listing.best_metric)} {listing.best_score:g}"
                    if listing.best_metric and listing.best_score is not None else "")
            title.update(f"checkpoints ({count}) · D deploys the selected{best} · {escape(listing.directory)}")
        self._fill(listing.checkpoints, now)

    def _fill(self, checkpoints: tuple[Checkpoint, ...], now: float) -> None:
        table = self.table
        keys = [c.path for c in checkpoints]
        rows: dict[str, tuple[str, ...]] = {
            c.path: (str(c.step), format_age(c.age(now)), size_text(c.size_bytes), marks_text(c), c.name)
            for c in checkpoints}
        if keys != self._keys:
            cursor = self.selected
            table.clear()
            for key in keys:
                table.add_row(*(Text(cell) for cell in rows[key]), key=key)
            self._keys, self._cells = keys, rows
            if cursor is not None and cursor.path in keys:
                table.move_cursor(row=keys.index(cursor.path))
            return
        for key in keys:
            old = self._cells.get(key)
            for (col, _label), cell, before in zip(self.COLUMNS, rows[key], old or (), strict=False):
                if cell != before:
                    table.update_cell(key, col, Text(cell), update_width=True)
            self._cells[key] = rows[key]

    @property
    def selected(self) -> Checkpoint | None:
        """The checkpoint under the cursor (the newest when the table was never moved)."""
        if self.listing is None or not self._keys:
            return None
        row = self.table.cursor_row
        path = self._keys[row] if 0 <= row < len(self._keys) else self._keys[0]
        return next((c for c in self.listing.checkpoints if c.path == path), None)


def selected_checkpoint(app: App[Any]) -> tuple[str, Checkpoint] | str:
    """(training host, checkpoint) under the cursor: of the focused checkpoint table, else of the
    first training pane that lists any; or why there is none (one line for the operator)."""
    tables = list(app.query(CheckpointTable))
    focused = app.focused
    tables.sort(key=lambda t: focused is None or focused.parent is not t)  # the focused one first
    for table in tables:
        ckpt = table.selected
        if ckpt is not None:
            pane = table.parent
            return (pane.host.name if isinstance(pane, PerHostPane) else "?"), ckpt
    if not tables:
        return "no training host configured; add a [[hosts]] with role = \"train\" to the config"
    listings = [t.listing for t in tables if t.listing is not None]
    if not listings:
        return "the training pane has not listed any checkpoints yet; try again in a moment"
    why = "; ".join(lst.error or f"none in {lst.directory}" for lst in listings)
    return f"no checkpoint to deploy ({why}); set [hosts.training] checkpoint_dir if they are elsewhere"
