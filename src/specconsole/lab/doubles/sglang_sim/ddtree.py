"""The DDTree build's rules, SIMULATED from sgl-project/sglang PR #29907 (in no release).

Real SGLang 0.5.23 judges a DDTree build's command line as the DFLASH it builds on (:func:`_as_release`);
:func:`_handle_ddtree` then applies DDTree's own validation to what it resolved: DFLASH's first, no
rejection sampling, page size 1, budget >= 1, full-tree mode only with the triton attention backend,
overlap scheduling off.
"""

from __future__ import annotations

import argparse
from typing import Any

from specconsole.lab.doubles.sglang_sim.errors import LaunchError

#: The DDTree build's spellings, as SGLang 0.5.23 (the release it builds on) spells them.
_RELEASE_NAMES = {"--speculative-dflash-block-size": "--speculative-num-draft-tokens",
                  "--speculative-dflash-draft-window-size": "--speculative-draft-window-size"}


def _as_release(argv: list[str]) -> list[str]:
    """A DDTree build's command line as SGLang 0.5.23 reads it: DDTREE as the DFLASH it builds on,
    the renamed flags under their 0.5.23 names, without ``--speculative-ddtree-budget``."""
    out: list[str] = []
    skip = False
    for word in argv:
        if skip:
            skip = False
            continue
        name, eq, value = word.partition("=")
        if name == "--speculative-ddtree-budget":
            skip = not eq
            continue
        name = _RELEASE_NAMES.get(name, name)
        if out and out[-1] == "--speculative-algorithm" and word.upper() == "DDTREE":
            word = "DFLASH"
        elif name == "--speculative-algorithm" and eq and value.upper() == "DDTREE":
            word = f"{name}=DFLASH"
        else:
            word = f"{name}{eq}{value}" if eq else name if word.startswith("--") else word
        out.append(word)
    return out


def _handle_ddtree(a: dict[str, Any], warnings: list[str], ns: argparse.Namespace) -> None:
    """DDTree's rules (SIMULATED: written from sgl-project/sglang PR #29907, which is in no release),
    after real SGLang resolved the command line as DFLASH."""
    if a.get("speculative_use_rejection_sampling"):
        raise LaunchError(
            "ValueError", "DDTREE speculative decoding does not support --speculative-use-rejection-sampling."
        )
    page_size = getattr(ns, "page_size", None)
    if page_size is not None and int(page_size) != 1:
        raise LaunchError(
            "ValueError", f"DDTREE speculative decoding requires --page-size 1, got page_size={page_size}."
        )
    a["page_size"] = 1
    block = int(a["speculative_num_draft_tokens"])
    budget = a.get("speculative_ddtree_budget")
    budget = block - 1 if budget is None else int(budget)
    if budget < 1:
        raise LaunchError(
            "ValueError", f"--speculative-ddtree-budget must be >= 1, got speculative_ddtree_budget={budget}."
        )
    backend = a.get("attention_backend")
    prefill = a.get("prefill_attention_backend") or backend
    decode = a.get("decode_attention_backend") or backend
    if budget > block - 1 and (prefill != "triton" or decode != "triton"):
        raise LaunchError(
            "ValueError",
            f"DDTREE full-tree mode (speculative_ddtree_budget={budget} > speculative_num_draft_tokens - 1 = "
            f"{block - 1}) requires the triton attention backend for prefill and decode, got "
            f"prefill_attention_backend={prefill}, decode_attention_backend={decode}.",
        )
    a["speculative_ddtree_budget"] = budget
    if not a.get("disable_overlap_schedule"):
        a["disable_overlap_schedule"] = True
        warnings.append("Overlap scheduler is disabled because of using DDTREE speculative decoding.")
