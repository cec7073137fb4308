"""The SGLang versions the simulator can be: 0.5.23 (the real help and flags) and a build with DDTree.

``0.5.23`` is read unchanged from ``data/`` (the real ``--help`` output and the parser's
actions of that wheel). :data:`DDTREE_VERSION` is that version plus the surface of DDTree tree
verification for DFlash drafters (sgl-project/sglang PR #29907) and the renames of newer
SGLang, written from their descriptions:

* ``--speculative-algorithm`` lists ``DDTREE`` among its builtins;
* ``--speculative-ddtree-budget N`` (int, default ``speculative_num_draft_tokens - 1``);
* ``--speculative-dflash-block-size`` is an alias of ``--speculative-num-draft-tokens`` (one
  option, one dest) instead of an option of its own;
* ``--speculative-dflash-draft-window-size`` is a hidden (``help=argparse.SUPPRESS``),
  deprecated alias of ``--speculative-draft-window-size``: accepted, never listed by ``--help``.

Which version a simulator process is: ``SGLANG_SIM_VERSION`` (the lab's ``bin/sglang`` wrapper
sets it, so the host's ``sglang --help`` answers as that version), default 0.5.23.
"""

from __future__ import annotations

import os
import textwrap
from typing import Any

BASE_VERSION = "0.5.23"
#: An SGLang built with the DDTree pull request (PEP 440 local label: not a release).
DDTREE_VERSION = "0.5.24+ddtree"
VERSIONS = (BASE_VERSION, DDTREE_VERSION)
VERSION_ENV = "SGLANG_SIM_VERSION"

_HELP_INDENT = " " * 24
_HELP_WIDTH = 78  # argparse's default: $COLUMNS (80) - 2


def sim_version() -> str:
    """The version this process simulates (``SGLANG_SIM_VERSION``); an unknown one is refused."""
    value = os.environ.get(VERSION_ENV) or BASE_VERSION
    if value not in VERSIONS:
        raise SystemExit(f"{VERSION_ENV}={value!r}: the simulator knows {', '.join(VERSIONS)}")
    return value


def has_ddtree(version: str) -> bool:
    return version == DDTREE_VERSION


def flags(version: str, base: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The parser's actions of ``version``, from 0.5.23's."""
    if not has_ddtree(version):
        return base
    out: list[dict[str, Any]] = []
    for flag in base:
        dest = flag["dest"]
        if dest == "speculative_dflash_block_size":
            continue  # an alias of --speculative-num-draft-tokens now
        flag = dict(flag)
        if dest == "speculative_num_draft_tokens":
            flag["opts"] = [*flag["opts"], "--speculative-dflash-block-size"]
            out.append(flag)
            out.append({"opts": ["--speculative-ddtree-budget"], "dest": "speculative_ddtree_budget",
                        "default": "None", "type": "int", "choices": None, "nargs": None,
                        "action": "_StoreAction"})
            continue
        if dest == "speculative_draft_window_size":
            flag["opts"] = [*flag["opts"], "--speculative-dflash-draft-window-size"]
        out.append(flag)
    return out


def _entry(option: str, text: str) -> str:
    """One argparse help entry: the option line, then the help wrapped at column 24."""
    body = textwrap.fill(text, _HELP_WIDTH, initial_indent=_HELP_INDENT, subsequent_indent=_HELP_INDENT)
    return f"  {option}\n{body}\n"


def _replace(text: str, old: str, new: str) -> str:
    if text.count(old) != 1:
        raise ValueError(f"the 0.5.23 help text does not hold exactly one {old[:60]!r}")
    return text.replace(old, new)


def help_text(version: str, base: str) -> str:
    """``--help`` of ``version``, from 0.5.23's (byte-identical for 0.5.23 itself)."""
    if not has_ddtree(version):
        return base
    text = _replace(base, "[--speculative-dflash-block-size SPECULATIVE_DFLASH_BLOCK_SIZE]",
                    "[--speculative-ddtree-budget SPECULATIVE_DDTREE_BUDGET]")
    algo_start = text.index("  --speculative-algorithm SPECULATIVE_ALGORITHM\n")
    algo_end = text.index("  --uno-lora-path", algo_start)
    text = text[:algo_start] + _entry(
        "--speculative-algorithm SPECULATIVE_ALGORITHM",
        "Speculative algorithm. Builtins: EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, DFLASH, DDTREE, DSPARK, "
        "UNO. Or any name registered via `SpeculativeAlgorithm.register`.") + text[algo_end:]
    ndt_start = text.index("  --speculative-num-draft-tokens SPECULATIVE_NUM_DRAFT_TOKENS\n")
    ndt_end = text.index("  --speculative-dspark-block-size", ndt_start)
    text = text[:ndt_start] + _entry(
        "--speculative-num-draft-tokens SPECULATIVE_NUM_DRAFT_TOKENS, "
        "--speculative-dflash-block-size SPECULATIVE_NUM_DRAFT_TOKENS",
        "The number of tokens sampled from the draft model in Speculative Decoding. For DFLASH and DDTREE: "
        "the block size (verify window length).") + _entry(
        "--speculative-ddtree-budget SPECULATIVE_DDTREE_BUDGET",
        "DDTREE only. Node budget of the draft tree verified per step. Must be >= 1. Default: "
        "speculative_num_draft_tokens - 1 (spine mode: a single chain, as DFLASH). A larger budget builds a "
        "real tree (full-tree mode), which needs --attention-backend triton.") + text[ndt_end:]
    return text
