"""``specconsole replay`` in Pilot on a synthetic recording: the timeline's keys (pause, step, seek,
next event, speed), the deploy's steps in the action view at their recorded times, and no key that
reaches a host."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import sample_data as sd
from conftest import wait_for
from recording_sample import T0, alert, record_synthetic, steps_as_events
from specconsole.recorder.recording import Recording
from specconsole.ui.console.replay import ReplayApp, ReplayFleet, TimelineBar, replay_config
from specconsole.ui.panes.action_view import ActionPanel
from specconsole.ui.style.themes import BUNDLED_DIR, load_themes


def replay_app(tmp_path: Path, start: float, speed: float = 1.0) -> tuple[ReplayApp, ReplayFleet]:
    path = tmp_path / "r.screc"
    deploy = [dataclasses.replace(e, at=T0 + 20 + e.elapsed_s) for e in sd.sample_deploy_events(T0)]
    done = dataclasses.replace(deploy[-1], kind="done", message="serving DFLASH, window 16, healthy",
                               at=T0 + 34.5, took_s=14.5)
    record_synthetic(path, seconds=900, keyframe_s=60,
                     events=[*steps_as_events([*deploy, done]), alert("stall", "train", "firing", T0 + 50)])
    fleet = ReplayFleet(Recording(path), start, speed)
    config = replay_config(fleet.state, str(path))
    config = dataclasses.replace(config, console=dataclasses.replace(config.console, state_dir=str(tmp_path / "st")))
    return ReplayApp(fleet, config, themes=load_themes([BUNDLED_DIR])), fleet


def step_of(fleet: ReplayFleet) -> int | None:
    train = next(s for s in fleet.statuses() if s.name == "train")
    return train.training.value.step if train.training is not None else None


async def test_the_timeline_keys_and_the_deploy_steps_at_their_times(tmp_path: Path) -> None:
    app, fleet = replay_app(tmp_path, start=T0 + 10)
    async with app.run_test(size=(120, 40)) as pilot:
        bar = app.query_one(TimelineBar)
        await wait_for(lambda: "▶ 1x" in str(bar.render()), 10, what="the timeline bar playing", pilot=pilot)
        assert app.read_only and app.fleet.host("serve") is None
        for action in ("kill_training", "deploy", "deploy_checkpoint", "eval_run"):  # nothing reaches a host
            assert not app.key_plan.is_bound(action)
        await pilot.press("p")
        assert fleet.paused and "⏸" in str(bar.render())
        await pilot.press("n")  # the next event: the deploy's first step
        assert fleet.now == T0 + 20
        panel = app.query_one(ActionPanel)
        await wait_for(lambda: panel.display and "reading sglang.service" in panel.text, 5,
                       what="the deploy's first step", pilot=pilot)
        assert "systemctl restart" not in panel.text
        for _ in range(7):  # . steps a second: the restart (at +6.9 s) is shown once its time came
            await pilot.press("full_stop")
        assert fleet.now == T0 + 27 and fleet.paused
        await wait_for(lambda: "systemctl restart sglang.service" in panel.text, 5, what="the restart", pilot=pilot)
        assert "waiting for /health" not in panel.text  # its heartbeat came at +13.9 s
        await pilot.press("n", "n")  # the heartbeat (+13.9 s), then the deploy's end
        await wait_for(lambda: "serving DFLASH, window 16, healthy" in panel.text, 5, what="the deploy's end",
                       pilot=pilot)
        assert fleet.now == T0 + 34.5 and panel.track is not None and panel.track.finished
        await pilot.press("right_square_bracket")  # +1 min
        assert fleet.now == T0 + 94.5 and step_of(fleet) == 12000 + 2 * 94
        await pilot.press("right_curly_bracket")  # +10 min
        assert fleet.now == T0 + 694.5 and step_of(fleet) == 12000 + 2 * 694
        await pilot.press("left_curly_bracket", "left_square_bracket")  # back 11 minutes: rebuilt from a keyframe
        assert fleet.now == T0 + 34.5 and step_of(fleet) == 12000 + 2 * 34
        assert fleet.state.worst_alert() is None
        await pilot.press("n")
        assert fleet.now == T0 + 50 and fleet.state.worst_alert() is not None
        await wait_for(lambda: "▲ stall on train" in app.screen_text(), 5, what="the recorded alert in the summary",
                       pilot=pilot)  # as recorded: the replay's own rules never run (no bell, no webhook)
        for _ in range(5):
            await pilot.press("plus")
        assert fleet.speed == 16
        await pilot.press("minus")
        assert fleet.speed == 8
        await pilot.press("p")  # play at 8x: the clock runs ahead of the wall clock
        before = fleet.now
        await wait_for(lambda: fleet.now >= before + 8, 10, what="8x playback", pilot=pilot)
        await pilot.press("p")
        await pilot.pause()
        assert "8x" in str(bar.render()) and "⏸" in str(bar.render())


async def test_replay_starts_at_from_and_stops_at_the_end(tmp_path: Path) -> None:
    app, fleet = replay_app(tmp_path, start=T0 + 895, speed=16)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(lambda: fleet.paused, 10, what="the end of the recording", pilot=pilot)
        assert fleet.now == T0 + 900
        assert any("end of the recording" in e.message for e in app.events.recent)
