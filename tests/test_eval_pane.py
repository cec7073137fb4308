"""The eval pane in a minimal Textual app (Pilot): the comparison table and a live run."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from rich.text import Text
from textual.app import App, ComposeResult
from textual.widgets import DataTable, SelectionList, Static

import sample_data as sd
from conftest import shared_sglang_judge, wait_for
from specconsole.eval.cli import start_eval
from specconsole.eval.store import Deployment, EvalRun, ResultStore, TaskResult
from specconsole.lab.parts.state import free_port
from specconsole.lab.testing.sim_server import SimServer, dflash_draft_dir
from specconsole.ui.panes.eval_pane import AVERAGE_ROW, VANILLA_ROW, WATCH_S, EvalPane

pytestmark = pytest.mark.timeout(60)



@pytest.fixture(autouse=True, scope="module")
def _sglang_judge() -> None:
    """The simulators these tests start ask the session's warm real-SGLang judge (not a cold import each)."""
    shared_sglang_judge()

def _run(run_id: str, label: str, when: str, values: dict[str, float], algo: str | None = "DDTREE",
         tps: dict[str, float] | None = None) -> EvalRun:
    return EvalRun(id=run_id, label=label, created_at=when, deployment=Deployment(algo),
                   tasks=tuple(TaskResult(t, acceptance_length=v, tokens_per_s=(tps or {}).get(t))
                               for t, v in values.items()))


def console_with_sample_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The console on sample data (test_ui_sample's) with the sample eval runs stored for it."""
    from test_ui_sample import sample_app

    store = ResultStore(tmp_path / "results")
    for run in sd.sample_runs():
        store.save(run)
    monkeypatch.setenv("SPECCONSOLE_EVAL_RESULTS", str(store.root))
    return sample_app(tmp_path)


class PaneApp(App[None]):
    """Handles the pane's messages as the console does: a run request starts ``start_run`` (if any)."""

    def __init__(self, pane: EvalPane, start_run: Any = None) -> None:
        super().__init__()
        self.pane = pane
        self.start_run = start_run
        self.messages: list[Any] = []

    def compose(self) -> ComposeResult:
        yield self.pane

    def on_eval_pane_run_finished(self, message: EvalPane.RunFinished) -> None:
        self.messages.append(message)

    def on_eval_pane_run_requested(self, message: EvalPane.RunRequested) -> None:
        self.messages.append(message)
        if self.start_run is not None:
            message.pane.start(self.start_run)


@pytest.fixture
def store(tmp_path: Path) -> ResultStore:
    store = ResultStore(tmp_path / "results")
    store.save(_run("zlab", "baseline (z-lab), DDTree-8", "2026-11-01T00:00:00Z",
                    {"fizzbuzz": 12.0, "binary_search": 10.0, "lru_cache": 11.0}, tps={"fizzbuzz": 900.0}))
    store.save(_run("ours-4000", "ours step 4000, DDTree-8", "2026-12-01T00:00:00Z",
                    {"fizzbuzz": 8.0, "binary_search": 6.5, "lru_cache": 7.25}, tps={"fizzbuzz": 600.0}))
    store.save(_run("vanilla", "vanilla", "2026-12-02T00:00:00Z",
                    {"fizzbuzz": 1.0, "binary_search": 1.0, "lru_cache": 1.0}, algo=None, tps={"fizzbuzz": 150.0}))
    return store


def _cell(table: DataTable[Any], row: str, col: str) -> str:
    value = table.get_cell(row, col)
    return value.plain if isinstance(value, Text) else str(value)


def _columns(table: DataTable[Any]) -> list[str]:
    return [str(c.label) for c in table.ordered_columns]


async def test_pane_renders_the_comparison(store: ResultStore) -> None:
    pane = EvalPane(store, id="eval")
    app = PaneApp(pane)
    async with app.run_test(size=(180, 50)) as pilot:
        await pilot.pause()
        assert [r.id for r in pane.runs] == ["zlab", "ours-4000", "vanilla"]
        pane.select_runs(["ours-4000", "zlab"], baseline="zlab")
        await pilot.pause()
        table = pane.query_one("#eval-table", DataTable)
        # short names head the columns (so the ratio fits beside the task); the title spells them out
        assert _columns(table) == ["task", "ours", "★ baseline", "ours / baseline"]
        # the average first, pinned (fixed) while the tasks scroll
        assert [str(k.value) for k in table.rows] == [AVERAGE_ROW, "fizzbuzz", "binary_search", "lru_cache"]
        assert table.fixed_rows == 1
        assert _cell(table, "fizzbuzz", "ours-4000") == "8.00 ▲"  # best
        assert _cell(table, "binary_search", "ours-4000") == "6.50 ▼"  # worst
        assert _cell(table, "lru_cache", "ours-4000") == "7.25"
        # the ratio columns mark where the run is closest to (▲) and furthest from (▼) the baseline
        assert _cell(table, "fizzbuzz", "ratio:ours-4000") == "66.7 % ▲"  # 8 / 12
        assert _cell(table, "binary_search", "ratio:ours-4000") == "65.0 % ▼"  # 6.5 / 10
        assert _cell(table, "lru_cache", "ratio:ours-4000") == "65.9 %"
        assert _cell(table, AVERAGE_ROW, "ours-4000") == "7.25"
        assert _cell(table, AVERAGE_ROW, "zlab") == "11.00"
        assert _cell(table, AVERAGE_ROW, "ratio:ours-4000") == "65.9 %"
        best = table.get_cell("fizzbuzz", "ours-4000")
        worst = table.get_cell("binary_search", "ours-4000")
        colours = app.get_css_variables()
        assert isinstance(best, Text) and colours["success"] in str(best.style)
        assert isinstance(worst, Text) and colours["error"] in str(worst.style)
        title = str(pane.query_one("#eval-title", Static).content)
        assert "baseline ★ baseline (z-lab), DDTree-8" in title and "[b]ours[/] = ours step 4000, DDTree-8" in title

        # add the vanilla run from the list (space) and see the speedup row
        lst = pane.query_one("#eval-run-list", SelectionList)
        lst.focus()
        lst.highlighted = 2
        await pilot.press("space")
        await pilot.pause()
        assert VANILLA_ROW in [str(k.value) for k in table.rows]
        assert _cell(table, VANILLA_ROW, "ours-4000") == "4.00×"  # 600 / 150 tok/s
        assert _cell(table, VANILLA_ROW, "vanilla") == "1.00×"
        assert _cell(table, "fizzbuzz", "vanilla") == "1.00"  # no best/worst: all equal

        # b: the highlighted run (vanilla) becomes the baseline
        await pilot.press("b")
        await pilot.pause()
        assert pane.baseline_id == "vanilla"
        assert _columns(table)[-3:] == ["★ vanilla", "baseline / vanilla", "ours / vanilla"]
        assert _cell(table, AVERAGE_ROW, "ratio:ours-4000") == "725.0 %"
        # m: next metric (tokens/s)
        await pilot.press("m")
        await pilot.pause()
        assert pane.metric == "tokens_per_s"
        assert _cell(table, "fizzbuzz", "ours-4000") == "600.0"
        assert _cell(table, "binary_search", "ours-4000") == "n/a"


async def test_one_run_shows_its_tasks_at_once_and_a_baseline_adds_the_ratio(store: ResultStore) -> None:
    """One run selected: its per-task table (every metric) with the average pinned first and the
    best/worst task by the chosen metric; `b` on another run: the comparison with the ratio."""
    ours = store.resolve("ours-4000")
    store.save(dataclasses.replace(ours, tasks=(
        TaskResult("fizzbuzz", acceptance_length=8.0, tokens_per_s=600.0, latency_s=1.5),
        TaskResult("binary_search", acceptance_length=6.5, tokens_per_s=480.0, latency_s=2.25),
        TaskResult("lru_cache", ok=False, error="timeout"))), overwrite=True)
    pane = EvalPane(store, id="eval")
    app = PaneApp(pane)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        pane.select_runs(["ours-4000"])
        await pilot.pause()
        table = pane.query_one("#eval-table", DataTable)
        assert _columns(table) == ["task", "▸ accept len", "tok/s", "latency s"]
        assert [str(k.value) for k in table.rows] == [AVERAGE_ROW, "fizzbuzz", "binary_search", "lru_cache"]
        assert table.fixed_rows == 1
        assert [_cell(table, "fizzbuzz", c) for c in ("acceptance_length", "tokens_per_s", "latency_s")] == \
            ["8.00 ▲", "600.0", "1.50"]
        assert _cell(table, "binary_search", "acceptance_length") == "6.50 ▼"
        assert _cell(table, "lru_cache", "tokens_per_s") == "failed"
        assert [_cell(table, AVERAGE_ROW, c) for c in ("acceptance_length", "tokens_per_s", "latency_s")] == \
            ["7.25", "540.0", "1.88"]  # the mean of the ok tasks
        title = str(pane.query_one("#eval-title", Static).content)
        assert "ours step 4000, DDTree-8" in title and "Select two" not in title
        # m: the marks follow the metric (latency: lower is better)
        pane.action_cycle_metric()
        pane.action_cycle_metric()
        await pilot.pause()
        assert _columns(table) == ["task", "accept len", "tok/s", "▸ latency s"]
        assert _cell(table, "fizzbuzz", "latency_s") == "1.50 ▲" and _cell(table, "binary_search", "latency_s") \
            == "2.25 ▼"
        pane.action_cycle_metric()
        # b on the z-lab run: the comparison, ours beside the baseline with its ratio per task and on average
        lst = pane.query_one("#eval-run-list", SelectionList)
        lst.focus()
        lst.highlighted = 0
        await pilot.press("b")
        await pilot.pause()
        assert _columns(table) == ["task", "ours", "★ baseline", "ours / baseline"]
        assert _cell(table, AVERAGE_ROW, "ratio:ours-4000") == "65.9 %"  # 7.25 / 11.0
        assert _cell(table, "fizzbuzz", "ratio:ours-4000") == "66.7 % ▲"
        assert _cell(table, "binary_search", "ratio:ours-4000") == "65.0 % ▼"
        assert _cell(table, "lru_cache", "ours-4000") == "failed"


async def test_the_average_stays_on_screen_while_the_tasks_scroll_at_80x24(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """In the console at 80x24: scrolling the comparison to its last task keeps the average row on screen."""
    app = console_with_sample_runs(tmp_path, monkeypatch)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        pane = app.query_one(EvalPane)
        pane.select_runs(["zlab-b16", "ours-4000"], baseline="zlab-b16")
        table = pane.query_one("#eval-table", DataTable)
        table.focus()
        await wait_for(lambda: sd.SAMPLE_TASKS[0] in app.screen_text(), 10, what="the table in view", pilot=pilot)
        last = sd.SAMPLE_TASKS[-1]
        assert last not in app.screen_text()  # more tasks than rows: the table scrolls
        await pilot.press(*["down"] * len(sd.SAMPLE_TASKS))  # the cursor to the last task
        await wait_for(lambda: last in app.screen_text(), 10, what="the last task in view", pilot=pilot)
        screen = app.screen_text()
        assert last in screen and sd.SAMPLE_TASKS[0] not in screen, screen
        assert "average" in screen and "%" in next(line for line in screen.splitlines() if "average" in line), screen


async def test_pane_with_fewer_than_two_runs(tmp_path: Path) -> None:
    pane = EvalPane(ResultStore(tmp_path / "none"))
    app = PaneApp(pane)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        assert "No eval runs in" in str(pane.query_one("#eval-title", Static).content)
        pane.query_one("#eval-run-list", SelectionList).focus()
        pane.action_start_run()  # the app binds e (registry) to this: the app is asked
        await pilot.pause()
        assert any(isinstance(m, EvalPane.RunRequested) for m in app.messages)


async def test_e_starts_a_live_run_against_the_simulator(store: ResultStore, tmp_path: Path) -> None:
    draft = dflash_draft_dir(tmp_path, 16)
    with SimServer(["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", draft,
                    "--speculative-draft-window-size", "32"]) as sim:

        async def start(emit: Any, on_result: Any) -> EvalRun:
            return await start_eval(None, emit=emit, on_result=on_result, url=sim.url, results=str(store.root),
                                    tasks=["fizzbuzz", "binary_search", "lru_cache"], label="live b16 w32")

        pane = EvalPane(store)
        app = PaneApp(pane, start)
        async with app.run_test(size=(180, 50)) as pilot:
            await pilot.pause()
            pane.select_runs(["ours-4000", "zlab"], baseline="zlab")
            pane.query_one("#eval-run-list", SelectionList).focus()
            pane.action_start_run()  # what the app's e binding (registry) calls
            await wait_for(lambda: not pane.running and bool(app.messages)
                           and isinstance(app.messages[-1], EvalPane.RunFinished), 10, what="the run to finish",
                           step=0.05, pilot=pilot)
            await pilot.pause()
            assert isinstance(app.messages[-1], EvalPane.RunFinished)
            run = app.messages[-1].run
            progress = [line for line in pane.log_lines if "/3] " in line]
            assert len(progress) == 3 and all("acceptance" in line for line in progress)
            assert "saved to" in pane.progress_text
            # the new run is listed and shown beside the baseline (ours is still listed, unselected):
            # the table compares the two
            assert [r.id for r in pane.selected] == ["zlab", run.id]
            assert "ours-4000" in [r.id for r in pane.runs]
            table = pane.query_one("#eval-table", DataTable)
            value = run.task("fizzbuzz").acceptance_length  # type: ignore[union-attr]
            assert _cell(table, "fizzbuzz", run.id).split()[0] == f"{value:.2f}"
            assert _cell(table, AVERAGE_ROW, f"ratio:{run.id}") == f"{run.average() / 11.0 * 100:.1f} %"
            assert run.deployment.draft_window == 32


def _marks(pane: EvalPane) -> list[str]:
    lst = pane.query_one("#eval-run-list", SelectionList)
    return [str(lst.get_option_at_index(i).prompt)[:3] for i in range(lst.option_count)]


async def test_space_toggles_the_highlighted_run_with_a_mark_readable_without_colour(store: ResultStore) -> None:
    pane = EvalPane(store, id="eval")
    app = PaneApp(pane)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert _marks(pane) == ["[ ]", "[x]", "[x]"]  # the newest two are selected at first
        lst = pane.query_one("#eval-run-list", SelectionList)
        lst.highlighted = 0
        pane.query_one("#eval-table", DataTable).focus()  # space works wherever the focus is in the pane
        await pilot.press("space")
        await pilot.pause()
        assert [r.id for r in pane.selected] == ["zlab", "ours-4000", "vanilla"]
        assert _marks(pane) == ["[x]", "[x]", "[x]"]
        await pilot.press("space")
        await pilot.pause()
        assert _marks(pane) == ["[ ]", "[x]", "[x]"] and [r.id for r in pane.selected] == ["ours-4000", "vanilla"]


@pytest.mark.serial  # asserts a time bound
async def test_a_run_imported_by_the_cli_appears_within_two_seconds(store: ResultStore, tmp_path: Path) -> None:
    """`specconsole eval import FILE` in another process: the pane shows the run without a restart."""
    other = ResultStore(tmp_path / "elsewhere")
    saved = other.save(_run("imported-b16", "imported DFlash b16", "2026-12-03T00:00:00Z",
                            {"fizzbuzz": 9.0, "binary_search": 8.0, "lru_cache": 8.5}))
    pane = EvalPane(store, id="eval")
    app = PaneApp(pane)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert "imported-b16" not in [r.id for r in pane.runs]
        exe = Path(sys.executable).parent / "specconsole"
        res = subprocess.run([str(exe), "eval", "import", str(saved.path)], capture_output=True, text=True,
                             timeout=60, env={**os.environ, "SPECCONSOLE_EVAL_RESULTS": str(store.root)})
        assert res.returncode == 0, res.stderr
        imported = time.monotonic()
        await wait_for(lambda: "imported-b16" in [r.id for r in pane.runs], 10, what="the imported run in the pane",
                       step=0.05, pilot=pilot)
        took = time.monotonic() - imported
        # the folder is checked every WATCH_S: the run shows on the next check, well within 2 s
        assert took <= WATCH_S + 1.0, took
        lst = pane.query_one("#eval-run-list", SelectionList)
        assert "imported DFlash b16" in str(lst.get_option_at_index(lst.option_count - 1).prompt)


@pytest.mark.parametrize("size", [(120, 40), (200, 50)], ids=["120x40", "200x50"])
async def test_comparison_readable_in_the_console_without_a_mouse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  size: tuple[int, int]) -> None:
    """In the console's own layout: whole task names, the ratio % column on screen (no sideways
    scrolling), the task column fixed when the table does scroll sideways."""
    app = console_with_sample_runs(tmp_path, monkeypatch)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        pane = app.query_one(EvalPane)
        pane.select_runs(["zlab-b16", "ours-4000"], baseline="zlab-b16")
        table = pane.query_one("#eval-table", DataTable)
        table.focus()  # tab reaches it; focusing scrolls it into view
        await wait_for(lambda: "ours / z-lab" in app.screen_text() and "fizzbuzz" in app.screen_text(), 10,
                       what="the comparison in view", pilot=pilot)
        screen = app.screen_text()
        assert "ours / z-lab" in screen, screen
        assert "linked_list_reverse" in screen and "async_rate_limiter" in screen  # not squeezed
        # the eval pane's own part of the row (a column of serving and training may stand beside it)
        rows = [line.split("│")[1].rstrip(" ▁▂▃▄▅▆▇█") for line in screen.splitlines() if "fizzbuzz" in line]
        assert rows and rows[0].endswith("%"), screen
        assert table.fixed_columns == 1


async def test_the_console_answers_the_panes_run_request(tmp_path: Path) -> None:
    """The console (not a callback) handles RunRequested: `e` starts a run against the configured
    serving host; nothing listens at its base_url here, so the pane reports the failure."""
    import sample_data as sd
    from specconsole.ui.console.app import ConsoleApp
    from specconsole.ui.style.themes import BUNDLED_DIR, load_themes

    port = free_port()  # a port nothing listens on
    config = sd.sample_config(str(tmp_path / "state"))
    serve = config.host("serve")
    assert serve.sglang is not None
    closed = dataclasses.replace(serve, sglang=dataclasses.replace(serve.sglang, base_url=f"http://127.0.0.1:{port}"))
    config = dataclasses.replace(config, hosts=tuple(closed if h.name == "serve" else h for h in config.hosts))
    app = ConsoleApp(config, fleet=sd.sample_fleet(sd.FROZEN_NOW), themes=load_themes([BUNDLED_DIR]))
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        pane = app.query_one(EvalPane)
        await pilot.press("e")
        await wait_for(lambda: pane.progress_text.startswith("eval failed"), 10, what="'eval failed' in the pane",
                       step=0.05, pilot=pilot)
        assert not pane.running
        assert str(port) in pane.progress_text


def _hist_run(run_id: str, label: str, hists: list[list[int] | None]) -> EvalRun:
    """A DFLASH block-16 run whose tasks' stored meta_info carry SGLang's histogram (None: an answer
    from a server that gives none)."""
    tasks = []
    for i, h in enumerate(hists):
        meta: dict[str, Any] = {"completion_tokens": 40, "spec_verify_ct": sum(h) if h else 8}
        if h:
            meta["spec_correct_drafts_histogram"] = h
        tasks.append(TaskResult(f"t{i}", acceptance_length=5.0, meta_info=meta))
    return EvalRun(id=run_id, label=label, created_at="2026-12-0%sT00:00:00Z" % (1 + len(run_id) % 8),
                   deployment=Deployment("DFLASH", block_size=16, num_draft_tokens=16), tasks=tuple(tasks))


async def test_the_pane_plots_acceptance_of_a_run_beside_its_baseline(tmp_path: Path) -> None:
    """Issue 36 item 4: the selected run's histogram of accepted drafts and acceptance by draft
    position beside the baseline's, at most 80 columns; a server without the detail is said once;
    runs without any (imported, vanilla) show nothing."""
    store = ResultStore(tmp_path / "results")
    store.save(_hist_run("w32", "window 32", [[1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2], [0, 1, 2]]))
    store.save(_hist_run("w16", "window 16", [[3, 3, 2, 1]]))
    store.save(_hist_run("old", "older server", [None, None]))
    store.save(_run("zlab", "baseline (z-lab)", "2026-11-01T00:00:00Z", {"fizzbuzz": 12.0}))
    pane = EvalPane(store, id="eval")
    async with PaneApp(pane).run_test(size=(120, 50)) as pilot:
        await pilot.pause()
        plot = pane.query_one("#eval-acceptance", Static)
        pane.select_runs(["w32", "w16"], baseline="w16")
        await pilot.pause()
        text = str(plot.render())
        assert not plot.has_class("-empty")
        assert "left: window 32: accept length" in text and "right: window 16 (baseline)" in text
        assert "accepted drafts per verify step (% of steps)" in text and "acceptance by draft position" in text
        assert all(len(line) <= 80 for line in text.splitlines())
        pane.select_runs(["old"])
        await pilot.pause()
        assert not plot.has_class("-empty")
        assert str(plot.render()) == "these runs hold no per-request acceptance detail (their server returned none)"
        pane.select_runs(["zlab"])
        await pilot.pause()
        assert plot.has_class("-empty") and str(plot.render()) == ""  # nothing to show, nothing to say
