"""``enter`` on a run in the eval pane's list shows its deployment, read-only; escape closes it (Pilot, sample data)."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.app import App
from textual.widgets import SelectionList, Static

import sample_data as sd
from specconsole.eval.store import Deployment, EvalRun, ResultStore, TaskResult
from specconsole.ui.panes.eval_pane import EvalPane
from specconsole.ui.screens.run_detail import NOT_RECORDED, RunDetail, deployment_rows
from test_eval_pane import PaneApp  # the pane alone, in an app of its own

pytestmark = pytest.mark.timeout(60)



def _ddtree_run() -> EvalRun:
    dep = Deployment("DDTREE", block_size=16, num_draft_tokens=16, tree_budget=16,
                     draft_model="/models/Qwen3-8B-DFlash-b16", model="/models/Qwen3-8B",
                     sglang_version="0.5.24+ddtree", url="http://127.0.0.1:30000")
    return EvalRun(id="ddtree-16", label="DDTREE budget 16 b16 (Qwen3-8B-DFlash-b16)",
                   created_at="2026-12-03T09:15:00Z", deployment=dep,
                   tasks=(TaskResult("fizzbuzz", acceptance_length=9.5),),
                   source={"kind": "measured", "host": "serve"})


def _imported_run() -> EvalRun:
    return EvalRun(id="zlab-import", label="z-lab DDTree-8", created_at="2026-11-30T08:00:00Z",
                   tasks=(TaskResult("humaneval", acceptance_length=11.2),),
                   source={"kind": "imported", "imported_from": ["bench/zlab.txt"],
                           "imported_at": "2026-12-01T10:00:00Z"})


@pytest.fixture
def store(tmp_path: Path) -> ResultStore:
    store = ResultStore(tmp_path / "results")
    for run in [*sd.sample_runs(), _imported_run(), _ddtree_run()]:
        store.save(run)
    return store


def _detail_text(app: App[None]) -> str:
    assert isinstance(app.screen, RunDetail)
    rendered = app.screen.query_one("#run-detail-body", Static).render()
    return rendered.plain if hasattr(rendered, "plain") else str(rendered)  # the text shown, not its markup


async def test_enter_on_a_run_shows_its_deployment_and_escape_closes_it(store: ResultStore) -> None:
    pane = EvalPane(store, id="eval")
    app = PaneApp(pane)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        ids = [r.id for r in pane.runs]
        lst = pane.query_one("#eval-run-list", SelectionList)
        lst.focus()
        before = list(pane._selected_order)
        lst.highlighted = ids.index("ddtree-16")
        await pilot.press("enter")
        await pilot.pause()
        text = _detail_text(app)
        for line in ("algorithm     DDTREE", "block size    16", "tree budget   16", "draft tokens  16",
                     "draft model   /models/Qwen3-8B-DFlash-b16", "SGLang        0.5.24+ddtree",
                     "when          2026-12-03 09:15 UTC", "measured by specconsole on serve"):
            assert line in text, text
        assert f"draft window  {NOT_RECORDED}" in text  # DDTREE's record has no window: said, not guessed
        assert pane._selected_order == before  # enter opens the details; it does not toggle the run
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, RunDetail)
        assert app.focused is lst  # back where the operator was

        # an imported benchmark file records no deployment: every field says so
        lst.highlighted = ids.index("zlab-import")
        await pilot.press("enter")
        await pilot.pause()
        text = _detail_text(app)
        assert f"algorithm     {NOT_RECORDED}" in text and f"SGLang        {NOT_RECORDED}" in text
        assert "imported from bench/zlab.txt" in text and "2026-11-30 08:00 UTC" in text
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, RunDetail)

        # space still selects
        await pilot.press("space")
        await pilot.pause()
        assert "zlab-import" in pane._selected_order


def test_rows_of_a_vanilla_and_a_dflash_run() -> None:
    published, _ours, vanilla = sd.sample_runs()
    rows = dict(deployment_rows(vanilla))
    assert rows["algorithm"] == "none (vanilla decoding)" and "draft model" not in rows
    assert rows["target model"] == "/models/Qwen3-8B" and rows["SGLang"] == NOT_RECORDED
    rows = dict(deployment_rows(published))
    assert (rows["algorithm"], rows["block size"], rows["draft window"]) == ("DFLASH", "16", "16")
    assert rows["tree budget"] == NOT_RECORDED and rows["source"] == "published"
