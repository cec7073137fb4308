"""The deploy's host check: the serving host's own SGLang judges the planned unit before anything changes.

Against the lab: real sshd, real systemctl, and a serving host whose SGLang launcher runs under real
SGLang 0.5.23 (``.venv-sglang``), so the verdicts below are SGLang's own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import running_lab
from specconsole.actions import host_check
from specconsole.actions.deploy import DeployRefused, DeployRequest, preflight
from specconsole.hosts import CommandResult
from specconsole.lab.parts.environment import Lab, LabOptions, write_draft_model
from specconsole.sglang.unit import parse_unit
from specconsole.steps import StepEvent, Steps
from test_deploy import connect, server_info, unit_digest, wait_healthy

pytestmark = pytest.mark.xdist_group("host-check-lab")  # its module lab: one per run, not one per worker


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, lab_parts: None) -> Iterator[Lab]:
    """Shared: nothing below changes the host (each asserts the unit's checksum)."""
    yield from running_lab(tmp_path_factory.mktemp("host-check") / "lab",
                           LabOptions(trainer=False, sglang_startup_s=0.3, sglang_load_rps=0), wait_healthy)


async def _check(lab: Lab, args: list[str]) -> tuple[host_check.HostVerdict, list[StepEvent]]:
    events: list[StepEvent] = []
    host, _cfg = await connect(lab)
    try:
        cat = lab._systemctl("cat", "sglang.service").stdout
        unit = parse_unit("sglang.service", cat)
        prefix = unit.exec_start[:2]  # .../bin/sglang serve
        verdict = await host_check.check(host, Steps("deploy", events.append, host="serve"), unit, prefix,
                                         ["--model-path", str(lab.target_model_dir()), *args])
    finally:
        await host.close()
    return verdict, events


async def test_the_old_dflash_to_nextn_plan_is_refused_by_sglangs_own_assert(lab: Lab) -> None:
    # what preflight used to plan for DFLASH -> NEXTN: steps/topk dropped, the block's draft tokens kept
    verdict, events = await _check(lab, ["--speculative-algorithm", "NEXTN", "--speculative-num-draft-tokens", "16"])
    assert verdict.verdict == "refused" and verdict.version == "0.5.23"
    assert verdict.message == ("AssertionError at speculative_hook.py:1162: assert ( cfg.speculative_eagle_topk is "
                               "None and cfg.speculative_num_draft_tokens is None )")
    # the step log shows the exact command: the unit's interpreter found through the launcher's #! line
    commands = [e.message for e in events if e.kind == "command"]
    assert commands[0].startswith("head -c 512 -- ") and commands[0].endswith("/bin/sglang")
    assert str(lab.sglang_venv_python()) + " - --model-path " in commands[-1]
    assert commands[-1].startswith("env -C / ") and "SGLANG_SIM_STARTUP_S=0.3" in commands[-1]


async def test_an_accepted_command_line_comes_back_resolved(lab: Lab) -> None:
    verdict, _ = await _check(lab, ["--speculative-algo", "NEXTN", "--tp-size", "2"])  # a prefix, as argparse takes
    assert verdict.accepted, verdict
    r = verdict.resolved
    assert (r["speculative_algorithm"], r["speculative_num_steps"], r["speculative_eagle_topk"],
            r["speculative_num_draft_tokens"]) == ("EAGLE", 3, 1, 4)  # SGLang's own automatic choice
    assert r["device"] == "cuda" and r["tp_size"] == 2  # the lab's CUDA double: a 2-GPU H200 host


async def test_argparse_refusals_come_back_as_sglangs_usage_line(lab: Lab) -> None:
    verdict, _ = await _check(lab, ["--attention-backend", "trition"])
    assert verdict.verdict == "refused"
    assert verdict.message.startswith("sglang serve: error: argument --attention-backend: invalid choice: 'trition'")


async def test_a_deploy_sglang_refuses_never_touches_the_unit_or_the_server(lab: Lab, tmp_path: Path) -> None:
    # a draft exported without model_type: the built-in rules read block_size and pass; SGLang cannot load it
    draft = lab.root("serve") / "models" / "dflash-no-model-type"
    write_draft_model(draft)
    cfg_path = draft / "config.json"
    cfg_path.write_text(json.dumps({k: v for k, v in json.loads(cfg_path.read_text()).items() if k != "model_type"}))
    before, started = unit_digest(lab), server_info(lab)["startup_time"]
    events: list[StepEvent] = []
    host, cfg = await connect(lab)
    try:
        with pytest.raises(DeployRefused) as refused:
            await preflight(host, cfg, DeployRequest(algorithm="DFLASH", draft_window=32, draft_model=str(draft)),
                            Steps("deploy", events.append, host="serve"))
    finally:
        await host.close()
    text = str(refused.value)
    assert "\n" not in text
    assert text.startswith("SGLang 0.5.23 on serve refuses the planned command line: ValueError: Unrecognized model "
                           f"in {draft}.")
    assert text.endswith("nothing was changed")
    assert unit_digest(lab) == before and server_info(lab)["startup_time"] == started  # no restart
    assert not any("lock" in e.message and e.kind == "command" and "mkdir" in e.message for e in events)


async def test_the_plan_shows_what_sglang_resolved_and_no_host_check_says_it_skipped(lab: Lab) -> None:
    before = unit_digest(lab)
    host, cfg = await connect(lab)
    try:
        events: list[StepEvent] = []
        plan = await preflight(host, cfg, DeployRequest(algorithm="DFLASH", draft_window=64),
                               Steps("deploy", events.append, host="serve"))
        skipped = await preflight(host, cfg, DeployRequest(algorithm="DFLASH", draft_window=64, host_check=False),
                                  Steps("deploy", lambda _e: None, host="serve"))
    finally:
        await host.close()
    text = "\n".join(plan.describe())
    assert ("SGLang 0.5.23 on serve accepts the new command line and resolves: DFLASH, draft tokens 16, steps 1/topk "
            "1, window 64") in text
    assert plan.expect["speculative_num_draft_tokens"] == 16 and plan.expect["speculative_algorithm"] == "DFLASH"
    assert any(e.kind == "step" and e.step == "SGLang's own check" for e in events)
    assert skipped.host_verdict is None
    assert "SGLang's own check: skipped (--no-host-check)" in "\n".join(skipped.describe())
    assert unit_digest(lab) == before


@pytest.mark.usefixtures("lab_parts")
async def test_a_launcher_that_is_not_python_falls_back_to_the_built_in_rules_in_one_line(tmp_path: Path) -> None:
    # the lab's DDTree build is a shell script (the build is in no release, real SGLang cannot be it)
    from specconsole.lab.doubles.sglang_versions import DDTREE_VERSION

    for lab in running_lab(tmp_path / "lab", LabOptions(trainer=False, sglang=True, sglang_startup_s=0.3,
                                                         sglang_load_rps=0, sglang_version=DDTREE_VERSION),
                           wait_healthy):
        events: list[StepEvent] = []
        host, cfg = await connect(lab)
        try:
            with pytest.raises(DeployRefused, match="full-tree mode"):  # the built-in DDTREE rules still decide
                await preflight(host, cfg, DeployRequest(algorithm="DDTREE", tree_budget=32, attention_backend="fa3"),
                                Steps("deploy", events.append, host="serve"))
            plan = await preflight(host, cfg, DeployRequest(algorithm="DDTREE", tree_budget=8),
                                   Steps("deploy", events.append, host="serve"))
        finally:
            await host.close()
        warns = [e.message for e in events if e.kind == "warning" and "own check" in e.message]
        assert warns and warns[0].startswith("SGLang's own check cannot run on serve: ExecStart's program ")
        assert "is not a Python script (#!/bin/sh)" in warns[0] and "the built-in rules decide" in warns[0]
        assert plan.host_verdict is not None and plan.host_verdict.verdict == "unavailable"

        # the review's finding: a unit with --decode-attention-backend fa3 (and --attention-backend triton) passed
        # preflight for a DDTree full tree, restarted, and SGLang's DDTree refused it at start-up
        unit = lab.unit_path
        unit.write_text(unit.read_text().replace(" --enable-metrics", " --enable-metrics --attention-backend triton "
                                                 "--decode-attention-backend fa3"))
        lab._systemctl("daemon-reload")
        before, started = unit_digest(lab), server_info(lab)["startup_time"]
        host, cfg = await connect(lab)
        try:
            with pytest.raises(DeployRefused, match="sets --decode-attention-backend fa3"):
                await preflight(host, cfg, DeployRequest(algorithm="DDTREE", tree_budget=32),
                                Steps("deploy", lambda _e: None, host="serve"))
        finally:
            await host.close()
        assert unit_digest(lab) == before and server_info(lab)["startup_time"] == started  # nothing restarted


def test_verdict_lines() -> None:
    def res(stdout: str, status: int = 0, stderr: str = "") -> CommandResult:
        return CommandResult("python -", status, stdout, stderr, 0.1)

    v = host_check.verdict_of(res('noise\nspecconsole-argcheck {"verdict": "refused", "version": "0.5.23", '
                                  '"kind": "ValueError", "message": "Currently DFLASH speculative decoding only '
                                  'supports pp_size == 1.", "where": "speculative_hook.py:88", "source": ""}\n'), "cmd")
    assert v.verdict == "refused" and v.message == ("ValueError: Currently DFLASH speculative decoding only supports "
                                                    "pp_size == 1.")
    v = host_check.verdict_of(res("", 1, "Traceback (most recent call last):\n  File \"<stdin>\", line 1\n"
                                          "ModuleNotFoundError: No module named 'torch'\n"), "cmd")
    assert v.verdict == "unavailable"
    assert v.message == "the check printed no verdict (exit 1: ModuleNotFoundError: No module named 'torch')"
    v = host_check.verdict_of(res('specconsole-argcheck {"verdict": "unavailable", "reason": "cannot import '
                                  'sglang.srt.server_args: ModuleNotFoundError: No module named \'sglang\'"}\n', 3),
                              "cmd")
    assert v.verdict == "unavailable" and "No module named 'sglang'" in v.message
    assert host_check.parse_shebang("#!/usr/bin/env -S python3 -u\nimport x") == ["python3", "-u"]
    assert host_check.parse_shebang("#!/opt/sglang/bin/python3.11\n") == ["/opt/sglang/bin/python3.11"]
    assert host_check.parse_shebang("#!/bin/sh\n") == ["/bin/sh"] and host_check.parse_shebang("ELF") is None


def test_ddtree_full_tree_needs_triton_for_prefill_and_decode() -> None:
    """Finding: ``--decode-attention-backend fa3`` passed preflight, and SGLang's DDTree refused it at start."""
    from specconsole.actions.algorithms import SpecContext, SpecInput, _ddtree_rules
    from specconsole.sglang.flags import SglangCli

    def plan(**current: str) -> dict[str, str | None]:
        ctx = SpecContext("serve", "sglang.service", "0.5.24+ddtree", SglangCli(), {}, dict(current), None)
        new: dict[str, str | None] = {}
        _ddtree_rules(ctx, SpecInput("DDTREE", None, 16, 32, None, None), 16, "DFLASH", new)
        return new

    assert plan(attention_backend="triton")["tree_budget"] == "32"
    for flag in ("decode_attention_backend", "prefill_attention_backend"):
        with pytest.raises(DeployRefused, match=f"sets --{flag.replace('_', '-')} fa3"):
            plan(attention_backend="triton", **{flag: "fa3"})
    assert plan(attention_backend="triton", decode_attention_backend="triton")["tree_budget"] == "32"


async def test_a_misspelt_attention_backend_is_refused_by_the_hosts_choices(lab: Lab) -> None:
    """Issue 24 item 3: ``--attention-backend trition`` passed preflight, restarted into a crash, rolled back."""
    before, started = unit_digest(lab), server_info(lab)["startup_time"]
    host, cfg = await connect(lab)
    try:
        with pytest.raises(DeployRefused) as refused:
            await preflight(host, cfg, DeployRequest(algorithm="DFLASH", draft_window=16, attention_backend="trition"),
                            Steps("deploy", lambda _e: None, host="serve"))
    finally:
        await host.close()
    text = str(refused.value)
    assert text.startswith("SGLang 0.5.23 on serve does not accept --attention-backend trition: did you mean "
                           "triton? its --help lists triton, torch_native,")
    assert unit_digest(lab) == before and server_info(lab)["startup_time"] == started


async def test_a_unit_that_runs_python_m_sglang_launch_server_is_checked_by_that_python(lab: Lab) -> None:
    # ExecStart=/opt/sglang/bin/python -m sglang.launch_server ARGS: the interpreter is ExecStart's own program
    events: list[StepEvent] = []
    host, _cfg = await connect(lab)
    try:
        unit = parse_unit("sglang.service", lab._systemctl("cat", "sglang.service").stdout)
        python = str(lab.sglang_venv_python())
        verdict = await host_check.check(host, Steps("deploy", events.append, host="serve"), unit,
                                         [python, "-m", "sglang.launch_server"],
                                         ["--model-path", str(lab.target_model_dir()), "--speculative-algorithm",
                                          "NGRAM"])
    finally:
        await host.close()
    assert verdict.accepted and verdict.resolved["speculative_algorithm"] == "NGRAM", verdict
    assert verdict.resolved["speculative_num_draft_tokens"] == 12  # SGLang's own NGRAM default
    commands = [e.message for e in events if e.kind == "command"]
    assert len(commands) == 1 and f"{python} - --model-path " in commands[0]  # no #! lookup needed
