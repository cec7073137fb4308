"""The action view, the plan dialog, the wizard's form and keyboard navigation (Pilot, issue 10).

The step list is fed real :class:`StepEvent` objects; the form's preflight and discovery are its
own injection points (the lab test in test_ui_actions.py drives them for real)."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path
from typing import Any

import pytest
from textual.containers import VerticalScroll
from textual.geometry import Region
from textual.widgets import Button, Input, Select, Static

import sample_data as sd
from conftest import wait_for
from specconsole.actions.deploy.preflight import DeployPlan, DeployRefused, DeployRequest
from specconsole.config import parse_config
from specconsole.lab.parts.state import free_port
from specconsole.sglang.acceptance import AcceptanceDetail
from specconsole.steps import StepEvent, Steps, audit
from specconsole.ui.console.app import ConsoleApp
from specconsole.ui.panes.action_view import ActionPanel, ActionTrack
from specconsole.ui.panes.events_pane import EventList, EventsPane
from specconsole.ui.screens.deploy_form import DeployForm, algorithm_choices
from specconsole.ui.screens.plan import PlanScreen, flag_rows
from specconsole.ui.style.acceptance_plot import acceptance_plot
from specconsole.ui.style.themes import BUNDLED_DIR, load_themes

pytestmark = pytest.mark.timeout(90)


def frozen(tmp_path: Path) -> ConsoleApp:
    now = sd.FROZEN_NOW
    return ConsoleApp(sd.sample_config(str(tmp_path / "state")), fleet=sd.sample_fleet(now), clock=lambda: now,
                      themes=load_themes([BUNDLED_DIR]))


# ------------------------------------------------------------------------------ the model

def test_track_builds_steps_from_events() -> None:
    events = sd.sample_deploy_events()
    track = ActionTrack("Deploy to serve", "serve", events[0].at + 5, action="deploy")
    for e in events:
        track.feed(e)
    names = [r.name for r in track.rows]
    assert names == ["read the unit", "SGLang flags", "draft model", "constraints", "lock", "upload",
                     "start the agent", "write the drop-in", "restart"]
    assert track.started_at == events[0].at  # the action's own start, not when the view opened
    assert all(r.state == "ok" for r in track.rows[:-1]) and track.rows[-1].state == "running"
    restart = track.rows[-1]
    assert restart.command == "systemctl restart sglang.service" and restart.ended_at is None
    assert track.latest.startswith("waiting for /health: 7s of 600s")
    assert track.rows[1].outcome == "exit 0 in 2.30s: 1712 lines of --help"
    assert not track.finished and track.status(events[-1].at) == "running 13.9s"

    track.feed(StepEvent("deploy", "failed", "rolled back: /health never answered", step="restart",
                         at=events[-1].at + 1, elapsed_s=14.9))
    assert track.finished and not track.ok and track.rows[-1].state == "failed"
    assert track.status(0) == "FAILED after 14.9s"
    lines = track.step_lines(events[-1].at + 1)
    assert lines[-1].startswith("[b $error]✗[/] [b]restart")  # the mark reads without colour too


def test_algorithm_choices_from_the_real_help_text() -> None:
    from importlib.resources import files

    text = files("specconsole.lab.data").joinpath("serve-help-0.5.23.txt").read_text()
    assert algorithm_choices(text) == ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO"]
    argparse_style = "  --speculative-algorithm {EAGLE,NEXTN,DFLASH}\n                        The algorithm.\n"
    assert algorithm_choices(argparse_style) == ["EAGLE", "NEXTN", "DFLASH"]
    assert algorithm_choices("  --speculative-algorithm SPECULATIVE_ALGORITHM\n   free text\n") == []


def test_plan_flag_rows_collapse_unchanged() -> None:
    changed, same = flag_rows(sd.sample_plan())
    assert ("--speculative-algorithm", "NEXTN", "DFLASH") in changed
    assert ("--speculative-draft-window-size", "-", "16") in changed
    assert same == [("--speculative-draft-model-path", "…/dflash-qwen3-8b-b16")] or \
        [f for f, _ in same] == ["--speculative-draft-model-path"]


# ------------------------------------------------------------------------------ on screen

async def test_action_view_stays_until_dismissed_and_fits_80x24(tmp_path: Path) -> None:
    app = frozen(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        panel = app.query_one(ActionPanel)
        assert not panel.display
        app.actions.open("deploy", "Deploy to serve", "serve", scroll_to="serving")
        for e in sd.sample_deploy_events():
            app.actions.emit(e)
        await pilot.pause()
        app.action_close_action_view()  # refused while it runs
        await pilot.pause()
        assert panel.display
        last = sd.sample_deploy_events()[-1]
        app.actions.emit(StepEvent("deploy", "done", "deployed: DFLASH window 16", step="smoke", host="serve",
                                  at=last.at + 3, elapsed_s=17.1))
        # the last step's row scrolls into view once the panel's new lines are laid out
        await wait_for(lambda: "✓ restart" in app.screen_text(), 5, what="the last step's row", pilot=pilot)
        screen = app.screen_text()
        assert "Deploy to serve · done in 17.1s" in screen and "✓ deployed: DFLASH window 16" in screen
        assert "▶ restart" not in screen
        region = panel.region
        assert region.y + region.height <= 23 and region.width == 80  # above the footer, the full width
        await pilot.press("escape")
        await pilot.pause()
        assert not panel.display


async def test_the_smoke_tests_acceptance_plot_is_in_the_action_view_at_80x24(tmp_path: Path) -> None:
    """A smoke event carrying SGLang's histogram (issue 36 item 4): the action view shows the plot
    (80 columns, unicode blocks) under the steps; the scroll holds what the panel's height cannot."""
    detail = AcceptanceDetail((2, 3, 4, 5, 6, 6, 5, 4, 3, 2, 2, 1, 1, 0, 0, 6), 1, 15)
    app = frozen(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        panel = app.query_one(ActionPanel)
        app.actions.open("deploy", "Deploy to serve", "serve", scroll_to="serving")
        events = sd.sample_deploy_events()
        for e in events:
            app.actions.emit(e)
        last = events[-1]
        app.actions.emit(StepEvent("deploy", "info", f"smoke: 64 tokens, acceptance length 7.26; {detail.summary()}",
                                   step="smoke test", host="serve", at=last.at + 2, elapsed_s=16.0,
                                   acceptance=(("serve", detail),)))
        app.actions.emit(StepEvent("deploy", "done", "deployed: DFLASH window 16", step="smoke test", host="serve",
                                   at=last.at + 3, elapsed_s=17.1))
        await pilot.pause()
        text = panel.text
        for line in acceptance_plot([("serve", detail)]):
            assert line in text, line
        assert app.query_one(ActionPanel).track.acceptance == (("serve", detail),)  # type: ignore[union-attr]
        # the steps stay in view (the latest one included); the plot is below them, for the scroll
        screen = app.screen_text()
        assert "✓ smoke test" in screen and "acceptance by draft position" not in screen
        panel.query_one("#action-scroll", VerticalScroll).scroll_end(animate=False)
        await wait_for(lambda: "acceptance by draft position" in app.screen_text(), 5,
                       what="the plot's last chart scrolled into view", pilot=pilot)
        assert all(len(line) <= 80 for line in app.screen_text().splitlines())


async def test_d_with_the_serving_host_down_says_so_on_screen(tmp_path: Path) -> None:
    port = free_port()  # a port nothing listens on: the serving host stays unreachable
    cfg = parse_config({
        "console": {"state_dir": str(tmp_path / "state"), "audit_log": str(tmp_path / "audit.log")},
        "hosts": [{"name": "serve", "role": "serve", "connect": "ssh", "host": "127.0.0.1", "port": port,
                   "user": "nobody", "ssh": {"known_hosts": str(tmp_path / "known_hosts")},
                   "sglang": {"base_url": "http://127.0.0.1:30000", "unit": "sglang.service"}}],
    }, "<test>")
    app = ConsoleApp(cfg, themes=load_themes([BUNDLED_DIR]))
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await pilot.pause()
        await pilot.press("d")
        await wait_for(lambda: "not connected" in app.screen_text(), 20, what="'not connected' on screen", pilot=pilot)
        screen = app.screen_text()
        assert "Deploy: cannot start" in screen and "serve is not connected" in screen, screen
        assert not isinstance(app.screen, DeployForm)


async def test_plan_dialog_fits_80x24_buttons_visible_and_scrolls(tmp_path: Path) -> None:
    app = frozen(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        app.push_screen(PlanScreen(sd.sample_plan()))
        await pilot.pause()
        dialog = app.screen
        for button in dialog.query(Button):
            r = button.region
            assert r.width > 0 and 0 <= r.y < 24 and r.x + r.width <= 80, (button.id, r)
        assert isinstance(app.focused, Button) and app.focused.id == "cancel"
        screen = app.screen_text()
        assert "--speculative-algorithm          NEXTN → DFLASH" in screen
        assert "1 unchanged flag" in screen
        body = dialog.query_one("#confirm-scroll", VerticalScroll)
        assert body.max_scroll_y > 0  # the plan is longer than the dialog: it scrolls
        await pilot.press("pagedown")
        await pilot.pause()
        assert body.scroll_y > 0
        assert isinstance(app.focused, Button) and app.focused.id == "cancel"  # the focus stays on Cancel
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, PlanScreen)


async def test_form_enter_moves_fields_errors_in_place_and_refusal_beside_the_field(tmp_path: Path) -> None:
    app = frozen(tmp_path)
    requests: list[DeployRequest] = []
    released = asyncio.Event()

    async def discover() -> list[str]:
        await released.wait()
        return ["EAGLE", "NEXTN", "DFLASH", "DSPARK"]

    async def check(request: DeployRequest) -> DeployPlan:
        requests.append(request)
        raise DeployRefused("draft window 8 is smaller than the block size 16: SGLang requires ...",
                            field="draft_window")

    result: list[Any] = []
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        app.push_screen(DeployForm({"algorithm": "DFLASH", "draft_window": "16", "block_size": "",
                                    "draft_model": "/models/d"}, discover=discover, check=check), result.append)
        await pilot.pause()
        form = app.screen
        status = form.query_one("#deploy-status", Static)
        assert "asking the host's SGLang which algorithms it has" in str(status.render())
        released.set()
        await wait_for(lambda: "4 algorithms" in str(status.render()), 10, what="the discovered algorithms",
                       pilot=pilot)
        options = [str(o[0]) for o in form.query_one("#deploy-algorithm", Select)._options]
        assert options == ["EAGLE", "NEXTN", "DFLASH", "DSPARK"] and "4 algorithms" in str(status.render())

        window = form.query_one("#deploy-draft_window", Input)
        assert app.focused is window
        window.value = "0"
        await pilot.press("enter")
        assert app.focused is window and isinstance(app.screen, DeployForm)
        assert "must be positive" in str(form.query_one("#error-draft_window", Static).render())
        window.value = "8"
        await pilot.press("enter")
        assert not form.query_one("#error-draft_window").display
        assert app.focused is form.query_one("#deploy-block_size", Input)
        await pilot.press("enter")
        assert app.focused is form.query_one("#deploy-draft_model", Input)
        await pilot.press("enter")
        assert isinstance(app.focused, Button) and app.focused.id == "plan" and not requests  # nothing submitted
        await pilot.press("enter")
        error = form.query_one("#error-draft_window", Static)
        await wait_for(lambda: "smaller than the block size 16" in str(error.render()), 10,
                       what="the refusal beside the draft window", pilot=pilot)
        assert requests and requests[0].draft_window == "8" and requests[0].algorithm == "DFLASH"
        assert isinstance(app.screen, DeployForm) and not result  # still open
        err = str(form.query_one("#error-draft_window", Static).render())
        assert "smaller than the block size 16" in err and app.focused is window
        await pilot.press("escape")
        await pilot.pause()
        assert result == [None]


async def test_keyboard_focus_cycles_panes_and_scrolls_at_80x24(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # stored runs: the eval pane shows its comparison table (with no runs it shows only what to do)
    monkeypatch.setenv("SPECCONSOLE_EVAL_RESULTS", str(sd.save_runs(tmp_path / "eval", sd.comparison_runs())))
    app = frozen(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        body = app.query_one("#body", VerticalScroll)
        assert app.focused is body
        await pilot.press("pagedown")
        await pilot.pause()
        assert body.scroll_y > 0
        await pilot.press("end")
        await pilot.pause()
        assert body.scroll_y == body.max_scroll_y
        seen = []
        for _ in range(6):
            await pilot.press("tab")
            seen.append(app.focused)
        assert any(isinstance(w, EventList) for w in seen) and any(w is body for w in seen)
        assert {getattr(w, "id", None) for w in seen} >= {"eval-run-list", "eval-table"}


async def test_event_lines_wrap_at_80_columns(tmp_path: Path) -> None:
    app = frozen(tmp_path)
    long = ("$ /opt/sglang/bin/python -m sglang.launch_server --model-path /models/Qwen3-8B --speculative-"
            "algorithm DFLASH --speculative-draft-window-size 16 END-OF-LINE")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        app.events.emit(long, "serve")
        await pilot.pause()
        events = app.query_one(EventList)
        events.focus()
        await pilot.press("end")
        await pilot.pause()
        screen = app.screen_text()
        assert "END-OF-LINE" in screen, screen  # not cut: the rest is on the next rows


async def test_form_algorithm_is_picked_from_the_list_then_enter_moves_on(tmp_path: Path) -> None:
    app = frozen(tmp_path)

    async def discover() -> list[str]:
        return ["EAGLE", "NEXTN", "DFLASH"]

    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        app.push_screen(DeployForm({"algorithm": "DFLASH", "draft_window": "16", "block_size": "",
                                    "draft_model": ""}, discover=discover))
        await wait_for(lambda: getattr(app.focused, "id", None) == "deploy-draft_window", 10,
                       what="the form, its focus on the draft window", pilot=pilot)
        form = app.screen
        select = form.query_one("#deploy-algorithm", Select)
        assert select.value == "DFLASH" and app.focused is form.query_one("#deploy-draft_window", Input)
        select.focus()
        await pilot.press("enter")  # opens the list (on DFLASH)
        await pilot.pause()
        await pilot.press("up", "enter")
        await pilot.pause()
        assert select.value == "NEXTN"
        # NEXTN has no window, block or draft model: those fields go, its own (draft steps, ...) come, and
        # the focus moves on to the first of them
        assert not form.query_one("#row-draft_window").display and not form.query_one("#row-draft_model").display
        assert app.focused is form.query_one("#deploy-num_steps", Input)


async def test_a_second_action_does_not_take_over_a_running_view(tmp_path: Path) -> None:
    app = frozen(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        app.actions.open("deploy", "Deploy to serve", "serve")
        events = sd.sample_deploy_events()
        app.actions.emit(events[0])
        panel = app.actions.open("eval", "Eval run", "serve")  # e while the deploy runs
        app.actions.emit(StepEvent("eval", "step", "reading /server_info", step="deployment", at=events[0].at + 1))
        await pilot.pause()
        assert panel.track is not None and panel.track.title == "Deploy to serve"
        assert [r.name for r in panel.track.rows] == ["read the unit"]
        app.actions.emit(StepEvent("deploy", "done", "deployed", at=events[0].at + 2))
        app.actions.open("eval", "Eval run", "serve")  # once it has finished, the next action takes the view
        assert panel.track.title == "Eval run" and panel.track.action == "eval"


# ------------------------------------------------------------------------------ the operator's time (issue 21)

@pytest.mark.serial  # asserts a time bound
def test_a_dialog_s_wait_is_no_step_s_time_but_a_line_of_its_own() -> None:
    """A step ends when the dialog opens; the wait shows as "waited N s for ..." and the step after it
    starts when the operator answers: no step's time (panel or event) includes the wait."""
    got: list[StepEvent] = []
    steps = Steps("deploy", got.append, host="serve")
    steps.begin("discover algorithms")
    time.sleep(0.05)
    steps.hand_over("you to fill in the deploy form")
    steps.hand_over("you to fill in the deploy form")  # a second hand-over changes nothing
    time.sleep(1.5)
    steps.begin("read the unit")
    time.sleep(0.05)
    steps.hand_over("your confirmation of the plan")
    time.sleep(1.5)
    steps.done("cancelled by the operator; nothing was changed")

    kinds = [(e.kind, e.step) for e in got]
    assert kinds == [("step", "discover algorithms"), ("wait", ""), ("waited", ""), ("step", "read the unit"),
                     ("wait", ""), ("waited", ""), ("done", "")]
    wait, waited = got[1], got[2]
    assert wait.took_s is not None and wait.took_s < 0.5  # the step it closed: its own time
    assert waited.took_s is not None and 1.5 <= waited.took_s < 2.0
    assert waited.message == f"waited {waited.took_s:.1f} s for you to fill in the deploy form"
    assert got[5].message.endswith("s for your confirmation of the plan")

    track = ActionTrack("Deploy to serve", "serve", got[0].at, action="deploy")
    for e in got[:4]:
        track.feed(e)
    assert [r.name for r in track.rows] == ["discover algorithms", got[2].message, "read the unit"]
    for e in got[4:]:
        track.feed(e)
    steps_rows = [r for r in track.rows if not r.wait]
    assert [r.name for r in steps_rows] == ["discover algorithms", "read the unit"]
    assert all(r.elapsed(0) < 0.5 and r.state == "ok" for r in steps_rows), [r.elapsed(0) for r in steps_rows]
    waits = [r for r in track.rows if r.wait]
    assert [r.state for r in waits] == ["waited", "waited"] and all(1.5 <= r.elapsed(0) < 2.0 for r in waits)
    lines = track.step_lines(got[-1].at)
    assert lines[1] == f"[$text-muted]· {got[2].message}[/]"  # its own line, no step time column
    assert "waited" not in lines[0] and "discover algorithms" in lines[0]
    # the events say the same in the audit log's terms: each step ends at the next step/wait/done event
    bounds = [e for e in got if e.kind in ("step", "wait", "done")]
    for start, end in itertools.pairwise(bounds):
        if start.kind == "step":
            assert end.elapsed_s - start.elapsed_s < 0.5


def test_a_dialog_still_open_shows_how_long_it_has_waited() -> None:
    got: list[StepEvent] = []
    steps = Steps("kill-training", got.append, host="train")
    steps.begin("find the job")
    steps.hand_over("your confirmation")
    assert steps.waiting
    track = ActionTrack("Kill training on train", "train", got[0].at, action="kill-training")
    for e in got:
        track.feed(e)
    assert track.rows[-1].state == "waiting" and track.rows[0].state == "ok"
    assert track.step_lines(got[-1].at + 3)[-1] == "[$text-muted]… waiting for your confirmation (3.0 s)[/]"


def test_steps_that_do_not_fit_are_named_on_one_line_and_the_latest_stays_in_view() -> None:
    track = ActionTrack("Deploy to serve", "serve", 0.0, action="deploy")
    names = ["read the unit", "SGLang flags", "draft model", "constraints", "lock", "restart", "verify"]
    for i, name in enumerate(names):
        track.feed(StepEvent("deploy", "step", f"doing {name}", step=name, at=float(i)))
    assert len(track.step_lines(10.0)) == 7 and len(track.step_lines(10.0, 7)) == 7  # all fit: unchanged
    lines = track.step_lines(10.0, 4)
    assert len(lines) == 4
    assert "4 earlier: read the unit, SGLang flags, draft model, constraints" in lines[0]
    assert "lock" in lines[1] and "verify" in lines[-1]
    # a narrow view leaves out the earliest names (on screen before), never the latest hidden one
    narrow = track.step_lines(10.0, 4, width=40)[0]
    assert "4 earlier: …, draft model, constraints" in narrow and "read the unit" not in narrow
    assert len(narrow.split("earlier: ", 1)[1].removesuffix("[/]")) <= 40 - len("✓ 4 earlier: ")


async def test_a_running_actions_heartbeats_lay_nothing_out(tmp_path: Path) -> None:
    """Issue 34: a heartbeat (at least every 0.5 s) goes to the action view and the events pane;
    with the pane already full, neither lays the screen out again, and the newest event is on screen."""
    app = frozen(tmp_path)
    for i in range(60):  # the events pane full at 200x50, as after a console's first minutes
        app.events.emit(f"earlier event {i}", "serve")
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        app.actions.open("deploy", "Deploy to serve", "serve")
        steps = Steps("deploy", app.actions.emit, host="serve")
        steps.begin("restart", "restarting sglang.service")
        await pilot.pause()
        await pilot.pause()
        screen, log = app.screen, app.query_one(EventList)
        layouts: list[bool] = []
        original = screen._refresh_layout

        def counted(*args: Any, **kwargs: Any) -> None:
            layouts.append(True)
            original(*args, **kwargs)

        screen._refresh_layout = counted  # type: ignore[method-assign]
        # the heartbeats alone: the once-a-refresh_s redraw stops (on a loaded machine it fell inside the
        # loop below, its summary bar's first text after the view's restyle laying the screen out once);
        # the view's opening (its height) lays the screen out once, and may still be pending: let it land
        screen.stop_redraws()
        for _ in range(40):
            await pilot.pause(0.05)
            if not screen._layout_required:
                break
        layouts.clear()
        for n in range(4):
            app.events.emit(f"heartbeat {n}: waiting for /health", "serve")
            steps.emit("heartbeat", f"waiting for /health: {n}s of 600s")
            await pilot.pause()
            await pilot.pause()
        assert layouts == []
        assert "waiting for /health: 3s of 600s" in app.screen_text()
        assert log.scroll_y == log.max_scroll_y  # still following the newest line
        assert "heartbeat 3: waiting for /health" in app.screen_text()


async def test_heartbeats_wait_for_the_next_redraw_and_replace_their_line(tmp_path: Path) -> None:
    """Issue 34: with redraws at least once a second, a heartbeat costs no frame of its own: it
    reaches the action view and the events pane with the next redraw, where a wait's latest
    heartbeat takes the place of the one before (one row drawn again, no scroll); the event log
    (and its audit file) keeps every one, and an event of another kind in between starts a new line."""
    app = frozen(tmp_path)
    for i in range(60):
        app.events.emit(f"earlier event {i}", "serve")
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        screen, log = app.screen, app.query_one(EventList)
        emit = audit(app.events, also=app.actions.emit)
        app.actions.open("deploy", "Deploy to serve", "serve")
        steps = Steps("deploy", emit, host="serve")
        steps.begin("restart", "restarting sglang.service")
        screen._redraw_timer.pause()  # the test redraws (a refresh_s of 1 s would come at any time)
        screen.refresh_panes()
        await pilot.pause()
        await pilot.pause()
        assert screen.heartbeats_wait
        frames: list[bool] = []
        update = screen._compositor.render_update

        def counted(*args: Any, **kwargs: Any) -> Any:
            frames.append(True)
            return update(*args, **kwargs)

        screen._compositor.render_update = counted  # type: ignore[method-assign]
        lines_before = len(log.lines)
        for n in range(3):
            steps.emit("heartbeat", f"waiting for /health: {n}s of 600s")
            await pilot.pause()
            await pilot.pause()
        assert frames == []  # nothing drawn yet
        assert "waiting for /health" not in app.screen_text()
        screen.refresh_panes()
        await pilot.pause()
        text = app.screen_text()
        assert "waiting for /health: 2s of 600s" in text and "waiting for /health: 1s" not in text
        assert len(log.lines) == lines_before + 1 and log.lines[-1].endswith("waiting for /health: 2s of 600s")
        assert log.scroll_y == log.max_scroll_y
        frames.clear()
        repainted: list[Region] = []
        refresh = log.refresh
        log.refresh = lambda *regions, **kw: (repainted.extend(regions), refresh(*regions, **kw))[1]  # type: ignore[method-assign]
        steps.emit("heartbeat", "waiting for /health: 3s of 600s")
        screen.refresh_panes()
        await pilot.pause()
        # its one row, left of the scrollbar
        assert len(frames) == 1 and repainted == [Region(0, log.size.height - 1, log.size.width - 1, 1)]
        assert log.lines[-1].endswith("waiting for /health: 3s of 600s") and len(log.lines) == lines_before + 1
        assert "waiting for /health: 3s of 600s" in app.screen_text()
        steps.emit("command", "curl -s /health", command="curl -s /health")
        steps.emit("heartbeat", "waiting for /health: 4s of 600s")
        steps.emit("heartbeat", "waiting for /health: 5s of 600s")
        screen.refresh_panes()
        await pilot.pause()
        assert [line.split(maxsplit=2)[2] for line in log.lines[-3:]] == [
            "waiting for /health: 3s of 600s", "$ curl -s /health", "waiting for /health: 5s of 600s"]
    kept = [e.message for e in app.events.recent if e.data.get("kind") == "heartbeat"]  # what the audit log got
    assert kept == [f"waiting for /health: {n}s of 600s" for n in range(6)]


async def test_the_title_s_clock_repaints_the_border_row_not_the_panel(tmp_path: Path) -> None:
    """Issue 34: the title's clock ticks every second; Textual repaints a widget whole when its
    title is set, and with the panel every line of its steps. A tick renders the panel's top
    row only (and the running step's line, whose time moves), and the new time is on screen."""
    clock = [sd.FROZEN_NOW]
    app = ConsoleApp(sd.sample_config(str(tmp_path / "state")), fleet=sd.sample_fleet(sd.FROZEN_NOW),
                     clock=lambda: clock[0], themes=load_themes([BUNDLED_DIR]))
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        screen = app.screen
        screen._redraw_timer.pause()  # the test redraws
        app.actions.open("deploy", "Deploy to serve", "serve")
        steps = Steps("deploy", app.actions.emit, host="serve")
        steps.begin("restart", "restarting sglang.service")
        for _ in range(3):
            await pilot.pause()
        panel = app.query_one(ActionPanel)
        crops: list[Region] = []
        render_lines = panel.render_lines
        panel.render_lines = lambda crop: (crops.append(crop), render_lines(crop))[1]  # type: ignore[method-assign]
        for tick in (1, 2):
            crops.clear()
            clock[0] = sd.FROZEN_NOW + tick
            panel.redraw(clock[0])
            await pilot.pause()
            await pilot.pause()
            assert crops == [Region(0, 0, panel.outer_size.width, 1)]
        assert "Deploy to serve · running 2.0s" in app.screen_text()
        assert panel.border_subtitle == "live"
        steps.done("deployed")  # the title's clock stops, the subtitle changes: both on screen
        await pilot.pause()
        await pilot.pause()
        text = app.screen_text()
        assert "Deploy to serve · done in" in text and "esc: close · history in Events" in text


async def test_a_wait_longer_than_its_row_is_wrapped_again(tmp_path: Path) -> None:
    """The next heartbeat of a wait wrapping to more rows than the one before is wrapped anew."""
    app = frozen(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        screen, log = app.screen, app.query_one(EventList)
        emit = audit(app.events)
        long = "waiting: 2s; journal: " + "x" * 120
        for message in ("waiting: 1s", long):
            emit(StepEvent("deploy", "heartbeat", message, step="restart", host="serve"))
            screen.refresh_panes()
            await pilot.pause()
        assert log.lines[-1].endswith(long) and not any(line.endswith("waiting: 1s") for line in log.lines)
        rows = [row for i, row in log._rows if i == len(log.lines) - 1]
        assert len(rows) == 3 and "".join(r.strip() for r in rows).endswith(long)


async def test_events_arriving_while_the_console_closes_are_no_error(tmp_path: Path) -> None:
    """The events pane's list goes before the pane when the console closes; an event flushed then
    (a step of an action still ending) is dropped from the pane, not a NoMatches that fails the exit."""
    app = frozen(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        pane = app.query_one(EventsPane)
        await pane.query_one(EventList).remove()
        app.events.emit("a step of an action still ending", "serve")
        app.new_events.append(app.events.recent[-1])
        pane.flush(app.new_events)
        await pilot.pause()
