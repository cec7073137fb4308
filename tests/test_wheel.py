"""The built wheel works on its own: installed into a fresh venv (its dependencies from the console's
lock, requirements/console.txt, as an operator installs it; ``pip check`` then holds the wheel's own
declared ranges against them), run from a folder outside the checkout, it has its themes, its eval
suite and its command."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("wheel")]  # one wheel and venv per run, not one per worker

REPO = Path(__file__).resolve().parents[1]
THEMES = ["dark", "light", "high-contrast"]
TEN = ["fizzbuzz", "binary_search", "linked_list_reverse", "json_parser", "async_rate_limiter",
       "trie_autocomplete", "merge_sort", "lru_cache", "graph_bfs", "matrix_multiply"]


def run(cmd: list[str | Path], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    res = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"{' '.join(map(str, cmd))} exited {res.returncode}:\n{res.stdout}\n{res.stderr}"
    return res


def _setuptools_major() -> int:
    try:
        return int(importlib.metadata.version("setuptools").split(".")[0])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return 0


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel built from a copy of this checkout's sources (no stale build/)."""
    base = tmp_path_factory.mktemp("wheel")
    tree = base / "tree"
    tree.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, tree / name)
    shutil.copytree(REPO / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    isolation = ["--no-build-isolation"] if _setuptools_major() >= 71 else []  # this env's backend (has bdist_wheel)
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", *isolation, "-w", base / "dist", tree], cwd=base)
    (wheel,) = (base / "dist").glob("specconsole-*.whl")
    env = base / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", env], cwd=base)
    pip = [sys.executable, "-m", "pip", "--python", env / "bin" / "python"]
    run([*pip, "install", "--quiet", "--require-hashes", "-r", REPO / "requirements" / "console.txt"], cwd=base)
    run([*pip, "install", "--quiet", "--no-deps", wheel], cwd=base)
    run([*pip, "check"], cwd=base)  # the wheel's Requires-Dist against what the lock installed
    return env


@pytest.fixture
def outside(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A working folder outside the checkout and an environment with empty user folders."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECCONSOLE_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "config"),
               XDG_STATE_HOME=str(tmp_path / "state"))
    return tmp_path, env


def probe(venv: Path, code: str, cwd: Path, env: dict[str, str]) -> object:
    return json.loads(run([venv / "bin" / "python", "-c", f"import json\n{code}"], cwd=cwd, env=env).stdout)


def test_the_command_runs(venv: Path, outside: tuple[Path, dict[str, str]]) -> None:
    cwd, env = outside
    res = run([venv / "bin" / "specconsole", "--help"], cwd=cwd, env=env)
    assert res.stdout.startswith("usage: specconsole") and "eval" in res.stdout
    where = probe(venv, "import specconsole; print(json.dumps(specconsole.__file__))", cwd, env)
    assert Path(str(where)).is_relative_to(venv), where  # the wheel's copy, not this checkout


def test_shipped_themes_load(venv: Path, outside: tuple[Path, dict[str, str]]) -> None:
    cwd, env = outside
    loaded = probe(venv, "from specconsole.ui.style.themes import load_themes\nt = load_themes()\n"
                   "print(json.dumps({'names': t.names, 'warnings': t.warnings}))", cwd, env)
    assert loaded == {"names": THEMES, "warnings": []}


def test_shipped_eval_suite_loads(venv: Path, outside: tuple[Path, dict[str, str]]) -> None:
    cwd, env = outside
    code = ("from specconsole.base.errors import ConfigError\nfrom specconsole.eval.suite import load_suite\n"
            "try:\n    print(json.dumps(list(load_suite().task_names)))\n"
            "except ConfigError as err:\n    print(json.dumps(str(err)))")
    assert probe(venv, code, cwd, env) == TEN
