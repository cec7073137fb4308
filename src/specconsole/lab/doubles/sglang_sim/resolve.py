"""After parsing: real SGLang 0.5.23's verdict on the launch, and the model configs it reads.

After parsing, **real SGLang 0.5.23** decides (:mod:`specconsole.lab.doubles.sglang_judge`: its
``prepare_server_args`` and ``ServerArgs.resolve_once()``, run by ``.venv-sglang``'s Python, a
warm judge process or a fresh one): a refusal prints SGLang's own exception
(``ValueError: ...``, ``AssertionError (at speculative_hook.py:N: assert ...)``) on stderr and
exits 1 (an argparse refusal exits 2), and ``/server_info`` reports the settings it resolved.
The DDTree build (in no release) is judged by real SGLang as the DFLASH it builds on, then by
DDTree's rules, SIMULATED from sgl-project/sglang PR #29907 (:func:`_handle_ddtree`).
A draft model path must be a local directory holding ``config.json``.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from typing import Any

from specconsole.lab.doubles import sglang_judge, sglang_versions
from specconsole.lab.doubles.sglang_sim.ddtree import _as_release, _handle_ddtree
from specconsole.lab.doubles.sglang_sim.errors import LaunchError, UsageError
from specconsole.lab.doubles.sglang_sim.flags import VERSION
from specconsole.lab.doubles.sglang_sim.log import log


def _looks_local(path: str) -> bool:
    return path.startswith(("/", "./", "../", "~")) or os.path.isdir(path)


def read_hf_config(path: str, *, must_exist: bool) -> dict[str, Any] | None:
    """A model's ``config.json`` the way transformers' get_config fails on a bad path.

    ``must_exist`` False: a name that is not a local path counts as a (cached) Hub repo id
    and yields None.
    """
    expanded = os.path.expanduser(path)
    if not os.path.isdir(expanded):
        if not must_exist and not _looks_local(path):
            return None
        raise LaunchError(
            "OSError",
            f"Incorrect path_or_model_id: '{path}'. Please provide either the path to a local "
            "folder or the repo_id of a model on the Hub.",
        )
    cfg_path = os.path.join(expanded, "config.json")
    if not os.path.isfile(cfg_path):
        raise LaunchError(
            "OSError",
            f"{path} does not appear to have a file named config.json. Checkout "
            f"'https://huggingface.co/{path}/tree/main' for available files.",
        )
    try:
        with open(cfg_path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        raise LaunchError(
            "OSError", f"It looks like the config file at '{cfg_path}' is not a valid JSON file."
        ) from None
    if not isinstance(data, dict):
        raise LaunchError(
            "OSError", f"It looks like the config file at '{cfg_path}' is not a valid JSON file."
        )
    return data


@dataclass
class Resolved:
    """The launch after SGLang's post-processing."""

    args: dict[str, Any]
    warnings: list[str]
    target_config: dict[str, Any] | None
    draft_config: dict[str, Any] | None
    requested_algorithm: str | None

    @property
    def algorithm(self) -> str | None:
        return self.args.get("speculative_algorithm")

    @property
    def speculative(self) -> bool:
        return self.algorithm is not None



def resolve_args(ns: argparse.Namespace, argv: list[str]) -> Resolved:
    """SGLang's resolution of ``argv``, by real SGLang 0.5.23 (:mod:`specconsole.lab.doubles.sglang_judge`).

    Whether the server starts, and every resolved setting ``/server_info`` reports, come from real
    SGLang's parser and resolution pipeline. The DDTree build's own rules (sgl-project/sglang PR
    #29907, in no release) are simulated on top: real SGLang judges the command line as the
    DFLASH it builds on, then :func:`_handle_ddtree` applies DDTree's rules. Raises
    :class:`LaunchError` (SGLang's exception) or :class:`UsageError` (its argparse message).
    """
    ddtree = sglang_versions.has_ddtree(VERSION)
    judged = _as_release(argv) if ddtree else list(argv)
    sock = os.environ.get(sglang_judge.SOCKET_ENV)
    if sock and not os.path.exists(sock):
        log(f"specconsole lab: waiting for real SGLang's argument parser (the lab's judge on {sock} is importing "
            f"SGLang)")
    try:
        verdict = sglang_judge.ask(judged)
    except sglang_judge.JudgeUnavailable as err:
        raise LaunchError("RuntimeError", f"specconsole lab: {err}") from None
    if verdict.get("verdict") == "refused":
        if verdict.get("kind") == "usage":
            raise UsageError(str(verdict.get("message") or "sglang serve: error"))
        message = str(verdict.get("message") or "")
        if not message and verdict.get("source"):  # a bare assert: Python shows the statement
            message = f"(at {verdict.get('where')}: {verdict.get('source')})"
        raise LaunchError(str(verdict.get("kind") or "Error"), message)
    a: dict[str, Any] = dict(verdict.get("resolved") or {})
    warnings = [str(w) for w in verdict.get("warnings") or []]
    requested = ns.speculative_algorithm
    if ddtree and (requested or "").upper() == "DDTREE":
        a["speculative_algorithm"] = "DDTREE"
        a["speculative_ddtree_budget"] = getattr(ns, "speculative_ddtree_budget", None)
        _handle_ddtree(a, warnings, ns)
    target_cfg = read_hf_config(a.get("model_path") or ns.model_path, must_exist=False)
    draft = a.get("speculative_draft_model_path")
    draft_cfg = read_hf_config(draft, must_exist=True) if draft and a.get("speculative_algorithm") else None
    for key in ("tokenizer_path", "served_model_name"):
        a.setdefault(key, a.get("model_path"))
    return Resolved(a, warnings, target_cfg, draft_cfg, requested)
