"""Deploying as a non-root user through a real sudo (``sudo = true``), in the lab.

The serving host's operator is a real system user (:mod:`specconsole.lab.parts.sudo_user`) who logs
in with the lab's key; a sudoers drop-in written by each test (checked by ``visudo -cf``)
grants, or does not grant, the rule the deploy needs. Needs root to create the user and the
drop-in: skipped elsewhere, with the reason; CI runs as root.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from specconsole.actions.deploy.execute import _launch_command
from specconsole.actions.deploy.preflight import DeployRefused, DeployRequest, execute, preflight
from specconsole.actions.deploy.privilege import alive_argv, sudoers_rule
from specconsole.config import HostConfig, load_config
from specconsole.hosts.ssh import SshHost
from specconsole.lab.parts import sudo_user
from specconsole.lab.parts.environment import Lab, LabOptions
from specconsole.steps import StepEvent, Steps
from test_deploy import server_info, wait_healthy
from test_deploy_faults import _agent_python_that_drops

pytestmark = [pytest.mark.lab, pytest.mark.xdist_group("sudo-lab")]  # one system user and sudoers rule: one worker

WHY_NOT = sudo_user.unavailable()
if WHY_NOT:
    pytest.skip(f"a real non-root user and sudo: {WHY_NOT}", allow_module_level=True)

DFLASH16 = DeployRequest(algorithm="DFLASH", draft_window=16, health_timeout_s=120)  # generous: CI load


@pytest.fixture(scope="module")
def sudo_lab(lab_parts: None) -> Iterator[tuple[Lab, str]]:
    """A serving lab in a folder other users can traverse, and the lab's non-root user."""
    user = sudo_user.ensure_user()
    folder = Path(tempfile.mkdtemp(prefix="specconsole-sudo-lab-"))
    opened = sudo_user.reach_for_others(folder, Path(sys.executable), Path(sys.executable).resolve(),
                                        Path(sudo_user.__file__).resolve())
    lab = Lab(folder / "lab", LabOptions(trainer=False, sglang_startup_s=1.0, sglang_load_rps=0))
    try:
        lab.up()
        wait_healthy(lab)
        yield lab, user.pw_name
    finally:
        sudo_user.remove_sudoers()
        lab.down()
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(Path(user.pw_dir) / ".local" / "state" / "specconsole", ignore_errors=True)
        sudo_user.restore_modes(opened)


@pytest.fixture
def no_sudoers() -> Iterator[None]:
    yield
    sudo_user.remove_sudoers()


async def _connect(lab: Lab, user: str) -> tuple[SshHost, HostConfig]:
    cfg = replace(load_config(lab.config_path).host("serve"), user=user, sudo=True)
    host = SshHost(cfg)
    await host.start()
    assert await host.wait_connected(30), host.status.last_error
    return host, cfg


def _tree_digest(lab: Lab) -> dict[str, str]:
    """Every file (and folder) under the lab's /etc/systemd/system, with its bytes' sha256."""
    base = lab.unit_path.parent
    return {str(p.relative_to(base)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(base.rglob("*"))}


def _main_pid(lab: Lab) -> str:
    out = lab._systemctl("show", "sglang.service", "--property=MainPID").stdout
    pid = out.strip().removeprefix("MainPID=")
    assert pid.isdigit() and pid != "0", out
    return pid


@pytest.mark.parametrize("grant", ["no rule", "a rule that needs a password"])
async def test_without_a_sudoers_rule_refuses_before_touching_anything(
        sudo_lab: tuple[Lab, str], no_sudoers: None, grant: str) -> None:
    lab, user = sudo_lab
    rule = None if grant == "no rule" else f"{user} ALL=(root) ALL"
    sudo_user.write_sudoers(sudo_user.sudoers_text(user, rule, lab.root("serve")), user)
    before, pid_before = _tree_digest(lab), _main_pid(lab)
    events: list[StepEvent] = []
    host, cfg = await _connect(lab, user)
    try:
        with pytest.raises(DeployRefused) as refused:
            await preflight(host, cfg, DFLASH16, Steps("deploy", events.append, host="serve"))
    finally:
        await host.close()
    message = str(refused.value)
    assert "\n" not in message and "nothing was changed" in message, message
    named = re.search(r"add the sudoers rule `([^`]+)`", message)
    assert named, message
    assert re.fullmatch(rf"{re.escape(user)} ALL=\(root\) NOPASSWD: /\S*python3?[0-9.]*", named[1]), named[1]
    assert "password is required" in message or "not allowed" in message, message
    # nothing changed: the unit's files and drop-in folder byte for byte, the same main process
    assert _tree_digest(lab) == before
    assert _main_pid(lab) == pid_before
    assert not any(e.command and ("setsid" in e.command or "mkdir" in e.command) for e in events)
    assert server_info(lab)["speculative_algorithm"] in ("NEXTN", "EAGLE")


async def test_deploy_as_a_non_root_user_through_sudo(sudo_lab: tuple[Lab, str], no_sudoers: None) -> None:
    lab, user = sudo_lab
    host, cfg = await _connect(lab, user)
    events: list[StepEvent] = []
    steps = Steps("deploy", events.append, host="serve")
    try:
        # the rule the refusal names, and nothing more (plus the lab-only secure_path/env_keep)
        who = await host.run(["sh", "-c", 'id -u; command -v python3'])
        uid, python = who.stdout.split()
        assert uid != "0"
        sudo_user.write_sudoers(sudo_user.sudoers_text(user, sudoers_rule(user, python), lab.root("serve")), user)
        # a root process is alive for this user although `kill -0` says EPERM (re-attach relies on it)
        assert (await host.run(alive_argv(lab.state.hosts["serve"].sshd_pid or 1))).ok
        pid_before = _main_pid(lab)
        plan = await preflight(host, cfg, DFLASH16, steps)
        assert plan.privilege.sudo and plan.privilege.python == python
        home = Path(sudo_user.pwd.getpwnam(user).pw_dir)
        assert plan.workdir.startswith(f"{home}/.local/state/specconsole/deploy/sglang.service/")
        assert f"as: {user} through `sudo -n {python}`" in "\n".join(plan.describe())
        outcome = await execute(host, plan, steps, operator="test")
        assert outcome.outcome == "deployed", "\n".join(e.line() for e in events)
        # starting it again (as after a dropped connection) finds the root agent (running, or
        # ran: its progress file) and starts no second one
        again = await host.run(_launch_command(plan))
        assert again.ok and "agent already" in again.stdout, again.stdout + again.stderr
    finally:
        await host.close()
    lines = "\n".join(e.line() for e in events)
    assert any(f"setsid nohup sudo -n {python} agent.py" in (e.command or "") for e in events), lines
    assert "systemctl restart -- sglang.service" in [e.command for e in events if e.kind == "command"], lines
    # the unit changed, written by root; the service restarted and is healthy with the new flags
    dropin = lab.unit_path.parent / "sglang.service.d" / "zz-specconsole-deploy.conf"
    assert "--speculative-draft-window-size 16" in dropin.read_text()
    assert dropin.stat().st_uid == 0
    assert _main_pid(lab) != pid_before
    wait_healthy(lab)
    info = server_info(lab)
    assert info["speculative_algorithm"] == "DFLASH" and info["speculative_draft_window_size"] == 16
    progress = Path(plan.workdir) / "progress.jsonl"
    assert progress.stat().st_uid == 0   # the agent ran as root
    records = [json.loads(line) for line in progress.read_text().splitlines()]
    assert records[-1]["outcome"] == "deployed"
    assert sum("started on the host" in r["message"] for r in records) == 1


async def test_sudo_deploy_whose_start_result_is_lost_reattaches_to_the_root_agent(
        sudo_lab: tuple[Lab, str], no_sudoers: None) -> None:
    """The connection drops while the root agent starts (its ``sudo`` pid, in agent.pid, is
    not the user's to signal): after reconnecting, the start finds it running, starts no
    second one, and the console follows it to the end."""
    lab, user = sudo_lab
    wrapper = _agent_python_that_drops(lab)
    (Path(wrapper).parent / "dropped").unlink(missing_ok=True)
    host, cfg = await _connect(lab, user)
    events: list[StepEvent] = []
    try:
        python = (await host.run(["sh", "-c", "command -v python3"])).stdout.strip()
        sudo_user.write_sudoers(sudo_user.sudoers_text(
            user, f"{sudoers_rule(user, python)}, {wrapper}", lab.root("serve")), user)
        plan = await preflight(host, cfg, DeployRequest(algorithm="DFLASH", draft_window=48, health_timeout_s=120),
                               Steps("deploy", events.append, host="serve"))
        plan.privilege = replace(plan.privilege, python=wrapper)   # the agent's interpreter drops the session
        outcome = await asyncio.wait_for(execute(host, plan, Steps("deploy", events.append, host="serve")), 300)
    finally:
        await host.close()
    lines = "\n".join(e.line() for e in events)
    assert outcome.outcome == "deployed", lines
    assert (Path(wrapper).parent / "dropped").exists()
    assert any(e.kind == "result" and e.message.startswith("exit status unknown") for e in events), lines
    assert any(e.kind == "result" and "agent already" in e.message for e in events), lines
    assert any(e.kind == "warning" and "lost the connection" in e.message for e in events), lines
    records = [json.loads(line) for line in (Path(plan.workdir) / "progress.jsonl").read_text().splitlines()]
    assert sum("started on the host" in r["message"] for r in records) == 1
    assert server_info(lab)["speculative_draft_window_size"] == 48
