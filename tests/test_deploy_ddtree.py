"""DDTree deploys against the lab: an SGLang with DDTree (0.5.24+ddtree) and one without (0.5.23).

Real sshd, real systemctl and the SGLang simulator of each version; the console learns what the
host offers from the installed SGLang's own ``--help``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import running_lab
from specconsole.actions.deploy.preflight import DeployRefused, DeployRequest, execute, preflight
from specconsole.lab.doubles.sglang_versions import DDTREE_VERSION
from specconsole.lab.parts.environment import Lab, LabOptions
from specconsole.sources.sglang import SglangSource
from specconsole.steps import StepEvent, Steps
from test_deploy import connect, server_info, unit_digest, wait_healthy

pytestmark = pytest.mark.xdist_group("ddtree-lab")  # its module lab: one per run, not one per worker

DDTREE16 = DeployRequest(algorithm="DDTREE", block_size=16, tree_budget=32, health_timeout_s=90)


def _lab(path: Path, version: str) -> Iterator[Lab]:
    yield from running_lab(path, LabOptions(trainer=False, sglang_startup_s=1.0, sglang_load_rps=0,
                                            sglang_version=version), lambda lab: wait_healthy(lab, timeout=120))


@pytest.fixture(scope="module")
def ddtree_lab(tmp_path_factory: pytest.TempPathFactory, lab_parts: None) -> Iterator[Lab]:
    """A serving host whose SGLang has DDTree; the tests below deploy on it in turn."""
    yield from _lab(tmp_path_factory.mktemp("ddtree") / "lab", DDTREE_VERSION)


@pytest.fixture
def old_lab(tmp_path: Path, lab_parts: None) -> Iterator[Lab]:
    yield from _lab(tmp_path / "lab", "0.5.23")


def dropin(lab: Lab) -> Path:
    return lab.unit_path.parent / "sglang.service.d" / "zz-specconsole-deploy.conf"


async def test_nextn_to_ddtree_block_16_budget_32(ddtree_lab: Lab) -> None:
    assert server_info(ddtree_lab)["speculative_algorithm"] in ("NEXTN", "EAGLE")
    events: list[StepEvent] = []
    host, cfg = await connect(ddtree_lab)
    try:
        steps = Steps("deploy", events.append, host="serve")
        plan = await preflight(host, cfg, DDTREE16, steps)
        assert plan.version == DDTREE_VERSION
        assert plan.new["algorithm"] == "DDTREE" and plan.new["num_draft_tokens"] == "16"
        assert plan.new["tree_budget"] == "32" and plan.new["attention_backend"] == "triton"
        text = "\n".join(plan.describe())
        assert "NEXTN -> DDTREE" in text and "--speculative-ddtree-budget" in text
        assert "full-tree mode" in text and "overlap scheduling off" in text
        outcome = await execute(host, plan, steps, operator="test")
        assert outcome.outcome == "deployed", outcome.message
        assert cfg.sglang is not None
        snap = await SglangSource(host, cfg.sglang).poll()  # what the serving pane shows
    finally:
        await host.close()
    assert snap.info is not None and snap.info.algorithm == "DDTREE"
    assert (snap.info.block_size, snap.info.tree_budget) == (16, 32)
    assert snap.worker == (("block_size", "16"), ("tree_budget", "32"))  # the DDTree worker's own log line
    info = server_info(ddtree_lab)
    assert info["speculative_algorithm"] == "DDTREE"
    assert info["speculative_num_draft_tokens"] == 16 and info["speculative_dflash_block_size"] == 16
    assert info["speculative_ddtree_budget"] == 32
    assert info["attention_backend"] == "triton" and info["page_size"] == 1
    assert info["disable_overlap_schedule"] is True  # SGLang's doing, not the unit's
    text = dropin(ddtree_lab).read_text()
    assert "--speculative-ddtree-budget 32" in text and "--speculative-num-draft-tokens 16" in text
    assert "--speculative-num-steps" not in text and "--speculative-eagle-topk" not in text
    journal = ddtree_lab.root("serve") / "var" / "log" / "journal" / "sglang.service.log"
    assert "Initialized DDTree worker. block_size=16, tree_budget=32" in journal.read_text(errors="replace")


async def test_the_deprecated_window_alias_is_changed_in_place(ddtree_lab: Lab) -> None:
    """A unit that spells the window ``--speculative-dflash-draft-window-size`` keeps that one flag."""
    unit = ddtree_lab.unit_path
    base = unit.read_text()
    alias = "--enable-metrics \\\n    --speculative-dflash-draft-window-size 32"
    unit.write_text(base.replace("--enable-metrics", alias))
    dropin(ddtree_lab).unlink()  # the operator went back to the base unit
    ddtree_lab._systemctl("daemon-reload")
    host, cfg = await connect(ddtree_lab)
    try:
        steps = Steps("deploy", lambda _e: None, host="serve")
        plan = await preflight(host, cfg, DeployRequest(algorithm="DDTREE", draft_window=48, health_timeout_s=90),
                               steps)
        assert plan.current["draft_window"] == "32"  # read through the hidden alias
        assert any("--speculative-dflash-draft-window-size" in n and "in place" in n for n in plan.notes)
        outcome = await execute(host, plan, steps, operator="test")
    finally:
        await host.close()
    assert outcome.outcome == "deployed", outcome.message
    text = dropin(ddtree_lab).read_text()
    exec_start = text.split("ExecStart=")[-1]
    assert len(re.findall(r"--speculative-dflash-draft-window-size 48\b", exec_start)) == 1
    # the old value 32 as a word of its own: a --port such as 32534 (the lab's ports are below 32768) is not it
    assert "--speculative-draft-window-size" not in exec_start and not re.search(r"\s32(\s|$)", exec_start)
    info = server_info(ddtree_lab)
    assert info["speculative_draft_window_size"] == 48 and info["speculative_dflash_draft_window_size"] == 48
    assert info["speculative_algorithm"] == "DDTREE" and info["speculative_ddtree_budget"] == 15  # spine mode


async def test_ddtree_on_0_5_23_is_refused_naming_the_flags_looked_for(old_lab: Lab) -> None:
    before = unit_digest(old_lab)
    host, cfg = await connect(old_lab)
    try:
        with pytest.raises(DeployRefused) as refused:
            await preflight(host, cfg, DDTREE16, Steps("deploy", lambda _e: None))
        # a rule of SGLang's, refused before anything changes, naming it
        with pytest.raises(DeployRefused, match="DFLASH, DSPARK, UNO"):
            await preflight(host, cfg, DeployRequest(algorithm="MEDUSA"), Steps("deploy", lambda _e: None))
    finally:
        await host.close()
    message = str(refused.value)
    assert "\n" not in message
    assert "SGLang 0.5.23 on serve does not offer DDTREE" in message
    assert "--speculative-algorithm" in message and "--speculative-ddtree-budget (absent)" in message
    assert unit_digest(old_lab) == before
