"""Acceptance as operators read it (issue 36 item 4), without a lab: SGLang's per-request histogram
of accepted drafts read from ``meta_info`` (0.5.23's ``spec_correct_drafts_histogram`` and the earlier
``spec_accept_histogram``), summed and turned into acceptance by draft position; the 80-column plot
(a text snapshot); the gate's figures (canary beside the fleet); an eval run's; the CLI's printing;
a server without the detail said once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from specconsole.actions.rollout.gate import Figures, acceptance_figures, measure
from specconsole.eval.compare import acceptance_series, run_acceptance
from specconsole.eval.store import Deployment, EvalRun, TaskResult
from specconsole.sglang.acceptance import (
    NO_DETAIL,
    AcceptanceDetail,
    AcceptanceTally,
    drafts_of,
    histogram_of,
    tally,
)
from specconsole.steps import StepEvent
from specconsole.ui.style.acceptance_plot import acceptance_plot

CANARY = AcceptanceDetail((2, 3, 4, 5, 6, 6, 5, 4, 3, 2, 2, 1, 1, 0, 0, 6), 4, 15)
FLEET = AcceptanceDetail((4, 6, 7, 8, 7, 6, 4, 3, 2, 1, 1, 0, 0, 0, 0, 1), 4, 15)


def test_both_names_of_the_histogram_are_read_and_bad_lists_are_not() -> None:
    assert histogram_of({"spec_correct_drafts_histogram": [1, 0, 2]}) == ("spec_correct_drafts_histogram", [1, 0, 2])
    assert histogram_of({"spec_accept_histogram": [0, 7]}) == ("spec_accept_histogram", [0, 7])
    for bad in ([], [1, -1], [1.5], [True], "1,2", None, [1] * 2000):
        assert histogram_of({"spec_correct_drafts_histogram": bad}) is None, bad
    assert histogram_of(None) is None and histogram_of({"spec_verify_ct": 3}) is None


def test_summed_histograms_give_shares_positions_and_the_mean() -> None:
    metas: list[dict[str, Any]] = [
        {"spec_verify_ct": 4, "spec_correct_drafts_histogram": [1, 1, 0, 2]},  # accepted 0, 1, 3, 3
        {"spec_verify_ct": 2, "spec_correct_drafts_histogram": [0, 2]},        # accepted 1, 1
        {"completion_tokens": 9},                                              # no speculation: nothing
    ]
    t = tally(metas, drafts=4)
    d = t.detail()
    assert d is not None and d.histogram == (1, 3, 0, 2) and d.requests == 2 and d.steps == 6
    assert d.accepted == 0 + 3 + 6 and d.accept_length == pytest.approx(1 + 9 / 6)
    assert d.positions == 4  # the deployment drafts 4 a step: position 4 shows, never accepted
    assert d.shares() == pytest.approx([1 / 6, 3 / 6, 0, 2 / 6, 0])
    # position k is accepted in every step that accepted k or more drafts (acceptance is a prefix)
    assert d.by_position() == pytest.approx([5 / 6, 2 / 6, 2 / 6, 0])
    assert d.summary() == "accepted drafts per verify step [1, 3, 0, 2] over 6 steps of 2 requests (accept length 2.50)"
    assert AcceptanceDetail.from_json(d.to_json()) == d
    assert not t.speculative_without_detail


def test_a_speculative_server_without_the_histogram_is_said_not_an_error() -> None:
    t = tally([{"spec_verify_ct": 5, "spec_accept_length": 3.2}, {"spec_verify_ct": 4}])
    assert t.detail() is None and t.speculative_without_detail
    assert acceptance_plot(()) == [NO_DETAIL] == ["no per-request acceptance detail from this server"]
    assert drafts_of({"speculative_num_draft_tokens": 16}) == 15 and drafts_of({}) == 0


#: The plot at 80 columns: the canary (left column of each pair) beside the fleet (right).
SNAPSHOT = """\
  left: serve (canary): accept length 7.26 (50 verify steps, 4 requests)
  right: serve2 (fleet): accept length 4.94 (50 verify steps, 4 requests)
accepted drafts per verify step (% of steps)
 20% ┤       ▁  ▃  ▁
     ┤ ▂  ▆ ▂█ ▄█ ▆█ ▆▆ ▄▂ ▂                       ▆
     ┤▅█ ▇█ ██ ██ ██ ██ ██ █▇ ▇▅ ▅▂ ▅▂ ▂  ▂        █▂
  0% └────────────────────────────────────────────────
      0  1  2  3  4  5  6  7  8  9  10 11 12 13 14 15
acceptance by draft position (% of steps accepting it)
100% ┤▇▆ ▆▃ ▄  ▁
     ┤██ ██ ██ █▄ ▆▁ ▄  ▁
     ┤██ ██ ██ ██ ██ █▆ █▄ ▇▂ ▆▁ ▅▁ ▄▁ ▃▁ ▃▁ ▃▁ ▃▁
  0% └─────────────────────────────────────────────
      1  2  3  4  5  6  7  8  9  10 11 12 13 14 15"""


def test_the_plot_at_80_columns() -> None:
    lines = acceptance_plot([("serve (canary)", CANARY), ("serve2 (fleet)", FLEET)], width=80)
    assert "\n".join(lines) == SNAPSHOT
    assert all(len(line) <= 80 for line in lines)


def test_the_plot_fits_whatever_the_block_and_the_labels() -> None:
    wide = AcceptanceDetail(tuple(range(64)), 2, 63)  # a 64-token block: bins grouped to fit
    long = "a-replica-with-a-very-long-name-indeed.example.internal (canary, new config)"
    for width in (80, 60, 40):
        lines = acceptance_plot([(long, wide), ("fleet", wide)], width=width)
        assert all(len(line) <= width for line in lines), [line for line in lines if len(line) > width]
        assert any("0-" in line for line in lines)  # grouped bins say their range
    one = acceptance_plot([("serve", CANARY)])
    assert one[0] == "  serve: accept length 7.26 (50 verify steps, 4 requests)"
    assert all(len(line) <= 80 for line in one) and "left" not in "\n".join(one)


def _generate(metas: list[dict[str, Any]]) -> Any:
    answers = iter(metas)

    async def generate(_text: str, _max_new: int) -> dict[str, Any]:
        return {"meta_info": next(answers)}

    return generate


def _meta(hist: list[int] | None, tokens: int) -> dict[str, Any]:
    verify = sum(hist) if hist else tokens
    meta: dict[str, Any] = {"completion_tokens": tokens, "e2e_latency": 0.1, "spec_verify_ct": verify}
    if hist:
        meta["spec_correct_drafts_histogram"] = hist
    return meta


def test_the_gate_sums_the_histograms_and_sets_the_canary_beside_the_fleet() -> None:
    prompts = [("a", 32), ("b", 32)]
    base = asyncio.run(measure(_generate([_meta([1, 2, 3], 14), _meta([2, 2], 6)]), prompts, where="serve2"))
    canary = asyncio.run(measure(_generate([_meta([0, 1, 5], 17), _meta([1, 3], 7)]), prompts, where="serve"))
    assert base.acceptance is not None and base.acceptance.histogram == (3, 4, 3) and base.acceptance.requests == 2
    shown = acceptance_figures(canary, base, role="canary")
    assert shown is not None
    line, series = shown
    assert [label for label, _ in series] == ["serve (canary)", "serve2 (fleet)"]
    assert line == ("acceptance per verify step: serve (canary) 2.40 vs serve2 (fleet) 2.00 "
                    "(from spec_correct_drafts_histogram)")


def test_a_gate_on_servers_without_detail_says_so_once() -> None:
    prompts = [("a", 32)]
    base = asyncio.run(measure(_generate([_meta(None, 10) | {"spec_verify_ct": 4}]), prompts, where="serve2"))
    new = asyncio.run(measure(_generate([_meta(None, 10) | {"spec_verify_ct": 4}]), prompts, where="serve"))
    assert base.acceptance is None and base.no_detail
    assert acceptance_figures(base, None, role="fleet") == (NO_DETAIL, ())   # said at the baseline
    assert acceptance_figures(new, base, said=True) is None                  # not again per replica
    vanilla = Figures(1.0, 100.0, 1, 10)
    assert acceptance_figures(vanilla, None) is None  # no speculation: nothing to say


def _run(label: str, hists: list[list[int] | None], rid: str) -> EvalRun:
    tasks = tuple(TaskResult(f"t{i}", ok=True, acceptance_length=2.0, meta_info=_meta(h, 10) | {"spec_verify_ct": 4})
                  for i, h in enumerate(hists))
    return EvalRun(id=rid, label=label, created_at="2026-12-06T18:00:00Z", tasks=tasks,
                   deployment=Deployment(algorithm="DFLASH", block_size=16, num_draft_tokens=16))


def test_eval_runs_give_their_histograms_a_run_beside_its_baseline() -> None:
    new, base = _run("w32", [[1, 2], [0, 1, 1]], "r1"), _run("w16", [[2, 2]], "r0")
    assert run_acceptance(new).detail() == AcceptanceDetail((1, 3, 1), 2, 15)
    series, without = acceptance_series([new, base], base)
    assert [label for label, _ in series] == ["w32", "w16 (baseline)"] and not without
    old = _run("old-sglang", [None], "r2")
    series, without = acceptance_series([old], None)
    assert series == () and without


def test_the_cli_prints_the_plot_under_the_step_line(capsys: pytest.CaptureFixture[str]) -> None:
    from specconsole.cli import _print_step

    _print_step(StepEvent("deploy", "info", "smoke: 64 tokens", step="smoke test", host="serve",
                          acceptance=(("serve", CANARY),)))
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("serve: smoke test: smoke: 64 tokens")
    assert out[1:] == acceptance_plot([("serve", CANARY)])


def test_tally_grows_to_the_longest_histogram() -> None:
    t = AcceptanceTally()
    t.add({"spec_accept_histogram": [1]})
    t.add({"spec_accept_histogram": [0, 0, 0, 4]})
    d = t.detail()
    assert d is not None and d.histogram == (1, 0, 0, 4) and d.field == "spec_accept_histogram" and d.positions == 3


def test_the_audit_log_keeps_the_figures_and_a_replay_reads_them_back() -> None:
    from specconsole.base.events import EventLog
    from specconsole.steps import audit
    from specconsole.ui.console.replay import _acceptance

    log = EventLog()
    series = (("serve (canary)", CANARY), ("serve2 (fleet)", FLEET))
    audit(log)(StepEvent("rollout", "info", "acceptance per verify step: …", step="gate", host="serve",
                         acceptance=series))
    (event,) = log.recent
    assert event.data["acceptance"][0] == {"label": "serve (canary)", **CANARY.to_json()}
    assert _acceptance(event.data["acceptance"]) == series
    assert _acceptance(None) == () and _acceptance([{"label": "x", "histogram": "bad"}]) == ()
    audit(log)(StepEvent("deploy", "info", "no figures"))
    assert "acceptance" not in log.recent[-1].data  # events without detail are written as before
