"""The console's panes. Each reads :class:`~specconsole.monitor.HostStatus` snapshots and nothing else.

Every pane has ``show(status, view)``, called by the app on each refresh; a pane only touches
the widgets whose text changed (GPU table rows by stable keys, one line each), so
a 1 Hz refresh redraws a handful of cells, never the whole screen.

The panes about one host derive from :class:`PerHostPane` and are listed in :data:`PER_HOST_PANES`,
the one registry the app mounts them from (all hosts, or the one a fleet drill-down shows) and
redraws them from.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from rich.segment import Segment
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Vertical
from textual.css.scalar import Scalar
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from specconsole.config import HostConfig
from specconsole.events import Event, EventLog
from specconsole.formats.slurm import slurm_lines
from specconsole.hosts.address import ssh_address
from specconsole.monitor import HostStatus
from specconsole.samples import Sample, format_age, format_bytes
from specconsole.ui import format as fmt
from specconsole.ui.checkpoints_pane import CheckpointTable
from specconsole.ui.fleet_rows import FleetRow, summary_text
from specconsole.ui.format import escape
from specconsole.ui.gpu_table import GpuTable
from specconsole.ui.history import tokens_per_s
from specconsole.ui.pane_base import PerHostPane, View, part, set_classes
from specconsole.ui.serving_facts import deployment_lines
from specconsole.ui.text_block import TextBlock
from specconsole.ui.widgets import PlotRow, scroll_bindings
from specconsole.values import printable

_BADGE_VAR = {"ok": "$success", "warn": "$warning", "bad": "$error", "idle": "$text-muted"}


# ------------------------------------------------------------------------------ host pane

class HostPane(PerHostPane):
    """One host: connection badge, sample age, GPU table, utilization and tokens/s history.

    On a short screen (``Screen.-short`` in console.tcss) the GPU table gives way to a two-line
    summary of the host's GPUs (:func:`~specconsole.ui.format.gpu_summary`): the panes of both hosts
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
        parts = [f"[b {_BADGE_VAR[state]}]{escape(text)}[/]", age_part]
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


# ------------------------------------------------------------------------------ serving

_SGLANG_STATE_VAR = {"healthy": "$success", "starting": "$warning", "loading": "$warning",
                     "down": "$error", "error": "$error", "unhealthy": "$error", "hung": "$error"}
#: states drawn as a badge, not a word: "hung" (the HTTP server answers, the scheduler does not)
#: must not read like "down" at a glance
_SGLANG_STATE_BADGE = frozenset({"hung"})


class ServingPane(PerHostPane):
    """SGLang on one serving host: state, deployment, load, throughput, acceptance length."""

    KIND = "serving"
    WAITING = "waiting for the first SGLang sample…"

    @classmethod
    def wanted(cls, host: HostConfig) -> bool:
        return host.serves and host.sglang is not None

    def titles(self) -> tuple[str, str | None]:
        unit = self.host.sglang.unit if self.host.sglang is not None else None
        return f"Serving [dim]· {escape(self.host.name)}[/]", escape(unit) if unit is not None else None

    def compose_parts(self) -> ComposeResult:
        yield PlotRow("accept len", classes="plot accept")

    def draw(self, status: HostStatus, view: View) -> None:
        body = self.body
        sample = status.sglang
        if sample is None:
            where = self.host.sglang.base_url if self.host.sglang else "?"
            self.show_missing(f"SGLang at {where}", status, "no answer yet")
            return
        v = sample.value
        age, stale = fmt.sample_age_text(sample, view.now, view.freshness.check((status.name, "sglang"), sample,
                                                                                 view.now))
        stale = stale or not status.reachable
        state = v.state.value
        var = _SGLANG_STATE_VAR.get(state, "$text-muted")
        message = v.error
        info, m = v.info, v.metrics
        version = info.version if info else None
        head = (f"[b reverse {var}] {escape(state)} [/]" if state in _SGLANG_STATE_BADGE
                else f"[b {var}]{escape(state)}[/]")
        if message:
            head += f" [{var}]{escape(str(message))}[/]"
        lines = [f"{head}  ·  SGLang {escape(version or 'n/a')}  ·  [{'$warning' if stale else '$text-muted'}]"
                 f"{escape(age)}[/]"]
        if info is not None:
            draft = info.draft_model_path
            draft_name = draft.rstrip("/").rsplit("/", 1)[-1] if draft else "n/a"
            algo = info.algorithm or "no speculation"
            lines.append(f"algorithm [b]{escape(algo)}[/]  ·  draft [b]{escape(draft_name)}[/]")
            lines += deployment_lines(info, v.worker)
        else:
            lines.append("[$text-muted]deployment: /server_info not read yet[/]")
        if m is not None:
            lines.append(f"running [b]{fmt.num(m.running_reqs)}[/]  ·  queued [b]{fmt.num(m.queued_reqs)}[/]  ·  "
                         f"gen [b]{fmt.si(m.tokens_per_s)}[/] tok/s")
        else:
            lines.append("[$text-muted]metrics: /metrics not read yet[/]")
        body.set("\n".join(lines))
        set_classes(self, stale=stale)
        accept = view.history.series(status.name, "accept")
        latest = m.spec_accept_length if m is not None else None
        if latest is None and info is not None:
            latest = info.avg_accept_length
        part(self, ".accept", PlotRow).show(accept.values(), fmt.num(latest, "{:.2f}"))


# ------------------------------------------------------------------------------ training

class TrainingPane(PerHostPane):
    """The training job on one host: progress, loss trend, rates, ETA, log freshness, last lines."""

    KIND = "training"
    WAITING = "waiting for the training log…"
    RECENT = 4

    @classmethod
    def wanted(cls, host: HostConfig) -> bool:
        return host.trains and host.training is not None

    def titles(self) -> tuple[str, str | None]:
        log = self.host.training.log_path.rsplit("/", 1)[-1] if self.host.training is not None else None
        return f"Training [dim]· {escape(self.host.name)}[/]", escape(log) if log is not None else None

    def compose_parts(self) -> ComposeResult:
        yield PlotRow("loss", minimum=None, classes="plot loss")
        yield TextBlock("", classes="freshness")
        yield TextBlock("", classes="recent")
        yield CheckpointTable()

    def draw(self, status: HostStatus, view: View) -> None:
        body = self.body
        sample = status.training
        if sample is None:
            self.show_missing(self.host.training.log_path if self.host.training else "?", status, "no log lines yet")
            return
        p = sample.value
        age, stale = fmt.sample_age_text(sample, view.now, view.freshness.check((status.name, "training"), sample,
                                                                                 view.now))
        stale = stale or not status.reachable
        pct = ""
        target = p.target_steps or p.total_steps
        if target and p.step is not None:
            pct = f" ({100.0 * p.step / target:.1f}%)"
        epoch = fmt.num(p.epoch, "{:.2f}")
        epochs = f"/{p.total_epochs:g}" if p.total_epochs else ""
        lines = [f"step [b]{fmt.progress_text(p.step, p.total_steps)}[/]{pct}  ·  epoch [b]{epoch}{epochs}[/]",
                 f"tokens/s [b]{fmt.si(p.tokens_per_s)}[/]  ·  steps/s [b]{fmt.num(p.steps_per_s, '{:.2f}')}[/]",
                 f"ETA [b]{escape(p.eta_text or 'n/a')}[/]"]
        if p.error:
            lines.append(f"[$error]{escape(p.error)}[/]")
        if p.slurm is not None:  # issue 32: the Slurm job, before its progress
            lines[:0] = [f"[$error]{escape(x)}[/]" if (i or not p.slurm.seen_by) and x.startswith("slurm: ")
                         else escape(x)
                         for i, x in enumerate(slurm_lines(p.slurm, view.now))]
        body.set("\n".join(lines))
        loss_values = list(p.loss_history) or ([p.loss] if p.loss is not None else [])
        part(self, ".loss", PlotRow).show(loss_values, fmt.num(p.loss, "{:.4f}"))

        stall_min = self.host.training.stall_warning_min if self.host.training else 10.0
        if p.last_line_at is None:
            fresh = "[$text-muted]no log line yet[/]"
            stalled = False
        else:
            since = max(0.0, view.now - p.last_line_at)
            stalled = p.stalled or since >= stall_min * 60.0
            if stalled:
                fresh = (f"[b $error]⚠ no log line for {format_age(since)}[/] "
                         f"[$error](stall warning after {stall_min:g} min)[/]")
            else:
                fresh = f"last log line {format_age(since)} ago"
        if p.behind_bytes:
            fresh += f"  ·  [b $warning]{escape(format_bytes(p.behind_bytes))} behind the log's end[/]"
        if stale:
            fresh += f"  ·  [b $warning]sample {escape(age)}[/]"
        part(self, ".freshness", TextBlock).set(fresh)
        recent = [escape(line) for line in p.recent_lines[-self.RECENT:]]
        part(self, ".recent", TextBlock).set("\n".join(recent) or "[$text-muted](no lines)[/]")
        part(self, ".checkpoints", CheckpointTable).show(p.checkpoints, view.now)
        set_classes(self, stale=stale, stalled=stalled)


# ------------------------------------------------------------------------------ the registry

#: Every kind of per-host pane, in the order they are shown (within a slot: all hosts' panes of
#: the first kind, then the next kind's). The app mounts them from here and redraws what is mounted.
PER_HOST_PANES: tuple[type[PerHostPane], ...] = (HostPane, ServingPane, TrainingPane)


def per_host_panes(hosts: Sequence[HostConfig]) -> dict[str, list[PerHostPane]]:
    """The per-host panes of ``hosts``, by slot (``hosts``, ``middle``)."""
    slots: dict[str, list[PerHostPane]] = {"hosts": [], "middle": []}
    for kind in PER_HOST_PANES:
        slots[kind.SLOT].extend(kind(h) for h in hosts if kind.wanted(h))
    return slots


# ------------------------------------------------------------------------------ events

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
        self.rows_changed: Callable[[int], None] | None = None  # told the number of screen rows

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

    def _rewrap(self) -> None:
        width = self._width()
        self._wrap_width = width
        self._rows = [(i, row) for i, line in enumerate(self._lines) for row in self.wrap(line, width)]
        self.virtual_size = Size(width, len(self._rows))
        if self.rows_changed is not None:
            self.rows_changed(len(self._rows))

    def on_resize(self) -> None:
        if self._width() != self._wrap_width:
            self._rewrap()
            if self._follow:
                self.call_after_refresh(self.scroll_end, animate=False, x_axis=False)
            self.refresh()

    def add(self, events: list[Event]) -> None:
        for event in events:
            self.events.append(event)
            self._lines.append(printable(event.line()))  # a host's ESC or U+202E is shown, not obeyed
        self._rewrap()
        if self._follow:  # after the new size is laid out, or the end is not the end yet
            self.call_after_refresh(self.scroll_end, animate=False, x_axis=False)
        self.refresh()

    @property
    def lines(self) -> list[str]:
        return list(self._lines)

    def render_line(self, y: int) -> Strip:
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
        text = Text(row, style=color or "", no_wrap=True, end="")
        segments = list(text.render(self.app.console))
        strip = Strip(Segment.apply_style(segments, base), text.cell_len)
        return strip.crop_extend(0, width, base)


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

    def _fit(self, rows: int) -> None:
        # its rows and the border; past the screen's height more makes no difference (no relayout)
        height = min(max(1, rows), max(1, self.app.size.height)) + self.styles.gutter.height
        if self.styles.max_height != Scalar.from_number(height):
            self.styles.max_height = height

    @property
    def lines(self) -> list[str]:
        return self.query_one(EventList).lines

    def flush(self, pending: deque[Event]) -> None:
        """Write the queued events (the app queues them as they are emitted, from any thread)."""
        if not pending:
            return
        batch = []
        while pending:
            batch.append(pending.popleft())
        self.query_one(EventList).add(batch)


# ------------------------------------------------------------------------------ summary

class SummaryBar(TextBlock):
    """One line that fits 80 columns: every host's badge, serving throughput, training step and ETA."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("specconsole", **kwargs)

    def show(self, statuses: list[HostStatus], view: View, fleet: Sequence[FleetRow] | None = None,
             alert: str | None = None) -> None:
        """``alert``: the worst active alert (markup), shown first so that 80 columns keep it."""
        parts = ["[b]specconsole[/]"] if self.size.width >= 120 else []
        if alert:
            parts.append(alert)
        if fleet is not None:  # the fleet view: counts per state (a badge per host would not fit)
            self.set(" │ ".join([*parts, summary_text(fleet)]))
            return
        for s in statuses:
            text, state = fmt.badge(s.connection, view.now)
            dated = fmt.newest(s)
            age = format_age(dated.age(view.now)) if dated is not None else "-"
            if dated is not None and view.freshness.check((s.name, "host"), dated, view.now):
                age = f"[$warning]{age}[/]"
            parts.append(f"{escape(s.name)} [{_BADGE_VAR[state]}]{text.split(' ')[0]}[/] {age}")
        for s in statuses:
            if s.training is not None:
                p = s.training.value
                eta = f" ETA {escape(p.eta_text)}" if p.eta_text else ""
                parts.append(f"step {fmt.progress_text(p.step, p.total_steps)}{eta}")
        for s in statuses:
            if s.sglang is not None:
                v = s.sglang.value
                state = v.state.value
                m = v.metrics
                tok = f" {fmt.si(m.tokens_per_s)} tok/s" if m is not None else ""
                acc = f" acc {fmt.num(m.spec_accept_length, '{:.2f}')}" if m is not None else ""
                parts.append(f"[{_SGLANG_STATE_VAR.get(state, '$text-muted')}]{escape(state)}[/]{tok}{acc}")
        self.set(" │ ".join(parts))

