"""The training pane: the training job on one training host (progress, loss, checkpoints)."""

from __future__ import annotations

from textual.app import ComposeResult

from specconsole.base.samples import format_age, format_bytes
from specconsole.config import HostConfig
from specconsole.formats.slurm import slurm_lines
from specconsole.monitor import HostStatus
from specconsole.ui.panes.checkpoints_pane import CheckpointTable
from specconsole.ui.panes.pane_base import PerHostPane, View, part, set_classes
from specconsole.ui.style import formatting as fmt
from specconsole.ui.style.formatting import escape
from specconsole.ui.widgets.plot_row import PlotRow
from specconsole.ui.widgets.text_block import TextBlock


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
