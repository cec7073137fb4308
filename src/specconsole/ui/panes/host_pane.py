"""The host pane: one host's connection, GPUs and their processes.

Like every pane it reads :class:`~specconsole.monitor.HostStatus` snapshots and nothing else.
Every pane has ``show(status, view)``, called by the app on each refresh; a pane only touches
the widgets whose text changed (GPU table rows by stable keys, one line each), so
a 1 Hz refresh redraws a handful of cells, never the whole screen.

The panes about one host derive from :class:`~specconsole.ui.panes.pane_base.PerHostPane` and are
listed in :data:`~specconsole.ui.panes.per_host.PER_HOST_PANES`, the one registry the app mounts them
from (all hosts, or the one a fleet drill-down shows) and redraws them from.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult

from specconsole.base.samples import Sample, format_age
from specconsole.config import HostConfig
from specconsole.hosts.address import ssh_address
from specconsole.monitor import HostStatus
from specconsole.ui.panes.history import tokens_per_s
from specconsole.ui.panes.pane_base import PerHostPane, View, part, set_classes
from specconsole.ui.style import formatting as fmt
from specconsole.ui.style.formatting import escape
from specconsole.ui.widgets.gpu_table import GpuTable
from specconsole.ui.widgets.plot_row import PlotRow
from specconsole.ui.widgets.text_block import TextBlock

BADGE_VAR = {"ok": "$success", "warn": "$warning", "bad": "$error", "idle": "$text-muted"}


class HostPane(PerHostPane):
    """One host: connection badge, sample age, GPU table, utilization and tokens/s history.

    On a short screen (``Screen.-short`` in console.tcss) the GPU table gives way to a two-line
    summary of the host's GPUs (:func:`~specconsole.ui.style.formatting.gpu_summary`): the panes of both hosts
    and the eval comparison share the first screen at 80x24."""

    KIND = "host"
    SLOT = "hosts"
    WAITING = "… connecting"
    BODY = "badge"

    def __init__(self, host: HostConfig, **kwargs: Any) -> None:
        super().__init__(host, **kwargs)
        self._rows: dict[str, tuple[tuple[str, str], ...]] = {}
        self._names: dict[int, str | None] = {}
        self._good: Sample[Any] | None = None  # the last GPU sample that had readings

    def titles(self) -> tuple[str, str | None]:
        address = ssh_address(self.host) if self.host.connect == "ssh" else (self.host.host or "local")
        return f"{escape(self.host.name)} [dim]· {self.host.role}[/]", escape(address)

    def compose_parts(self) -> ComposeResult:
        yield TextBlock("", classes="problem")
        yield TextBlock("[$text-muted]no GPU readings yet[/]", classes="gpu-summary")
        yield GpuTable(fmt.GPU_COLUMNS, classes="gpus")
        yield PlotRow("util %", maximum=100.0, classes="plot util")
        yield PlotRow("tok/s", classes="plot tokens")

    @property
    def table(self) -> GpuTable:
        return part(self, ".gpus", GpuTable)

    @property
    def row_keys(self) -> list[str]:
        return list(self._rows)

    def draw(self, status: HostStatus, view: View) -> None:
        now = view.now
        conn = status.connection
        text, state = fmt.badge(conn, now)
        gpu = status.gpu
        snapshot = gpu.value if gpu is not None else None
        if gpu is not None and gpu.value.gpus:
            self._good = gpu
        # The pane dates itself by its last real GPU reading (error samples keep coming while a
        # host is down; they say why, not what the GPUs do).
        dated = self._good or fmt.newest(status)
        stale = view.freshness.check((status.name, "host"), dated, now) or not status.reachable
        if dated is None:
            age_part = "[$text-muted]no samples yet[/]"
        elif stale:
            age_part = f"[b $warning]STALE {escape(format_age(dated.age(now)))} old[/]"
        else:
            age_part = f"sample {escape(format_age(dated.age(now)))} ago"
        parts = [f"[b {BADGE_VAR[state]}]{escape(text)}[/]", age_part]
        shown = self._good.value if self._good is not None else None
        if shown is not None:
            parts.append(f"{len(shown.gpus)} GPU{'s' if len(shown.gpus) != 1 else ''}")
        self.body.set(" · ".join(parts))

        problems = []
        if not status.reachable and conn.last_error:
            problems.append(conn.last_error)
        if snapshot is not None and snapshot.error and snapshot.error not in problems:
            problems.append(snapshot.error)
        problem = part(self, ".problem", TextBlock)
        problem.set(escape("; ".join(problems)))
        if problem.display != bool(problems):
            problem.display = bool(problems)

        set_classes(self, stale=stale, down=state == "bad", reconnecting=state == "warn")
        if shown is not None:
            missing = snapshot.missing if snapshot is not None and snapshot.gpus else shown.missing
            self._update_table(shown, missing, view.palette, stale)
            part(self, ".gpu-summary", TextBlock).set(fmt.gpu_summary(shown, missing, view.palette))

        util = view.history.series(status.name, "util")
        part(self, ".util", PlotRow).show(util.values(), fmt.num(util.latest, unit="%"))
        label, _at, _value = tokens_per_s(status)
        tokens = view.history.series(status.name, "tokens")
        values = tokens.values()
        peak = max((v for v in values if v is not None), default=None)
        value_text = fmt.si(tokens.latest) + (f" ≤{fmt.si(peak)}" if peak else "")
        part(self, ".tokens", PlotRow).show(values, value_text, label)

    def _update_table(self, snap: Any, missing: tuple[int, ...], palette: fmt.Palette, stale: bool) -> None:
        table = self.table
        added = False
        processes = snap.processes if snap.processes_known else None
        for reading in snap.gpus:
            self._names[reading.index] = reading.name
            added |= self._put_row(table, f"gpu-{reading.index}",
                                   fmt.gpu_cells(reading, processes, palette, stale))
        for index in missing:
            added |= self._put_row(table, f"gpu-{index}",
                                   fmt.missing_gpu_cells(index, self._names.get(index), palette))
        if added:
            table.sort(key=lambda cells: int(cells[0].plain) if cells[0].plain.isdigit() else 0)

    def _put_row(self, table: GpuTable, key: str, cells: tuple[Text, ...]) -> bool:
        # Rich's Text equality ignores the base style: compare text *and* style, so a cell that
        # only turns dim (stale) or changes colour (theme) is rewritten too.
        sig = tuple((c.plain, str(c.style)) for c in cells)
        old = self._rows.get(key)
        if old != sig:
            table.put_row(key, cells)  # repaints that row's line only
            self._rows[key] = sig
        return old is None
