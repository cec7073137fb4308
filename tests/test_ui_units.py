"""The console's pure parts: the action registry and [keys], theme files and the remembered
theme, the fixed-scale plot, and cell formatting. No terminal, no hosts."""

from __future__ import annotations

import json
import math
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from specconsole.ui.registry import BY_ID, REGISTRY, key_display, normalize_key, plan_keys
from specconsole.ui.style import formatting as fmt
from specconsole.ui.style.themes import BUNDLED_DIR, ConsoleState, load_themes, pick_theme
from specconsole.ui.widgets.plot_row import BLOCKS, MISSING, bar_rows

# ------------------------------------------------------------------------------ registry


def test_registry_ids_unique_and_destructive_set() -> None:
    ids = [s.id for s in REGISTRY]
    assert len(ids) == len(set(ids))
    assert {s.id for s in REGISTRY if s.destructive} == {"kill_training", "deploy", "deploy_checkpoint", "rollout"}
    assert BY_ID["kill_training"].key == "k" and BY_ID["deploy"].key == "d"
    assert BY_ID["help"].key == "question_mark" and BY_ID["cycle_theme"].key == "t"
    for spec in REGISTRY:
        assert spec.description and spec.help
        if spec.destructive:  # a destructive key always goes through a flow (its confirm lives there)
            assert spec.flow is not None


def test_plan_default_keys() -> None:
    plan = plan_keys({}, read_only=False)
    assert [b.spec.id for b in plan.bound] == [s.id for s in REGISTRY]
    assert plan.key_of("kill_training") == "k"
    assert not plan.removed and not plan.warnings


def test_plan_read_only_removes_destructive() -> None:
    plan = plan_keys({}, read_only=True)
    assert {s.id for s in plan.removed} == {"kill_training", "deploy", "deploy_checkpoint", "rollout"}
    assert not plan.is_bound("kill_training") and not plan.is_bound("deploy")
    assert plan.is_bound("help") and plan.is_bound("quit")


def test_plan_remap_and_conflicts() -> None:
    plan = plan_keys({"kill_training": "ctrl+k", "deploy": "Ctrl+D"}, read_only=False)
    assert plan.key_of("kill_training") == "ctrl+k"
    assert plan.key_of("deploy") == "ctrl+d"
    assert not plan.warnings

    # a remap onto another action's default key takes it; that action is left without one
    plan = plan_keys({"deploy": "q"}, read_only=False)
    assert plan.key_of("deploy") == "q"
    assert plan.key_of("quit") is None
    assert any("quit" in w and "keys.quit" in w for w in plan.warnings)

    plan = plan_keys({"nope": "x", "help": "??bad"}, read_only=False)
    assert any(w.startswith("keys.nope: no such action") for w in plan.warnings)
    assert any(w.startswith("keys.help") and "not a key name" in w for w in plan.warnings)
    assert plan.key_of("help") == "question_mark"

    plan = plan_keys({"help": "x", "refresh": "x"}, read_only=False)
    assert plan.key_of("help") == "x" and plan.key_of("refresh") == "r"
    assert any("already used by help" in w for w in plan.warnings)


def test_key_names() -> None:
    assert normalize_key("?") == "question_mark"
    assert normalize_key("Ctrl+K") == "ctrl+k"
    assert normalize_key("f5") == "f5"
    assert normalize_key("hyper+space") == "hyper+space"
    assert normalize_key("bogus+k") is None
    assert key_display("question_mark") == "?"
    assert key_display("ctrl+k") == "^k"


# ------------------------------------------------------------------------------ themes


def test_bundled_themes_load() -> None:
    loaded = load_themes([BUNDLED_DIR])
    assert loaded.warnings == []
    assert loaded.names[:3] == ["dark", "light", "high-contrast"]
    assert loaded.themes["light"].dark is False
    assert loaded.themes["high-contrast"].background == "#000000"


def test_broken_theme_file_is_skipped_with_a_reason(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text('name = "bad"\nprimary = "not-a-colour"\n')
    (tmp_path / "typo.toml").write_text('name = "typo"\nprimray = "#ffffff"\n')
    (tmp_path / "broken.toml").write_text("name = \n")
    (tmp_path / "mine.toml").write_text('name = "mine"\nprimary = "#123456"\n')
    loaded = load_themes([BUNDLED_DIR, tmp_path])
    assert "mine" in loaded.names and "bad" not in loaded.names and "typo" not in loaded.names
    text = "\n".join(loaded.warnings)
    assert "bad.toml: primary: 'not-a-colour' is not a colour (fix: " in text
    assert "typo.toml: primray: unknown key (fix: did you mean 'primary'?)" in text
    assert "broken.toml: invalid TOML" in text


def test_theme_state_and_precedence(tmp_path: Path) -> None:
    state = ConsoleState(tmp_path / "state")
    assert state.theme is None
    assert state.remember(theme="light") is None
    assert json.loads((tmp_path / "state" / "console.json").read_text()) == {"theme": "light"}
    assert ConsoleState(tmp_path / "state").theme == "light"
    names = ["dark", "light", "high-contrast"]
    assert pick_theme(names, cli="high-contrast", remembered="light", configured="dark") == "high-contrast"
    assert pick_theme(names, cli=None, remembered="light", configured="dark") == "light"
    assert pick_theme(names, cli=None, remembered="gone", configured="high-contrast") == "high-contrast"
    assert pick_theme(names, cli=None, remembered=None, configured=None) == "dark"
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert "cannot remember the theme" in (ConsoleState(blocked / "sub").remember(theme="x") or "")


# ------------------------------------------------------------------------------ plot


def test_bar_rows_fixed_scale() -> None:
    # 0..100 fixed: 96-98 % stays near full, never rescaled to fill the range
    (row,) = bar_rows([96.0, 97.0, 98.0], width=3, height=1, maximum=100.0)
    assert row == BLOCKS[8] * 3
    (row,) = bar_rows([50.0, 0.0, 100.0, None], width=6, height=1, maximum=100.0)
    assert row == "  " + BLOCKS[4] + " " + BLOCKS[8] + MISSING
    top, bottom = bar_rows([25.0, 75.0], width=2, height=2, maximum=100.0)
    assert bottom == BLOCKS[4] + BLOCKS[8] and top == " " + BLOCKS[4]
    (row,) = bar_rows([250.0, -5.0, 1.0], width=3, height=1, maximum=100.0)
    assert row == BLOCKS[8] + " " + BLOCKS[1]  # clamped; a small non-zero value still shows


def _bar_rows_by_column(values: list[float | None], width: int, height: int, maximum: float | None,
                       minimum: float | None = 0.0) -> list[str]:
    """The plot drawn column by column, as the documented rules say (the oracle for bar_rows)."""
    data = values[-width:] if width else []
    pad = width - len(data)
    finite = [v for v in data if v is not None and math.isfinite(v)]
    top = maximum if maximum is not None else max(finite, default=0.0)
    if minimum is None:
        low = min(finite, default=0.0)
        minimum = low - 0.1 * (top - low)
    rows = [[" "] * width for _ in range(height)]
    for col, value in enumerate(data, pad):
        if value is None or not math.isfinite(value):
            rows[-1][col] = MISSING
            continue
        span = top - minimum
        frac = 0.0 if span <= 0 else min(1.0, max(0.0, (value - minimum) / span))
        eighths = round(frac * height * 8) or (1 if value > minimum else 0)
        for level in range(height):
            rows[height - 1 - level][col] = BLOCKS[min(8, max(0, eighths - level * 8))]
    return ["".join(r) for r in rows]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.none(), st.sampled_from([0.0, 1.0, 50.0, 99.5, 100.0, 250.0, -5.0, math.nan, math.inf]),
                          st.floats(-10, 1000)), max_size=40),
       st.integers(0, 30), st.integers(1, 3), st.sampled_from([None, 100.0, 0.0]), st.sampled_from([None, 0.0]))
def test_bar_rows_match_the_column_rules(values: list[float | None], width: int, height: int,
                                         maximum: float | None, minimum: float | None) -> None:
    assert bar_rows(values, width, height, maximum, minimum) == _bar_rows_by_column(values, width, height, maximum,
                                                                                    minimum)


def test_bar_rows_auto_scales() -> None:
    (row,) = bar_rows([10.0, 20.0], width=2, height=1, maximum=None)  # zero baseline, top = max
    assert row == BLOCKS[4] + BLOCKS[8]
    (row,) = bar_rows([2.0, 1.0], width=2, height=1, maximum=None, minimum=None)  # trend
    assert row[0] == BLOCKS[8] and row[1] in BLOCKS[1:3]
    assert bar_rows([], width=4, height=1, maximum=None) == ["    "]


# ------------------------------------------------------------------------------ format


def test_formatting() -> None:
    assert fmt.si(950) == "950" and fmt.si(48210) == "48.2k" and fmt.si(2.5e6) == "2.50M" and fmt.si(None) == "n/a"
    assert fmt.num(None) == "n/a" and fmt.num(97.4, unit="%") == "97%"
    assert fmt.short_gpu_name("NVIDIA H200") == "H200"
    assert fmt.progress_text(12345, 198000) == "12,345/198,000"
    assert fmt.progress_text(None, 3000) == "n/a (of 3,000)"


def test_gpu_cells_never_invent_values() -> None:
    from specconsole.formats.nvidia_smi import GpuProcess, GpuReading

    r = GpuReading(index=3, uuid="u3", name="NVIDIA H200", utilization_pct=None, memory_used_mib=61000.0,
                   memory_total_mib=143771.0, power_draw_w=None, power_limit_w=700.0, temperature_c=91.0,
                   unavailable={"utilization.gpu": "[N/A]", "power.draw": "[N/A]"})
    procs = [GpuProcess(10, "/usr/bin/python3", 500.0, "u3", 3), GpuProcess(11, "/usr/bin/worker", 900.0, "u3", 3)]
    cells = [c.plain for c in fmt.gpu_cells(r, procs, fmt.Palette(), stale=False)]
    assert cells == ["3", "H200", "n/a", "59.6/140.4", "n/a/700", "91°C", "11 worker +1"]
    hot = fmt.gpu_cells(r, procs, fmt.Palette(error="#ff0000"), stale=False)[5]
    assert "#ff0000" in str(hot.style)
    dimmed = fmt.gpu_cells(r, procs, fmt.Palette(), stale=True)
    assert all(str(c.style) == "dim" for c in dimmed)
    unknown = fmt.gpu_cells(r, None, fmt.Palette(), stale=False)  # process list not known yet
    assert unknown[-1].plain == "…" and [c.plain for c in unknown[:-1]] == cells[:-1]
