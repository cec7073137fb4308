"""The deploy wizard against the lab: real sshd, real systemctl managing the SGLang simulator."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import running_lab, wait_for
from specconsole.actions.deploy.execute import SMOKE_PROMPT
from specconsole.actions.deploy.preflight import DeployRefused, DeployRequest, execute, preflight
from specconsole.config import HostConfig, load_config
from specconsole.hosts.ssh import SshHost
from specconsole.lab.parts.environment import Lab, LabOptions
from specconsole.sglang.acceptance import NO_DETAIL
from specconsole.steps import StepEvent, Steps

DFLASH16 = DeployRequest(algorithm="DFLASH", draft_window=16, health_timeout_s=60)


def _serve_lab(path: Path) -> Iterator[Lab]:
    yield from running_lab(path, LabOptions(trainer=False, sglang_startup_s=1.5, sglang_load_rps=0), wait_healthy)


@pytest.fixture
def serve_lab(tmp_path: Path, lab_parts: None) -> Iterator[Lab]:
    """A serving host of the test's own: deploys change it."""
    yield from _serve_lab(tmp_path / "lab")


@pytest.fixture(scope="module")
def unchanged_lab(tmp_path_factory: pytest.TempPathFactory, lab_parts: None) -> Iterator[Lab]:
    """Shared by the tests that prove nothing changes (each asserts the unit's checksum)."""
    yield from _serve_lab(tmp_path_factory.mktemp("deploy-readonly") / "lab")


def url(lab: Lab, path: str) -> str:
    return f"http://127.0.0.1:{lab.state.sglang_port}{path}"


def wait_healthy(lab: Lab, timeout: float = 60) -> None:
    def healthy() -> bool:
        try:
            with urllib.request.urlopen(url(lab, "/health"), timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    assert wait_for(healthy, timeout, what="the lab's SGLang to answer /health with 200", step=0.2)


def server_info(lab: Lab) -> dict:
    with urllib.request.urlopen(url(lab, "/server_info"), timeout=5) as r:
        return json.loads(r.read())


def unit_digest(lab: Lab) -> str:
    base = lab.unit_path.parent
    h = hashlib.sha256()
    for p in sorted(base.rglob("sglang.service*")):
        if p.is_file():
            h.update(str(p).encode() + p.read_bytes())
    return h.hexdigest()


async def connect(lab: Lab) -> tuple[SshHost, HostConfig]:
    cfg = load_config(lab.config_path).host("serve")
    host = SshHost(cfg)
    await host.start()
    assert await host.wait_connected(15)
    return host, cfg


async def test_nextn_to_dflash_window_16(serve_lab: Lab) -> None:
    assert server_info(serve_lab)["speculative_algorithm"] in ("NEXTN", "EAGLE")
    events: list[StepEvent] = []
    host, cfg = await connect(serve_lab)
    try:
        steps = Steps("deploy", events.append, host="serve")
        plan = await preflight(host, cfg, DFLASH16, steps)
        assert plan.current["algorithm"] == "NEXTN" and plan.current["num_draft_tokens"] == "4"
        assert plan.new["algorithm"] == "DFLASH" and plan.new["draft_window"] == "16"
        assert plan.new["block_size"] == "16"  # from the draft model's config.json
        assert plan.version == "0.5.23"
        text = "\n".join(plan.describe())
        assert "NEXTN -> DFLASH" in text and "+ExecStart=" in text and "restarts: sglang.service" in text
        outcome = await execute(host, plan, steps, operator="test")
    finally:
        await host.close()
    assert outcome.outcome == "deployed", outcome.message
    info = server_info(serve_lab)
    assert info["speculative_algorithm"] == "DFLASH"
    assert info["speculative_draft_window_size"] == 16
    assert info["speculative_num_draft_tokens"] == 16
    assert info["speculative_draft_model_path"] == str(serve_lab.draft_model_dir())
    dropin = serve_lab.unit_path.parent / "sglang.service.d" / "zz-specconsole-deploy.conf"
    assert "--speculative-draft-window-size 16" in dropin.read_text()
    # each step said what it did, with the exact commands, results and times
    steps_seen = [e.message for e in events if e.kind == "step"]
    for name in ("read the unit", "SGLang flags", "draft model", "constraints", "lock", "upload",
                 "start the agent", "daemon-reload", "wait for health"):
        assert any(name in s or e.step == name for s in steps_seen for e in events), name
    commands = [e.command for e in events if e.kind == "command"]
    assert "systemctl cat -- sglang.service" in commands
    assert "systemctl restart -- sglang.service" in commands
    assert any(c and c.endswith("/bin/sglang serve --help") for c in commands)
    results = [e for e in events if e.kind == "result"]
    assert results and all(r.took_s is not None and r.message.startswith("exit ") for r in results)
    assert any("smoke:" in e.message and "tok/s" in e.message and "acceptance length" in e.message for e in events)
    # the smoke line carries the simulator's per-request histogram (SGLang 0.5.23's field, its real
    # shape), and the event the plot's figures: the same numbers as the same prompt gives again
    (smoke,) = [e for e in events if e.message.startswith("smoke:")]
    sampling = {"max_new_tokens": plan.smoke_tokens, "temperature": 0}
    body = json.dumps({"text": SMOKE_PROMPT, "sampling_params": sampling}).encode()
    req = urllib.request.Request(url(serve_lab, "/generate"), data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        meta = json.loads(r.read())["meta_info"]
    hist = meta["spec_correct_drafts_histogram"]
    assert sum(hist) == meta["spec_verify_ct"]
    assert f"accepted drafts per verify step [{', '.join(map(str, hist))}] (spec_correct_drafts_histogram, " \
           f"{meta['spec_verify_ct']} steps)" in smoke.message, smoke.message
    ((label, detail),) = smoke.acceptance
    assert label == "serve" and list(detail.histogram) == hist and detail.positions == 15  # block 16: 15 drafts
    assert NO_DETAIL not in smoke.message
    assert events[-1].kind == "done" and events[-1].took_s is not None


@pytest.mark.parametrize(
    ("request_", "needle"),
    [
        (DeployRequest(algorithm="DFLASH", draft_window=8), "SGLang requires --speculative-draft-window-size >= the "
                                                            "DFLASH block size"),
        (DeployRequest(algorithm="DFLASH", draft_window=0), "must be positive"),
        (DeployRequest(algorithm="DFLASH", draft_window=-4), "must be positive"),
        (DeployRequest(algorithm="DFLASH", draft_window="sixteen"), "must be a whole number"),
        (DeployRequest(algorithm="DFLASH", draft_window="99999999999999999999"),
         "the draft window must be <= 1048576, got 99999999999999999999 (SGLang's "
         "--speculative-draft-window-size is a C int)"),
        (DeployRequest(algorithm="DFLASH", draft_window=16, draft_model="/nonexistent/draft"),
         "has no config.json"),
    ],
)
@pytest.mark.xdist_group("deploy-unchanged-lab")  # one module lab per run, not one per worker
async def test_invalid_input_is_refused_before_anything_changes(unchanged_lab: Lab, request_: DeployRequest,
                                                                needle: str) -> None:
    before = unit_digest(unchanged_lab)
    pid_before = server_info(unchanged_lab)["startup_time"]
    host, cfg = await connect(unchanged_lab)
    try:
        with pytest.raises(DeployRefused, match=needle.replace("(", r"\(").replace(")", r"\)")):
            await preflight(host, cfg, request_, Steps("deploy", lambda _e: None))
    finally:
        await host.close()
    assert unit_digest(unchanged_lab) == before
    assert server_info(unchanged_lab)["startup_time"] == pid_before  # not restarted


@pytest.mark.xdist_group("deploy-unchanged-lab")  # one module lab per run, not one per worker
def test_dry_run_changes_nothing(unchanged_lab: Lab) -> None:
    before = unit_digest(unchanged_lab)
    res = subprocess.run([sys.executable, "-m", "specconsole", "deploy", "--config", str(unchanged_lab.config_path),
                          "--algorithm", "DFLASH", "--draft-window", "16", "--dry-run"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "dry run: nothing on the host was changed" in res.stdout
    assert "--speculative-draft-window-size                   - -> 16" in res.stdout.replace("  *", "")
    assert unit_digest(unchanged_lab) == before
    assert server_info(unchanged_lab)["speculative_algorithm"] != "DFLASH"


@pytest.mark.xdist_group("deploy-unchanged-lab")  # one module lab per run, not one per worker
def test_cli_refuses_window_smaller_than_block(unchanged_lab: Lab) -> None:
    before = unit_digest(unchanged_lab)
    res = subprocess.run([sys.executable, "-m", "specconsole", "deploy", "--config", str(unchanged_lab.config_path),
                          "--algorithm", "DFLASH", "--draft-window", "8", "--yes"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and "draft window 8 is smaller than the block size 16" in err[0]
    assert unit_digest(unchanged_lab) == before


async def test_failed_start_is_rolled_back(serve_lab: Lab) -> None:
    # a truncated copy of the draft model: the new server dies loading its weights
    bad = serve_lab.root("serve") / "models" / "dflash-truncated"
    bad.mkdir()
    (bad / "config.json").write_text((serve_lab.draft_model_dir() / "config.json").read_text())
    (bad / "model.safetensors").write_bytes(b"\x00\x01")
    before_info = server_info(serve_lab)
    events: list[StepEvent] = []
    host, cfg = await connect(serve_lab)
    try:
        steps = Steps("deploy", events.append, host="serve")
        plan = await preflight(host, cfg, DeployRequest(algorithm="DFLASH", draft_window=16, draft_model=str(bad),
                                                        health_timeout_s=30), steps)
        outcome = await execute(host, plan, steps)
    finally:
        await host.close()
    assert outcome.outcome == "rolled_back", outcome.message
    assert "previous config is serving again" in outcome.message
    wait_healthy(serve_lab)
    info = server_info(serve_lab)
    assert info["speculative_algorithm"] == before_info["speculative_algorithm"]
    assert not (serve_lab.unit_path.parent / "sglang.service.d" / "zz-specconsole-deploy.conf").exists()
    journal = [e.message for e in events if e.message.startswith("journal:")]
    assert journal, "the service's last log lines are reported"
    assert events[-1].kind == "failed"


async def test_health_timeout_is_rolled_back(serve_lab: Lab) -> None:
    host, cfg = await connect(serve_lab)
    try:
        steps = Steps("deploy", lambda _e: None, host="serve")
        plan = await preflight(host, cfg, DeployRequest(algorithm="DFLASH", draft_window=16, health_timeout_s=0.5),
                               steps)
        outcome = await execute(host, plan, steps)
    finally:
        await host.close()
    assert outcome.outcome == "rolled_back", outcome.message
    assert "/health did not answer 200 within 0.5s" in outcome.message
    wait_healthy(serve_lab)
    assert server_info(serve_lab)["speculative_algorithm"] != "DFLASH"


async def test_dropped_connection_mid_deploy_ends_in_a_good_state(serve_lab: Lab) -> None:
    events: list[StepEvent] = []
    restarting = asyncio.Event()

    def on_event(e: StepEvent) -> None:
        events.append(e)
        if e.command == "systemctl restart -- sglang.service":
            restarting.set()

    host, cfg = await connect(serve_lab)
    try:
        steps = Steps("deploy", on_event, host="serve")
        plan = await preflight(host, cfg, DFLASH16, steps)
        task = asyncio.create_task(execute(host, plan, steps))
        await asyncio.wait_for(restarting.wait(), 60)
        serve_lab.stop_sshd("serve")   # the operator's connection is gone, mid-restart
        await wait_for(lambda: any(e.kind == "warning" and "the deploy continues on the host" in e.message
                                   for e in events), 60, what="the console to notice the lost connection")
        serve_lab.start_sshd("serve")
        outcome = await asyncio.wait_for(task, 120)
    finally:
        await host.close()
    assert outcome.outcome == "deployed", outcome.message
    assert any(e.kind == "warning" and "the deploy continues on the host" in e.message for e in events)
    assert any("re-attaching" in e.message for e in events)
    # nothing is replayed after re-attaching: each agent step is reported once
    assert sum(1 for e in events if e.step == "smoke test" and e.kind == "step") == 1
    wait_healthy(serve_lab)
    assert server_info(serve_lab)["speculative_algorithm"] == "DFLASH"


def test_console_killed_mid_deploy_host_still_ends_good(serve_lab: Lab) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "specconsole", "deploy", "--config", str(serve_lab.config_path),
                             "--algorithm", "DFLASH", "--draft-window", "16", "--yes"],
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stdout is not None
    for line in proc.stdout:
        if "$ systemctl restart" in line:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    lock = serve_lab.unit_path.parent / "sglang.service.d" / ".specconsole" / "deploy.lock"
    wait_for(lambda: not lock.exists(), 60, step=0.3)  # the agent finishing (the asserts below say how)
    wait_healthy(serve_lab)
    info = server_info(serve_lab)
    dropin = serve_lab.unit_path.parent / "sglang.service.d" / "zz-specconsole-deploy.conf"
    # the agent finished on its own: new config healthy (or, had it failed, the old one back)
    assert (info["speculative_algorithm"] == "DFLASH") == dropin.exists()
    assert info["speculative_algorithm"] == "DFLASH"


async def test_second_concurrent_deploy_is_refused_by_the_lock(serve_lab: Lab) -> None:
    locked = asyncio.Event()

    def on_event(e: StepEvent) -> None:
        if "took the lock" in e.message:
            locked.set()

    host, cfg = await connect(serve_lab)
    other, _ = await connect(serve_lab)
    try:
        plan_a = await preflight(host, cfg, DFLASH16, Steps("deploy", lambda _e: None))
        plan_b = await preflight(other, cfg, DeployRequest(algorithm="DFLASH", draft_window=32),
                                 Steps("deploy", lambda _e: None))
        task = asyncio.create_task(execute(host, plan_a, Steps("deploy", on_event)))
        await asyncio.wait_for(locked.wait(), 60)
        # a second operator: refused at preflight ...
        with pytest.raises(DeployRefused, match="another deploy is running"):
            await preflight(other, cfg, DeployRequest(algorithm="DFLASH", draft_window=32),
                            Steps("deploy", lambda _e: None))
        # ... and by the host-side lock itself, had they planned before the first started
        outcome_b = await execute(other, plan_b, Steps("deploy", lambda _e: None))
        outcome_a = await asyncio.wait_for(task, 120)
    finally:
        await host.close()
        await other.close()
    assert outcome_b.outcome == "locked" and "another deploy holds the lock" in outcome_b.message
    assert outcome_a.outcome == "deployed"
    assert server_info(serve_lab)["speculative_draft_window_size"] == 16
