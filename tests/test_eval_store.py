"""The result schema: save/load round trip, import, refusal of wrong schemas and bad values."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from specconsole.eval.store import (
    SCHEMA,
    EvalRun,
    ResultFileError,
    ResultStore,
    RunNotFound,
    TaskResult,
    load_run_file,
    run_from_json,
    write_json_atomic,
)

REPO = Path(__file__).resolve().parents[1]


def _write(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def _minimal(**over: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"schema": SCHEMA, "label": "other tool, DFLASH b16",
                            "tasks": [{"task": "fizzbuzz", "acceptance_length": 6.5},
                                      {"task": "lru_cache", "completion_tokens": 500, "verify_ct": 100}]}
    data.update(over)
    return data


def test_round_trip_keeps_everything(tmp_path: Path) -> None:
    from specconsole.eval.store import Deployment

    run = EvalRun(id="20261202T183000Z-a", label="a", created_at="2026-12-02T18:30:00Z",
                  tasks=(TaskResult("fizzbuzz", acceptance_length=6.0, tokens_per_s=400.0, latency_s=1.25,
                                    completion_tokens=480, verify_ct=80, meta_info={"completion_tokens": 480,
                                                                                    "spec_verify_ct": 80}),
                         TaskResult("lru_cache", ok=False, error="HTTP 500: boom")),
                  deployment=Deployment("DFLASH", block_size=16, draft_window=32, draft_model="/m/d",
                                        sglang_version="0.5.23"),
                  source={"kind": "measured"})
    store = ResultStore(tmp_path)
    saved = store.save(run)
    assert saved.path == str(tmp_path / "20261202T183000Z-a.json")
    back = load_run_file(saved.path)
    assert back.tasks == run.tasks and back.deployment.draft_window == 32 and back.label == "a"
    assert back.average() == 6.0
    # a second save with the same id does not overwrite
    again = store.save(run)
    assert again.id == "20261202T183000Z-a-2"
    assert [r.id for r in store.runs()] == ["20261202T183000Z-a", "20261202T183000Z-a-2"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left


def test_atomic_write_leaves_the_old_file_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    write_json_atomic(target, {"ok": 1})
    with pytest.raises(ValueError):
        write_json_atomic(target, {"bad": float("nan")})  # refused mid-write
    assert json.loads(target.read_text()) == {"ok": 1}
    assert os.listdir(tmp_path) == ["r.json"]


@pytest.mark.parametrize(("data", "expected"), [
    ({"schema": "specconsole.eval/2", "label": "x", "tasks": []},
     "schema version 'specconsole.eval/2' is not supported (this specconsole reads specconsole.eval/1) "
     "(fix: re-export it as specconsole.eval/1, or upgrade specconsole)"),
    ({"schema": "lm-eval-harness/0.4", "results": {}},
     "schema 'lm-eval-harness/0.4' is not a specconsole eval result (expected specconsole.eval/1) "
     "(fix: convert it to specconsole.eval/1 as described in docs/eval-results-schema.md)"),
    ({"label": "x", "tasks": [{"task": "a", "acceptance_length": 2}]},
     'not a specconsole.eval/1 result (no "schema" key) (fix: convert it to the schema in '
     'docs/eval-results-schema.md ("schema": "specconsole.eval/1"), then: specconsole eval import FILE)'),
    ([1, 2], "not a specconsole.eval/1 result (the top level is a JSON list)"),
    ("{not json", "not valid JSON (Expecting property name enclosed in double quotes at line 1 column 2)"),
])
def test_wrong_schema_is_refused_with_one_line(tmp_path: Path, data: Any, expected: str) -> None:
    path = _write(tmp_path / "foreign.json", data)
    with pytest.raises(ResultFileError) as err:
        load_run_file(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: {expected}")
    assert "\n" not in msg
    assert err.value.exit_code == 2
    # the store refuses to import it and lists it as a problem instead of crashing
    store = ResultStore(tmp_path / "store")
    with pytest.raises(ResultFileError):
        store.import_file(path)
    assert not (tmp_path / "store").exists()
    bad_store = ResultStore(tmp_path)
    assert bad_store.runs() == []
    assert bad_store.problems and bad_store.problems[0][0] == str(path)


@pytest.mark.parametrize(("tasks", "key", "problem"), [
    ([], "tasks", "must be a non-empty list"),
    ([{"acceptance_length": 2}], "tasks[0].task", "is missing"),
    ([{"task": "a", "acceptance_length": "6.1"}], "tasks[0].acceptance_length", "must be a number, got '6.1'"),
    ([{"task": "a", "acceptance_length": 0.6}], "tasks[0].acceptance_length", "must be >= 1.0 (it includes the bonus"),
    ([{"task": "a", "acceptance_length": 6.1, "completion_tokens": 500, "verify_ct": 100}],
     "tasks[0].acceptance_length", "6.1 disagrees with completion_tokens / verify_ct = 500/100 = 5.0000"),
    ([{"task": "a", "status": "maybe"}], "tasks[0].status", 'must be "ok" or "failed"'),
    ([{"task": "a"}], "tasks[0]", "an ok task needs acceptance_length, tokens_per_s or latency_s"),
    ([{"task": "a", "acceptance_length": 2}, {"task": "a", "acceptance_length": 3}], "tasks[1].task", "duplicate"),
])
def test_invalid_values_name_the_key(tmp_path: Path, tasks: list[Any], key: str, problem: str) -> None:
    path = _write(tmp_path / "r.json", _minimal(tasks=tasks))
    with pytest.raises(ResultFileError) as err:
        load_run_file(path)
    assert str(err.value).startswith(f"{path}: {key}: {problem}")


def test_import_of_a_minimal_external_file(tmp_path: Path) -> None:
    src = _write(tmp_path / "external.json", _minimal(created_at="2026-11-30T09:00:00Z",
                                                      deployment={"algorithm": "dflash", "block_size": 16}))
    store = ResultStore(tmp_path / "results")
    run = store.import_file(src)
    assert run.id == "20261130T090000Z-other-tool-dflash-b16"
    assert run.kind == "imported" and run.source["imported_from"] == str(src)
    assert run.deployment.algorithm == "DFLASH"
    assert run.task("lru_cache").acceptance_length == 5.0  # type: ignore[union-attr]  # from 500 / 100
    assert run.average() == pytest.approx(5.75)
    stored = json.loads(Path(run.path).read_text())  # type: ignore[arg-type]
    assert stored["schema"] == SCHEMA and stored["summary"]["acceptance_length_avg"] == pytest.approx(5.75)
    with pytest.raises(ResultFileError, match=r"already stored.*fix: pass --force"):
        store.import_file(src)
    assert store.import_file(src, overwrite=True).id == run.id
    assert len(store.runs()) == 1


def test_failed_task_and_vanilla_defaults() -> None:
    run = run_from_json(_minimal(deployment={"algorithm": "none"}, tasks=[
        {"task": "a", "completion_tokens": 300, "tokens_per_s": 90.0},
        {"task": "b", "status": "failed", "error": "timeout\nsecond line"}]))
    assert run.deployment.vanilla
    assert run.task("a").acceptance_length == 1.0  # type: ignore[union-attr]
    b = run.task("b")
    assert b is not None and not b.ok and b.error == "timeout"
    # no deployment given: unknown, never taken for vanilla
    unknown = run_from_json(_minimal(tasks=[{"task": "a", "completion_tokens": 300, "tokens_per_s": 90.0}]))
    assert unknown.deployment.unknown and not unknown.deployment.vanilla
    assert unknown.task("a").acceptance_length is None  # type: ignore[union-attr]
    assert unknown.to_json()["deployment"]["algorithm"] == "unknown"
    assert run_from_json(unknown.to_json()).deployment.unknown


def test_resolve_by_id_prefix_label_and_path(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "results")
    for label, when in (("ours step 2000", "2026-11-01T00:00:00Z"), ("ours step 4000", "2026-11-02T00:00:00Z"),
                        ("baseline (z-lab)", "2026-10-01T00:00:00Z")):
        store.import_file(_write(tmp_path / f"in-{when[:10]}.json", _minimal(label=label, created_at=when)))
    assert store.resolve("ours step 4000").label == "ours step 4000"
    assert store.resolve("20261101").label == "ours step 2000"
    assert store.resolve("base").label == "baseline (z-lab)"
    assert store.resolve(str(tmp_path / "in-2026-10-01.json")).label == "baseline (z-lab)"
    with pytest.raises(RunNotFound, match="ambiguous"):
        store.resolve("ours")
    with pytest.raises(RunNotFound, match="no run 'nope'"):
        store.resolve("nope")
    with pytest.raises(ResultFileError, match="file not found"):
        store.resolve("missing.json")
    # a copy of a stored run under another name: one run, the copy reported
    (store.root / "copy.json").write_bytes(store.path_for(store.resolve("base").id).read_bytes())
    assert len(store.runs()) == 3
    assert [Path(p).name for p, _ in store.problems] == ["copy.json"]
    assert "is already used by" in store.problems[0][1]


def test_shipped_baselines_load_and_are_labelled() -> None:
    files = sorted((REPO / "configs" / "baselines").glob("*.json"))
    assert files
    for f in files:
        run = load_run_file(f)
        assert run.kind == "published"
        assert "arXiv 2604.12989" in run.source["reference"]
        assert run.label.startswith("baseline (DDTree paper)")
        assert {t.task for t in run.tasks} == {"humaneval", "mbpp", "livecodebench"}
    ddtree = load_run_file(REPO / "configs" / "baselines" / "ddtree-paper-qwen3-8b-dflash-b16-ddtree.json")
    assert ddtree.average() == pytest.approx((9.67 + 9.07 + 10.28) / 3)


def test_a_results_file_nested_hundreds_deep_is_refused_in_one_line(tmp_path: Path) -> None:
    deep = _write(tmp_path / "deep.json", '{"schema": ' + "[" * 5000 + "]" * 5000 + "}")
    with pytest.raises(ResultFileError, match=r"deep\.json: tables or arrays nested too deeply to read"):
        load_run_file(deep)
