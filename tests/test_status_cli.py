"""`specconsole status` against the lab: real values from both hosts; an unreachable host is marked."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import wait_for
from specconsole.base.samples import Sample
from specconsole.lab.parts.environment import Lab, free_port
from specconsole.report import sample_json, status_text


def run_status(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specconsole", "status", *args], capture_output=True, text=True,
                          timeout=timeout)


def wait_training(lab: Lab, steps: int = 3, timeout: float = 90) -> None:
    assert wait_for(lambda: lab.train_log.exists() and lab.train_log.read_text().count('"step"') >= steps, timeout,
                    what=f"{steps} steps in the training job's log", step=0.3)


def loaded(data: dict[str, Any]) -> bool:
    """Both hosts show what moves after start: the workers on their GPUs, training speed, SGLang healthy
    with its simulated traffic counted."""
    hosts = {h["name"]: h for h in data["hosts"]}
    try:
        train, serve = hosts["train"], hosts["serve"]
        sglang = serve["sglang"]["value"]
        return (len(train["gpu"]["value"]["processes"]) == 2 and train["training"]["value"]["tokens_per_s"] > 0
                and sglang["state"] == "healthy" and sglang["metrics"]["tokens_per_s"] > 0
                and sglang["metrics"]["spec_accept_length"] is not None)
    except (KeyError, TypeError):  # not there yet (None where a value comes later)
        return False


def test_status_json_has_real_values_for_both_hosts(lab: Lab) -> None:
    wait_training(lab)
    snaps: list[dict[str, Any]] = []

    def snapshot_loaded() -> bool:
        res = run_status("--config", str(lab.config_path), "--json")
        assert res.returncode == 0, res.stderr
        snaps.append(json.loads(res.stdout))
        # a GPU reading older than its interval + grace is marked stale, rightly: a loaded 2-core
        # machine can delay one by seconds, so the snapshot checked below is a fresh one
        return loaded(snaps[-1]) and not any(h["gpu"]["stale"] for h in snaps[-1]["hosts"])

    assert wait_for(snapshot_loaded, 60, what="SGLang loaded, its simulated traffic counted and fresh GPU readings "
                    "in `status --json`", step=0.2)
    data = snaps[-1]
    hosts = {h["name"]: h for h in data["hosts"]}
    assert set(hosts) == {"train", "serve"}
    for h in hosts.values():
        assert h["reachable"] and h["connection"]["state"] == "connected"
        for kind in ("gpu",):
            s = h[kind]
            assert s["at"] and s["age_s"] >= 0 and s["stale"] is False and s["interval_s"] == 0.5
    train, serve = hosts["train"], hosts["serve"]
    gpus = train["gpu"]["value"]["gpus"]
    assert len(gpus) == 8 and gpus[0]["name"] == "NVIDIA H200" and gpus[0]["memory_total_mib"] == 143771
    # the two torchrun workers hold GPUs 0 and 1 (LOCAL_RANK), the rest idle
    assert gpus[0]["memory_used_mib"] > 60000 and gpus[1]["memory_used_mib"] > 60000
    assert gpus[2]["memory_used_mib"] < 100 and gpus[0]["utilization_pct"] > 80
    pids = {p["pid"] for p in train["gpu"]["value"]["processes"]}
    assert len(pids) == 2
    t = train["training"]["value"]
    assert t["step"] >= 1 and t["loss"] > 0 and t["tokens_per_s"] > 0 and t["total_epochs"] == 6
    assert serve["sglang"]["value"]["state"] == "healthy"
    info = serve["sglang"]["value"]["info"]
    assert info["version"] == "0.5.23" and info["algorithm"] in ("EAGLE", "NEXTN")
    assert info["num_draft_tokens"] == 4
    m = serve["sglang"]["value"]["metrics"]
    assert m["tokens_per_s"] is not None and m["tokens_per_s"] > 0
    assert m["spec_accept_length"] is not None and 1.0 < m["spec_accept_length"] <= 4.0
    assert len(serve["gpu"]["value"]["gpus"]) == 2


def test_status_text_and_unreachable_host_exit_1(lab: Lab, tmp_path: Path) -> None:
    text = lab.config_path.read_text()
    serve_port = lab.state.hosts["serve"].port
    dead = free_port("127.0.0.3")
    cfg = tmp_path / "one-down.toml"
    cfg.write_text(text.replace(f"port = {serve_port}\n", f"port = {dead}\n"))
    t0 = time.monotonic()
    res = run_status("--config", str(cfg), "--timeout", "20")
    took = time.monotonic() - t0
    assert res.returncode == 1, res.stdout + res.stderr
    out = res.stdout
    assert re.search(r"== serve \(serve, root@127\.0\.0\.3:\d+\): down", out)
    assert f"cannot connect to root@127.0.0.3:{dead}" in out
    assert "== train (train" in out and "NVIDIA H200" in out and "training: step" in out
    assert took < 15, "an unreachable host must not hold the snapshot hostage"


def test_status_watch_keeps_printing(lab: Lab) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "specconsole", "status", "--config", str(lab.config_path),
                             "--json", "--watch", "--interval", "0.5"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        snaps = [json.loads(proc.stdout.readline()) for _ in range(3)]
    finally:
        proc.terminate()
        proc.wait(10)
    times = [s["at"] for s in snaps]
    assert len(set(times)) == 3 and times == sorted(times)


def test_stale_samples_are_reported_with_their_age() -> None:
    s = Sample(value={"x": 1}, at=1000.0, interval=1.0)
    fresh = sample_json(s, now=1001.2)
    assert fresh["stale"] is False and fresh["age_s"] == 1.2
    old = sample_json(s, now=1003.0)
    assert old["stale"] is True and old["age_s"] == 3.0


def test_status_text_marks_stale_values(lab: Lab) -> None:
    from specconsole.monitor import HostStatus

    res = run_status("--config", str(lab.config_path), "--json")
    assert res.returncode == 0
    # a snapshot read 10 s later than it was taken says STALE and how old
    from specconsole.config import load_config
    from specconsole.monitor import Fleet

    fleet = Fleet(load_config(lab.config_path))
    import asyncio

    async def snap() -> list[HostStatus]:
        await fleet.start()
        try:
            return await fleet.first_snapshot(20)
        finally:
            await fleet.stop()

    statuses = asyncio.run(snap())
    later = time.time() + 10
    text = status_text(statuses, now=later)
    assert re.search(r"gpus: ok, 8 GPU\(s\) \(STALE 1\d\.\ds old\)|gpus: ok, 8 GPU\(s\) \(STALE 1\ds old\)", text), text


@pytest.mark.usefixtures("lab_parts")
def test_lab_cli_up_and_down_leaves_nothing(tmp_path: Path) -> None:
    d = tmp_path / "cli-lab" / "state"
    up = subprocess.run([sys.executable, "-m", "specconsole", "lab", "up", "--dir", str(d), "--no-trainer",
                         "--sglang-startup", "0.5"], capture_output=True, text=True, timeout=120)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "sshd listening on 127.0.0.2" in up.stdout and f"config: {d / 'lab.toml'}" in up.stdout
        st = subprocess.run([sys.executable, "-m", "specconsole", "lab", "status", "--dir", str(d)],
                            capture_output=True, text=True, timeout=30)
        assert st.returncode == 0 and json.loads(st.stdout)["running"] is True
        again = subprocess.run([sys.executable, "-m", "specconsole", "lab", "up", "--dir", str(d)],
                               capture_output=True, text=True, timeout=60)
        assert again.returncode == 1 and "already running" in again.stderr
    finally:
        down = subprocess.run([sys.executable, "-m", "specconsole", "lab", "down", "--dir", str(d)],
                              capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stderr
    # the last of them may still be on its way out: until no process names the folder
    assert wait_for(lambda: not leftovers(d), 10), leftovers(d)


def leftovers(folder: Path) -> list[str]:
    """The command lines of the processes that name ``folder``."""
    found = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if str(folder) in cmd:
                found.append(cmd)
    return found
