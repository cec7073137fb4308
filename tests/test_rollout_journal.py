"""The rollout's journal without a lab: what a dead console leaves, what is unfinished, and the console's first
events naming it (the lab tests of kill -9 and --resume are in test_rollout_faults)."""

from __future__ import annotations

import subprocess
from dataclasses import asdict
from pathlib import Path

import pytest

import sample_data as sd
from specconsole.actions.deploy.preflight import DeployRequest
from specconsole.actions.rollout.gate import Figures
from specconsole.actions.rollout.journal import Journal, JournalError, find, unfinished
from specconsole.actions.rollout.router import RouterError, list_workers
from specconsole.sglang.acceptance import HISTOGRAM_FIELDS, AcceptanceDetail
from specconsole.ui.console.app import ConsoleApp
from specconsole.ui.console.provider import FixedStatuses
from tiny_http import TinyServer


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _left_by_a_dead_console(state: Path) -> Journal:
    j = Journal.begin(state, DeployRequest(draft_window=32), "http://127.0.0.1:1", ["serve", "serve2"], "x", "op")
    j.replicas[0].state, j.replicas[0].changed, j.replicas[0].workdir = "gating", True, "/w/1"
    j.pid = _dead_pid()
    j.save()
    return j


def test_a_journal_of_a_dead_console_is_unfinished_and_says_each_replica(tmp_path: Path) -> None:
    j = _left_by_a_dead_console(tmp_path)
    again = Journal.load(j.path)
    assert again.unfinished and not again.running
    assert again.deploy_request() == DeployRequest(draft_window=32)
    lines = again.lines()
    assert lines[0].startswith(f"rollout {j.id}") and "gone" in lines[0]
    assert lines[1] == "  serve: gating (new config); deploy folder /w/1"
    assert lines[2] == "  serve2: waiting (old config)"
    assert [u.id for u in unfinished(tmp_path)] == [j.id] and find(tmp_path, None).id == j.id
    again.end(True, "done")
    assert not unfinished(tmp_path)
    with pytest.raises(JournalError, match="no unfinished rollout"):
        find(tmp_path, None)


def test_the_baseline_comes_back_from_the_journal_with_its_acceptance_histogram(tmp_path: Path) -> None:
    j = Journal.begin(tmp_path, DeployRequest(draft_window=32), "http://127.0.0.1:1", ["serve", "serve2"], "x", "op")
    detail = AcceptanceDetail(histogram=(3, 5, 2), requests=4, drafts=3, field=HISTOGRAM_FIELDS[-1])
    measured = Figures(accept_len=2.1, tok_s=640.0, prompts=4, tokens=96, acceptance=detail, where="serve2")
    j.baseline = asdict(measured)
    j.save()
    again = Journal.load(j.path).baseline_figures()
    assert again == measured and isinstance(again.acceptance, AcceptanceDetail)
    assert again.acceptance.accept_length == detail.accept_length


def test_a_journal_of_this_console_is_not_unfinished_and_a_damaged_one_is_skipped(tmp_path: Path) -> None:
    Journal.begin(tmp_path, DeployRequest(), "http://r", ["serve"])   # this process: its own rollout runs
    (tmp_path / "rollouts" / "20990101-000000-bad.json").write_text("{not json")
    assert unfinished(tmp_path) == []
    with pytest.raises(JournalError, match="cannot read the rollout journal"):
        Journal.load(tmp_path / "rollouts" / "20990101-000000-bad.json")


async def test_the_console_names_an_unfinished_rollout_in_its_first_events(tmp_path: Path) -> None:
    j = _left_by_a_dead_console(tmp_path / "state")
    app = ConsoleApp(sd.sample_config(str(tmp_path / "state")), fleet=FixedStatuses([], sd.sample_events()))
    said = [e.message for e in app.events.recent if e.source == "rollout"]
    assert said[0].startswith(f"unfinished rollout {j.id}")
    assert "serve: gating (new config); deploy folder /w/1" in said
    assert said[-1] == f"finish it: specconsole deploy --resume {j.id}; undo it: add --undo"


async def test_a_router_answering_workers_with_503_is_one_line() -> None:
    srv = TinyServer({"/workers": lambda: (503, "application/json", b'{"error":"registry unavailable"}')})
    try:
        with pytest.raises(RouterError) as err:
            await list_workers(srv.url, 2)
    finally:
        srv.close()
    assert str(err.value).count("\n") == 0
    assert f"the router at {srv.url} answered GET /workers with HTTP 503" in str(err.value)
