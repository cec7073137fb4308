"""The speculative settings of a deploy, per algorithm, checked by the rules SGLang applies.

Which algorithms a host offers comes from its SGLang's ``--help`` (the choices, or the
``Builtins:`` list, of ``--speculative-algorithm``). Each algorithm needs its own settings:

* DFLASH: a DFlash draft model, the block size (``--speculative-num-draft-tokens``, or
  ``--speculative-dflash-block-size`` where that is a flag of its own) and the draft window
  (``--speculative-draft-window-size`` >= the block size);
* DDTREE (DDTree tree verification of a DFlash drafter, sgl-project/sglang PR #29907): DFLASH's
  settings and rules first, then the tree budget ``--speculative-ddtree-budget`` (>= 1; default
  block size - 1, "spine mode", a chain as DFLASH; larger: a real tree, "full-tree mode", which
  SGLang runs only with ``--attention-backend triton``), no
  ``--speculative-use-rejection-sampling``, ``--page-size`` 1. SGLang itself turns overlap
  scheduling off for DDTREE;
* every other algorithm (NEXTN, EAGLE, ...): what the operator passes, as given.

Each refusal names SGLang's own rule, before anything on the host changes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from specconsole.base.errors import SpecConsoleError
from specconsole.hosts import Host
from specconsole.sglang.flags import CONCEPTS, SglangCli
from specconsole.sglang.info import BLOCK_ALGORITHMS
from specconsole.sglang.unit import SPECIFIER, UnitError, check_unit_value, show_word
from specconsole.steps import Steps

#: Where the DDTree flags come from, for the refusal on an SGLang without them.
DDTREE_SOURCE = "sgl-project/sglang PR #29907"


#: The deploy form's fields a refusal can be about (:attr:`DeployRefused.field`).
FORM_FIELDS = ("algorithm", "draft_window", "block_size", "tree_budget", "num_steps", "eagle_topk", "draft_tokens",
               "draft_model")


class DeployRefused(SpecConsoleError):
    """Preflight refused the deploy; nothing on the host was changed.

    ``field``: the deploy form's field the refusal is about (one of :data:`FORM_FIELDS`), which the
    form marks; None: the deployment as a whole (the unit, the host, the SGLang install)."""

    exit_code = 2

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class SpecInput:
    """The operator's speculative settings, checked as numbers (None: keep / the default)."""

    algorithm: str | None
    window: int | None
    block: int | None
    budget: int | None
    draft_model: str | None
    attention_backend: str | None
    num_steps: int | None = None
    topk: int | None = None
    draft_tokens: int | None = None

    @property
    def eagle_knobs(self) -> bool:
        return any(v is not None for v in (self.num_steps, self.topk, self.draft_tokens))


@dataclass
class SpecContext:
    """What preflight read: the host's SGLang, the unit's current settings, the config."""

    host: str
    unit: str
    version: str | None
    cli: SglangCli
    names: dict[str, str | None]
    current: dict[str, str | None]
    default_draft: str | None
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def sglang(self) -> str:
        return f"SGLang {self.version} on {self.host}" if self.version else f"the SGLang on {self.host}"


def check_value(what: str, value: str | None, field: str | None = None) -> None:
    """Refuse a value that would reach the unit file with a control or line-break character
    (``field``: the form's field it came from)."""
    try:
        check_unit_value(value or "", what)
    except UnitError as err:
        raise DeployRefused(str(err), field=field) from None


def to_int(value: str | None) -> int | None:
    return int(value) if value and value.strip().lstrip("+").isdigit() else None


def check_offered(ctx: SpecContext, algorithm: str | None) -> None:
    """Refuse an algorithm the host's SGLang does not offer (by its ``--help``)."""
    if algorithm is None:
        return
    offered = ctx.cli.algorithms()
    flag = ctx.names.get("algorithm") or CONCEPTS["algorithm"][0]
    listed = f"its --help lists {', '.join(offered)}" if offered else f"its --help lists no choices for {flag}"
    if algorithm == "DDTREE" and ("DDTREE" not in offered or not ctx.names.get("tree_budget")):
        budget = "present" if ctx.names.get("tree_budget") else "absent"
        raise DeployRefused(
            f"{ctx.sglang()} does not offer DDTREE: looked for DDTREE among the choices of {flag} ({listed}) "
            f"and for the flag {', '.join(CONCEPTS['tree_budget'])} ({budget}); DDTree needs an SGLang built "
            f"with {DDTREE_SOURCE}", field="algorithm")
    if offered and algorithm not in offered:
        raise DeployRefused(f"{ctx.sglang()} does not offer the speculative algorithm {algorithm}: {flag}: "
                            f"{listed}; pass one of them", field="algorithm")


async def plan_settings(host: Host, steps: Steps, ctx: SpecContext, given: SpecInput,
                        algorithm: str) -> tuple[dict[str, str | None], dict[str, Any] | None]:
    """The new values of the concepts that change (None: remove the flag) and the draft
    model's ``config.json`` (DFLASH and DDTREE)."""
    cur = ctx.current
    new: dict[str, str | None] = {}
    if given.attention_backend is not None:
        new["attention_backend"] = given.attention_backend
    if algorithm in BLOCK_ALGORITHMS:
        if given.eagle_knobs:
            raise DeployRefused(f"--num-steps, --topk and --draft-tokens do not apply to {algorithm} (SGLang forces "
                                f"steps and topk to 1; its draft tokens are the block size): pass --block-size",
                                field="algorithm")
        return await _dflash_family(host, steps, ctx, given, algorithm, new)
    if given.block is not None:
        raise DeployRefused("--block-size applies to DFLASH and DDTREE only; pass --algorithm DFLASH or DDTREE",
                            field="algorithm")
    if given.budget is not None:
        raise DeployRefused("--tree-budget applies to DDTREE only; pass --algorithm DDTREE", field="algorithm")
    was_block = (cur.get("algorithm") or "").upper() in BLOCK_ALGORITHMS
    if given.window is not None:
        new["draft_window"] = str(given.window)
    elif was_block and algorithm != "EAGLE3":  # DFLASH's window: SGLang honours it for EAGLE3 only
        new["draft_window"] = None
    if given.algorithm:
        new["algorithm"] = given.algorithm
        if cur.get("tree_budget") is not None:
            new["tree_budget"] = None  # DDTREE's setting; other algorithms refuse nothing but ignore it
        if was_block and ctx.names.get("block_size"):
            new["block_size"] = None
    if given.draft_model:
        new["draft_model"] = given.draft_model
    elif algorithm in ("NEXTN", "NGRAM") and (cur.get("algorithm") or "").upper() != algorithm:
        new["draft_model"] = None  # NEXTN drafts with the target's own layers, NGRAM from the prompt
    if algorithm in EAGLE_FAMILY:
        _eagle_knobs(ctx, given, algorithm, was_block, new)
        if algorithm != "NEXTN" and not new.get("draft_model", cur.get("draft_model")):
            raise DeployRefused(f"{algorithm} needs a draft model: SGLang requires --speculative-draft-model-path "
                                f"for {algorithm}; pass --draft-model PATH", field="draft_model")
    elif algorithm == "NGRAM":
        if given.num_steps is not None or given.topk is not None:
            raise DeployRefused("NGRAM takes no --num-steps or --topk (SGLang derives them from the n-gram "
                                "breadth); pass --draft-tokens only", field="algorithm")
        new["num_steps"] = new["eagle_topk"] = None
        if given.draft_tokens is not None:
            new["num_draft_tokens"] = str(given.draft_tokens)
        elif was_block or (cur.get("algorithm") or "").upper() != "NGRAM":
            new["num_draft_tokens"] = None
            ctx.notes.append("NGRAM: SGLang chooses the draft tokens itself (12 by default)")
    return new, None


#: The chain-drafting algorithms whose settings are steps, topk and draft tokens.
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
#: The EAGLE family's settings: draft steps, top-k per step, draft tokens.
EAGLE_KNOBS = ("num_steps", "eagle_topk", "draft_tokens")
#: Which algorithm takes which of the algorithm-specific settings (the deploy form shows these
#: fields for it); the draft model goes with every algorithm but :data:`NO_DRAFT_MODEL`.
FIELDS_FOR: dict[str, tuple[str, ...]] = {
    "DFLASH": ("draft_window", "block_size"),
    "DDTREE": ("block_size", "tree_budget"),
    **{algo: EAGLE_KNOBS for algo in EAGLE_FAMILY},
    "NGRAM": ("draft_tokens",),
}
#: Every algorithm-specific setting.
SPECIFIC = ("draft_window", "block_size", "tree_budget", *EAGLE_KNOBS)
#: Algorithms that take no draft model: NEXTN drafts with the target's own layers, NGRAM from the prompt.
NO_DRAFT_MODEL = ("NEXTN", "NGRAM")


def _eagle_knobs(ctx: SpecContext, given: SpecInput, algorithm: str, was_block: bool,
                 new: dict[str, str | None]) -> None:
    """Steps, topk and draft tokens, by SGLang's rule: with ``--speculative-num-steps`` unset, SGLang
    chooses all three itself and asserts that topk and draft tokens are unset too."""
    cur = ctx.current
    if given.eagle_knobs:
        for concept, value in (("num_steps", given.num_steps), ("eagle_topk", given.topk),
                               ("num_draft_tokens", given.draft_tokens)):
            if value is not None:
                new[concept] = str(value)
    elif was_block or (cur.get("algorithm") or "").upper() not in EAGLE_FAMILY:
        # the old algorithm's draft tokens (a DFLASH block of 16) would be kept with no steps:
        # SGLang asserts on that at start-up. Leave all three to SGLang.
        new["num_steps"] = new["eagle_topk"] = new["num_draft_tokens"] = None
        ctx.notes.append(f"{algorithm}: steps, topk and draft tokens left to SGLang, which chooses them itself "
                         f"(pass --num-steps/--topk/--draft-tokens to set them)")
    steps_after = new.get("num_steps", cur.get("num_steps"))
    topk_after = new.get("eagle_topk", cur.get("eagle_topk"))
    tokens_after = new.get("num_draft_tokens", cur.get("num_draft_tokens"))
    if steps_after is None and (topk_after is not None or tokens_after is not None):
        raise DeployRefused(
            f"{algorithm} with --speculative-eagle-topk or --speculative-num-draft-tokens needs "
            f"--speculative-num-steps: SGLang asserts that topk and draft tokens are unset when it chooses the "
            f"steps itself; pass --num-steps N (or none of the three)", field="num_steps")


async def _read_draft_config(host: Host, steps: Steps, ctx: SpecContext, draft: str) -> dict[str, Any]:
    res = await steps.run(host, ["cat", "--", f"{draft.rstrip('/')}/config.json"])
    if not res.ok:
        raise DeployRefused(f"draft model {draft} has no config.json on {ctx.host} (cannot read "
                            f"{draft.rstrip('/')}/config.json); check the path (SGLang requires "
                            f"--speculative-draft-model-path to be a Hugging Face model directory: "
                            f"export a training checkpoint first)", field="draft_model")
    try:
        data = json.loads(res.stdout)
    except ValueError:
        raise DeployRefused(f"{draft}/config.json on {ctx.host} is not valid JSON", field="draft_model") from None
    if not isinstance(data, dict):
        raise DeployRefused(f"{draft}/config.json on {ctx.host} is not a JSON object", field="draft_model")
    return data


async def _dflash_family(host: Host, steps: Steps, ctx: SpecContext, given: SpecInput, algorithm: str,
                         new: dict[str, str | None]) -> tuple[dict[str, str | None], dict[str, Any]]:
    cur = ctx.current
    steps.begin("draft model", "reading the draft model's config.json")
    draft = given.draft_model or cur["draft_model"] or ctx.default_draft
    if draft and SPECIFIER in draft:
        raise DeployRefused(f"the draft model path {show_word(draft)} in {ctx.unit} uses a systemd % "
                            f"specifier the console cannot resolve; pass --draft-model with the path written out",
                            field="draft_model")
    check_value("the draft model path", draft, "draft_model")
    if not draft:
        raise DeployRefused(f"{algorithm} needs a draft model: SGLang requires --speculative-draft-model-path; "
                            "pass --draft-model PATH or set sglang.draft_model_path", field="draft_model")
    draft_cfg = await _read_draft_config(host, steps, ctx, draft)
    arch = draft_cfg.get("architectures") or []
    model_block = draft_cfg.get("block_size") or (draft_cfg.get("dflash_config") or {}).get("block_size")
    steps.info(f"architectures {arch}, block_size {model_block}")
    if not any(a in arch for a in ("DFlashDraftModel", "DFlash2DraftModel")):
        ctx.warnings.append(f"{draft} is not a DFlash draft model (architectures {arch})")
    was_block = (cur.get("algorithm") or "").upper() in BLOCK_ALGORITHMS
    block = given.block or to_int(cur.get("block_size")) or (to_int(cur.get("num_draft_tokens")) if was_block
                                                              else None) or (int(model_block) if model_block else None)
    if block is None:
        raise DeployRefused("no block size: pass --block-size N (the draft model's config.json has none)",
                            field="block_size")
    if model_block and block != int(model_block):
        ctx.warnings.append(f"block size {block} differs from the draft model's block_size {model_block}")
    window = given.window or to_int(cur.get("draft_window"))
    steps.begin("constraints", f"checking SGLang's {algorithm} constraints")
    pp = cur.get("pp_size")
    if pp is not None and pp.strip() != "1":
        raise DeployRefused(f"{ctx.unit} has --pp-size {pp}: SGLang runs {algorithm} only with pp_size 1 "
                            f"(\"Currently DFLASH speculative decoding only supports pp_size == 1\"); remove it")
    if cur.get("enable_dp_attention") is not None and cur.get("enable_dp_lm_head") is None:
        raise DeployRefused(f"{ctx.unit} passes --enable-dp-attention without --enable-dp-lm-head: SGLang refuses "
                            f"{algorithm} so (\"DFLASH with dp attention requires --enable-dp-lm-head\"); add "
                            f"--enable-dp-lm-head to the unit or drop --enable-dp-attention")
    if window is not None and window < block:
        raise DeployRefused(
            f"draft window {window} is smaller than the block size {block}: SGLang requires "
            f"--speculative-draft-window-size >= the DFLASH block size (--speculative-num-draft-tokens); "
            f"use a window of at least {block}", field="draft_window")
    new.update(algorithm=algorithm, draft_model=draft, draft_window=str(window) if window else None)
    if ctx.names.get("block_size") and algorithm == "DFLASH":  # a DFLASH-only flag of its own (0.5.23)
        new["block_size"] = str(block)
        new["num_draft_tokens"] = str(block) if cur.get("num_draft_tokens") is not None else None
    else:
        new["num_draft_tokens"] = str(block)
        if ctx.names.get("block_size"):
            new["block_size"] = None  # "DFLASH only": the block is --speculative-num-draft-tokens
    new["num_steps"] = None  # DFLASH forces both to 1; leaving them would only warn
    new["eagle_topk"] = None
    if algorithm == "DDTREE":
        _ddtree_rules(ctx, given, block, cur.get("algorithm"), new)
    elif cur.get("tree_budget") is not None:
        new["tree_budget"] = None
    steps.info(f"block {block}, window {window}: draft window >= block size holds; draft path exists")
    return new, draft_cfg


def _ddtree_rules(ctx: SpecContext, given: SpecInput, block: int, was: str | None,
                  new: dict[str, str | None]) -> None:
    """DDTREE's own checks after DFLASH's, as SGLang makes them."""
    cur = ctx.current
    budget = given.budget
    if budget is None and (was or "").upper() == "DDTREE":
        budget = to_int(cur.get("tree_budget"))
    effective = budget if budget is not None else block - 1
    if effective < 1:
        raise DeployRefused(f"tree budget {effective} (the default is block size - 1): SGLang requires "
                            f"--speculative-ddtree-budget >= 1; pass --tree-budget N with N >= 1", field="tree_budget")
    if cur.get("rejection_sampling") is not None:
        raise DeployRefused(f"{ctx.unit} passes --speculative-use-rejection-sampling, which SGLang refuses for "
                            f"DDTREE (DDTREE speculative decoding does not support it); remove it from the unit")
    page = cur.get("page_size")
    if page is not None and page.strip() != "1":
        raise DeployRefused(f"{ctx.unit} has --page-size {page}: SGLang requires page_size 1 for DDTREE; "
                            f"set --page-size 1 in the unit (or remove it)")
    if effective > block - 1:
        backend = given.attention_backend or cur.get("attention_backend")
        rule = (f"a tree budget of {effective} > block size - 1 = {block - 1} is DDTREE's full-tree mode, which "
                f"SGLang runs only with triton attention (prefill and decode)")
        for concept, flag in (("prefill_attention_backend", "--prefill-attention-backend"),
                              ("decode_attention_backend", "--decode-attention-backend")):
            own = cur.get(concept)
            if own is not None and own != "triton":
                raise DeployRefused(f"{rule}; {ctx.unit} sets {flag} {own}: remove it or set it to triton, or pass a "
                                    f"tree budget <= {block - 1} (spine mode)", field="tree_budget")
        if backend is None:
            new["attention_backend"] = "triton"
            ctx.notes.append(f"{rule}; the unit sets no attention backend, so the drop-in adds "
                             f"--attention-backend triton")
        elif backend != "triton":
            raise DeployRefused(f"{rule}; {ctx.unit} uses --attention-backend {backend}: pass --attention-backend "
                                f"triton, or a tree budget <= {block - 1} (spine mode)", field="tree_budget")
        else:
            ctx.notes.append(f"full-tree mode: budget {effective} > block size - 1 = {block - 1}, attention "
                             f"backend triton")
    else:
        ctx.notes.append(f"spine mode: budget {effective} <= block size - 1 = {block - 1} verifies a single "
                         f"chain, as DFLASH does")
    ctx.notes.append("SGLang turns overlap scheduling off for DDTREE itself (nothing in the unit changes)")
    new["tree_budget"] = str(budget) if budget is not None else None
