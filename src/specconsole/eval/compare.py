"""Side-by-side tables of two or more eval runs: per task, the average, the ratio to a baseline.

:func:`compare` builds a :class:`Comparison` (pure numbers); :func:`to_markdown`,
:func:`to_text` and :func:`to_json` render it; the eval pane fills its DataTable from it.

Definitions (also in ``docs/eval-results-schema.md``):

* a cell is the run's value of the metric for the task (acceptance length by default),
  ``failed`` when the task failed in that run, ``n/a`` when the run has no such task;
* **average**: the arithmetic mean of the run's own ok tasks (so a published baseline measured
  on other benchmarks still has an average to compare with);
* **ratio**: run / baseline in %, per task where both have a value, and for the averages
  (ratio of the two averages, computed from unrounded values);
* **best / worst**: the run's task with the highest / lowest value (lowest / highest for
  latency); ties go to the task listed first; marked when the run has two or more different values;
* **vanilla**: when a run without speculative decoding is included, the speedup of every
  other run over it in tokens/s: per task ``tok/s(run) / tok/s(vanilla)``, and the ratio of
  the two runs' average tokens/s.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from specconsole.base.errors import SpecConsoleError
from specconsole.eval.store import METRICS, EvalRun
from specconsole.sglang.acceptance import AcceptanceDetail, AcceptanceTally

COMPARE_SCHEMA = "specconsole.eval.compare/1"
NA = "n/a"
FAILED = "failed"
Status = Literal["ok", "failed", "missing"]

METRIC_TITLES = {
    "acceptance_length": "acceptance length (tokens per verify step, bonus token included)",
    "tokens_per_s": "tokens/s (completion tokens / e2e latency)",
    "latency_s": "latency, s (SGLang e2e_latency)",
}
_FORMATS = {"acceptance_length": "{:.2f}", "tokens_per_s": "{:.1f}", "latency_s": "{:.2f}"}


class CompareError(SpecConsoleError):
    exit_code = 2


@dataclass(frozen=True)
class Comparison:
    metric: str
    runs: tuple[EvalRun, ...]
    baseline: int | None
    tasks: tuple[str, ...]
    names: tuple[str, ...]  # column headers (labels)
    shorts: tuple[str, ...]  # names in ratio headers
    vanilla: int | None = None
    higher_is_better: bool = True
    _cells: dict[tuple[str, int], tuple[Status, float | None]] = field(default_factory=dict, repr=False)

    # -- values -------------------------------------------------------------------------
    def status(self, task: str, i: int) -> Status:
        return self._cells.get((task, i), ("missing", None))[0]

    def value(self, task: str, i: int) -> float | None:
        return self._cells.get((task, i), ("missing", None))[1]

    def average(self, i: int) -> float | None:
        return self.runs[i].average(self.metric)

    @property
    def ratio_columns(self) -> tuple[int, ...]:
        """Indices of the runs that get a ``run / baseline`` column (all but the baseline)."""
        if self.baseline is None:
            return ()
        return tuple(i for i in range(len(self.runs)) if i != self.baseline)

    def ratio(self, task: str, i: int) -> float | None:
        """``value(run i) / value(baseline)`` in % for ``task``."""
        if self.baseline is None:
            return None
        return _pct(self.value(task, i), self.value(task, self.baseline))

    def average_ratio(self, i: int) -> float | None:
        if self.baseline is None:
            return None
        return _pct(self.average(i), self.average(self.baseline))

    def ratio_header(self, i: int) -> str:
        assert self.baseline is not None
        return f"{self.shorts[i]} / {self.shorts[self.baseline]}"

    def best(self, i: int) -> str | None:
        return self._extreme(i, best=True)

    def worst(self, i: int) -> str | None:
        return self._extreme(i, best=False)

    def best_ratio(self, i: int) -> str | None:
        """The task where run ``i`` does best relative to the baseline (highest ratio; lowest for latency)."""
        return self._extreme(i, best=True, of=self.ratio)

    def worst_ratio(self, i: int) -> str | None:
        return self._extreme(i, best=False, of=self.ratio)

    def _extreme(self, i: int, *, best: bool, of: Callable[[str, int], float | None] | None = None) -> str | None:
        get = of or self.value
        valued = [(t, v) for t in self.tasks if (v := get(t, i)) is not None]
        if len(valued) < 2 or len({v for _, v in valued}) == 1:
            return None  # nothing to tell apart (e.g. vanilla: 1.0 everywhere)
        want_max = best == self.higher_is_better
        pick = valued[0]
        for t, v in valued[1:]:
            if (v > pick[1]) if want_max else (v < pick[1]):
                pick = (t, v)
        return pick[0]

    # -- vanilla ------------------------------------------------------------------------
    @property
    def speedup_columns(self) -> tuple[int, ...]:
        if self.vanilla is None:
            return ()
        return tuple(i for i in range(len(self.runs)) if i != self.vanilla)

    def tokens_per_s(self, task: str, i: int) -> float | None:
        r = self.runs[i].task(task)
        return r.tokens_per_s if r is not None and r.ok else None

    def speedup(self, task: str, i: int) -> float | None:
        """tok/s of run ``i`` over the vanilla run's for ``task`` (a factor, e.g. 2.9)."""
        if self.vanilla is None:
            return None
        return _div(self.tokens_per_s(task, i), self.tokens_per_s(task, self.vanilla))

    def average_speedup(self, i: int) -> float | None:
        if self.vanilla is None:
            return None
        return _div(self.runs[i].average("tokens_per_s"), self.runs[self.vanilla].average("tokens_per_s"))


def _div(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def _pct(a: float | None, b: float | None) -> float | None:
    q = _div(a, b)
    return None if q is None else q * 100.0


def short_names(runs: tuple[EvalRun, ...] | list[EvalRun]) -> tuple[str, ...]:
    """Ratio-header names: the first word of each label (``ours step 4000, DDTree-8`` → ``ours``),
    or the whole label where first words collide or are empty."""
    firsts = []
    for r in runs:
        words = r.label.split()
        firsts.append(re.sub(r"[,;:]+$", "", words[0]) if words else "")
    out = []
    for r, f in zip(runs, firsts, strict=True):
        out.append(f if f and firsts.count(f) == 1 else r.label)
    if len(set(out)) < len(out):  # identical labels: fall back to ids
        out = [r.id for r in runs]
    return tuple(out)


def compare(runs: list[EvalRun], baseline: EvalRun | None = None, metric: str = "acceptance_length",
            *, baseline_index: int | None = None) -> Comparison:
    """Compare ``runs`` (2 or more, counting ``baseline``), the baseline's column where it is listed
    (appended when it is not among ``runs``). With neither ``baseline`` nor ``baseline_index`` there
    is no ratio column."""
    if metric not in METRICS:
        raise CompareError(f"unknown metric {metric!r} (fix: use one of {', '.join(METRICS)})")
    cols = list(runs)
    base: int | None = baseline_index
    if baseline is not None:
        found = [i for i, r in enumerate(cols) if r.id == baseline.id]
        if found:
            base = found[0]
        else:
            cols.append(baseline)
            base = len(cols) - 1
    if len(cols) < 2:
        raise CompareError("a comparison needs two or more runs (fix: name more runs, or add --baseline RUN)")
    if base is not None and not 0 <= base < len(cols):
        raise CompareError(f"baseline index {base} out of range")
    ids = [r.id for r in cols]
    if len(set(ids)) < len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise CompareError(f"run {dup!r} is listed twice (fix: name each run once)")
    return _build(cols, base, metric)


def overview(run: EvalRun, metric: str = "acceptance_length") -> Comparison:
    """One run on its own (no baseline, no ratio): its tasks, average and best/worst task for
    ``metric``; the eval pane's table when a single run is selected."""
    if metric not in METRICS:
        raise CompareError(f"unknown metric {metric!r} (fix: use one of {', '.join(METRICS)})")
    return _build([run], None, metric)


def _build(cols: list[EvalRun], base: int | None, metric: str) -> Comparison:
    tasks: list[str] = []
    cells: dict[tuple[str, int], tuple[Status, float | None]] = {}
    for i, r in enumerate(cols):
        for t in r.tasks:
            if t.task not in tasks:
                tasks.append(t.task)
            cells[(t.task, i)] = ("ok", t.value(metric)) if t.ok else ("failed", None)
    vanilla = next((i for i, r in enumerate(cols) if r.deployment.vanilla), None)
    return Comparison(metric=metric, runs=tuple(cols), baseline=base, tasks=tuple(tasks),
                      names=tuple(r.label for r in cols), shorts=short_names(cols), vanilla=vanilla,
                      higher_is_better=metric != "latency_s", _cells=cells)


# ------------------------------------------------------------------------------ rendering


def fmt_value(cmp: Comparison, v: float | None) -> str:
    return fmt_metric(cmp.metric, v)


def fmt_metric(metric: str, v: float | None) -> str:
    """``v`` as ``metric``'s values are shown (``7.28``, ``1690.0``), ``n/a`` for none."""
    return NA if v is None else _FORMATS[metric].format(v)


def fmt_pct(v: float | None) -> str:
    return NA if v is None else f"{v:.1f} %"


def fmt_speedup(v: float | None) -> str:
    return NA if v is None else f"{v:.2f}×"


def cell_text(cmp: Comparison, task: str, i: int) -> str:
    status = cmp.status(task, i)
    if status == "failed":
        return FAILED
    return fmt_value(cmp, cmp.value(task, i))


@dataclass(frozen=True)
class Grid:
    """The table as strings plus the marks, shared by the text and markdown renderers."""

    header: list[str]
    rows: list[list[str]]
    marks: list[list[str]]  # "", "best", "worst" per cell
    average_row: int  # index in rows


def grid(cmp: Comparison) -> Grid:
    header = ["task", *cmp.names, *(cmp.ratio_header(i) for i in cmp.ratio_columns)]
    rows: list[list[str]] = []
    marks: list[list[str]] = []
    best = [cmp.best(i) for i in range(len(cmp.runs))]
    worst = [cmp.worst(i) for i in range(len(cmp.runs))]
    for task in cmp.tasks:
        row = [task]
        mark = [""]
        for i in range(len(cmp.runs)):
            row.append(cell_text(cmp, task, i))
            mark.append("best" if best[i] == task else "worst" if worst[i] == task else "")
        for i in cmp.ratio_columns:
            row.append(fmt_pct(cmp.ratio(task, i)))
            mark.append("")
        rows.append(row)
        marks.append(mark)
    avg = ["average", *(fmt_value(cmp, cmp.average(i)) for i in range(len(cmp.runs))),
           *(fmt_pct(cmp.average_ratio(i)) for i in cmp.ratio_columns)]
    rows.append(avg)
    marks.append([""] * len(avg))
    average_row = len(rows) - 1
    if cmp.vanilla is not None:
        sp = ["tok/s vs vanilla", *(
            "1.00×" if i == cmp.vanilla else fmt_speedup(cmp.average_speedup(i)) for i in range(len(cmp.runs))),
            *("" for _ in cmp.ratio_columns)]
        rows.append(sp)
        marks.append([""] * len(sp))
    return Grid(header, rows, marks, average_row)


def speedup_grid(cmp: Comparison) -> Grid | None:
    """Per task tokens/s of every run and each run's speedup over the vanilla run."""
    if cmp.vanilla is None:
        return None
    v = cmp.vanilla
    header = ["task", *(f"{n} tok/s" for n in cmp.names),
              *(f"{cmp.shorts[i]} / {cmp.shorts[v]} (tok/s)" for i in cmp.speedup_columns)]
    rows: list[list[str]] = []
    for task in cmp.tasks:
        row = [task]
        for i in range(len(cmp.runs)):
            st = cmp.runs[i].task(task)
            row.append(NA if st is None else FAILED if not st.ok else
                       NA if st.tokens_per_s is None else f"{st.tokens_per_s:.1f}")
        row.extend(fmt_speedup(cmp.speedup(task, i)) for i in cmp.speedup_columns)
        rows.append(row)
    avg = ["average", *(NA if (a := cmp.runs[i].average("tokens_per_s")) is None else f"{a:.1f}"
                        for i in range(len(cmp.runs))),
           *(fmt_speedup(cmp.average_speedup(i)) for i in cmp.speedup_columns)]
    rows.append(avg)
    return Grid(header, rows, [[""] * len(r) for r in rows], len(rows) - 1)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(cmp: Comparison, *, legend: bool = True) -> str:
    """``| task | A | B | A / B |`` with the average row; best task in **bold**, worst in _italics_."""
    g = grid(cmp)
    lines = ["| " + " | ".join(_md_cell(h) for h in g.header) + " |",
             "|" + "---|" * len(g.header)]
    for row, mark in zip(g.rows, g.marks, strict=True):
        cells = []
        for text, m in zip(row, mark, strict=True):
            text = _md_cell(text)
            cells.append(f"**{text}**" if m == "best" else f"_{text}_" if m == "worst" else text)
        lines.append("| " + " | ".join(cells) + " |")
    sg = speedup_grid(cmp)
    if sg is not None:
        lines.append("")
        lines.append("| " + " | ".join(_md_cell(h) for h in sg.header) + " |")
        lines.append("|" + "---|" * len(sg.header))
        lines.extend("| " + " | ".join(_md_cell(c) for c in row) + " |" for row in sg.rows)
    if legend:
        lines.append("")
        lines.append(legend_text(cmp, bold="**bold**", italic="_italics_"))
    return "\n".join(lines) + "\n"


def legend_text(cmp: Comparison, *, bold: str = "▲", italic: str = "▼") -> str:
    better = "highest" if cmp.higher_is_better else "lowest"
    parts = [f"{METRIC_TITLES[cmp.metric]}; average = mean of each run's ok tasks; "
             f"best ({better}) task per run {bold}, worst {italic}"]
    if cmp.baseline is not None:
        parts.append(f"ratio = run / baseline ({cmp.names[cmp.baseline]})")
    if cmp.vanilla is not None:
        parts.append(f"speedup = tokens/s over vanilla ({cmp.names[cmp.vanilla]})")
    return "; ".join(parts) + "."


def _text_table(g: Grid, marked: bool) -> list[str]:
    rows = []
    for row, mark in zip(g.rows, g.marks, strict=True):
        rows.append([f"{t} ▲" if marked and m == "best" else f"{t} ▼" if marked and m == "worst" else t
                     for t, m in zip(row, mark, strict=True)])
    widths = [max(len(r[c]) for r in [g.header, *rows]) for c in range(len(g.header))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(widths[0]) if k == 0 else c.rjust(widths[k]) for k, c in enumerate(cells)).rstrip()

    out = [line(g.header), "  ".join("-" * w for w in widths)]
    for k, r in enumerate(rows):
        if k == g.average_row:
            out.append("  ".join("-" * w for w in widths))
        out.append(line(r))
    return out


def to_text(cmp: Comparison) -> str:
    lines = _text_table(grid(cmp), marked=True)
    sg = speedup_grid(cmp)
    if sg is not None:
        lines.append("")
        lines.extend(_text_table(sg, marked=False))
    lines.append("")
    lines.append(legend_text(cmp))
    for i, r in enumerate(cmp.runs):
        lines.append(f"  [{i + 1}] {r.label}: {r.id} ({r.kind}, {r.deployment.short()}, {r.created_at})")
    return "\n".join(lines) + "\n"


def to_json_obj(cmp: Comparison) -> dict[str, Any]:
    ids = [r.id for r in cmp.runs]
    runs = []
    for i, r in enumerate(cmp.runs):
        runs.append({
            "id": r.id, "label": r.label, "short": cmp.shorts[i], "kind": r.kind, "created_at": r.created_at,
            "deployment": r.deployment.to_json(), "source": dict(r.source),
            "tasks_ok": len(r.ok_tasks), "tasks_failed": len(r.failed_tasks),
            "average": cmp.average(i), "ratio_pct": cmp.average_ratio(i) if i in cmp.ratio_columns else None,
            "best": cmp.best(i), "worst": cmp.worst(i),
            "average_tokens_per_s": r.average("tokens_per_s"),
            "speedup_vs_vanilla": cmp.average_speedup(i) if i in cmp.speedup_columns else None,
        })
    tasks = []
    for t in cmp.tasks:
        entry: dict[str, Any] = {
            "task": t,
            "values": {ids[i]: cmp.value(t, i) for i in range(len(ids))},
            "status": {ids[i]: cmp.status(t, i) for i in range(len(ids))},
        }
        if cmp.baseline is not None:
            entry["ratio_pct"] = {ids[i]: cmp.ratio(t, i) for i in cmp.ratio_columns}
        if cmp.vanilla is not None:
            entry["tokens_per_s"] = {ids[i]: cmp.tokens_per_s(t, i) for i in range(len(ids))}
            entry["speedup_vs_vanilla"] = {ids[i]: cmp.speedup(t, i) for i in cmp.speedup_columns}
        tasks.append(entry)
    return {
        "schema": COMPARE_SCHEMA,
        "metric": cmp.metric,
        "baseline": ids[cmp.baseline] if cmp.baseline is not None else None,
        "vanilla": ids[cmp.vanilla] if cmp.vanilla is not None else None,
        "runs": runs,
        "tasks": tasks,
        "average": {ids[i]: cmp.average(i) for i in range(len(ids))},
        "average_ratio_pct": {ids[i]: cmp.average_ratio(i) for i in cmp.ratio_columns},
    }


def to_json(cmp: Comparison) -> str:
    return json.dumps(to_json_obj(cmp), indent=2, ensure_ascii=False) + "\n"


# ------------------------------------------------------------------------- acceptance detail


def run_acceptance(run: EvalRun) -> AcceptanceTally:
    """The run's per-request acceptance histograms (its ok tasks' stored ``meta_info``), summed;
    draft positions from its deployment (``num_draft_tokens - 1``, else the block's)."""
    dep = run.deployment
    n = dep.num_draft_tokens or dep.block_size or 0
    tally = AcceptanceTally(n - 1 if n > 1 else 0)
    for t in run.ok_tasks:
        tally.add(t.meta_info)
    return tally


def acceptance_series(runs: list[EvalRun], baseline: EvalRun | None) -> tuple[
        tuple[tuple[str, AcceptanceDetail], ...], bool]:
    """The plot's series for ``runs`` beside ``baseline``: the first run with detail that is not the
    baseline, then the baseline's (at most two, as the canary beside the fleet); and whether a
    selected run was measured speculatively without any (say so once)."""
    series: list[tuple[str, AcceptanceDetail]] = []
    without = False
    for r in [*(r for r in runs if baseline is None or r.id != baseline.id), *([baseline] if baseline else [])]:
        tally = run_acceptance(r)
        detail = tally.detail()
        without = without or tally.speculative_without_detail
        if detail is None:
            continue
        if r is baseline:
            series.append((f"{r.label} (baseline)", detail))
        elif not series or len(runs) == 1:
            series.append((r.label, detail))
    return tuple(series[:2] if baseline is None or len(series) <= 2 else [series[0], series[-1]]), without
