"""Pure text formatting for the panes: numbers, GPU table cells, connection badges.

Nothing here touches a widget, so it is tested directly. Cells are Rich :class:`Text` styled
from a :class:`Palette` (the current theme's colours); a value that is not reported is ``n/a``,
never a made-up zero; values from a stale sample are dimmed.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.markup import escape as _markup_escape

from specconsole.base.samples import Sample, format_age
from specconsole.base.values import printable
from specconsole.hosts import Connection, ConnState
from specconsole.monitor import HostStatus

NA = "n/a"


def escape(text: str) -> str:
    """``text`` for Textual markup, shown as it is: markup escaped, and control and bidi
    characters from hosts (ESC, NUL, U+202E) as visible escapes (:func:`values.printable`; line
    breaks stay). THE way a host- or config-provided string reaches the screen."""
    return _markup_escape(printable(text, newlines=True))


@dataclass(frozen=True)
class Palette:
    """The theme colours cells are drawn with (hex strings from the app's theme variables)."""

    success: str = "green"
    warning: str = "yellow"
    error: str = "red"
    accent: str = "cyan"

    @classmethod
    def from_variables(cls, variables: Mapping[str, str]) -> Palette:
        def pick(name: str, default: str) -> str:
            value = variables.get(name, default)
            return value if value.startswith("#") else default

        return cls(pick("success", "green"), pick("warning", "yellow"), pick("error", "red"),
                   pick("accent", "cyan"))


def hms(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts))


def num(value: float | None, fmt: str = "{:.0f}", unit: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return NA
    return fmt.format(value) + unit


def si(value: float | None, unit: str = "") -> str:
    """``950`` -> ``950``, ``12345`` -> ``12.3k``, ``2.5e6`` -> ``2.50M``."""
    if value is None or not math.isfinite(value):
        return NA
    a = abs(value)
    if a >= 1e6:
        return f"{value / 1e6:.2f}M{unit}"
    if a >= 1e4:
        return f"{value / 1e3:.1f}k{unit}"
    if a >= 100:
        return f"{value:.0f}{unit}"
    return f"{value:.1f}{unit}"


def gib(mib: float | None) -> str:
    return NA if mib is None else f"{mib / 1024:.1f}"


def short_gpu_name(name: str | None) -> str:
    if not name:
        return "?"
    for prefix in ("NVIDIA ", "Tesla "):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name


def thousands(value: int | None) -> str:
    return NA if value is None else f"{value:,}"


def sample_age_text(sample: Sample[Any] | None, now: float, stale: bool | None = None) -> tuple[str, bool]:
    """``("0.4s ago", False)`` or ``("STALE 12s old", True)``; ``("no data yet", True)`` when None.
    ``stale``: the caller's verdict (with hysteresis, :mod:`specconsole.base.freshness`), else the sample's own."""
    if sample is None:
        return "no data yet", True
    age = format_age(sample.age(now))
    if sample.is_stale(now) if stale is None else stale:
        return f"STALE {age} old", True
    return f"{age} ago", False


def badge(conn: Connection, now: float) -> tuple[str, str]:
    """The connection badge text and its state class (``ok``, ``warn``, ``bad``, ``idle``)."""
    state = conn.state
    if state is ConnState.CONNECTED:
        return "● connected", "ok"
    if state is ConnState.RECONNECTING:
        return f"◌ reconnecting {conn.attempt}", "warn"
    if state is ConnState.DOWN:
        return f"✖ down since {hms(conn.since)}", "bad"
    if state is ConnState.CONNECTING:
        return "… connecting", "idle"
    if state is ConnState.ON_DEMAND:
        return "◇ via Prometheus (ssh on demand)", "ok"
    return "■ closed", "idle"


def newest(status: HostStatus) -> Sample[object] | None:
    """The sample a host pane dates itself by: its GPUs' (a stream that only publishes what it
    read), else the newest of its other sources."""
    if status.gpu is not None:
        return status.gpu
    samples = [s for s in (status.sglang, status.training) if s is not None]
    return max(samples, key=lambda s: s.at) if samples else None


def progress_text(step: int | None, total: int | None) -> str:
    """``12,345/198,000``, ``12,345``, or ``n/a (of 3,000)`` before the first step."""
    if step is None:
        return f"n/a (of {total:,})" if total else NA
    return f"{step:,}/{total:,}" if total else f"{step:,}"


# ---------------------------------------------------------------------------- GPU table

GPU_COLUMNS: tuple[tuple[str, str], ...] = (
    ("idx", "#"), ("name", "GPU"), ("util", "Util"), ("mem", "Mem GiB"), ("power", "Power W"),
    ("temp", "Temp"), ("proc", "Top process"),
)


def _cell(text: str, style: str = "", stale: bool = False, justify: str = "left") -> Text:
    if stale:
        style = "dim"
    return Text(printable(text), style=style, justify=justify, no_wrap=True,  # type: ignore[arg-type]
                overflow="ellipsis")


def _level(value: float | None, warn: float, bad: float, p: Palette) -> str:
    if value is None:
        return "dim"
    if value >= bad:
        return p.error
    if value >= warn:
        return p.warning
    return ""


def top_process(processes: Sequence[Any], index: int) -> Any | None:
    mine = [p for p in processes if getattr(p, "gpu_index", None) == index]
    if not mine:
        return None
    return max(mine, key=lambda p: p.used_memory_mib or 0.0)


def process_text(proc: Any | None, count: int) -> str:
    if proc is None:
        return "-"
    name = os.path.basename(proc.name) if proc.name else "?"
    more = f" +{count - 1}" if count > 1 else ""
    return f"{proc.pid} {name}{more}"


def gpu_cells(reading: Any, processes: Sequence[Any] | None, palette: Palette, stale: bool) -> tuple[Text, ...]:
    """One GPU row; ``processes`` None: not known yet (the process cell reads "…")."""
    r = reading
    util = r.utilization_pct
    mem_pct = r.memory_used_pct
    power = r.power_draw_w
    power_pct = None if power is None or not r.power_limit_w else 100.0 * power / r.power_limit_w
    mem = f"{gib(r.memory_used_mib)}/{gib(r.memory_total_mib)}" if r.memory_total_mib else gib(r.memory_used_mib)
    pw = f"{num(power)}/{num(r.power_limit_w)}" if r.power_limit_w else num(power)
    if processes is None:
        proc_cell = _cell("…", "", stale)  # pending, not stale: dim is for stale rows
    else:
        count = sum(1 for p in processes if getattr(p, "gpu_index", None) == r.index)
        proc_cell = _cell(process_text(top_process(processes, r.index), count), "", stale)
    return (
        _cell(str(r.index), "bold", stale, "right"),
        _cell(short_gpu_name(r.name), "", stale),
        _cell(num(util, unit="%"), "dim" if util is None else "bold", stale, "right"),
        _cell(mem, _level(mem_pct, 90, 98, palette) if mem_pct is not None else "dim", stale, "right"),
        _cell(pw, _level(power_pct, 90, 100, palette) if power is not None else "dim", stale, "right"),
        _cell(num(r.temperature_c, unit="°C"), _level(r.temperature_c, 83, 90, palette), stale, "right"),
        proc_cell,
    )


def missing_gpu_cells(index: int, previous_name: str | None, palette: Palette) -> tuple[Text, ...]:
    return (
        _cell(str(index), f"bold {palette.error}", False, "right"),
        _cell(short_gpu_name(previous_name), palette.error),
        _cell("MISSING", f"bold {palette.error}"),
        _cell(""), _cell(""), _cell(""),
        _cell("was present earlier", palette.error),
    )


def _styled(text: str, style: str) -> str:
    return f"[{style}]{text}[/]" if style else text


def gpu_summary(snap: Any, missing: Sequence[int], palette: Palette) -> str:
    """A host's GPUs in two lines (the host pane on a short screen, instead of a row per GPU):
    ``8× H200 · util 24% (0–99%) · 72°C`` (mean utilization, its spread, the hottest GPU) and
    ``mem 119/1123 GiB · 1.7/5.6 kW`` (totals), each coloured by the worst GPU; missing GPUs first."""
    gpus = snap.gpus
    names = {short_gpu_name(r.name) for r in gpus}
    count = len(gpus) + len(missing)
    head = f"{count}× {escape(names.pop())}" if len(names) == 1 else f"{count} GPUs"
    parts = [head]
    if missing:
        parts.append(f"[b {palette.error}]{len(missing)} MISSING[/]")
    utils = [r.utilization_pct for r in gpus if r.utilization_pct is not None]
    if utils:
        spread = f" ({min(utils):.0f}–{max(utils):.0f}%)" if len(utils) > 1 else ""
        parts.append(f"util [b]{sum(utils) / len(utils):.0f}%[/]{spread}")
    temps = [r.temperature_c for r in gpus if r.temperature_c is not None]
    if temps:
        parts.append(_styled(num(max(temps), unit="°C"), _level(max(temps), 83, 90, palette)))
    used = [r.memory_used_mib for r in gpus if r.memory_used_mib is not None]
    total = [r.memory_total_mib for r in gpus if r.memory_total_mib]
    mem_pcts = [p for r in gpus if (p := r.memory_used_pct) is not None]
    mem = f"{sum(used) / 1024:.0f}/{sum(total) / 1024:.0f}" if used and total else NA
    second = [_styled(f"mem {mem} GiB", _level(max(mem_pcts, default=None), 90, 98, palette))]
    power = [r.power_draw_w for r in gpus if r.power_draw_w is not None]
    limits = [r.power_limit_w for r in gpus if r.power_limit_w]
    if power:
        pcts = [100.0 * r.power_draw_w / r.power_limit_w for r in gpus
                if r.power_draw_w is not None and r.power_limit_w]
        watts = f"{sum(power) / 1000:.1f}/{sum(limits) / 1000:.1f} kW" if limits else f"{sum(power) / 1000:.1f} kW"
        second.append(_styled(watts, _level(max(pcts, default=None), 90, 100, palette)))
    return " · ".join(parts) + "\n" + " · ".join(second)
