"""The eval pane: choose stored runs, see them side by side, start a run and watch it live.

A self-contained widget: ``EvalPane(store=ResultStore())``; the app reacts to its messages.

* top: the stored runs, a row each (a :class:`SelectionList`, a few rows high, that scrolls; space
  toggles a run, ``b`` makes the highlighted run the baseline, marked ★, ``enter`` shows what the
  highlighted run was measured on: :class:`~specconsole.ui.screens.run_detail.RunDetail`); the keys in the border.
* under them, one run selected: its per-task table (:func:`specconsole.eval.compare.overview`): task,
  acceptance length, tokens/s, latency, the average row; best/worst task by the chosen metric.
* under them, two or more: the comparison (:func:`specconsole.eval.compare.compare`): a row per task,
  the average row, a ``run / baseline`` column in % per run, the best task of each run in the
  success colour and the worst in the error colour (in the ratio columns too: where the run is
  closest to and furthest from the baseline), and a "tok/s vs vanilla" row when a vanilla run is
  selected. The average row comes first and stays pinned while the tasks scroll.
* bottom, once a run started (or a stored run was skipped): the live progress of a run, one line
  per task from the runner's step events.

``e`` posts :class:`EvalPane.RunRequested`; the app handles it (``on_eval_pane_run_requested``)
by calling :meth:`EvalPane.start` with the run to make (an async callable receiving the step-event
emitter and the per-task callback; it must save the run and return it). The pane shows its
progress and posts :class:`EvalPane.RunFinished` or :class:`EvalPane.RunFailed`; the new run is then
shown beside the baseline of the runs selected before (:meth:`EvalPane.show_beside_baseline`). ``m``
cycles the metric.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, RichLog, SelectionList, Static
from textual.widgets.selection_list import Selection

from specconsole.base.errors import SpecConsoleError
from specconsole.eval.compare import (
    FAILED,
    METRIC_TITLES,
    Comparison,
    acceptance_series,
    cell_text,
    compare,
    fmt_metric,
    fmt_pct,
    fmt_speedup,
    fmt_value,
    overview,
)
from specconsole.eval.store import METRICS, EvalRun, ResultStore, TaskResult
from specconsole.sglang.acceptance import NO_DETAIL_IN_RUNS
from specconsole.steps import StepEvent
from specconsole.ui.screens.run_detail import RunDetail
from specconsole.ui.style.acceptance_plot import acceptance_plot
from specconsole.ui.style.formatting import escape

Emit = Callable[[StepEvent], None]
OnResult = Callable[[TaskResult, int, int], None]
StartRun = Callable[[Emit, OnResult], Awaitable[EvalRun]]

AVERAGE_ROW = "__average__"
#: Column headers of the one-run table.
METRIC_COLUMNS = {"acceptance_length": "accept len", "tokens_per_s": "tok/s", "latency_s": "latency s"}
VANILLA_ROW = "__vanilla__"
LOG_LINES = 200
#: How often the results folder is checked for runs saved or imported by another process.
WATCH_S = 0.5


class RunList(SelectionList[str]):
    """The stored runs: ``space`` toggles one (SelectionList's own key), ``enter`` asks for its
    deployment (OptionList's ``enter`` would toggle it too)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "details", "Details", tooltip="What the highlighted run was measured on"),
    ]

    class DetailsRequested(Message):
        def __init__(self, run_id: str) -> None:
            super().__init__()
            self.run_id = run_id

    def action_details(self) -> None:
        if self.highlighted is not None and self.option_count:
            self.post_message(self.DetailsRequested(str(self.get_option_at_index(self.highlighted).value)))


class EvalPane(Vertical):
    """Runs list + comparison table + live progress. See the module docstring."""

    DEFAULT_CSS = """
    EvalPane { height: auto; }
    EvalPane #eval-body { height: auto; }
    EvalPane #eval-run-list { height: auto; max-height: 4; border: none; padding: 0; background: transparent; }
    EvalPane #eval-run-list:focus { background-tint: $foreground 5%; }
    EvalPane #eval-main { height: auto; }
    EvalPane #eval-title { text-wrap: nowrap; text-overflow: ellipsis; }
    EvalPane #eval-table { height: auto; max-height: 24; }
    EvalPane .eval-hint { color: $text-muted; }
    EvalPane #eval-progress { height: 1; display: none; }
    EvalPane #eval-log { height: 6; display: none; }
    EvalPane.-log #eval-progress, EvalPane.-log #eval-log { display: block; }
    EvalPane.-empty #eval-table, EvalPane.-empty #eval-legend { display: none; }
    EvalPane.-empty #eval-title { text-wrap: wrap; }
    """
    #: The keys, in the border (the footer has them too, while the pane has the focus).
    HINT = "[b]space[/] select · [b]⏎[/] details · [b]b[/] baseline · [b]e[/] new run · [b]m[/] metric"

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space", "toggle_highlighted", "Select", tooltip="Select or unselect the highlighted run"),
        Binding("b", "baseline_highlighted", "Baseline", tooltip="Make the highlighted run the baseline"),
        Binding("m", "cycle_metric", "Metric", tooltip="Show acceptance length, tokens/s or latency"),
    ]

    class RunRequested(Message):
        """``e`` was pressed and no run is in progress: the app may start one (:meth:`EvalPane.start`)."""

        def __init__(self, pane: EvalPane) -> None:
            super().__init__()
            self.pane = pane

    class RunFinished(Message):
        def __init__(self, run: EvalRun) -> None:
            super().__init__()
            self.run = run

    class RunFailed(Message):
        def __init__(self, error: str) -> None:
            super().__init__()
            self.error = error

    def __init__(self, store: ResultStore | None = None, *, metric: str = "acceptance_length",
                 id: str | None = None, classes: str = "pane eval-pane") -> None:
        super().__init__(id=id, classes=classes)
        self.store = store or ResultStore()
        self.metric = metric
        self.runs: list[EvalRun] = []
        self.baseline_id: str | None = None
        self.comparison: Comparison | None = None
        self.running = False
        self.progress_text = ""
        self.log_lines: list[str] = []
        self._selected_order: list[str] = []
        self._seen: tuple[int, int] | None = None  # the results folder's (mtime_ns, inode) last read

    # -- layout ---------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        self.border_title = "Eval"
        self.border_subtitle = self.HINT
        with Vertical(id="eval-body"):
            yield RunList(id="eval-run-list")
            with Vertical(id="eval-main"):
                yield Static("", id="eval-title")
                # the average row comes first and stays pinned (fixed_rows, set once it exists: an
                # empty table with a fixed row fails in Textual) while the tasks scroll under it
                table: DataTable[Any] = DataTable(id="eval-table", cursor_type="row", zebra_stripes=True,
                                                  fixed_columns=1)
                yield table
                yield Static("", id="eval-legend", classes="eval-hint")
                # the histogram of accepted drafts and acceptance by draft position (hidden when empty)
                yield Static("", id="eval-acceptance", classes="-empty", markup=False)
        yield Static("", id="eval-progress")
        yield RichLog(id="eval-log", max_lines=LOG_LINES, wrap=False, markup=False, highlight=False)

    def on_mount(self) -> None:
        self.reload()
        self.set_interval(WATCH_S, self.watch_store, name="eval-store-watch")

    def _stamp(self) -> tuple[int, int] | None:
        try:
            st = self.store.root.stat()
        except OSError:
            return None
        return st.st_mtime_ns, st.st_ino

    def watch_store(self) -> bool:
        """Reload when the results folder changed (a run saved or imported elsewhere); one stat per tick."""
        stamp = self._stamp()
        if stamp == self._seen:
            return False
        self.reload()
        return True

    # -- runs -----------------------------------------------------------------------------
    def reload(self, select: list[str] | None = None) -> None:
        """Re-read the results folder; keep the selection (plus ``select``), default: the newest two."""
        self._seen = self._stamp()
        self.runs = self.store.runs()
        ids = [r.id for r in self.runs]
        keep = [i for i in self._selected_order if i in ids]
        for i in select or []:
            if i in ids and i not in keep:
                keep.append(i)
        if not keep and not select:
            keep = ids[-2:]
        self._selected_order = keep
        if self.baseline_id not in ids:
            self.baseline_id = None
        self._fill_list()
        self.refresh_table()
        if self.store.problems:
            for _path, problem in self.store.problems:
                self._log(f"skipped {problem}")

    def _prompt(self, r: EvalRun) -> Text:
        star = "★ " if r.id == self.baseline_id else ""
        avg = r.average("acceptance_length")
        chosen = r.id in self._selected_order
        text = Text("[x] " if chosen else "[ ] ", style="bold" if chosen else "dim")
        text.append(f"{star}{r.label}", style="bold" if star or chosen else "")
        text.append(f"  {r.deployment.short()} · {'n/a' if avg is None else f'{avg:.2f}'} · {r.created_at[:16]}",
                    style="dim")
        return text

    def _fill_list(self) -> None:
        lst = self.query_one("#eval-run-list", SelectionList)
        highlighted = lst.highlighted
        with lst.prevent(SelectionList.SelectedChanged):
            lst.clear_options()
            lst.add_options([Selection(self._prompt(r), r.id, r.id in self._selected_order) for r in self.runs])
        if highlighted is not None and self.runs:
            lst.highlighted = min(highlighted, len(self.runs) - 1)

    def on_selection_list_selected_changed(self, event: SelectionList.SelectedChanged[str]) -> None:
        event.stop()
        now = set(event.selection_list.selected)
        order = [i for i in self._selected_order if i in now]
        order.extend(i for i in event.selection_list.selected if i not in order)
        self._selected_order = order
        self._fill_list()
        self.refresh_table()

    def action_toggle_highlighted(self) -> None:
        """space: select or unselect the highlighted run (wherever the focus is inside the pane)."""
        lst = self.query_one("#eval-run-list", SelectionList)
        if lst.highlighted is None:
            if not self.runs:
                return
            lst.highlighted = 0
        lst.toggle(lst.get_option_at_index(lst.highlighted).value)

    def on_run_list_details_requested(self, event: RunList.DetailsRequested) -> None:
        """enter on a run: its deployment, read-only (escape closes it)."""
        event.stop()
        self.show_details(event.run_id)

    def show_details(self, run_id: str) -> bool:
        run = next((r for r in self.runs if r.id == run_id), None)
        if run is None:
            return False
        self.app.push_screen(RunDetail(run))
        return True

    @property
    def selected(self) -> list[EvalRun]:
        by_id = {r.id: r for r in self.runs}
        chosen = set(self._selected_order)
        return [by_id[i] for i in by_id if i in chosen]  # list (chronological) order

    def select_runs(self, ids: list[str], baseline: str | None = None) -> None:
        """Select exactly ``ids`` (and make ``baseline`` the baseline); refreshes the table."""
        self._selected_order = [i for i in ids if any(r.id == i for r in self.runs)]
        if baseline is not None:
            self.baseline_id = baseline
            if baseline not in self._selected_order:
                self._selected_order.append(baseline)
        self._fill_list()
        self.refresh_table()

    def set_baseline(self, run_id: str | None) -> None:
        self.baseline_id = run_id
        if run_id is not None and run_id not in self._selected_order:
            self._selected_order.append(run_id)
        self._fill_list()
        self.refresh_table()

    def action_baseline_highlighted(self) -> None:
        lst = self.query_one("#eval-run-list", SelectionList)
        if lst.highlighted is None or not self.runs:
            return
        run_id = str(lst.get_option_at_index(lst.highlighted).value)
        self.set_baseline(None if run_id == self.baseline_id else run_id)

    def action_cycle_metric(self) -> None:
        self.metric = METRICS[(METRICS.index(self.metric) + 1) % len(METRICS)]
        self.refresh_table()

    def _effective_baseline(self, runs: list[EvalRun]) -> EvalRun | None:
        if self.baseline_id is not None:
            for r in runs:
                if r.id == self.baseline_id:
                    return r
        published = [r for r in runs if r.kind == "published"]
        if published:
            return published[0]
        return runs[0] if runs else None

    # -- the table ------------------------------------------------------------------------
    def refresh_table(self) -> None:
        table = self.query_one("#eval-table", DataTable)
        title = self.query_one("#eval-title", Static)
        legend = self.query_one("#eval-legend", Static)
        runs = self.selected
        self._show_acceptance(runs)
        table.fixed_rows = 0
        table.clear(columns=True)
        self.set_class(not runs, "-empty")  # the message alone, wrapped: no empty table or legend rows
        if not runs:
            self.comparison = None
            where = escape(str(self.store.root))
            if not self.runs:
                title.update(f"No eval runs in {where} yet: press [b]e[/] to measure the current deployment, "
                             "or `specconsole eval import FILE`.")
            else:
                title.update("Select a run ([b]space[/]) to see its tasks; two or more to compare them.")
            legend.update("")
            return
        if len(runs) == 1:
            self._fill_single(table, title, legend, runs[0])
            return
        base = self._effective_baseline(runs)
        others = [r for r in runs if base is None or r.id != base.id]
        ordered = [*others, base] if base is not None else others
        cmp = compare(ordered, base, self.metric)
        self.comparison = cmp
        table.add_column("task", key="task")
        for i, r in enumerate(cmp.runs):
            table.add_column(_column_title(cmp, i), key=r.id)  # short names; the legend has the labels
        for i in cmp.ratio_columns:
            table.add_column(cmp.ratio_header(i), key=f"ratio:{cmp.runs[i].id}")
        avg: list[Any] = [Text("average", style="bold")]
        avg.extend(Text(fmt_value(cmp, cmp.average(i)), style="bold", justify="right") for i in range(len(cmp.runs)))
        avg.extend(Text(fmt_pct(cmp.average_ratio(i)), style="bold", justify="right") for i in cmp.ratio_columns)
        table.add_row(*avg, key=AVERAGE_ROW)
        table.fixed_rows = 1
        best = [cmp.best(i) for i in range(len(cmp.runs))]
        worst = [cmp.worst(i) for i in range(len(cmp.runs))]
        best_ratio = {i: cmp.best_ratio(i) for i in cmp.ratio_columns}
        worst_ratio = {i: cmp.worst_ratio(i) for i in cmp.ratio_columns}
        for task in cmp.tasks:
            cells: list[Any] = [task]
            for i in range(len(cmp.runs)):
                cells.append(self._marked(cell_text(cmp, task, i), task, best[i], worst[i]))
            cells.extend(self._marked(fmt_pct(cmp.ratio(task, i)), task, best_ratio[i], worst_ratio[i])
                         for i in cmp.ratio_columns)
            table.add_row(*cells, key=task)
        if cmp.vanilla is not None:
            row: list[Any] = [Text("tok/s vs vanilla", style="italic")]
            row.extend(Text("1.00×" if i == cmp.vanilla else fmt_speedup(cmp.average_speedup(i)), justify="right")
                       for i in range(len(cmp.runs)))
            row.extend(Text("") for _ in cmp.ratio_columns)
            table.add_row(*row, key=VANILLA_ROW)
        base_name = cmp.names[cmp.baseline] if cmp.baseline is not None else "none"
        names = "  ".join(f"[b]{escape(short)}[/] = {escape(name)}" for short, name in zip(cmp.shorts, cmp.names,
                                                                                        strict=True) if short != name)
        title.update(f"[b]{escape(METRIC_TITLES[self.metric])}[/]  ·  baseline ★ {escape(base_name)}"
                     + (f"\n{names}" if names else ""))
        legend.update(escape("average = mean of each run's ok tasks; ▲ best, ▼ worst task per run; "
                             "ratio = run / baseline") + (escape("; tok/s vs vanilla = speedup in tokens/s")
                                                          if cmp.vanilla is not None else ""))

    def _show_acceptance(self, runs: list[EvalRun]) -> None:
        """The selected runs' acceptance plot (a run beside the baseline), or, once, that their
        server gave no per-request detail; hidden when there is neither."""
        plot = self.query_one("#eval-acceptance", Static)
        series, without = acceptance_series(runs, self._effective_baseline(runs) if len(runs) > 1 else None)
        lines = acceptance_plot(series, width=min(80, max(40, plot.size.width or self.size.width - 4))) if series else \
            ([NO_DETAIL_IN_RUNS] if without else [])
        plot.update("\n".join(lines))
        plot.set_class(not lines, "-empty")

    def _marked(self, text: str, task: str, best: str | None, worst: str | None) -> Text:
        """A cell: ▲ and the success colour on the best task, ▼ and the error colour on the worst."""
        variables = self.app.get_css_variables() if self.is_mounted else {}
        if best == task:
            return Text(f"{text} ▲", style=f"bold {variables.get('success', 'green')}", justify="right")
        if worst == task:
            return Text(f"{text} ▼", style=f"bold {variables.get('error', 'red')}", justify="right")
        if text == FAILED:
            return Text(text, style=variables.get("error", "red"), justify="right")
        return Text(text, justify="right")

    def _fill_single(self, table: DataTable[Any], title: Static, legend: Static, run: EvalRun) -> None:
        """One run selected: its per-task table at once (every metric; ▲▼ by the chosen metric)."""
        cmp = overview(run, self.metric)
        self.comparison = cmp
        table.add_column("task", key="task")
        for m in METRICS:
            table.add_column(("▸ " if m == self.metric else "") + METRIC_COLUMNS[m], key=m)
        table.add_row(Text("average", style="bold"), *(Text(fmt_metric(m, run.average(m)), style="bold",
                                                            justify="right") for m in METRICS), key=AVERAGE_ROW)
        table.fixed_rows = 1
        best, worst = cmp.best(0), cmp.worst(0)
        for task in cmp.tasks:
            result = run.task(task)
            cells: list[Any] = [task]
            for m in METRICS:
                text = FAILED if result is not None and not result.ok else \
                    fmt_metric(m, result.value(m) if result is not None else None)
                cells.append(self._marked(text, task, best, worst) if m == self.metric else
                             Text(text, justify="right"))
            table.add_row(*cells, key=task)
        star = "★ " if run.id == self.baseline_id else ""
        title.update(f"[b]{escape(star + run.label)}[/]  ·  {escape(run.deployment.short())}  ·  "
                     f"{escape(run.created_at[:16])}")
        legend.update(escape(f"▲ best, ▼ worst task by {METRIC_COLUMNS[self.metric]} (m: metric); "
                             "select another run (space) or mark a baseline (b) to compare"))

    # -- live progress --------------------------------------------------------------------
    def _log(self, line: str) -> None:
        self.log_lines.append(line)
        del self.log_lines[:-LOG_LINES]
        if self.is_mounted:
            self.add_class("-log")  # the progress line and the log take room once they have something
            self.query_one("#eval-log", RichLog).write(line)

    def feed(self, event: StepEvent) -> None:
        """A step event of a running eval (the runner's emitter)."""
        self._log(event.line())
        if event.kind in ("done", "failed"):
            self._set_progress(event.message)

    def on_task_result(self, result: TaskResult, done: int, total: int) -> None:
        if result.ok and result.acceptance_length is not None:
            last = f"{result.task} {result.acceptance_length:.2f}"
        else:
            last = f"{result.task} {'failed' if not result.ok else 'n/a'}"
        bar_w = 20
        filled = round(bar_w * done / total) if total else bar_w
        self._set_progress(f"eval {'█' * filled}{'░' * (bar_w - filled)} {done}/{total} tasks · last: {last}")

    def _set_progress(self, text: str) -> None:
        self.progress_text = text
        if self.is_mounted:
            self.add_class("-log")
            self.query_one("#eval-progress", Static).update(escape(text))

    def action_start_run(self) -> None:
        if self.running:
            self.notify("an eval run is already in progress", severity="warning")
            return
        self.post_message(self.RunRequested(self))

    def start(self, start_run: StartRun) -> bool:
        """Make the run ``start_run`` (the app's answer to :class:`RunRequested`), its progress shown
        here; False when a run is already in progress."""
        if self.running:
            return False
        self.running = True
        self._set_progress("eval: starting…")
        self.run_worker(self._run(start_run), group="eval-run", exclusive=True, exit_on_error=False)
        return True

    async def _run(self, start_run: StartRun) -> None:
        try:
            run = await start_run(self.feed, self.on_task_result)
        except SpecConsoleError as err:
            self._log(f"eval failed: {err}")
            self._set_progress(f"eval failed: {err}")
            self.post_message(self.RunFailed(str(err)))
            return
        except Exception as err:  # a bug or an unexpected failure: shown, never a crashed console
            message = f"{type(err).__name__}: {err}"
            self._log(f"eval failed: {message}")
            self._set_progress(f"eval failed: {message}")
            self.post_message(self.RunFailed(message))
            return
        finally:
            self.running = False
        self.show_beside_baseline(run.id)
        self.post_message(self.RunFinished(run))

    def show_beside_baseline(self, run_id: str) -> None:
        """A run just made, beside the baseline of what was selected (the comparison the operator
        measured it for, which fits an 80-column table); the other runs stay listed, ``space`` adds them."""
        self.reload(select=[run_id])
        base = self._effective_baseline([r for r in self.selected if r.id != run_id])
        keep = [run_id] if base is None else [base.id, run_id]
        self.select_runs(keep)


def _column_title(cmp: Comparison, i: int) -> str:
    """The run's short name (``ours``), so the ratio columns fit beside the task column."""
    star = "★ " if i == cmp.baseline else ""
    return f"{star}{cmp.shorts[i]}"
