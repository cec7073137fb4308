"""`specconsole eval import` of z-lab's benchmark output (`python -m dflash.benchmark --backend
sglang`): its printed summary blocks, one file per dataset or concatenated, become one run with a
task per dataset."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specconsole.eval.store import ResultFileError, ResultStore, load_run_file
from specconsole.eval.zlab_import import import_benchmark, is_benchmark_file, looks_like_benchmark, parse_blocks

FIXTURES = Path(__file__).parent / "fixtures" / "zlab"
EXE = Path(sys.executable).parent / "specconsole"


def cli(*args: str, results: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(EXE), "eval", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SPECCONSOLE_EVAL_RESULTS": str(results)})


def test_one_block_with_the_noise_around_it() -> None:
    text = (FIXTURES / "gsm8k.txt").read_bytes().decode()
    assert looks_like_benchmark(text)
    (block,) = parse_blocks(text, "gsm8k.txt")
    assert block.dataset == "gsm8k" and block.line == 8
    assert block.values == {"backend": "sglang", "dataset": "gsm8k", "num_prompts": 1024, "concurrency": 1,
                            "latency_s": 1647.3, "output_tokens": 312345, "tokens_per_s": 189.61,
                            "accept_length": 6.352, "spec_verify_ct": 49187}
    assert block.acceptance_length() == 6.352  # the printed mean, not 312345 / 49187


def test_concatenated_blocks_and_thousands_separators() -> None:
    blocks = parse_blocks((FIXTURES / "concatenated.txt").read_bytes().decode(), "all.txt")
    assert [b.dataset for b in blocks] == ["humaneval", "mbpp", "mt-bench"]
    assert blocks[0].values["tokens_per_s"] == 269.62 and blocks[0].values["concurrency"] == 4
    assert blocks[2].acceptance_length() is None  # no speculation: no Accept length, no verify ct
    one = parse_blocks("Dataset: x\nOutput tokens: 1,000\nThroughput: 1,234.50 tok/s\nSpec verify ct: 250\n", "x")
    assert one[0].values["tokens_per_s"] == 1234.5 and one[0].acceptance_length() == 4.0


def test_files_per_dataset_become_one_run(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "results")
    run = import_benchmark(store, [str(FIXTURES / "gsm8k.txt"), str(FIXTURES / "math500.txt")],
                           label="z-lab DFlash b16 (published setup)")
    assert [t.task for t in run.tasks] == ["gsm8k", "math500"]
    gsm = run.task("gsm8k")
    assert gsm is not None and (gsm.acceptance_length, gsm.tokens_per_s, gsm.completion_tokens) == (
        6.352, 189.61, 312345)
    assert gsm.meta_info is not None and gsm.meta_info["spec_verify_ct"] == 49187
    assert run.kind == "imported" and run.source["tool"] == "dflash.benchmark"
    assert run.deployment.unknown  # the block does not say what was served
    # stored as an ordinary specconsole.eval/1 file that reads back the same
    again = load_run_file(run.path or "")
    assert again.id == run.id and [t.acceptance_length for t in again.tasks] == [6.352, 7.79]
    assert [r.id for r in store.runs()] == [run.id]
    with pytest.raises(ResultFileError, match="already stored"):
        import_benchmark(store, [str(FIXTURES / "gsm8k.txt"), str(FIXTURES / "math500.txt")],
                         label="z-lab DFlash b16 (published setup)")


def test_the_same_dataset_twice_is_refused_naming_both(tmp_path: Path) -> None:
    with pytest.raises(ResultFileError) as err:
        import_benchmark(ResultStore(tmp_path), [str(FIXTURES / "gsm8k.txt"), str(FIXTURES / "gsm8k.txt")])
    assert "dataset 'gsm8k' again at line 8" in str(err.value) and "gsm8k.txt:8" in str(err.value)


def test_a_bad_value_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("Dataset: gsm8k\nThroughput: fast tok/s\n")
    assert not is_benchmark_file(bad)  # "fast" is no number: not recognised as benchmark output
    bad.write_text("Dataset: gsm8k\nThroughput: 12.5 tok/s\nAccept length: six\n")
    with pytest.raises(ResultFileError) as err:
        import_benchmark(ResultStore(tmp_path / "r"), [str(bad)])
    assert str(err.value).startswith(f"{bad}: line 3: Accept length: 'six' is not a number")


def test_json_results_are_not_taken_for_benchmark_output(tmp_path: Path) -> None:
    f = tmp_path / "run.json"
    f.write_text('{"schema": "specconsole.eval/1", "label": "Dataset: x", "tasks": [{"task": "Throughput: 1 tok/s"}]}')
    assert not is_benchmark_file(f)


def test_cli_imports_benchmark_output_and_json_side_by_side(tmp_path: Path) -> None:
    results = tmp_path / "results"
    res = cli("import", str(FIXTURES / "concatenated.txt"), "--label", "z-lab b16 coding", results=results)
    assert res.returncode == 0, res.stderr
    assert "from dflash.benchmark output: 3 task(s) (humaneval τ 6.61, mbpp τ 5.99, mt-bench)" in res.stdout
    listed = cli("list", results=results)
    assert listed.returncode == 0 and "z-lab b16 coding" in listed.stdout
    # a directory is neither: the JSON import's one-line error, exit status non-zero, no traceback
    res = cli("import", str(tmp_path), results=results)
    assert res.returncode != 0 and "Traceback" not in res.stderr and str(tmp_path) in res.stderr
