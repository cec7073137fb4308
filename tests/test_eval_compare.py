"""Comparison tables: values, averages, ratios, best/worst and the vanilla speedup, computed exactly."""

from __future__ import annotations

import json

import pytest

from specconsole.eval.compare import CompareError, compare, short_names, to_json, to_json_obj, to_markdown, to_text
from specconsole.eval.store import Deployment, EvalRun, TaskResult


def _run(run_id: str, label: str, values: dict[str, float | None], *, algo: str | None = "DDTREE",
         tps: dict[str, float] | None = None, kind: str = "measured") -> EvalRun:
    tasks = tuple(TaskResult(t, ok=v is not None, error=None if v is not None else "HTTP 500",
                             acceptance_length=v, tokens_per_s=(tps or {}).get(t) if v is not None else None)
                  for t, v in values.items())
    return EvalRun(id=run_id, label=label, created_at="2026-12-01T00:00:00Z", tasks=tasks,
                   deployment=Deployment(algo), source={"kind": kind})


OURS = _run("ours-4000", "ours step 4000, DDTree-8", {"fizzbuzz": 8.0, "binary_search": 6.5, "lru_cache": 7.25})
BASE = _run("zlab", "baseline (z-lab), DDTree-8", {"fizzbuzz": 12.0, "binary_search": 10.0, "lru_cache": 11.0})


def test_markdown_exactly_like_the_issue_table() -> None:
    cmp = compare([OURS, BASE], BASE)
    md = to_markdown(cmp, legend=False)
    # ratios: 8/12 = 66.67 %, 6.5/10 = 65 %, 7.25/11 = 65.909 %; averages 7.25 and 11; 7.25/11 = 65.909 %
    assert md == (
        "| task | ours step 4000, DDTree-8 | baseline (z-lab), DDTree-8 | ours / baseline |\n"
        "|---|---|---|---|\n"
        "| fizzbuzz | **8.00** | **12.00** | 66.7 % |\n"
        "| binary_search | _6.50_ | _10.00_ | 65.0 % |\n"
        "| lru_cache | 7.25 | 11.00 | 65.9 % |\n"
        "| average | 7.25 | 11.00 | 65.9 % |\n"
    )
    assert to_markdown(cmp).endswith("ratio = run / baseline (baseline (z-lab), DDTree-8).\n")


def test_numbers_are_exact() -> None:
    cmp = compare([OURS, BASE], BASE)
    assert cmp.average(0) == (8.0 + 6.5 + 7.25) / 3
    assert cmp.average(1) == 11.0
    assert cmp.ratio("fizzbuzz", 0) == 8.0 / 12.0 * 100
    assert cmp.average_ratio(0) == cmp.average(0) / 11.0 * 100
    assert cmp.best(0) == "fizzbuzz" and cmp.worst(0) == "binary_search"
    assert cmp.ratio_columns == (0,) and cmp.ratio_header(0) == "ours / baseline"
    js = to_json_obj(cmp)
    assert js["baseline"] == "zlab" and js["metric"] == "acceptance_length"
    assert js["average"] == {"ours-4000": cmp.average(0), "zlab": 11.0}
    assert js["average_ratio_pct"] == {"ours-4000": cmp.average(0) / 11.0 * 100}
    assert js["tasks"][0] == {"task": "fizzbuzz", "values": {"ours-4000": 8.0, "zlab": 12.0},
                              "status": {"ours-4000": "ok", "zlab": "ok"},
                              "ratio_pct": {"ours-4000": 8.0 / 12.0 * 100}}
    assert js["runs"][0]["best"] == "fizzbuzz" and js["runs"][0]["worst"] == "binary_search"
    assert json.loads(to_json(cmp)) == js


def test_the_issue_example_averages() -> None:
    # 7.28 average against 11.26 average: 64.65 % shown as 64.7 % (from unrounded values)
    ours = _run("o", "ours step 4000, DDTree-8", {"a": 7.0, "b": 7.56})
    base = _run("b", "baseline (z-lab), DDTree-8", {"a": 11.0, "b": 11.52})
    line = to_markdown(compare([ours, base], base), legend=False).splitlines()[-1]
    assert line == f"| average | 7.28 | 11.26 | {7.28 / 11.26 * 100:.1f} % |"


def test_three_runs_failed_and_missing_cells_and_text() -> None:
    step2 = _run("ours-2000", "ours step 2000", {"fizzbuzz": 5.0, "binary_search": None, "graph_bfs": 4.0})
    cmp = compare([step2, OURS], BASE)
    assert cmp.tasks == ("fizzbuzz", "binary_search", "graph_bfs", "lru_cache")
    assert [r.id for r in cmp.runs] == ["ours-2000", "ours-4000", "zlab"]
    assert cmp.status("binary_search", 0) == "failed" and cmp.status("lru_cache", 0) == "missing"
    assert cmp.average(0) == 4.5  # failed tasks do not count
    assert cmp.ratio("graph_bfs", 0) is None  # the baseline has no such task
    # first words collide ("ours"): full labels in the ratio headers
    assert cmp.ratio_header(0) == "ours step 2000 / baseline"
    md = to_markdown(cmp, legend=False).splitlines()
    assert md[0] == ("| task | ours step 2000 | ours step 4000, DDTree-8 | baseline (z-lab), DDTree-8 | "
                     "ours step 2000 / baseline | ours step 4000, DDTree-8 / baseline |")
    assert md[3] == "| binary_search | failed | _6.50_ | _10.00_ | n/a | 65.0 % |"
    assert md[4] == "| graph_bfs | _4.00_ | n/a | n/a | n/a | n/a |"
    assert md[-1] == "| average | 4.50 | 7.25 | 11.00 | 40.9 % | 65.9 % |"
    text = to_text(cmp)
    assert "8.00 ▲" in text and "6.50 ▼" in text and "failed" in text
    assert "[1] ours step 2000: ours-2000" in text


def test_vanilla_row_and_speedup() -> None:
    van = _run("van", "vanilla", {"fizzbuzz": 1.0, "lru_cache": 1.0}, algo=None,
               tps={"fizzbuzz": 100.0, "lru_cache": 80.0})
    spec = _run("dfl", "dflash b16", {"fizzbuzz": 6.0, "lru_cache": 5.0}, algo="DFLASH",
                tps={"fizzbuzz": 450.0, "lru_cache": 300.0})
    cmp = compare([spec, van], van)
    assert cmp.vanilla == 1
    assert cmp.speedup("fizzbuzz", 0) == 4.5 and cmp.speedup("lru_cache", 0) == 3.75
    assert cmp.average_speedup(0) == 375.0 / 90.0
    assert cmp.best(1) is None  # 1.0 everywhere: no best/worst
    md = to_markdown(cmp, legend=False).splitlines()
    assert md[:6] == [
        "| task | dflash b16 | vanilla | dflash / vanilla |",
        "|---|---|---|---|",
        "| fizzbuzz | **6.00** | 1.00 | 600.0 % |",
        "| lru_cache | _5.00_ | 1.00 | 500.0 % |",
        "| average | 5.50 | 1.00 | 550.0 % |",
        "| tok/s vs vanilla | 4.17× | 1.00× |  |",
    ]
    assert md[7:] == [
        "| task | dflash b16 tok/s | vanilla tok/s | dflash / vanilla (tok/s) |",
        "|---|---|---|---|",
        "| fizzbuzz | 450.0 | 100.0 | 4.50× |",
        "| lru_cache | 300.0 | 80.0 | 3.75× |",
        "| average | 375.0 | 90.0 | 4.17× |",
    ]
    js = to_json_obj(cmp)
    assert js["vanilla"] == "van" and js["tasks"][0]["speedup_vs_vanilla"] == {"dfl": 4.5}
    assert js["runs"][0]["speedup_vs_vanilla"] == 375.0 / 90.0


def test_other_metric_latency_lower_is_better() -> None:
    a = EvalRun("a", "a", "2026-12-01T00:00:00Z", (TaskResult("x", latency_s=1.0), TaskResult("y", latency_s=2.0)))
    b = EvalRun("b", "b", "2026-12-01T00:00:00Z", (TaskResult("x", latency_s=2.0), TaskResult("y", latency_s=2.0)))
    cmp = compare([a, b], b, "latency_s")
    assert cmp.best(0) == "x" and cmp.worst(0) == "y"
    assert cmp.average_ratio(0) == 1.5 / 2.0 * 100


def test_refusals_and_short_names() -> None:
    with pytest.raises(CompareError, match="two or more runs"):
        compare([OURS])
    with pytest.raises(CompareError, match="listed twice"):
        compare([OURS, OURS])
    with pytest.raises(CompareError, match="unknown metric"):
        compare([OURS, BASE], metric="bleu")
    assert compare([OURS, BASE]).ratio_columns == ()  # no baseline: no ratio column
    assert short_names([OURS, BASE]) == ("ours", "baseline")
    # the baseline may be given on its own and is appended
    cmp = compare([OURS, _run("x", "other", {"fizzbuzz": 2.0})], BASE)
    assert [r.id for r in cmp.runs] == ["ours-4000", "x", "zlab"] and cmp.baseline == 2
