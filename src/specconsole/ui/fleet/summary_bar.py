"""The summary bar: one line that fits 80 columns, every host's badge, throughput, step and ETA."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specconsole.base.samples import format_age
from specconsole.monitor import HostStatus
from specconsole.ui.fleet.fleet_rows import FleetRow, summary_text
from specconsole.ui.panes.host_pane import BADGE_VAR
from specconsole.ui.panes.pane_base import View
from specconsole.ui.panes.serving_pane import SGLANG_STATE_VAR
from specconsole.ui.style import formatting as fmt
from specconsole.ui.style.formatting import escape
from specconsole.ui.widgets.text_block import TextBlock


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
            parts.append(f"{escape(s.name)} [{BADGE_VAR[state]}]{text.split(' ')[0]}[/] {age}")
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
                parts.append(f"[{SGLANG_STATE_VAR.get(state, '$text-muted')}]{escape(state)}[/]{tok}{acc}")
        self.set(" │ ".join(parts))
