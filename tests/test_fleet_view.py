"""The fleet view (issue 13): one line per host, worst first, sort, filter, drill-down and back;
the stale threshold's hysteresis; redraws that repaint only the lines that changed.

The Pilot tests run the real console on a fixed fleet (HostStatus objects built from the real
source dataclasses, tests/fleet_sample.py) with a frozen clock: seconds, no lab.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import sample_data as sd
from fleet_sample import fixed_fleet, fleet_config, fleet_statuses
from specconsole.base.errors import ConfigError
from specconsole.base.freshness import FRESH_BELOW, STALE_AFTER, Staleness, stale_next
from specconsole.base.samples import Sample
from specconsole.config import parse_config
from specconsole.ui.console.app import ConsoleApp
from specconsole.ui.fleet.fleet_rows import SORTS, DerivedCache, fit_columns, fleet_row, order
from specconsole.ui.fleet.fleet_view import FleetTable, FleetView
from specconsole.ui.panes.host_pane import HostPane
from specconsole.ui.panes.serving_pane import ServingPane
from specconsole.ui.panes.training_pane import TrainingPane
from specconsole.ui.style.themes import BUNDLED_DIR, load_themes

pytestmark = pytest.mark.timeout(120)
NOW = sd.FROZEN_NOW


# ---------------------------------------------------------------------------- hysteresis

def test_stale_threshold_has_hysteresis() -> None:
    interval = 1.0
    assert (STALE_AFTER, FRESH_BELOW) == (2.5, 1.5)
    assert not stale_next(False, 1.6, interval)  # late, but one late delivery is not stale
    assert not stale_next(False, 2.5, interval)
    assert stale_next(False, 2.6, interval)  # two deliveries missed
    assert stale_next(True, 2.0, interval)  # between the thresholds the state holds
    assert stale_next(True, 1.5, interval)
    assert not stale_next(True, 1.4, interval)  # on time again
    assert stale_next(False, 26.0, 10.0) and not stale_next(False, 24.0, 10.0)  # scales with the interval


def test_staleness_remembers_each_key() -> None:
    tracker = Staleness()

    def at(age: float) -> bool:
        return tracker.check(("h1", "gpu"), Sample(None, at=NOW - age, interval=1.0), NOW)

    # jitter around the old single threshold (interval + 0.5 s) no longer flips anything
    assert [at(a) for a in (0.4, 1.6, 1.4, 1.7, 1.3)] == [False] * 5
    assert [at(a) for a in (3.0, 2.0, 1.6, 1.2, 2.4)] == [True, True, True, False, False]
    assert tracker.check(("h2", "gpu"), None, NOW)  # no sample: stale
    assert not tracker.check(("h2", "gpu"), Sample(None, at=NOW - 2.0, interval=1.0), NOW)  # a fresh key


# ---------------------------------------------------------------------------- rows

def rows(n: int = 12, **kwargs: Any) -> list[Any]:
    config = fleet_config(n)
    by_name = {h.name: h for h in config.hosts}
    tracker, derived = Staleness(), DerivedCache()
    return [fleet_row(s, by_name[s.name], NOW, tracker, derived) for s in fleet_statuses(n, NOW, **kwargs)]


def test_worst_first_sorts_a_down_host_to_the_top() -> None:
    shown = order(rows(12, down=[9], stale=[4]))
    assert [(r.name, r.state) for r in shown[:2]] == [("serve-009", "down"), ("train-004", "stale")]
    assert {r.state for r in shown[2:]} == {"ok"}
    assert shown[0].cell("state")[0].startswith("✖ down 42s")
    assert [r.name for r in shown[2:]] == sorted(r.name for r in shown[2:])  # by name within a state


def test_sort_orders_cycle() -> None:
    all_rows = rows(6, down=[3])
    assert [r.name for r in order(all_rows, SORTS.index(next(s for s in SORTS if s[0] == "name")))] == \
        sorted(r.name for r in all_rows)
    by_util = order(all_rows, [s[0] for s in SORTS].index("GPU util"))
    utils = [r.util for r in by_util]
    assert utils == sorted(utils, reverse=True)


def test_filter_keeps_rows_matching_every_word() -> None:
    all_rows = rows(12, down=[9])
    assert [r.name for r in order(all_rows, 0, "serve down")] == ["serve-009"]
    assert {r.name for r in order(all_rows, 0, "TRAIN")} == {f"train-{i:03d}" for i in range(0, 12, 2)}
    assert order(all_rows, 0, "no-such-host") == []


def test_columns_fit_the_width() -> None:
    for width in (60, 78, 118, 198):
        cols = fit_columns(width, 9)
        assert sum(c.width for c in cols) + len(cols) - 1 <= width
        assert {"name", "state"} <= {c.key for c in cols}
    assert len(fit_columns(198, 9)) > len(fit_columns(78, 9))


def test_fleet_threshold_is_configured() -> None:
    base = {"hosts": [{"name": "a", "role": "train", "training": {"log_path": "/tmp/t.log"}}]}
    assert parse_config(base, "t").console.fleet_threshold == 8
    assert parse_config({**base, "console": {"fleet_threshold": 0}}, "t").console.fleet_threshold == 0
    with pytest.raises(ConfigError, match="fleet_threshold"):
        parse_config({**base, "console": {"fleet_threshold": -1}}, "t")


# ---------------------------------------------------------------------------- the console

def fleet_app(tmp_path: Path, n: int = 12, **kwargs: Any) -> ConsoleApp:
    return ConsoleApp(fleet_config(n, str(tmp_path / "state")), fleet=fixed_fleet(n, NOW, **kwargs),
                      clock=lambda: NOW, themes=load_themes([BUNDLED_DIR]))


def table_names(app: ConsoleApp) -> list[str]:
    return [r.name for r in app.query_one(FleetTable).rows]


async def test_fleet_view_opens_past_the_threshold_without_host_panes(tmp_path: Path) -> None:
    app = fleet_app(tmp_path, 12, down=[9])
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app.query_one(FleetView).display
        assert not app.query_one("#body").display
        assert not app.query(HostPane) and not app.query(TrainingPane) and not app.query(ServingPane)
        assert table_names(app)[0] == "serve-009"
        screen = app.screen_text()
        assert "12 hosts: 1 down · 11 ok" in screen
        assert screen.index("serve-009") < screen.index("serve-001")
        assert app.focused is app.query_one(FleetTable)


async def test_filter_sort_and_drill_down_and_back(tmp_path: Path) -> None:
    app = fleet_app(tmp_path, 12, down=[9])
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("slash", *"train")
        await pilot.pause()
        assert set(table_names(app)) == {f"train-{i:03d}" for i in range(0, 12, 2)}
        assert "filter train: 6 shown" in app.screen_text()
        await pilot.press("escape")  # clears the filter
        await pilot.pause()
        assert len(table_names(app)) == 12 and app.focused is app.query_one(FleetTable)

        await pilot.press("s")  # worst first -> name
        await pilot.pause()
        assert table_names(app) == sorted(table_names(app))
        assert "sort: name" in app.screen_text()

        assert app.query_one(FleetTable).cursor_host == "train-000"  # the cursor stays on its host
        await pilot.press("home", "down", "enter")  # the second host by name
        await pilot.pause()
        await pilot.pause()
        assert not app.query_one(FleetView).display and app.query_one("#body").display
        assert [p.host.name for p in app.query(HostPane)] == ["serve-003"]
        assert [p.host.name for p in app.query(ServingPane)] == ["serve-003"]
        assert not app.query(TrainingPane)
        assert "╭─ serve-003 · serve" in app.screen_text()

        await pilot.press("escape")  # back to the fleet, the cursor where it was
        await pilot.pause()
        assert app.query_one(FleetView).display and not app.query_one("#body").display
        assert app.query_one(FleetTable).cursor_host == "serve-003"

        await pilot.press("up", "enter")  # another host: its panes replace the first one's
        await pilot.pause()
        await pilot.pause()
        assert [p.host.name for p in app.query(HostPane)] == ["serve-001"]


async def test_redraw_repaints_only_changed_lines(tmp_path: Path) -> None:
    app = fleet_app(tmp_path, 30)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        app.refresh_panes()
        await pilot.pause()
        table = app.query_one(FleetTable)
        before = table.lines_rendered
        app.refresh_panes()  # nothing changed (frozen clock, same samples)
        await pilot.pause()
        assert table.lines_rendered == before
        statuses = fleet_statuses(30, NOW)
        gpu = statuses[4].gpu
        assert gpu is not None
        first = replace(gpu.value.gpus[0], utilization_pct=3.0)
        statuses[4] = replace(statuses[4], gpu=Sample(replace(gpu.value, gpus=(first, *gpu.value.gpus[1:])),
                                                      at=gpu.at, interval=gpu.interval))
        app.fleet.set(statuses)  # type: ignore[attr-defined]
        app.refresh_panes()
        await pilot.pause()
        assert table.lines_rendered == before + 1  # one host's line, nothing else


async def test_two_host_console_switches_to_the_fleet_view_and_back(tmp_path: Path) -> None:
    app = ConsoleApp(sd.sample_config(str(tmp_path / "state")), fleet=sd.sample_fleet(NOW), clock=lambda: NOW,
                     themes=load_themes([BUNDLED_DIR]))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert not app.query_one(FleetView).display and len(app.query(HostPane)) == 2
        await pilot.press("s")  # only in the fleet view: nothing happens
        await pilot.press("f")
        await pilot.pause()
        assert app.query_one(FleetView).display and not app.query_one("#body").display
        assert set(table_names(app)) == {"train", "serve"}
        await pilot.press("f")
        await pilot.pause()
        await pilot.pause()
        assert not app.query_one(FleetView).display and len(app.query(HostPane)) == 2


class RecordingGuard:
    def __init__(self) -> None:
        self.armed: list[tuple[int, str]] = []

    def arm(self, code: int, reason: str) -> None:
        self.armed.append((code, reason))


async def test_quit_key_arms_the_exit_deadline_from_the_input_thread(tmp_path: Path) -> None:
    """Issue 9 item 7: q must not wait behind a saturated loop. The real console's driver hands
    each key to ``quit_key_pressed`` from the input thread; q arms the exit guard's deadline
    there, except while text is typed (the filter)."""
    real = ConsoleApp(fleet_config(12, str(tmp_path / "state")), handle_signals=True,
                      fleet=fixed_fleet(12, NOW), themes=load_themes([BUNDLED_DIR]))
    assert real.driver_class.__name__.startswith("QuitDeadline")
    app = fleet_app(tmp_path, 12)
    assert not app.driver_class.__name__.startswith("QuitDeadline")  # tests' apps: signals not handled
    guard = RecordingGuard()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        app.exit_guard = guard  # type: ignore[assignment]
        app.quit_key_pressed("x")
        await pilot.press("slash")
        await pilot.pause()
        app.quit_key_pressed("q")  # typing in the filter: a letter
        assert guard.armed == []
        await pilot.press("escape")
        await pilot.pause()
        app.quit_key_pressed("q")
        assert guard.armed == [(0, "quit")]
        app.exit_guard = None


# ---------------------------------------------------------------------------- a real terminal

def test_fleet_view_in_tmux(lab_hosts: Any, tmp_path: Path) -> None:
    """The real ``specconsole`` on SSH hosts of the lab (training-log streams only, so it stays
    cheap) in tmux panes: 10 hosts at 80x24 (the fleet view, Enter, Escape, q), then 2 hosts at
    120x40 (the usual panes, f to the fleet view and back, q)."""
    import shutil

    from conftest import wait_for as wait
    from specconsole.lab.testing.synthetic_fleet import write_fleet_config, write_training_log
    from test_signals import EXE, Tmux, alive

    if not shutil.which("tmux"):
        pytest.fail("tmux is required: apt-get install -y tmux (scripts/setup.sh does this)")
    log = write_training_log(tmp_path / "train.jsonl")
    config = write_fleet_config(lab_hosts, tmp_path / "fleet.toml", 10, log_path=log, gpu_every=0,
                                audit_log=tmp_path / "audit.log", state_dir=tmp_path / "state")
    frame = tmp_path / "first-frame"
    tmux = Tmux(tmp_path)
    try:
        tmux("new-session", "-d", "-s", "c", "-x", "80", "-y", "24", "-e", f"SPECCONSOLE_FIRST_FRAME_FILE={frame}",
             f"exec {EXE} --config {config}")
        pid = int(tmux("display-message", "-p", "-t", "c", "#{pane_pid}").strip())

        def screen() -> str:
            return tmux("capture-pane", "-p", "-t", "c")

        assert wait(frame.exists, 90), f"no full frame; the screen was:\n{screen()}"
        assert wait(lambda: "10 hosts: 10 ok" in screen(), 30), screen()
        small = screen().splitlines()
        assert len(small) == 24 and all(len(line) <= 80 for line in small)
        assert any("Host" in line and "State" in line for line in small)
        assert sum(1 for line in small if line.startswith("│ h0")) == 10  # every host on one line
        assert "SGLang" not in small[3]  # 80 columns: the least important columns left out
        tmux("send-keys", "-t", "c", "Enter")  # the first host's own panes
        assert wait(lambda: "╭─ h000 · train" in screen() and "Training · h000" in screen(), 20), screen()
        tmux("send-keys", "-t", "c", "Escape")
        assert wait(lambda: "╭─ Fleet" in screen(), 20), screen()
        tmux("send-keys", "-t", "c", "q")
        assert wait(lambda: not alive(pid), 10), "the console did not leave on q"

        # two hosts: the usual panes; the hidden fleet view must not hold the focus (its filter
        # input once took it in a real terminal and ate every key, q included)
        two = write_fleet_config(lab_hosts, tmp_path / "two.toml", 2, log_path=log, gpu_every=0,
                                 audit_log=tmp_path / "audit2.log", state_dir=tmp_path / "state")
        frame.unlink()
        tmux("new-session", "-d", "-s", "two", "-x", "120", "-y", "40", "-e",
             f"SPECCONSOLE_FIRST_FRAME_FILE={frame}", f"exec {EXE} --config {two}")
        pid = int(tmux("display-message", "-p", "-t", "two", "#{pane_pid}").strip())
        assert wait(frame.exists, 90), tmux("capture-pane", "-p", "-t", "two")
        assert wait(lambda: "╭─ h001 · train" in tmux("capture-pane", "-p", "-t", "two"), 20)
        tmux("send-keys", "-t", "two", "f")  # the fleet view, and back
        assert wait(lambda: "╭─ Fleet" in (s := tmux("capture-pane", "-p", "-t", "two")) and "2 hosts: 2 ok" in s
                    and "│ h001" in s, 20), tmux("capture-pane", "-p", "-t", "two")
        tmux("send-keys", "-t", "two", "f")
        assert wait(lambda: "╭─ h001 · train" in tmux("capture-pane", "-p", "-t", "two"), 20)
        tmux("send-keys", "-t", "two", "q")
        assert wait(lambda: not alive(pid), 10), f"q did not end it:\n{tmux('capture-pane', '-p', '-t', 'two')}"
    finally:
        tmux.kill_server()


def test_sample_clock_is_frozen() -> None:
    assert time.time() > NOW  # the fixed fleet's samples are dated at the frozen clock, not now
