"""``specconsole eval``: run the benchmark, list stored runs, compare them, import results.

Shape (``eval`` alone is ``eval run``)::

    specconsole eval [run] [--label NAME] [--tasks a,b] [--concurrency N] [--max-new-tokens N]
                           [--suite FILE] [--results DIR] [--url URL | --host NAME] [--timeout S]
    specconsole eval list [--results DIR] [--json]
    specconsole eval compare RUN... [--baseline RUN] [--metric M] [--json | --markdown] [--results DIR]
    specconsole eval import FILE... [--results DIR] [--force]

RUN is a run id, a unique id prefix, a label (its newest run) or a path to a ``.json`` file.
The run form measures the configured serving host's SGLang (through an SSH tunnel when its
``sglang.tunnel`` is true); ``--url`` bypasses the config. The lead wires it as::

    add_eval_parser(subparsers)                       # in build_parser()
    if args.command == "eval":
        config = load_config(...) if eval_needs_config(args) else None
        return run_eval_command(args, config, emit=printer)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

from specconsole.base.validation import num, option_type
from specconsole.eval.start import start_eval
from specconsole.eval.store import METRICS, ResultStore, default_results_dir
from specconsole.eval.suite import Tokens
from specconsole.sglang.acceptance import NO_DETAIL_IN_RUNS, Series

if TYPE_CHECKING:
    from specconsole.config import Config
    from specconsole.steps import StepEvent

Emit = Callable[["StepEvent"], None]
EVAL_COMMANDS = ("run", "list", "compare", "import")


# ------------------------------------------------------------------------------- parser


def _run_options(p: argparse.ArgumentParser, *, suppress: bool) -> None:
    def d(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    p.add_argument("--label", default=d(None), help="name of this run (default: from the deployment, "
                   "e.g. 'DFLASH b16 w16 (dflash-b16)')")
    p.add_argument("--tasks", default=d(None), metavar="A,B", help="comma-separated task names (default: all)")
    p.add_argument("--concurrency", type=option_type(Concurrency, "--concurrency"), default=d(1), metavar="N",
                   help="requests in flight at once (default 1: latency is per request alone)")
    p.add_argument("--max-new-tokens", type=option_type(Tokens, "--max-new-tokens"), default=d(None), metavar="N",
                   help="override the suite's max new tokens for every task")
    p.add_argument("--suite", default=d(None), metavar="FILE",
                   help="benchmark definition (default: the shipped eval-coding.toml)")
    p.add_argument("--url", default=d(None), help="SGLang base URL to measure, bypassing the config")
    p.add_argument("--host", default=d(None), metavar="NAME",
                   help="serving host from the config (default: the only one)")
    p.add_argument("--api-key", default=d(None), help="with --url: the server's --api-key")
    p.add_argument("--timeout", type=option_type(RequestTimeout, "--timeout"), default=d(300.0), metavar="S",
                   help="seconds one request may take before its task is recorded as failed (default 300)")


def _results_option(p: argparse.ArgumentParser, *, suppress: bool) -> None:
    p.add_argument("--results", default=argparse.SUPPRESS if suppress else None, metavar="DIR",
                   help=f"results folder (default: $SPECCONSOLE_EVAL_RESULTS or {default_results_dir()})")


#: requests in flight at once
Concurrency = Annotated[int, num(ge=1, le=4096, why="requests in flight at once", example=1)]
#: seconds one request may take
RequestTimeout = Annotated[float, num(gt=0, why="seconds one request may take", example=300)]


def add_eval_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add ``eval`` (with ``run``, ``list``, ``compare``, ``import``) to specconsole's subparsers."""
    ev = subparsers.add_parser(
        "eval", help="acceptance length per coding task: run the benchmark, list, compare, import results",
        description="Measure acceptance length, tokens/s and latency per task against SGLang, and compare runs. "
                    "`eval` alone is `eval run`.")
    ev.add_argument("--config", default=argparse.SUPPRESS, help="console config (TOML)")
    _run_options(ev, suppress=False)
    _results_option(ev, suppress=False)
    sub = ev.add_subparsers(dest="eval_command", metavar="[ACTION]")

    run = sub.add_parser("run", help="run the benchmark against the serving host's SGLang and save the run")
    run.add_argument("--config", default=argparse.SUPPRESS, help="console config (TOML)")
    _run_options(run, suppress=True)
    _results_option(run, suppress=True)

    ls = sub.add_parser("list", help="list the stored runs")
    _results_option(ls, suppress=True)
    ls.add_argument("--json", action="store_true", help="machine-readable output")

    cmp = sub.add_parser("compare", help="per-task table of two or more runs, averages and ratio to a baseline")
    cmp.add_argument("runs", nargs="+", metavar="RUN", help="run id, id prefix, label, or .json file")
    cmp.add_argument("--baseline", metavar="RUN", help="the run ratios are taken to (default: the last RUN)")
    cmp.add_argument("--metric", choices=METRICS, default="acceptance_length",
                     help="the value per task (default acceptance_length)")
    fmt = cmp.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="machine-readable output")
    fmt.add_argument("--markdown", action="store_true", help="a markdown table")
    _results_option(cmp, suppress=True)

    imp = sub.add_parser("import", help="validate results files (schema specconsole.eval/1) and store them; "
                                        "z-lab `dflash.benchmark` output becomes one run, a task per dataset")
    imp.add_argument("files", nargs="+", metavar="FILE")
    imp.add_argument("--force", action="store_true", help="replace a stored run with the same id")
    imp.add_argument("--label", help="label of the run made from dflash.benchmark output (default: file and datasets)")
    _results_option(imp, suppress=True)
    return ev


def eval_command(args: argparse.Namespace) -> str:
    return getattr(args, "eval_command", None) or "run"


def eval_needs_config(args: argparse.Namespace) -> bool:
    """Whether this ``eval`` invocation needs the console config (only ``run`` without ``--url``)."""
    return eval_command(args) == "run" and not getattr(args, "url", None)


# ------------------------------------------------------------------------------ commands


def _print_event(event: StepEvent) -> None:
    print(event.line(), flush=True)


#: draws acceptance series as text lines (``specconsole.ui.style.acceptance_plot``, handed in by the CLI)
Plot = Callable[[Series], list[str]]


def run_eval_command(args: argparse.Namespace, config: Config | None, emit: Emit | None = None,
                     plot: Plot | None = None) -> int:
    """Execute a parsed ``eval`` command; 0 ok, 1 when a task failed (the run is still saved).
    ``plot``: the plain-text ``compare`` shows the runs' acceptance histograms with it."""
    store = ResultStore(getattr(args, "results", None))
    cmd = eval_command(args)
    if cmd == "list":
        return _list(store, args.json)
    if cmd == "compare":
        return _compare(store, args, plot)
    if cmd == "import":
        return _import(store, args.files, args.force, getattr(args, "label", None))
    return asyncio.run(_run(args, config, store, emit or _print_event))


def _list(store: ResultStore, as_json: bool) -> int:
    runs = store.runs()
    for _path, problem in store.problems:
        print(f"specconsole: skipped {problem}", file=sys.stderr)
    if as_json:
        out = [{"id": r.id, "label": r.label, "created_at": r.created_at, "kind": r.kind, "path": r.path,
                "deployment": r.deployment.to_json(), **r.summary()} for r in runs]
        print(json.dumps({"results": str(store.root), "runs": out}, indent=2, ensure_ascii=False))
        return 0
    if not runs:
        print(f"no runs in {store.root} (start one with `specconsole eval`, or `specconsole eval import FILE`)")
        return 0
    rows = [["id", "created", "label", "deployment", "tasks", "avg accept", "kind"]]
    for r in runs:
        avg = r.average("acceptance_length")
        tasks = f"{len(r.ok_tasks)}/{len(r.tasks)}"
        rows.append([r.id, r.created_at, r.label, r.deployment.short(), tasks,
                     "n/a" if avg is None else f"{avg:.2f}", r.kind])
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    for k, row in enumerate(rows):
        print("  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip())
        if k == 0:
            print("  ".join("-" * w for w in widths))
    print(f"\n{len(runs)} run(s) in {store.root}")
    return 0


def _compare(store: ResultStore, args: argparse.Namespace, plot: Plot | None = None) -> int:
    from specconsole.eval.compare import acceptance_series, compare, to_json, to_markdown, to_text

    pool = store.runs()
    runs = [store.resolve(ref, pool) for ref in args.runs]
    baseline = store.resolve(args.baseline, pool) if args.baseline else None
    if baseline is None and len(runs) >= 2:
        baseline = runs[-1]
    cmp = compare(runs, baseline, args.metric)
    if args.json:
        sys.stdout.write(to_json(cmp))
    elif args.markdown:
        sys.stdout.write(to_markdown(cmp))
    else:
        sys.stdout.write(to_text(cmp))
        series, without = acceptance_series(runs, baseline)
        if plot is not None and (series or without):
            sys.stdout.write("\n" + "\n".join(plot(series) if series else [NO_DETAIL_IN_RUNS]) + "\n")
    return 0


def _import(store: ResultStore, files: list[str], force: bool, label: str | None = None) -> int:
    from specconsole.eval.zlab_import import import_benchmark, is_benchmark_file

    bench = [f for f in files if is_benchmark_file(f)]
    for f in files:
        if f not in bench:
            run = store.import_file(f, overwrite=force)
            print(f"imported {run.id} ({run.label}): {len(run.tasks)} task(s), {run.kind} -> {run.path}")
    if bench:
        run = import_benchmark(store, bench, label=label, overwrite=force)
        tasks = ", ".join(f"{t.task} τ {t.acceptance_length:.2f}" if t.acceptance_length else t.task for t in run.tasks)
        print(f"imported {run.id} ({run.label}) from dflash.benchmark output: {len(run.tasks)} task(s) "
              f"({tasks}) -> {run.path}")
    return 0


# ----------------------------------------------------------------------------------- run
# the run itself (shared with the console's ``e``) is in specconsole.eval.start


def _task_list(text: str | None) -> list[str] | None:
    if not text:
        return None
    names = [t.strip() for t in text.split(",") if t.strip()]
    return names or None


async def _run(args: argparse.Namespace, config: Config | None, store: ResultStore, emit: Emit) -> int:
    run = await start_eval(config, emit=emit, url=args.url, host=args.host, label=args.label,
                           tasks=_task_list(args.tasks), concurrency=args.concurrency,
                           max_new_tokens=args.max_new_tokens, suite=args.suite, results=str(store.root),
                           timeout_s=args.timeout, api_key=args.api_key)
    print(f"compare: specconsole eval compare {run.id} RUN [--markdown]" +
          (f" --results {store.root}" if getattr(args, "results", None) else ""), flush=True)
    return 1 if run.failed_tasks else 0
