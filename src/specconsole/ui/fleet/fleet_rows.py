"""The fleet table's rows: one per host, from :class:`~specconsole.monitor.HostStatus` snapshots.

Pure (no widgets): which state a host is in and how bad that is, the cells' text and colour,
the sort orders, the filter, and which columns fit a width. :mod:`specconsole.ui.fleet.fleet_view`
draws them.

Worst first (the default order): down, reconnecting, stale, SGLang not healthy, training
stalled, a training host whose GPUs idle while its job runs, no data yet, then the healthy hosts;
by name within each group. Ages never reorder rows (only a change of state does), so a redraw
moves nothing unless something happened.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from specconsole.base.freshness import Staleness
from specconsole.base.samples import format_age
from specconsole.config import HostConfig
from specconsole.hosts import ConnState
from specconsole.monitor import HostStatus
from specconsole.sources.training_progress import TrainingProgress
from specconsole.ui.panes.history import mean_utilization, tokens_per_s
from specconsole.ui.style import formatting as fmt

#: A training host's GPUs count as idle below this mean utilization (while its job runs).
IDLE_UTIL_PCT = 5.0
BLOCKS = "▁▂▃▄▅▆▇█"
#: At most this many GPUs get a bar character; more are summarised as ``+N``.
MAX_BAR_GPUS = 16

#: state -> (severity: lower is worse, the colour role of its text)
STATES: dict[str, tuple[int, str]] = {
    "down": (0, "error"), "retry": (1, "warning"), "stale": (2, "warning"), "sglang": (3, "error"),
    "stalled": (3, "error"), "idle": (4, "warning"), "wait": (5, "muted"), "ok": (6, "success"),
}

#: A cell: its text and a colour role (``""`` plain, ``muted``, ``success``, ``warning``,
#: ``error``, ``bold``).
Cell = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Column:
    key: str
    label: str
    width: int
    #: lower stays longer when the width is short
    priority: int
    right: bool = False


COLUMNS: tuple[Column, ...] = (
    Column("name", "Host", 10, 0),
    Column("state", "State", 14, 0),
    Column("gpus", "GPUs util", 14, 1),
    Column("mem", "Mem GiB", 10, 3, right=True),
    Column("power", "Power", 6, 5, right=True),
    Column("tokens", "tok/s", 6, 2, right=True),
    Column("step", "Step", 13, 2, right=True),
    Column("eta", "ETA", 8, 4, right=True),
    Column("sglang", "SGLang", 9, 3),
    Column("role", "Role", 5, 6),
)
GAP = 1


def fit_columns(width: int, name_width: int) -> list[Column]:
    """The columns that fit ``width`` (lowest priority dropped first), in display order; the
    host column as wide as the longest name (10..24) when there is room."""
    name = min(24, max(10, name_width))
    cols = [Column(c.key, c.label, name if c.key == "name" else c.width, c.priority, c.right) for c in COLUMNS]
    while cols and sum(c.width for c in cols) + GAP * (len(cols) - 1) > width:
        droppable = [c for c in cols if c.priority > 0]
        if not droppable:
            break
        cols.remove(max(droppable, key=lambda c: (c.priority, cols.index(c))))
    return cols


class FleetRow:
    """One host's line. What sorting and counting need (state, util, power, tokens, progress) is
    worked out for every host on each redraw; the cells' text only when asked for (the lines on
    screen, or every line while a filter is typed), since most hosts are off screen."""

    __slots__ = ("_cells", "fraction", "name", "power", "role", "state", "state_text", "status", "tokens",
                 "util")

    def __init__(self, status: HostStatus, state: str, state_text: str, util: float | None,
                 power: float | None, tokens: float | None, fraction: float | None) -> None:
        self.name, self.role, self.status = status.name, status.role, status
        self.state, self.state_text = state, state_text
        self.util, self.power, self.tokens, self.fraction = util, power, tokens, fraction
        self._cells: dict[str, Cell] | None = None

    @property
    def severity(self) -> int:
        return STATES[self.state][0]

    @property
    def cells(self) -> dict[str, Cell]:
        """Each column's (text, colour role), by column key."""
        if self._cells is None:
            self._cells = _cells(self)
        return self._cells

    def cell(self, key: str) -> Cell:
        return self.cells.get(key, ("", ""))

    def same_line(self, other: FleetRow) -> bool:
        """Whether ``other`` draws the same line (same host, same cells)."""
        return self.name == other.name and self.cells == other.cells

    def text(self) -> str:
        """Everything the filter matches against (name, role, state and every cell's text)."""
        return " ".join([self.name, self.role, self.state, *(c[0] for c in self.cells.values())]).lower()


def util_bar(gpus: Sequence[Any]) -> str:
    """One block per GPU by its utilization (``·`` when not reported), ``+N`` past 16 GPUs."""
    chars = []
    for g in gpus[:MAX_BAR_GPUS]:
        u = g.utilization_pct
        if u is None or not math.isfinite(u):
            chars.append("·")
        else:
            chars.append(BLOCKS[min(7, max(0, int(u / 100.0 * 8)))])
    more = f"+{len(gpus) - MAX_BAR_GPUS}" if len(gpus) > MAX_BAR_GPUS else ""
    return "".join(chars) + more


def _sum(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _gib0(mib: float | None) -> str:
    return fmt.NA if mib is None else f"{mib / 1024:.0f}"


def _compact(n: int | None) -> str:
    if n is None:
        return fmt.NA
    if n >= 100_000:
        return f"{n / 1000:.0f}k"
    return f"{n / 1000:.1f}k" if n >= 10_000 else str(n)


def fleet_row(status: HostStatus, config: HostConfig | None, now: float, staleness: Staleness,
              derived: DerivedCache) -> FleetRow:
    """``status`` as a row; ``staleness`` remembers each host's stale state (hysteresis),
    ``derived`` its figures until its next sample."""
    conn = status.connection
    dated = fmt.newest(status)
    stale = staleness.check((status.name, "host"), dated, now)
    train = status.training.value if status.training is not None else None
    sglang = _sglang_state(status)
    util, power, tokens = derived.figures(status)

    age = format_age(dated.age(now)) if dated is not None else ""
    if conn.state is ConnState.DOWN:
        state, text = "down", f"✖ down {format_age(max(0.0, now - conn.since))}"
    elif conn.state is ConnState.RECONNECTING:
        state, text = "retry", f"◌ retry {conn.attempt}"
    elif dated is None:
        state, text = "wait", "… connecting" if conn.state is ConnState.CONNECTING else "… no data"
    elif stale:
        state, text = "stale", f"STALE {age}"
    elif sglang and sglang not in ("healthy", "starting"):
        state, text = "sglang", f"● {age} sglang"
    elif train is not None and _stalled(train, config, now):
        state, text = "stalled", f"● {age} stalled"
    elif (config is None or config.trains) and train is not None and train.state == "running" \
            and util is not None and util < IDLE_UTIL_PCT:
        state, text = "idle", f"● {age} idle"
    else:
        state, text = "ok", f"● {age}"
    return FleetRow(status, state, text, util, power, tokens, train.fraction if train is not None else None)


#: ``(mean utilization, power, tokens/s)`` of one host.
Derived = tuple[float | None, float | None, float | None]


class DerivedCache:
    """Each host's :data:`Derived` figures, worked out once per new sample of the host: a host's
    samples change every few seconds, its row is asked for every redraw (1,000 hosts at 1 s).

    Owned by whoever draws the rows (each :class:`~specconsole.ui.fleet.fleet_view.FleetView` has its
    own), as the app owns its :class:`~specconsole.base.freshness.Staleness`; :meth:`prune` forgets
    the hosts that left the fleet.
    """

    __slots__ = ("_by_host",)

    def __init__(self) -> None:
        #: host -> (its samples when worked out, the figures)
        self._by_host: dict[str, tuple[tuple[object, object, object], Derived]] = {}

    def __len__(self) -> int:
        return len(self._by_host)

    def __contains__(self, host: object) -> bool:
        return host in self._by_host

    def figures(self, status: HostStatus) -> Derived:
        """``status``'s figures: the remembered ones while its samples are the same objects."""
        cached = self._by_host.get(status.name)
        if cached is not None and status.same_samples(cached[0]):
            return cached[1]
        snap = status.gpu.value if status.gpu is not None else None
        gpus = snap.gpus if snap is not None else ()
        util = mean_utilization(snap) if snap is not None and gpus else None
        power = _sum([g.power_draw_w for g in gpus]) if gpus else None
        _label, _at, tokens = tokens_per_s(status)
        figures = (util, power, tokens)
        self._by_host[status.name] = (status.samples, figures)
        return figures

    def prune(self, statuses: Sequence[HostStatus]) -> None:
        """Forget the hosts not in ``statuses`` (the fleet now). Call it after asking for the
        figures of every one of them: then each is here, and a cache no bigger than the fleet
        has nothing to forget (one comparison per redraw)."""
        if len(self._by_host) > len(statuses):
            names = {s.name for s in statuses}
            for gone in [name for name in self._by_host if name not in names]:
                del self._by_host[gone]


def _sglang_state(status: HostStatus) -> str:
    if status.sglang is None:
        return ""
    return str(status.sglang.value.state.value)


def _cells(row: FleetRow) -> dict[str, Cell]:
    status = row.status
    snap = status.gpu.value if status.gpu is not None else None
    gpus = snap.gpus if snap is not None else ()
    train = status.training.value if status.training is not None else None
    sglang = _sglang_state(status)
    dim = "muted" if row.state in ("down", "retry", "stale") else ""
    step_text, eta_text = fmt.NA, ""
    if train is not None:
        target = train.target_steps or train.total_steps
        step_text = _compact(train.step) + (f"/{_compact(target)}" if target else "")
        eta_text = (train.eta_text or "").split(" to ")[0]  # "7d 2h to 6 epochs": the target is the same
    elif "training" not in status.expected:
        step_text = "-"
    if gpus:
        mem_used = _sum([g.memory_used_mib for g in gpus])
        mem_total = _sum([g.memory_total_mib for g in gpus])
        mem = f"{_gib0(mem_used)}/{_gib0(mem_total)}" if mem_total else _gib0(mem_used)
        gpu_cell: Cell = (f"{util_bar(gpus)} {fmt.num(row.util, unit='%')}", dim or "success")
    else:
        mem = fmt.NA if "gpu" in status.expected else "-"
        error = snap.error if snap is not None else None
        gpu_cell = ((error or fmt.NA) if "gpu" in status.expected else "-", "muted")
    sglang_cell: Cell = ("-", "muted")
    if sglang:
        sglang_cell = (sglang, dim or ("success" if sglang == "healthy" else
                                       "warning" if sglang == "starting" else "error"))
    elif "sglang" in status.expected:
        sglang_cell = (fmt.NA, "muted")
    return {
        "name": (status.name, "bold"),
        "role": (status.role, "muted"),
        "state": (row.state_text, STATES[row.state][1]),
        "gpus": gpu_cell,
        "mem": (mem, dim),
        "power": (fmt.si(row.power) if row.power is not None else (fmt.NA if gpus else "-"), dim),
        "tokens": (fmt.si(row.tokens) if row.tokens is not None else "-", dim),
        "step": (step_text, dim),
        "eta": (eta_text, dim),
        "sglang": sglang_cell,
    }


def _stalled(train: TrainingProgress, config: HostConfig | None, now: float) -> bool:
    if train.stalled:
        return True
    last = train.last_line_at
    stall_min = config.training.stall_warning_min if config is not None and config.training else 10.0
    return last is not None and now - last >= stall_min * 60.0


# ---------------------------------------------------------------------------- order, filter

def _num_key(value: float | None) -> tuple[int, float]:
    return (1, 0.0) if value is None else (0, -value)  # largest first, unknown last


#: (name shown in the header, key) in the order ``s`` cycles through them.
SORTS: tuple[tuple[str, Callable[[FleetRow], Any]], ...] = (
    ("worst first", lambda r: (r.severity, r.name)),
    ("name", lambda r: r.name),
    ("GPU util", lambda r: (_num_key(r.util), r.name)),
    ("power", lambda r: (_num_key(r.power), r.name)),
    ("tok/s", lambda r: (_num_key(r.tokens), r.name)),
    ("training progress", lambda r: (_num_key(r.fraction), r.name)),
)


def order(rows: Sequence[FleetRow], sort: int = 0, query: str = "") -> list[FleetRow]:
    """``rows`` filtered by ``query`` (every word must appear in a row) and sorted by ``SORTS[sort]``."""
    words = query.lower().split()
    kept = [r for r in rows if all(w in r.text() for w in words)] if words else list(rows)
    return sorted(kept, key=SORTS[sort % len(SORTS)][1])


def counts(rows: Sequence[FleetRow]) -> dict[str, int]:
    """How many rows are in each state (states with none left out)."""
    out: dict[str, int] = {}
    for r in rows:
        out[r.state] = out.get(r.state, 0) + 1
    return out


def summary_text(rows: Sequence[FleetRow]) -> str:
    """``200 hosts: 196 ok · 2 down · 1 stale · 1 stalled`` (markup; worst states first)."""
    n = counts(rows)
    parts = [f"[b]{len(rows)} host{'s' if len(rows) != 1 else ''}[/]:"]
    colour = {"error": "$error", "warning": "$warning", "success": "$success", "muted": "$text-muted"}
    labels = {"retry": "reconnecting", "sglang": "SGLang not healthy", "wait": "waiting", "idle": "GPUs idle"}
    for state, (_sev, role) in sorted(STATES.items(), key=lambda kv: kv[1][0]):
        if n.get(state):
            parts.append(f"[{colour[role]}]{n[state]} {labels.get(state, state)}[/]")
    return " · ".join([parts[0] + " " + parts[1], *parts[2:]]) if len(parts) > 1 else parts[0]
