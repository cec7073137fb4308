"""The recorder's file, on synthetic recordings (no lab): what goes in comes back at its time,
keyframes, damage, alerts, diff, retention, the tmux line, and a kill -9 losing at most a second."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sample_data as sd
from conftest import wait_for
from recording_sample import T0, alert, record_synthetic, steps_as_events
from specconsole.cli import main
from specconsole.hosts import Connection, ConnState
from specconsole.launch import main as launch_main
from specconsole.recorder.recorder import Recorder
from specconsole.recorder.recording import Recording, diff, parse_time
from specconsole.recorder.store import HEADER, scan
from specconsole.recorder.tmux import line, status_tmux
from specconsole.report import status_json


def test_the_fleet_at_any_second_is_what_was_recorded(tmp_path: Path) -> None:
    path = tmp_path / "r.screc"
    record_synthetic(path, seconds=150, keyframe_s=60)
    recording = Recording(path)
    assert recording.problem is None and recording.start == T0 and recording.end == T0 + 150
    assert sum(b.keyframe for b in recording.blocks) == 3  # 0, 60, 120: a replay starts at any of them
    for k in (0, 59, 61, 149):
        state = recording.state_at(T0 + k)
        by = {s.name: s for s in state.statuses()}
        assert by["train"].training is not None and by["train"].training.value.step == 12000 + 2 * k
        assert by["train"].gpu is not None and by["train"].gpu.at == T0 + k
        assert by["serve"].sglang is not None and by["serve"].sglang.value.metrics is not None
        assert by["serve"].sglang.value.metrics.tokens_per_s == 1800.0 + 10 * k
        assert by["train"].expected == ("gpu", "training") and by["serve"].connection.state is ConnState.CONNECTED
    # the same JSON as status --json gives for the live statuses
    live = sd.sample_statuses(T0)
    replayed = recording.state_at(T0).statuses()
    assert [g["utilization_pct"] for g in status_json(replayed, T0)["hosts"][0]["gpu"]["value"]["gpus"]] == \
        [50.0 + i for i in range(8)]
    assert [h["name"] for h in status_json(replayed, T0)["hosts"]] == ["train", "serve"]
    assert status_json(replayed, T0)["hosts"][0]["gpu"]["value"]["processes"] == \
        status_json(live, T0)["hosts"][0]["gpu"]["value"]["processes"]


def test_a_truncated_or_damaged_file_replays_up_to_the_damage(tmp_path: Path,
                                                               capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.screc"
    record_synthetic(path, seconds=40, keyframe_s=10)
    blocks, _ = scan(path)
    cut = blocks[30].offset + blocks[30].length // 2  # half of the block of second 30
    data = path.read_bytes()
    path.write_bytes(data[:cut])
    recording = Recording(path)
    assert recording.problem is not None and "damaged at byte" in recording.problem and "\n" not in recording.problem
    assert recording.end == T0 + 29
    assert recording.state_at(T0 + 35).statuses()[0].training.value.step == 12000 + 2 * 29  # type: ignore[union-attr]
    # a flipped byte in the middle: its CRC fails, the replay ends before it, with one line
    damaged = bytearray(data)
    damaged[blocks[20].offset + 5] ^= 0xFF
    path.write_bytes(bytes(damaged))
    recording = Recording(path)
    cursor = recording.cursor(T0 + 25)  # from the keyframe at 20, which is the damaged block
    assert "is damaged" in (recording.problem or "") and cursor.state.statuses()[0].training.value.step == 12038  # type: ignore[union-attr]
    assert main(["replay", str(path), "--at", "+25s", "--json"]) == 0
    out, err = capfd.readouterr()
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and "damaged" in err
    assert json.loads(out)["hosts"][0]["training"]["value"]["step"] == 12038
    path.write_bytes(b"not a recording")
    assert main(["replay", str(path), "--at", "+1s", "--json"]) == 1
    assert "nothing recorded" in capfd.readouterr().err


def test_at_and_diff_json(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.screc"
    deploy = [dataclasses.replace(e, at=T0 + 20 + e.elapsed_s) for e in sd.sample_deploy_events(T0)]
    done = dataclasses.replace(deploy[-1], kind="done", message="serving DFLASH, window 16, healthy", at=T0 + 34.5)

    def changes(k: int, statuses: list) -> list:  # type: ignore[type-arg]
        if 30 <= k < 40:  # the training host drops for ten seconds
            return [dataclasses.replace(s, connection=Connection(ConnState.RECONNECTING, T0 + 30, attempt=1))
                    if s.name == "train" else s for s in statuses]
        return statuses

    record_synthetic(path, seconds=60, events=[*steps_as_events([*deploy, done]),
                                               alert("stall", "train", "firing", T0 + 31)], changes=changes)
    assert main(["replay", str(path), "--at", "+10s", "--json"]) == 0
    at = json.loads(capfd.readouterr().out)
    assert set(at) == {"at", "hosts"} and at["hosts"][0]["training"]["value"]["step"] == 12020
    assert set(at["hosts"][0]) == {"name", "role", "address", "reachable", "connection", "gpu", "sglang", "training"}
    assert main(["replay", str(path), "--diff", "+10s", "+35s"]) == 0
    d = json.loads(capfd.readouterr().out)
    assert [(a["action"], a["outcome"]) for a in d["actions"]] == [("deploy", "done")]
    assert d["connections"] == [{"host": "train", "before": "connected", "after": "reconnecting"}]
    assert [(a["alert"], a["state"]) for a in d["alerts"]] == [("stall", "firing")]
    serve = next(h for h in d["hosts"] if h["name"] == "serve")
    assert serve["figures"]["tokens_per_s"] == {"before": 1900.0, "after": 2150.0}
    train = next(h for h in d["hosts"] if h["name"] == "train")
    assert "training_step" not in train.get("figures", {})  # 12020 -> 12070: under the 10 % threshold
    recording = Recording(path)
    quiet = diff(recording, T0 + 45, T0 + 50, threshold=0.5)
    assert quiet["actions"] == [] and quiet["connections"] == [] and quiet["hosts"] == []
    assert main(["replay", str(path), "--at", "yesterday", "--json"]) == 1
    assert "is not a time" in capfd.readouterr().err


def test_times_are_read_several_ways(tmp_path: Path) -> None:
    path = tmp_path / "r.screc"
    record_synthetic(path, seconds=2)
    recording = Recording(path)
    assert parse_time("+90s", recording) == T0 + 90 and parse_time("+2m", recording) == T0 + 120
    assert parse_time(str(T0 + 5), recording) == T0 + 5
    hms = time.strftime("%H:%M:%S", time.localtime(T0 + 1))
    assert parse_time(hms, recording) == T0 + 1


def test_alerts_firing_resolve_and_survive_keyframes(tmp_path: Path) -> None:
    path = tmp_path / "r.screc"
    events = [alert("stall", "train", "firing", T0 + 5), alert("accept_low", "serve", "firing", T0 + 8, "error"),
              alert("accept_low", "serve", "resolved", T0 + 20, "info"), alert("stall", "train", "resolved", T0 + 70)]
    record_synthetic(path, seconds=80, events=events, keyframe_s=10, state_file=tmp_path / "tmux.json")
    recording = Recording(path)
    assert recording.state_at(T0 + 4).worst_alert() is None
    worst = recording.state_at(T0 + 9).worst_alert()
    assert worst is not None and (worst.name, worst.host, worst.level) == ("accept_low", "serve", "error")
    # from a keyframe after the alert fired (the cursor starts there): still firing
    late = recording.cursor(T0 + 65)
    assert late.index > 1 and [(a.name, a.host) for a in late.state.alerts.values()] == [("stall", "train")]
    assert recording.state_at(T0 + 75).worst_alert() is None
    assert recording.next_event_after(T0 + 20.5) == T0 + 70


def test_status_tmux_line_from_the_state_file(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "tmux.json"
    record_synthetic(tmp_path / "r.screc", seconds=3, events=[alert("stall", "train", "firing", T0 + 1, "error")],
                     state_file=state)
    code, text = status_tmux(str(state), now=T0 + 4)
    assert code == 0
    assert text == "2/2 up · !! train stall · step 12006/198000 ETA 7d 2h to 6 epochs · 1830 tok/s acc 6.38"
    assert status_tmux(str(state), now=T0 + 100)[1].startswith("stale 97s: 2/2 up")
    assert launch_main(["status", "--tmux", "--state", str(tmp_path / "missing.json")]) == 1
    assert "no recorder state" in capfd.readouterr().out
    assert line({"hosts_up": 1, "hosts": 2, "alert": {"host": "a\x1b[2J", "name": "x", "level": "warning"}}) == \
        "1/2 up · ! a?[2J x"


def test_a_folder_recording_rotates_segments_and_prunes_old_ones(tmp_path: Path) -> None:
    folder = tmp_path / "recordings"
    folder.mkdir()
    old = folder / "rec-20000101-000000.screc"
    old.write_bytes(b"SPECREC1")
    os.utime(old, (T0 - 3 * 3600, T0 - 3 * 3600))
    record_synthetic(folder, seconds=30, folder=True, segment_s=10, retention_h=1.0)
    segments = sorted(folder.glob("rec-*.screc"))
    assert old not in segments and len(segments) >= 3  # a new segment every 10 s; the 3 h old one is gone
    recording = Recording(folder)
    assert recording.problem is None and recording.start == T0 and recording.end == T0 + 30
    assert recording.state_at(T0 + 25).statuses()[1].sglang.value.metrics.tokens_per_s == 2050.0  # type: ignore[union-attr]


WRITER = """
import sys, time
from specconsole.base.events import Event
from specconsole.recorder.recorder import Recorder
rec = Recorder(sys.argv[1])
rec.start()
while True:
    rec.add([time.time(), "event", "x", Event("tick", "x", at=time.time())])
    time.sleep(0.01)
"""


def test_kill_9_loses_at_most_the_last_second(tmp_path: Path) -> None:
    path = tmp_path / "r.screc"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)])
    try:
        assert wait_for(lambda: path.exists() and len(scan(path)[0]) >= 4, 30, what="four blocks written")
    finally:
        killed_at = time.time()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    recording = Recording(path)
    assert recording.problem is None or "damaged" in recording.problem
    assert recording.end >= killed_at - 1.0
    assert len(recording.events_between(recording.start - 1, recording.end)) > 10


def test_the_header_is_the_documented_size() -> None:
    assert HEADER.size == 31
    assert Recorder("/nonexistent/x").state_file is None


def _local_config(tmp_path: Path, recorder: str = "") -> Path:
    log = tmp_path / "train.jsonl"
    log.write_text('{"step": 7, "loss": 1.5}\n')
    cfg = tmp_path / "local.toml"
    cfg.write_text(f'[console]\nstate_dir = "{tmp_path / "state"}"\naudit_log = "{tmp_path / "audit.log"}"\n'
                   f'{recorder}\n[[hosts]]\nname = "here"\nrole = "train"\nconnect = "local"\n'
                   f'gpu = {{ source = "none" }}\n[hosts.training]\nlog_path = "{log}"\n')
    return cfg


def test_the_console_records_by_default_into_its_state_folder(tmp_path: Path) -> None:
    from specconsole.config import load_config
    from specconsole.ui.console.app import ConsoleApp, _start_recorder

    app = ConsoleApp(load_config(_local_config(tmp_path)))
    recorder = _start_recorder(app)
    assert recorder is not None and recorder.folder and recorder.retention_s == 48 * 3600
    app.events.emit("hello from the console")
    recorder.stop()
    recording = Recording(tmp_path / "state" / "recordings")
    messages = [e.message for e in recording.events_between(recording.start - 1, recording.end)]
    assert any(m.startswith(f"recording to {tmp_path / 'state' / 'recordings'}") for m in messages)
    assert "hello from the console" in messages
    assert [s.name for s in recording.state_at(recording.end).statuses()] == ["here"]
    assert json.loads((tmp_path / "state" / "tmux-status.json").read_text())["hosts"] == 1
    off = ConsoleApp(load_config(_local_config(tmp_path, "[recorder]\nenabled = false")))
    assert _start_recorder(off) is None


def test_status_records_only_when_asked(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    cfg = _local_config(tmp_path)
    assert main(["--config", str(cfg), "status", "--json", "--timeout", "5"]) == 0
    assert not (tmp_path / "state" / "recordings").exists()  # headless: off by default
    path = tmp_path / "headless.screc"
    assert main(["--config", str(cfg), "status", "--json", "--timeout", "5", "--record", str(path)]) == 0
    capfd.readouterr()
    state = Recording(path).state_at(time.time())
    here = state.statuses()[0]
    assert here.name == "here" and here.training is not None and here.training.value.step == 7


def test_status_tmux_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "tmux.json"
    state.write_text(json.dumps({"at": time.time(), "hosts_up": 1, "hosts": 1}))
    assert launch_main(["status", "--tmux", f"--state={state}"]) == 0
    assert capsys.readouterr().out == "1/1 up\n"
    assert launch_main(["status", "--tmux", "--state"]) == 2
    assert launch_main(["status", "--tmux", "--json"]) == 2
    assert "unexpected '--json'" in capsys.readouterr().out
