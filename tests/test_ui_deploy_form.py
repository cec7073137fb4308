"""The deploy wizard's form: the host's algorithms in a Select, only the fields that apply (no lab)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from textual.app import App
from textual.pilot import Pilot
from textual.widgets import Button, Input, Select, Static

from conftest import click, wait_for
from specconsole.actions.deploy.preflight import DeployPlan, DeployRefused, DeployRequest
from specconsole.ui.screens.deploy_form import DeployForm

VALUES = {"algorithm": "DFLASH", "draft_window": "16", "block_size": "", "tree_budget": "",
          "draft_model": "/models/dflash-b16"}


async def click_plan(pilot: Pilot[None], form: DeployForm) -> None:
    """Click Plan once it takes a click again: a button ignores clicks while it shows the last one (0.2 s)."""
    plan = form.query_one("#plan", Button)
    await wait_for(lambda: not plan.has_class("-active"), 5, what="the Plan button to take a click", pilot=pilot)
    await click(pilot, plan)


class FormApp(App[None]):
    def __init__(self, form: DeployForm) -> None:
        super().__init__()
        self.form = form

    def on_mount(self) -> None:
        self.push_screen(self.form)


async def test_ddtree_shows_block_size_and_tree_budget_and_sends_them() -> None:
    seen: list[DeployRequest] = []

    async def discover() -> list[str]:
        return ["EAGLE", "NEXTN", "DFLASH", "DDTREE"]

    async def check(request: DeployRequest) -> DeployPlan:
        seen.append(request)
        raise DeployRefused("tree budget 0: SGLang requires --speculative-ddtree-budget >= 1", field="tree_budget")

    form = DeployForm(VALUES, discover=discover, check=check, draft_model="/ckpt/run-step900")
    async with FormApp(form).run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        shown = {key: form.query_one(f"#row-{key}").display for key in ("draft_window", "block_size", "tree_budget")}
        assert shown == {"draft_window": True, "block_size": True, "tree_budget": False}
        select = form.query_one("#deploy-algorithm", Select)
        assert [str(o[0]) for o in select._options if o[1] is not Select.BLANK] == ["EAGLE", "NEXTN", "DFLASH",
                                                                                    "DDTREE"]
        select.value = "DDTREE"
        await pilot.pause()
        shown = {key: form.query_one(f"#row-{key}").display for key in ("draft_window", "block_size", "tree_budget")}
        assert shown == {"draft_window": False, "block_size": True, "tree_budget": True}
        form.query_one("#deploy-block_size", Input).value = "16"
        form.query_one("#deploy-tree_budget", Input).value = "32"
        await click_plan(pilot, form)
        await wait_for(lambda: form.query_one("#error-tree_budget").display, 10,
                       what="the refusal beside the tree budget", pilot=pilot)
        assert seen and seen[-1].algorithm == "DDTREE" and seen[-1].block_size == "16"
        assert seen[-1].tree_budget == "32" and seen[-1].draft_window is None  # not DDTREE's field here
        assert seen[-1].draft_model == "/ckpt/run-step900"
        assert form.query_one("#error-tree_budget").display  # the refusal beside its field
        select.value = "NEXTN"
        await pilot.pause()
        assert not any(form.query_one(f"#row-{key}").display for key in ("draft_window", "block_size", "tree_budget"))


async def test_ddtree_says_how_up_to_16_maps_onto_the_tree_budget() -> None:
    """The help line under the hint says what the budget counts (DDTREE only; DFLASH's form is unchanged)."""
    async def discover() -> list[str]:
        return ["DFLASH", "DDTREE"]

    form = DeployForm({**VALUES, "algorithm": "DDTREE"}, discover=discover)
    async with FormApp(form).run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.pause()
        help_line = form.query_one("#deploy-help", Static)
        shown = help_line.render()
        text = shown.plain if hasattr(shown, "plain") else str(shown)
        assert help_line.display and "'Up to 16' → block size 16, budget 16" in text and "block size - 1" in text
        form.query_one("#deploy-algorithm", Select).value = "DFLASH"
        await pilot.pause()
        assert not help_line.display


async def test_a_bad_tree_budget_is_marked_in_place() -> None:
    form = DeployForm({**VALUES, "algorithm": "DDTREE"})
    async with FormApp(form).run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        form.query_one("#deploy-tree_budget", Input).value = "0"
        assert form.validate_field("tree_budget") == "must be positive (SGLang refuses 0)"
        form.query_one("#deploy-draft_window", Input).value = "nonsense"  # hidden for DDTREE: not checked
        assert form.validate_field("draft_window") == ""


def test_the_form_opens_on_the_running_ddtree_settings() -> None:
    from specconsole.base.samples import Sample
    from specconsole.config import parse_config
    from specconsole.sglang import ServerInfo
    from specconsole.sources.sglang import ServerState, SglangSnapshot
    from specconsole.ui.screens.deploy_form import prefill

    cfg = parse_config({"hosts": [{"name": "serve", "role": "serve", "connect": "local",
                                   "sglang": {"base_url": "http://127.0.0.1:30000"}}]}, "<test>").host("serve")
    info = ServerInfo.from_json({"speculative_algorithm": "DDTREE", "speculative_num_draft_tokens": 16,
                                 "speculative_ddtree_budget": 32, "speculative_draft_model_path": "/m/d"})
    snap = SglangSnapshot(ServerState.HEALTHY, 200, None, info, None, 0.0)
    values = prefill(cfg, Sample(snap, 0.0, 1.0))
    assert values["algorithm"] == "DDTREE" and values["tree_budget"] == "32" and values["draft_model"] == "/m/d"


async def test_the_eagle_family_shows_steps_topk_and_draft_tokens_and_ngram_its_draft_tokens() -> None:
    seen: list[DeployRequest] = []

    async def check(request: DeployRequest) -> DeployPlan:
        seen.append(request)
        raise DeployRefused("stop here")

    knobs = ("num_steps", "eagle_topk", "draft_tokens", "draft_window", "block_size", "tree_budget")
    form = DeployForm(VALUES, check=check)
    async with FormApp(form).run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert not any(form.query_one(f"#row-{k}").display for k in knobs[:3])  # DFLASH: none of them
        select = form.query_one("#deploy-algorithm", Select)
        select.set_options([(a, a) for a in ("NEXTN", "NGRAM", "DFLASH")])
        select.value = "NEXTN"
        await pilot.pause()
        assert [form.query_one(f"#row-{k}").display for k in knobs] == [True, True, True, False, False, False]
        assert not form.query_one("#row-draft_model").display  # NEXTN drafts with the target's own layers
        form.query_one("#deploy-num_steps", Input).value = "5"
        form.query_one("#deploy-eagle_topk", Input).value = "1"
        form.query_one("#deploy-draft_tokens", Input).value = "x"
        await click_plan(pilot, form)
        await wait_for(lambda: form.query_one("#error-draft_tokens").display, 10,
                       what="the error beside the draft tokens", pilot=pilot)
        assert not seen  # checked in place, not sent
        form.query_one("#deploy-draft_tokens", Input).value = "6"
        await click_plan(pilot, form)
        await wait_for(lambda: len(seen) == 1, 10, what="the NEXTN request", pilot=pilot)
        assert (seen[-1].algorithm, seen[-1].num_steps, seen[-1].eagle_topk, seen[-1].draft_tokens) == (
            "NEXTN", "5", "1", "6")
        assert seen[-1].draft_model is None  # the DFlash draft of the config is not sent to NEXTN
        select.value = "NGRAM"
        await pilot.pause()
        assert [form.query_one(f"#row-{k}").display for k in knobs] == [False, False, True, False, False, False]
        await click_plan(pilot, form)
        await wait_for(lambda: len(seen) == 2, 10, what="the NGRAM request", pilot=pilot)
        assert seen[-1].algorithm == "NGRAM" and seen[-1].num_steps is None and seen[-1].draft_tokens == "6"


async def test_the_rules_say_the_field_of_their_refusal_and_the_form_marks_it(tmp_path: Path) -> None:
    """Issue 35 item 4: a refusal carries its field (``DeployRefused.field``); the form marks that field
    from it, not from the message text. The refusals come from the real preflight and algorithm rules."""
    from importlib.resources import files

    from specconsole.actions.deploy.algorithms import (
        FORM_FIELDS,
        SpecContext,
        SpecInput,
        _ddtree_rules,
        check_offered,
        plan_settings,
    )
    from specconsole.actions.deploy.preflight import _check_choices, preflight
    from specconsole.config import parse_config
    from specconsole.hosts import make_host
    from specconsole.sglang.flags import CHECKED, CONCEPTS, SglangCli
    from specconsole.steps import Steps

    cli = SglangCli.from_help(files("specconsole.lab.data").joinpath("serve-help-0.5.23.txt").read_text())
    names = {c: cli.name_for(c) for c in (*CONCEPTS, *CHECKED)}

    def ctx(**current: str) -> SpecContext:
        return SpecContext("serve", "sglang.service", "0.5.23", cli, names, {"draft_model": None, **current}, None)

    def refusal(rule: Callable[[], object]) -> DeployRefused:
        with pytest.raises(DeployRefused) as caught:
            rule()
        return caught.value

    async def refused(rule: Awaitable[object]) -> DeployRefused:
        with pytest.raises(DeployRefused) as caught:
            await rule
        return caught.value

    cfg = parse_config({"hosts": [{"name": "serve", "role": "serve", "connect": "local",
                                   "sglang": {"base_url": "http://127.0.0.1:30000"}}]}, "<test>").host("serve")
    host = make_host(cfg)
    steps = Steps("deploy", lambda _e: None, host="serve")
    draft = tmp_path / "dflash-b16"
    draft.mkdir()
    (draft / "config.json").write_text('{"architectures": ["DFlashDraftModel"], "block_size": 16}')

    def dflash(window: int | None, path: Path, algorithm: str = "DFLASH") -> Awaitable[object]:
        given = SpecInput(algorithm, window, None, None, str(path), None)
        return plan_settings(host, steps, ctx(), given, algorithm)

    cases = [  # (the refusal, the field it is about, the algorithm whose form shows that field)
        (refusal(lambda: check_offered(ctx(), "DDTREE")), "algorithm", "DFLASH"),
        (await refused(dflash(8, draft)), "draft_window", "DFLASH"),
        (await refused(dflash(None, tmp_path / "no-such-model")), "draft_model", "DFLASH"),
        (refusal(lambda: _ddtree_rules(ctx(attention_backend="fa3"), SpecInput("DDTREE", None, 16, 32, None, None),
                                       16, "DFLASH", {})), "tree_budget", "DDTREE"),
        (await refused(preflight(host, cfg, DeployRequest(algorithm="NEXTN", num_steps="x"), steps)), "num_steps",
         "NEXTN"),
        (refusal(lambda: _check_choices(ctx(), "attention_backend", "trition")), None, "DFLASH"),
    ]
    assert "smaller than the block size 16" in str(cases[1][0]) and "config.json" in str(cases[2][0])
    assert "did you mean triton?" in str(cases[5][0])
    assert [err.field for err, _, _ in cases] == [key for _, key, _ in cases]
    assert all(err.field is None or err.field in FORM_FIELDS for err, _, _ in cases)

    now: list[DeployRefused] = []

    async def check(request: DeployRequest) -> DeployPlan:
        raise now[-1]

    form = DeployForm(VALUES, check=check)
    async with FormApp(form).run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        select = form.query_one("#deploy-algorithm", Select)
        select.set_options([(a, a) for a in ("DFLASH", "DDTREE", "NEXTN")])
        status = form.query_one("#deploy-status", Static)
        for err, key, algorithm in cases:
            select.value = algorithm
            await pilot.pause()
            now.append(err)
            await click_plan(pilot, form)
            if key is None:  # the deployment as a whole: on the status line, no field marked
                await wait_for(lambda: "trition" in str(status.render()), 10, what="the refusal on the status line",
                               pilot=pilot)
                marked = [k for k in FORM_FIELDS if form.query_one(f"#error-{k}").display]
                assert marked == [], marked
                continue
            error = form.query_one(f"#error-{key}", Static)
            shown = str(err)[:40]
            await wait_for(lambda e=error, s=shown: s in str(e.render()), 10,
                           what=f"the refusal beside {key}", pilot=pilot)
            assert error.display and form.focused is form.query_one(f"#deploy-{key}")
            form.set_error(key, "")  # cleared, so the next case starts from a clean form
        await host.close()
