"""User folders follow the XDG variables (platformdirs); shipped files come from the package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specconsole.base import paths
from specconsole.config import ConsoleSettings, default_config_path
from specconsole.eval.store import default_results_dir
from specconsole.eval.suite import default_suite_path
from specconsole.ui.style.themes import load_themes, theme_dirs

LIGHT = (Path(__file__).resolve().parents[1] / "src" / "specconsole" / "data" / "themes" / "light.toml").read_text()


@pytest.fixture
def xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    config, state = tmp_path / "xdg-config", tmp_path / "xdg-state"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    for var in ("SPECCONSOLE_CONFIG", "SPECCONSOLE_EVAL_RESULTS", "SPECCONSOLE_LAB_DIR", "SPECCONSOLE_THEMES"):
        monkeypatch.delenv(var, raising=False)
    return config / "specconsole", state / "specconsole"


def test_user_folders_follow_xdg(xdg: tuple[Path, Path]) -> None:
    config, state = xdg
    assert paths.config_dir() == config and paths.state_dir() == state
    assert default_config_path() is None  # no file there yet
    config.mkdir(parents=True)
    (config / "config.toml").write_text("")
    assert default_config_path() == str(config / "config.toml")
    settings = ConsoleSettings()  # the remembered theme lives in state_dir, beside the audit log
    assert (settings.state_dir, settings.audit_log) == (str(state), str(state / "audit.log"))
    assert default_results_dir() == state / "eval"


def test_user_themes_load_from_the_xdg_config_folder(xdg: tuple[Path, Path]) -> None:
    config, _ = xdg
    (config / "themes").mkdir(parents=True)
    (config / "themes" / "mine.toml").write_text(LIGHT.replace('name = "light"', 'name = "mine"'))
    assert config / "themes" in theme_dirs()
    loaded = load_themes()
    assert loaded.names[:3] == ["dark", "light", "high-contrast"] and "mine" in loaded.names
    assert loaded.sources["mine"] == config / "themes" / "mine.toml"


def test_lab_and_demo_folders_follow_xdg_state_home(xdg: tuple[Path, Path]) -> None:
    _, state = xdg
    probe = ("import json; from specconsole.lab.parts.environment import default_demo_dir, default_lab_dir\n"
             "print(json.dumps([str(default_lab_dir()), str(default_demo_dir())]))")
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=os.environ)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == [str(state / "lab"), str(state / "demo")]


def test_without_xdg_the_linux_defaults_are_unchanged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    assert paths.config_dir() == tmp_path / ".config" / "specconsole"
    assert paths.state_dir() == tmp_path / ".local" / "state" / "specconsole"


def test_env_overrides_still_win(xdg: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECCONSOLE_CONFIG", str(tmp_path / "c.toml"))
    monkeypatch.setenv("SPECCONSOLE_EVAL_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("SPECCONSOLE_EVAL_SUITE", str(tmp_path / "suite.toml"))
    assert default_config_path() == str(tmp_path / "c.toml")
    assert default_results_dir() == tmp_path / "results"
    assert default_suite_path() == tmp_path / "suite.toml"


def test_shipped_files_are_package_data() -> None:
    assert paths.data_path("eval-coding.toml").is_file()
    assert sorted(p.name for p in paths.data_path("themes").glob("*.toml")) == [
        "dark.toml", "high-contrast.toml", "light.toml"]
    assert default_suite_path() == paths.data_path("eval-coding.toml")
