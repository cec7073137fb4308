"""The deploy's host check: the serving host's own SGLang judges the planned unit before anything changes.

Against the lab: real sshd, real systemctl, and a serving host whose SGLang launcher runs under real
SGLang 0.5.23 (``.venv-sglang``), so the verdicts below are SGLang's own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import running_lab
from specconsole.actions.deploy import host_check
from specconsole.actions.deploy.preflight import DeployRefused, DeployRequest, preflight
from specconsole.hosts import CommandResult
from specconsole.lab.doubles.sglang_judge import sglang_python
from specconsole.lab.parts.environment import Lab, LabOptions, write_draft_model
from specconsole.remote import argcheck
from specconsole.sglang.unit import parse_unit
from specconsole.steps import StepEvent, Steps
from test_deploy import connect, server_info, unit_digest, wait_healthy

pytestmark = pytest.mark.xdist_group("host-check-lab")  # its module lab: one per run, not one per worker


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, lab_parts: None) -> Iterator[Lab]:
    """Shared: nothing below changes the host (each asserts the unit's checksum)."""
    yield from running_lab(tmp_path_factory.mktemp("host-check") / "lab",
                           LabOptions(trainer=False, sglang_startup_s=0.3, sglang_load_rps=0), wait_healthy)


async def _check(lab: Lab, args: list[str], python: Path | None = None
                 ) -> tuple[host_check.HostVerdict, list[StepEvent]]:
    """The host check of ``args`` under the unit's launcher (or ``python -m sglang.launch_server``)."""
    events: list[StepEvent] = []
    host, _cfg = await connect(lab)
    try:
        cat = lab._systemctl("cat", "sglang.service").stdout
        unit = parse_unit("sglang.service", cat)
        prefix = [str(python), "-m", "sglang.launch_server"] if python else unit.exec_start[:2]  # bin/sglang serve
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
        assert "is not a Python script (#!/bin/sh)" in warns[0]
        assert "checking with the built-in rules instead" in warns[0]
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
    from specconsole.actions.deploy.algorithms import SpecContext, SpecInput, _ddtree_rules
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


# --- SGLang's import chain breaking is the check failing to run, not SGLang refusing (issue 31) ---

#: A module real SGLang 0.5.23 imports only once ``resolve_once`` runs (its resolution pipeline ->
#: kv_shard_hook -> configs -> nano_nemotron_vl -> internvl_utils, which imports torchvision).
DEEP_MODULE = "sglang/srt/multimodal/internvl_utils.py"


def broken_sglang_venv(dest: Path, how: str) -> Path:
    """A copy of ``.venv-sglang`` (hard links: a second or so) whose import chain breaks ``how``:
    ``torchvision`` (the module is not installed, as on the host of the issue), ``syntax`` (a patched
    build with a SyntaxError) or ``library`` (a shared library that does not load). Its Python."""
    real = sglang_python()
    assert real, "tests need .venv-sglang (scripts/setup.sh)"
    venv = Path(real).parent.parent
    subprocess.run(["cp", "-al", str(venv), str(dest)], check=True)
    site = next((dest / "lib").glob("python3*/site-packages"))
    if how == "torchvision":
        shutil.rmtree(site / "torchvision")
    else:
        deep = site / DEEP_MODULE
        text = deep.read_text()
        deep.unlink()  # a file of its own, not the shared hard link
        head = ("import ctypes\nctypes.CDLL('libspecconsole-missing.so.1')\n" if how == "library"
                else "def patched(:\n    pass\n")
        deep.write_text(head + text)
    return dest / "bin" / "python"


@contextmanager
def serving_python(lab: Lab, python: Path) -> Iterator[None]:
    """The serving host's SGLang virtualenv Python (the launcher's ``#!``) is ``python`` meanwhile."""
    wrapper = lab.sglang_venv_python()
    kept = wrapper.with_name("python.kept")
    os.replace(wrapper, kept)
    try:
        wrapper.write_text(f'#!/bin/sh\nexec {python} "$@"\n')  # not a link: a venv's Python is found by its path
        wrapper.chmod(0o755)
        yield
    finally:
        wrapper.unlink()
        os.replace(kept, wrapper)


async def test_a_host_whose_sglang_cannot_import_torchvision_deploys_with_the_built_in_rules(
        lab: Lab, tmp_path: Path) -> None:
    """The issue's host: every deploy was refused with "SGLang 0.5.23 on serve refuses the planned
    command line: ModuleNotFoundError ..."; now the check says it could not run, and the deploy goes on."""
    python = broken_sglang_venv(tmp_path / "venv", "torchvision")
    before = unit_digest(lab)
    events: list[StepEvent] = []
    with serving_python(lab, python):
        host, cfg = await connect(lab)
        try:
            plan = await preflight(host, cfg, DeployRequest(algorithm="DFLASH", draft_window=64),
                                   Steps("deploy", events.append, host="serve"))
        finally:
            await host.close()
    assert plan.host_verdict is not None and plan.host_verdict.verdict == "unavailable"
    warns = [e.message for e in events if e.kind == "warning" and "own check" in e.message]
    assert len(warns) == 1 and "\n" not in warns[0]
    assert warns[0] == ("SGLang's own check cannot run on serve: SGLang 0.5.23 cannot import its resolution: "
                        "ModuleNotFoundError: No module named 'torchvision' (sglang/srt/multimodal/"
                        "internvl_utils.py:5: import torchvision.transforms as T); checking with the built-in rules "
                        "instead (--no-host-check skips the check)")
    assert not any("refuses" in e.message for e in events)
    assert plan.new.get("algorithm") == "DFLASH" and plan.changes  # the built-in rules planned it
    assert "could not run (SGLang 0.5.23 cannot import its resolution" in "\n".join(plan.describe())
    assert unit_digest(lab) == before


@pytest.mark.parametrize(("how", "said"), [
    ("syntax", "SyntaxError: invalid syntax (internvl_utils.py, line 1) (sglang/srt/configs/nano_nemotron_vl.py:22: "
               "from sglang.srt.multimodal.internvl_utils import IMAGENET_MEAN, IMAGENET_STD)"),
    ("library", "OSError: libspecconsole-missing.so.1: cannot open shared object file: No such file or directory "
                "(sglang/srt/multimodal/internvl_utils.py:2: ctypes.CDLL('libspecconsole-missing.so.1'))"),
])
async def test_an_import_chain_broken_deep_inside_sglang_is_unavailable_not_refused(
        lab: Lab, tmp_path: Path, how: str, said: str) -> None:
    python = broken_sglang_venv(tmp_path / "venv", how)
    verdict, events = await _check(lab, ["--speculative-algorithm", "NEXTN"], python)
    assert verdict.verdict == "unavailable" and verdict.version == "0.5.23", verdict
    assert verdict.message == f"SGLang 0.5.23 cannot import its resolution: {said}"
    assert verdict.python == str(python)
    assert [e.message for e in events if e.kind == "command"][-1].split(" - ")[0].endswith(str(python))


async def test_sglangs_own_verdict_is_still_a_refusal_where_its_import_chain_is_broken(
        lab: Lab, tmp_path: Path) -> None:
    """argparse answers before the lazy imports: its usage error stays SGLang's refusal."""
    python = broken_sglang_venv(tmp_path / "venv", "torchvision")
    verdict, _ = await _check(lab, ["--attention-backend", "trition"], python)
    assert verdict.verdict == "refused"
    assert verdict.message.startswith("sglang serve: error: argument --attention-backend: invalid choice: 'trition'")


def test_import_failures_are_told_from_verdicts(tmp_path: Path) -> None:
    """:func:`argcheck.import_failure` on real exceptions raised by real imports and functions."""
    (tmp_path / "needs_lib.py").write_text("import ctypes\nctypes.CDLL('libspecconsole-missing.so.1')\n")
    (tmp_path / "bad_value.py").write_text("raise ValueError('bad at import')\n")
    (tmp_path / "rules.py").write_text(
        "def refuse():\n    raise ValueError('--speculative-num-steps must be >= 1')\n"
        "def wrap():\n    try:\n        import needs_lib  # noqa\n"
        "    except OSError as err:\n        raise RuntimeError('Failed to import needs_lib') from err\n"
        "def explain():\n    try:\n        import no_such_module_xyz  # noqa\n"
        "    except ImportError as err:\n        raise ValueError('flashinfer is not installed') from err\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import rules  # type: ignore[import-not-found]

        def raised(call: object) -> BaseException:
            try:
                call()  # type: ignore[operator]
            except Exception as err:
                return err
            raise AssertionError("nothing raised")

        def importing(name: str) -> BaseException:
            return raised(lambda: __import__(name))

        assert argcheck.import_failure(raised(rules.refuse)) is None  # a verdict
        assert argcheck.import_failure(raised(rules.explain)) is None  # SGLang's ValueError, whatever its cause
        said = argcheck.import_failure(importing("needs_lib"))
        assert said is not None and said.startswith("OSError: libspecconsole-missing.so.1: cannot open shared object")
        assert said.endswith("(needs_lib.py:2: ctypes.CDLL('libspecconsole-missing.so.1'))")
        assert argcheck.import_failure(importing("bad_value")) == \
            "ValueError: bad at import (bad_value.py:1: raise ValueError('bad at import'))"
        wrapped = argcheck.import_failure(raised(rules.wrap))
        assert wrapped is not None and wrapped.startswith("OSError: libspecconsole-missing.so.1")
        assert argcheck.import_failure(importing("no_such_module_xyz")) == \
            "ModuleNotFoundError: No module named 'no_such_module_xyz'"
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("rules", "needs_lib", "bad_value"):
            sys.modules.pop(name, None)
