"""The serving pane: SGLang on one serving host (state, deployment, load, throughput, acceptance length)."""

from __future__ import annotations

from textual.app import ComposeResult

from specconsole.config import HostConfig
from specconsole.monitor import HostStatus
from specconsole.ui.panes.pane_base import PerHostPane, View, part, set_classes
from specconsole.ui.panes.serving_facts import deployment_lines
from specconsole.ui.style import formatting as fmt
from specconsole.ui.style.formatting import escape
from specconsole.ui.widgets.plot_row import PlotRow

SGLANG_STATE_VAR = {"healthy": "$success", "starting": "$warning", "loading": "$warning",
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
        var = SGLANG_STATE_VAR.get(state, "$text-muted")
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
