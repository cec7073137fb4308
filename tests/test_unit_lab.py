"""The drop-in against the lab: real sshd, docker-systemctl-replacement running the SGLang simulator.

docker-systemctl-replacement splits ExecStart with Python's ``shlex`` (POSIX shell rules) and
expands ``%`` specifiers per word, but it does not implement ``$$`` (it expands ``$NAME`` even
after a ``$``) nor systemd's C escapes outside ``\\\\``/``\\"``. For every character where it
agrees with systemd (spaces, both quotes, backslashes, ``%``, ``;``, unicode) the path below
goes all the way through a deploy and comes back in ``/server_info`` unchanged; ``$`` and the
escapes are covered by the independent systemd parser in test_unit_escaping.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from specconsole.actions.deploy.preflight import BaseUnitChanged, DeployRequest, execute, preflight
from specconsole.lab.parts.environment import Lab
from specconsole.sglang.unit import DEPLOY_DROPIN
from specconsole.steps import StepEvent, Steps
from test_deploy import _serve_lab, connect, server_info, unit_digest

WEIRD = "d r'a\"f\\t 100% %h ;ü日本"


@pytest.fixture
def serve_lab(tmp_path: Path, lab_parts: None) -> Iterator[Lab]:
    yield from _serve_lab(tmp_path / "lab")


def _cli(lab: Lab, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SPECCONSOLE_CONFIG=str(lab.config_path))
    return subprocess.run([sys.executable, "-m", "specconsole", "deploy", "--config", str(lab.config_path), *args],
                          capture_output=True, text=True, timeout=180, env=env)


def _dropin(lab: Lab) -> Path:
    return lab.unit_path.parent / "sglang.service.d" / DEPLOY_DROPIN


async def test_a_path_with_quotes_percent_and_backslashes_deploys_exactly(serve_lab: Lab) -> None:
    # a newline in the draft model path is refused in one line before anything is read or changed
    before = unit_digest(serve_lab)
    res = _cli(serve_lab, "--algorithm", "DFLASH", "--draft-window", "16", "--dry-run", "--yes",
               "--draft-model", "/models/d\nExecStartPre=/bin/touch /tmp/specconsole-pwned")
    assert res.returncode == 2, res.stdout + res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("specconsole: --draft-model ") and "U+000A" in last and "control" in last
    assert "ExecStartPre" not in res.stdout and unit_digest(serve_lab) == before

    weird = serve_lab.root("serve") / "models" / WEIRD
    shutil.copytree(serve_lab.draft_model_dir(), weird)
    events: list[StepEvent] = []
    host, cfg = await connect(serve_lab)
    try:
        steps = Steps("deploy", events.append, host="serve")
        request = DeployRequest(algorithm="DFLASH", draft_window=16, draft_model=str(weird), health_timeout_s=60)
        plan = await preflight(host, cfg, request, steps)
        outcome = await execute(host, plan, steps, operator="test")
        assert outcome.outcome == "deployed", outcome.message
        # the agent's own check compared /server_info with the path; check it here too
        assert server_info(serve_lab)["speculative_draft_model_path"] == str(weird)
        text = _dropin(serve_lab).read_text()
        assert "100%%" in text and "%%h" in text and "\\\\t" in text
        # the next preflight reads back what was written: nothing left to deploy
        again = await preflight(host, cfg, request, steps)
        assert again.current["draft_model"] == str(weird) and not again.changes
    finally:
        await host.close()


async def test_an_edited_base_unit_is_found_and_rebased(serve_lab: Lab) -> None:
    host, cfg = await connect(serve_lab)
    steps = Steps("deploy", lambda e: None, host="serve")
    dfl16 = DeployRequest(algorithm="DFLASH", draft_window=16, health_timeout_s=60)
    try:
        plan = await preflight(host, cfg, dfl16, steps)
        assert (await execute(host, plan, steps, operator="test")).outcome == "deployed"
        assert "# specconsole-base: sha256=" in _dropin(serve_lab).read_text()

        # the operator edits the base unit after the deploy
        unit = serve_lab.unit_path.read_text()
        assert "    --enable-metrics\n" in unit
        serve_lab.unit_path.write_text(unit.replace("    --enable-metrics\n",
                                                    "    --context-length 8192 \\\n    --enable-metrics\n"))

        with pytest.raises(BaseUnitChanged) as info:
            await preflight(host, cfg, DeployRequest(algorithm="DFLASH", draft_window=32), steps)
        drift = info.value.drift
        assert drift.recorded and ("--context-length", "8192", None) in drift.shadowed
        line = str(info.value)
        assert "\n" not in line and str(serve_lab.unit_path) in line and str(_dropin(serve_lab)) in line
        assert "--context-length 8192 in the base vs absent in the drop-in" in line and "--rebase" in line

        # headless: refused with the fix named; --rebase shows the rebuilt ExecStart in the plan
        res = _cli(serve_lab, "--algorithm", "DFLASH", "--draft-window", "16", "--dry-run", "--yes")
        assert res.returncode == 2 and "specconsole deploy --rebase" in res.stderr, res.stdout + res.stderr
        res = _cli(serve_lab, "--rebase", "--dry-run", "--yes")
        assert res.returncode == 0, res.stdout + res.stderr
        assert f"rebase: ExecStart rebuilt from {serve_lab.unit_path}" in res.stdout
        assert "+    --context-length 8192 \\" in res.stdout

        plan = await preflight(host, cfg, DeployRequest(draft_window=32, rebase=True, health_timeout_s=60), steps)
        assert plan.rebased is not None and any("rebase:" in ln for ln in plan.describe())
        assert "--context-length 8192" in plan.new_dropin and "--speculative-draft-window-size 32" in plan.new_dropin
        assert (await execute(host, plan, steps, operator="test")).outcome == "deployed"
        info_ = server_info(serve_lab)
        assert info_["context_length"] == 8192
        assert info_["speculative_algorithm"] == "DFLASH" and info_["speculative_draft_window_size"] == 32

        # rebased onto the current base: no drift any more
        plan = await preflight(host, cfg, DeployRequest(draft_window=32), steps)
        assert plan.rebased is None and not plan.changes
    finally:
        await host.close()
