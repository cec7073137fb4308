"""The benchmark definition: the shipped coding suite, extension, and one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from specconsole.base.errors import ConfigError
from specconsole.eval.suite import load_suite

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "src" / "specconsole" / "data" / "eval-coding.toml"
TEN = ("fizzbuzz", "binary_search", "linked_list_reverse", "json_parser", "async_rate_limiter",
       "trie_autocomplete", "merge_sort", "lru_cache", "graph_bfs", "matrix_multiply")


def test_shipped_suite_has_the_ten_tasks_greedy() -> None:
    suite = load_suite()
    assert Path(suite.path) == SHIPPED
    assert suite.task_names == TEN
    assert suite.temperature == 0.0 and suite.max_new_tokens == 512
    for t in suite.tasks:
        text = suite.text_for(t)
        assert t.prompt in text and text.startswith("<|im_start|>user\n") and len(t.prompt) > 150
    assert len({t.prompt for t in suite.tasks}) == 10
    assert suite.select(["lru_cache", "fizzbuzz", "lru_cache"]).task_names == ("lru_cache", "fizzbuzz")
    with pytest.raises(ConfigError, match=r"unknown task 'fizz' .*pick from fizzbuzz, binary_search"):
        suite.select(["fizz"])


@pytest.mark.parametrize("extends", [str(SHIPPED), "eval-coding.toml"], ids=["path", "shipped-name"])
def test_extends_adds_and_replaces(tmp_path: Path, extends: str) -> None:
    mine = tmp_path / "mine.toml"
    mine.write_text(f'''
[suite]
extends = "{extends}"
name = "coding-plus"
max_new_tokens = 256

[[tasks]]
name = "fizzbuzz"
prompt = "FizzBuzz in Rust, please."
max_new_tokens = 64

[[tasks]]
name = "regex_engine"
prompt = "Write a tiny regex matcher supporting . * ^ $."
''')
    suite = load_suite(mine)
    assert suite.name == "coding-plus" and suite.task_names == (*TEN, "regex_engine")
    fb = suite.tasks[0]
    assert fb.prompt == "FizzBuzz in Rust, please." and suite.max_tokens_for(fb) == 64
    assert suite.max_tokens_for(suite.tasks[1]) == 256 and suite.max_tokens_for(fb, 32) == 32
    assert suite.prompt_template.startswith("<|im_start|>")  # inherited


@pytest.mark.parametrize(("body", "expected"), [
    ('[suite]\ntemperature = -1\n[[tasks]]\nname="a"\nprompt="p"', "suite.temperature: must be a number >= 0"),
    ('[[tasks]]\nname="a b"\nprompt="p"', "tasks[0].name: must be a simple name"),
    ('[[tasks]]\nname="a"\nprompt=""', "tasks[0].prompt: must be a non-empty string"),
    ('[[tasks]]\nname="a"\nprompt="p"\nmax_new_tokens=0', "tasks[0].max_new_tokens: must be a positive integer"),
    ('[[tasks]]\nname="a"\nprompt="p"\n[[tasks]]\nname="a"\nprompt="q"', "tasks[1].name: duplicate task 'a'"),
    ('[suite]\nprompt_template = "no placeholder"\n[[tasks]]\nname="a"\nprompt="p"',
     "suite.prompt_template: must be a string containing {prompt}"),
    ('[suite]\nname = "x"', "tasks: no tasks defined"),
    ('[suite]\nextends = "self.toml"\n[[tasks]]\nname="a"\nprompt="p"', "suite.extends: extends itself"),
    ("[[tasks]\n", "invalid TOML"),
])
def test_errors_name_file_and_key(tmp_path: Path, body: str, expected: str) -> None:
    path = tmp_path / "self.toml"
    path.write_text(body)
    with pytest.raises(ConfigError) as err:
        load_suite(path)
    assert str(err.value).startswith(f"{path}: {expected}") and "(fix: " in str(err.value)
