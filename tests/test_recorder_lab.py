"""The flight recorder on the lab: record the fleet (real sshd, torchrun, the SGLang simulator)
while the training job is killed and SGLang deployed to DFLASH window 16, then replay it: in
Pilot (the deploy's steps in the action view at their recorded times), in tmux (capture-pane),
and as ``--at``/``--diff`` JSON. One recording for the module (~30 s of lab time)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import running_lab, wait_for
from specconsole.actions.deploy.preflight import DeployRequest, execute, preflight
from specconsole.actions.kill.training import find_job, kill_job
from specconsole.cli import main
from specconsole.config import load_config
from specconsole.lab.parts.environment import Lab, LabOptions
from specconsole.lab.procs import children
from specconsole.monitor import Fleet
from specconsole.recorder.recorder import start_recording
from specconsole.recorder.recording import Recording
from specconsole.steps import StepEvent, Steps, audit
from specconsole.ui.console.replay import ReplayApp, ReplayFleet, replay_config
from specconsole.ui.panes.action_view import ActionPanel
from specconsole.ui.style.themes import BUNDLED_DIR, load_themes

pytestmark = pytest.mark.xdist_group("recorder-lab")  # one module lab per run


def ready(lab: Lab) -> None:
    def up() -> bool:
        pid, log = lab.state.trainer_pid, lab.train_log
        if not (pid and len(children(pid)) >= 2 and log.exists() and '"step"' in log.read_text()):
            return False
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{lab.state.sglang_port}/health", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    assert wait_for(up, 120, what="the lab's training job and SGLang", step=0.2)


@dataclass
class Recorded:
    path: Path
    lab: Lab
    kill: list[StepEvent]
    deploy: list[StepEvent]
    start: float
    end: float


async def _record(lab: Lab, path: Path) -> Recorded:
    config = load_config(lab.config_path)
    fleet = Fleet(config)
    recorder = start_recording(config, fleet, str(path))
    kill: list[StepEvent] = []
    deploy: list[StepEvent] = []
    start = time.time()
    await fleet.start()
    try:
        await fleet.first_snapshot(30)
        train, serve = fleet.host("train"), fleet.host("serve")
        assert train is not None and serve is not None
        await asyncio.sleep(2)  # a little of the fleet before the actions
        steps = Steps("kill-training", audit(fleet.events, also=kill.append), host="train")
        plan = await find_job(train, config.host("train"), steps)
        assert (await kill_job(train, plan, steps, grace_s=10)).ok

        def stopped() -> bool:
            s = next(s for s in fleet.statuses() if s.name == "train")
            return s.training is not None and s.training.value.state != "running"

        # the replay's check "killed before the deploy" needs the training pane to have seen it first
        assert await wait_for(stopped, 30, what="the training pane's source to see the job stopped")
        steps = Steps("deploy", audit(fleet.events, also=deploy.append), host="serve")
        request = DeployRequest(algorithm="DFLASH", draft_window=16, health_timeout_s=60)
        outcome = await execute(serve, await preflight(serve, config.host("serve"), request, steps), steps,
                                operator="test")
        assert outcome.outcome == "deployed", outcome.message

        def dflash() -> bool:
            s = next(s for s in fleet.statuses() if s.name == "serve")
            info = s.sglang.value.info if s.sglang is not None else None
            return info is not None and info.algorithm == "DFLASH"

        assert await wait_for(dflash, 30, what="the serving pane's source to see DFLASH")
        await asyncio.sleep(2)
    finally:
        await fleet.stop()
        recorder.stop()
    return Recorded(path, lab, kill, deploy, start, time.time())


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, lab_parts: None) -> Iterator[Recorded]:
    folder = tmp_path_factory.mktemp("recorder-lab")
    options = LabOptions(trainer_step_seconds=0.2, sglang_startup_s=1.5, sglang_load_rps=4.0,
                         gpu_interval_s=0.5, sglang_interval_s=0.5)
    for lab in running_lab(folder / "lab", options, ready):
        yield asyncio.run(_record(lab, folder / "fleet.screc"))


async def test_replay_shows_the_deploy_steps_at_their_times(recorded: Recorded, tmp_path: Path) -> None:
    recording = Recording(recorded.path)
    assert recording.problem is None
    assert recording.start >= recorded.start - 1 and recording.end <= recorded.end + 1
    fleet = ReplayFleet(recording, recording.start)
    config = replay_config(fleet.state, str(recorded.path))
    assert [h.name for h in config.hosts] == ["train", "serve"] and config.serve_hosts  # the recorded config
    app = ReplayApp(fleet, config, themes=load_themes([BUNDLED_DIR]))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("p")
        assert fleet.paused
        panel = app.query_one(ActionPanel)
        first = recorded.deploy[0]
        for _ in range(400):  # n: event by event, up to the deploy's first step
            if panel.track is not None and panel.track.title == "Deploy":
                break
            await pilot.press("n")
        assert panel.track is not None and panel.track.title == "Deploy"
        logged = [e for e in recording.events_between(recording.start - 1, recording.end)
                  if e.data.get("action") == "deploy" and e.data.get("kind") == "step"]
        assert fleet.now == logged[0].at and abs(logged[0].at - first.at) < 0.05  # its recorded time
        serve = next(s for s in fleet.statuses() if s.name == "serve")
        assert serve.sglang is not None and serve.sglang.value.info is not None
        assert serve.sglang.value.info.algorithm in ("NEXTN", "EAGLE")  # before the deploy (SGLang resolves NEXTN)
        train = next(s for s in fleet.statuses() if s.name == "train")
        assert train.training is not None and train.training.value.state != "running"  # killed before
        assert [e.message for e in logged] == [e.message for e in recorded.deploy if e.kind == "step"]
        seen: set[str] = set()
        for event, step in zip(logged, [e for e in recorded.deploy if e.kind == "step"], strict=True):
            assert abs(event.at - step.at) < 0.05  # recorded at the step's own time
            if step.step in seen:
                continue
            seen.add(step.step)
            fleet.play_to(event.at - 1e-6)  # each step shows up at its recorded time, not before
            await pilot.pause()
            assert step.step not in [r.name for r in panel.track.rows] or step is first, (step.step, panel.text)
            fleet.play_to(event.at)
            await pilot.pause()
            assert step.step in [r.name for r in panel.track.rows], (step.step, panel.text)
        fleet.play_to(recorded.deploy[-1].at + 0.05)
        await wait_for(lambda: panel.track is not None and panel.track.finished, 5, what="the deploy's end",
                       pilot=pilot)
        assert recorded.deploy[-1].message in panel.text
        await pilot.press("right_square_bracket")  # +1 min: past the end, the fleet as it ended
        assert fleet.now == recording.end
        serve = next(s for s in fleet.statuses() if s.name == "serve")
        assert serve.sglang is not None and serve.sglang.value.info is not None
        assert serve.sglang.value.info.algorithm == "DFLASH"


def test_at_and_diff_on_the_lab_recording(recorded: Recorded, capsys: pytest.CaptureFixture[str]) -> None:
    before, after = recorded.kill[0].at - 0.5, recorded.end
    assert main(["replay", str(recorded.path), "--at", str(after), "--json"]) == 0
    at = json.loads(capsys.readouterr().out)
    serve = next(h for h in at["hosts"] if h["name"] == "serve")
    assert serve["sglang"]["value"]["info"]["algorithm"] == "DFLASH"
    assert serve["sglang"]["value"]["info"]["draft_window"] == 16
    assert main(["replay", str(recorded.path), "--diff", str(before), str(after)]) == 0
    d = json.loads(capsys.readouterr().out)
    assert [(a["action"], a["outcome"]) for a in d["actions"]] == [("kill-training", "done"), ("deploy", "done")]
    hosts = {h["name"]: h for h in d["hosts"]}
    assert hosts["serve"]["serving"]["before"]["algorithm"] in ("NEXTN", "EAGLE")
    assert hosts["serve"]["serving"]["after"]["algorithm"] == "DFLASH"
    assert hosts["train"]["training_state"]["before"] == "running"


def test_replay_in_tmux(recorded: Recorded, tmp_path: Path) -> None:
    if not shutil.which("tmux"):
        pytest.fail("tmux is required: apt-get install -y tmux (scripts/setup.sh does this)")
    exe = Path(sys.executable).parent / "specconsole"
    sock = f"sc-replay-{tmp_path.name}"
    tmux = ["tmux", "-L", sock]
    subprocess.run([*tmux, "new-session", "-d", "-x", "120", "-y", "40",
                    f"{exe} replay {recorded.path} --speed 16"], check=True)
    try:
        def screen() -> str:
            return subprocess.run([*tmux, "capture-pane", "-p"], capture_output=True, text=True).stdout

        assert wait_for(lambda: "REPLAY read-only" in screen() and "16x" in screen(), 30, step=0.2), screen()
        assert wait_for(lambda: "Deploy" in screen(), 30, step=0.2), screen()  # the action view at 16x
        subprocess.run([*tmux, "send-keys", "q"], check=True)
        assert wait_for(lambda: subprocess.run([*tmux, "has-session"], capture_output=True).returncode != 0, 15)
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
