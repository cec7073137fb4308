"""Layout by size (issue 21), on the frozen sample console: no pane holds a block of empty rows
while another is cut, the events pane is as tall as its lines (or the room left), and the eval
comparison (average row, ratio, task rows) is on the first screen at 80x24, whole from 120x40.

The demo itself, read from a real tmux, is tests/test_tmux_first_screen.py."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import sample_data as sd
from specconsole.ui.console.app import ConsoleApp
from specconsole.ui.panes.eval_pane import EvalPane
from specconsole.ui.panes.events_pane import EventsPane
from specconsole.ui.panes.host_pane import HostPane

pytestmark = pytest.mark.timeout(60)

RATIO = re.compile(r"average\s.*\d+\.\d %")


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ConsoleApp:
    monkeypatch.setenv("SPECCONSOLE_EVAL_RESULTS", str(sd.save_runs(tmp_path / "eval", sd.comparison_runs())))
    return sd.frozen_console(str(tmp_path / "state"))  # type: ignore[no-any-return]


async def drawn(app: ConsoleApp, pilot: Any) -> str:
    await pilot.pause()
    app.refresh_panes()
    await pilot.pause(0.2)
    return app.screen_text()


def task_rows(screen: str) -> list[str]:
    return [line for line in screen.splitlines() if any(f" {t} " in line for t in sd.SAMPLE_TASKS)]


def host(app: ConsoleApp, name: str) -> HostPane:
    return app.query_one(f"#host-{name}", HostPane)


async def test_80x24_first_screen_has_both_hosts_and_the_comparison(app: ConsoleApp) -> None:
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await drawn(app, pilot)
        body = app.query_one("#body")
        assert body.scroll_y == 0
        train, serve = host(app, "train"), host(app, "serve")
        assert train.region.y == serve.region.y and train.region.x < serve.region.x  # side by side
        assert not train.table.display and "8× H200 · util 96%" in screen and "2× H200 · util 64%" in screen
        assert "★ z-lab" in screen and "ours / z-lab" in screen
        assert RATIO.search(screen), screen
        assert len(task_rows(screen)) >= 3, screen
        eval_pane = app.query_one(EvalPane)
        assert eval_pane.region.bottom <= 23, screen  # the whole pane above the footer, no scrolling


async def test_80x50_keeps_a_row_per_gpu(app: ConsoleApp) -> None:
    """Tall enough: the GPU tables (stacked at 80 columns), the whole comparison under them."""
    async with app.run_test(size=(80, 50)) as pilot:
        screen = await drawn(app, pilot)
        train, serve = host(app, "train"), host(app, "serve")
        assert train.table.display and train.region.x == serve.region.x
        assert screen.count("H200") == 10


@pytest.mark.parametrize("size", [(120, 40), (200, 50)], ids=["120x40", "200x50"])
async def test_the_whole_comparison_beside_serving_and_training(app: ConsoleApp, size: tuple[int, int]) -> None:
    async with app.run_test(size=size) as pilot:
        screen = await drawn(app, pilot)
        assert app.query_one("#body").scroll_y == 0
        assert RATIO.search(screen) and len(task_rows(screen)) == len(sd.SAMPLE_TASKS), screen
        eval_pane = app.query_one(EvalPane)
        serving = app.query_one("#serving-serve")
        assert serving.region.x > eval_pane.region.x and serving.region.y == eval_pane.region.y
        assert eval_pane.region.width >= serving.region.width
        assert eval_pane.region.bottom <= size[1] - 1  # on the first screen


async def test_events_pane_is_as_tall_as_its_lines(app: ConsoleApp) -> None:
    """200x50 has room to spare: the events pane holds its lines and its border, no empty rows."""
    async with app.run_test(size=(200, 50)) as pilot:
        await drawn(app, pilot)
        events = app.query_one(EventsPane)
        assert events.region.height == len(events.lines) + 2
        app.events.emit("one more line")
        await pilot.pause(0.2)
        assert events.region.height == len(events.lines) + 2


async def test_events_pane_takes_the_room_left_showing_the_latest(app: ConsoleApp) -> None:
    """120x40, more lines than room: the pane reaches down to the footer, the newest line in view."""
    async with app.run_test(size=(120, 40)) as pilot:
        await drawn(app, pilot)
        events = app.query_one(EventsPane)
        for i in range(30):
            app.events.emit(f"event number {i}")
        await pilot.pause(0.3)
        assert events.region.bottom == 39 and 3 <= events.region.height < 32  # down to the footer, no further
        assert "event number 29" in app.screen_text()


def test_readme_screenshots_are_what_the_console_draws() -> None:
    """docs/screenshot-*.svg (the README's) come from scripts/screenshots.py on the current code."""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(root / "scripts" / "screenshots.py"), "--check"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_gpu_summary_counts_missing_gpus_and_colours_the_worst() -> None:
    from dataclasses import replace

    from specconsole.formats.nvidia_smi import GpuSnapshot, GpuState
    from specconsole.ui.style.formatting import Palette, gpu_summary

    palette = Palette()
    train = sd.sample_statuses()[0].gpu
    assert train is not None
    gpus = train.value.gpus
    hot = (*gpus[:6], replace(gpus[6], temperature_c=93.0))  # GPU 7 gone, GPU 6 too hot
    text = gpu_summary(GpuSnapshot(GpuState.OK, hot), (7,), palette)
    first, second = text.split("\n")
    assert first.startswith("8× H200 · ") and f"[b {palette.error}]1 MISSING[/]" in first
    assert f"[{palette.error}]93°C[/]" in first and "util [b]96%[/] (95–97%)" in first
    assert second == f"mem 418/983 GiB · [{palette.warning}]4.4/4.9 kW[/]"  # one GPU at 91 % of its power limit


async def test_no_style_inside_the_body_depends_on_its_focus(app: ConsoleApp) -> None:
    """``Body`` restyles only itself when it gains or loses focus (issue 34): every node inside it
    styles the same, restyled in full, with the body focused and with nothing focused."""
    from textual.containers import VerticalScroll

    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        body = app.query_one("#body", VerticalScroll)
        inside = list(body.walk_children())
        assert len(inside) > 20

        def styles_inside() -> list[str]:
            app.stylesheet.update_nodes([body, *inside], animate=False)
            return [node.styles.css for node in inside]

        body.focus()
        await pilot.pause()
        assert app.focused is body and body.has_pseudo_class("focus")
        focused = styles_inside()
        app.screen.set_focus(None)
        await pilot.pause()
        assert app.focused is None and not body.has_pseudo_class("focus")
        assert styles_inside() == focused
        body.focus()  # and the body's own rule still follows its focus
        await pilot.pause()
        assert "scrollbar-color" in body.styles.css
