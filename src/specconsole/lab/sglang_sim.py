"""A protocol simulator of an SGLang 0.5.23 server (SGLang's CUDA engine cannot run here).

With ``SGLANG_SIM_VERSION=0.5.24+ddtree`` it is an SGLang built with DDTree tree verification
(see :mod:`specconsole.lab.sglang_versions`): ``DDTREE`` among the algorithms,
``--speculative-ddtree-budget``, the renamed DFLASH flags as aliases, DDTREE's validation
(DFLASH's first; no rejection sampling, page size 1, budget >= 1, full-tree mode only with the
triton attention backend; overlap scheduling off), the log line ``Initialized DDTree worker.
block_size=B, tree_budget=N`` and ``/server_info`` reporting the renamed settings under both names.

Run it like the real thing::

    python -m specconsole.lab.sglang_sim serve --model-path Qwen/Qwen3-8B \\
        --speculative-algorithm DFLASH --speculative-draft-model-path /models/dflash-b16 \\
        --speculative-draft-window-size 16 --enable-metrics --port 30000

(``serve`` is optional, mirroring ``python -m sglang.launch_server ARGS``, which also prints
SGLang's "sglang serve is the recommended entrypoint" warning.)

Command line
    The argparse parser is built from ``data/flags-0.5.23.json`` (every action of SGLang
    0.5.23's parser: aliases, types, choices, ``store_true``, ``--x/--no-x`` pairs, nargs), so
    the simulator accepts exactly SGLang 0.5.23's flags and refuses unknown ones the way
    argparse does (usage on stderr, ``sglang serve: error: unrecognized arguments: ...``,
    exit 2). ``--help`` prints the real help text (``data/serve-help-0.5.23.txt``).
    After parsing, **real SGLang 0.5.23** decides (:mod:`specconsole.lab.sglang_judge`: its
    ``prepare_server_args`` and ``ServerArgs.resolve_once()``, run by ``.venv-sglang``'s Python, a
    warm judge process or a fresh one): a refusal prints SGLang's own exception
    (``ValueError: ...``, ``AssertionError (at speculative_hook.py:N: assert ...)``) on stderr and
    exits 1 (an argparse refusal exits 2), and ``/server_info`` reports the settings it resolved.
    The DDTree build (in no release) is judged by real SGLang as the DFLASH it builds on, then by
    DDTree's rules, SIMULATED from sgl-project/sglang PR #29907 (:func:`_handle_ddtree`).
    A draft model path must be a local directory holding ``config.json``.

Start-up
    Logs SGLang-like lines (``[YYYY-mm-dd HH:MM:SS TP0] Load weight begin. ...``,
    ``Capture cuda graph 3/12 ...``, ``The server is fired up and ready to roll!``) to
    stderr, as Python logging does; uvicorn's access lines (``INFO:     127.0.0.1:PORT -
    "GET /health HTTP/1.1" 200 OK``) go to stdout. The HTTP server listens from the first
    moment; ``/health`` answers 503 until ready. SIGTERM/SIGINT: logs uvicorn's shutdown
    lines and exits 0.

A hung scheduler
    SIGUSR1 (or ``SGLANG_SIM_HANG_AFTER_S``) makes the simulated scheduler hang, as a real one
    stuck in a collective or a CUDA call does: ``/health`` still answers 200 (what SGLang does
    with ``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0``), ``/server_info``, ``/model_info`` and
    ``/metrics`` still answer (the tokenizer process serves them), but ``/health_generate``
    blocks (and answers 503 after 20 s, SGLang's ``HEALTH_CHECK_TIMEOUT``) and ``/generate``
    blocks until the hang ends. SIGUSR2 ends it; the requests that were blocked then go through.

Environment
    ``SGLANG_SIM_STARTUP_S``  start-up duration in seconds (default 3).
    ``SGLANG_SIM_FAIL``       crash during start-up: ``oom`` (KV cache allocation,
                              ``torch.OutOfMemoryError``; also any other non-empty value
                              except 0/false/no), ``weights`` (a truncated safetensors
                              shard), ``cuda_graph`` (illegal memory access during capture).
                              Exit status 1.
    A draft model directory holding a ``*.safetensors`` file shorter than 8 bytes (a truncated
    copy) crashes start-up the same way as ``weights``.
    ``SGLANG_SIM_STEP_MS``    latency of one decode/verify step in ms (default 8).
    ``SGLANG_SIM_STOP_S``     shutting down after SIGTERM takes this long (default 0), as a
                              server finishing its requests and freeing GPU memory does.
    ``SGLANG_SIM_HANG_AFTER_S`` the scheduler hangs this many seconds after the server is
                              ready (see "A hung scheduler"; unset: never by itself).
    ``SGLANG_SIM_LOAD``       requests/s of *simulated internal traffic* (default 0): a
                              Poisson stream of fake requests that runs through the same
                              engine model and moves ``gen_throughput``, running/queued
                              requests and the token counters. It is not real traffic and
                              exists for demos only; with 0 an idle server reports 0
                              throughput, as a real one does.

Endpoints
    ``GET /health``, ``/health_generate`` (200 ready, 503 loading/shutting down),
    ``GET /server_info`` (+ deprecated ``/get_server_info``): the resolved server args as a
    flat object keyed by argparse dest, plus ``launch_command``, ``startup_time`` (UNIX time
    the process started), ``version``, ``max_total_num_tokens``, ``internal_states`` (one
    item per DP rank with ``last_gen_throughput``, ``memory_usage`` and, when speculation
    is on, ``avg_spec_accept_length`` = cumulative accepted tokens / verify steps, 0.0
    before any traffic). ``GET /model_info`` (+ ``/get_model_info``), ``GET /v1/models``,
    ``GET /metrics`` (Prometheus text from prometheus_client, only with
    ``--enable-metrics``), ``POST /generate``. With ``--api-key`` every path except
    ``/health*`` and ``/metrics`` needs ``Authorization: Bearer KEY`` (else 401). Errors
    are ``{"error": {"message": ...}}`` with 400, as SGLang's ``_create_error_response``.

Acceptance model (deterministic, hash-based)
    Each prompt gets a quality factor ``q`` in [0.78, 1.18) from a SHA-256 of its text (or
    token ids). The mean accept length per verify step (bonus token included) is:

    * no speculation: exactly 1.0 (one token per decode step, no ``spec_*`` fields);
    * EAGLE/NEXTN/EAGLE3/STANDALONE chain with ``k = num_steps`` drafted tokens:
      ``1 + a * k_eff * q`` with a = 0.55 (EAGLE3 0.62, STANDALONE 0.45) and ``k_eff = k``
      up to 4, half credit beyond; a small tree bonus when topk > 1; never above
      num_draft_tokens;
    * DFLASH with block ``b`` and draft window ``w``:
      ``1 + 7.5 * (1 - exp(-(b - 1) / 9)) * ctx(w) * q`` where
      ``ctx(w) = 0.86 + 0.14 * (1 - exp(-w / 96))`` (1.0 without a window), capped at ``b``:
      block 16 / window 16 gives about 6 against about 2.5 for NEXTN with 4 draft tokens;
      larger windows are slightly better (window 256: about +12 %); the value saturates
      and never exceeds the block;
    * DSPARK like DFLASH (x0.95) on gamma + 1; NGRAM about 1.5.

    Per-step accept lengths are drawn from a truncated geometric whose mean is that value,
    from one uniform per step seeded by the prompt alone (common random numbers: for a
    given prompt a deployment with a higher mean never accepts less), so at temperature 0
    the same prompt gives the same numbers (temperature > 0 adds per-request randomness and lowers ``q``
    slightly). ``spec_accept_length = completion_tokens / spec_verify_ct``,
    ``spec_num_proposed_drafts = spec_verify_ct * (num_draft_tokens - 1)``,
    ``spec_accept_rate = spec_num_correct_drafts / spec_num_proposed_drafts``.
    Generation really takes ``prefill + verify_steps * SGLANG_SIM_STEP_MS * step_cost``
    (step_cost: 1.0 vanilla, 1 + 0.1*steps + 0.02*draft tokens for EAGLE, 1.22 + 0.012*b
    for DFLASH), so tokens / e2e_latency is a meaningful tokens/s.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import math
import os
import random
import re
import shlex
import signal
import sys
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from specconsole.lab import sglang_judge, sglang_versions

VERSION = sglang_versions.sim_version()
PROG = "sglang serve"
FLAGS_FILE = "flags-0.5.23.json"
HELP_FILE = "serve-help-0.5.23.txt"

EAGLE_FAMILY = ("EAGLE", "EAGLE3", "STANDALONE", "UNO", "FROZEN_KV_MTP")
#: How long SGLang's /health_generate waits for its generation before answering 503.
HEALTH_CHECK_TIMEOUT_S = 20.0


class LaunchError(Exception):
    """A start-up failure: printed as ``{kind}: {message}`` on stderr, exit status 1."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


# ---------------------------------------------------------------------------------------
# Logging, SGLang style
# ---------------------------------------------------------------------------------------
_log_lock = threading.Lock()


def _ts() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def log(msg: str, *, rank: str = "", stream: Any = None) -> None:
    """``[2026-12-02 18:11:00 TP0] msg`` on stderr (Python logging's stream)."""
    out = stream if stream is not None else sys.stderr
    prefix = f"[{_ts()} {rank}]" if rank else f"[{_ts()}]"
    with _log_lock:
        try:
            out.write(f"{prefix} {msg}\n")
            out.flush()
        except (OSError, ValueError):
            pass


def access_log(msg: str) -> None:
    log(f"INFO:     {msg}", stream=sys.stdout)


# ---------------------------------------------------------------------------------------
# The parser, built from the flags JSON
# ---------------------------------------------------------------------------------------
def _data_text(name: str) -> str:
    return resources.files("specconsole.lab").joinpath("data", name).read_text("utf-8")


def load_flags() -> list[dict[str, Any]]:
    return sglang_versions.flags(VERSION, json.loads(_data_text(FLAGS_FILE)))


def _split_help() -> tuple[str, str, str]:
    """(the launch_server UserWarning lines, the usage block, the full help)."""
    text = sglang_versions.help_text(VERSION, _data_text(HELP_FILE))
    start = text.index("usage: ")
    warning, full = text[:start], text[start:]
    usage = full[: full.index("\n\n") + 1]
    return warning, usage, full


def human_readable_int(value: str) -> int:
    """SGLang's integer type with SI (k, M, G, T) and IEC (Ki, Mi, Gi, Ti) suffixes."""
    value = value.strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if m:
        number, suffix = m.groups()
        iec = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
        si = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
        if suffix in iec:
            if "." in number:
                raise ValueError(value)
            return int(number) * iec[suffix]
        return int(float(number) * si[suffix])
    return int(value)


def json_list_type(value: str) -> list[Any]:
    parsed = json.loads(value)
    if not isinstance(parsed, list):
        raise ValueError(value)
    return parsed


def loads(value: str) -> Any:  # named like json.loads: argparse names the type in errors
    return json.loads(value)


def nullable_str(value: str) -> str | None:
    if not value or value == "None":
        return None
    return value


def parse_cuda_graph_backend_arg(value: str) -> str:
    return value


def parse_cuda_graph_config_arg(value: str) -> str:
    return value


_TYPES: dict[str, Any] = {
    "str": str, "int": int, "float": float, "None": None,
    "human_readable_int": human_readable_int, "json_list_type": json_list_type,
    "loads": loads, "nullable_str": nullable_str,
    "parse_cuda_graph_backend_arg": parse_cuda_graph_backend_arg,
    "parse_cuda_graph_config_arg": parse_cuda_graph_config_arg,
}

#: Flags SGLang marks required (shown without brackets in the usage line).
_REQUIRED = {"model_path"}


class SglangArgumentParser(argparse.ArgumentParser):
    """argparse with SGLang's real help and usage text."""

    def __init__(self, usage_text: str, help_text: str) -> None:
        super().__init__(prog=PROG, add_help=False)
        self._usage_text = usage_text
        self._help_text = help_text

    def format_usage(self) -> str:
        return self._usage_text

    def format_help(self) -> str:
        return self._help_text


def build_parser() -> SglangArgumentParser:
    _, usage, full = _split_help()
    parser = SglangArgumentParser(usage, full)
    for flag in load_flags():
        opts, dest, action = flag["opts"], flag["dest"], flag["action"]
        default = ast.literal_eval(flag["default"])
        if action == "_HelpAction":
            parser.add_argument(*opts, action="help", default=argparse.SUPPRESS)
            continue
        kwargs: dict[str, Any] = {"dest": dest, "default": default}
        if action == "_StoreTrueAction":
            kwargs["action"] = "store_true"
        elif action == "BooleanOptionalAction":
            kwargs["action"] = argparse.BooleanOptionalAction
            opts = [o for o in opts if not o.startswith("--no-")]
        else:  # _StoreAction and SGLang's LoRAPathAction (a store of a list)
            typ = _TYPES.get(flag["type"], str)
            if typ is not None:
                kwargs["type"] = typ
            if flag["choices"] is not None:
                kwargs["choices"] = flag["choices"]
            if flag["nargs"] is not None:
                kwargs["nargs"] = flag["nargs"]
                if flag["nargs"] == "?":
                    kwargs["const"] = ""
            if dest in _REQUIRED:
                kwargs["required"] = True
        parser.add_argument(*opts, **kwargs)
    return parser


# ---------------------------------------------------------------------------------------
# Post-parse resolution: SGLang's speculative hooks, replayed
# ---------------------------------------------------------------------------------------
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


class UsageError(Exception):
    """Real SGLang's argparse refused the command line (exit status 2)."""


def resolve_args(ns: argparse.Namespace, argv: list[str]) -> Resolved:
    """SGLang's resolution of ``argv``, by real SGLang 0.5.23 (:mod:`specconsole.lab.sglang_judge`).

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


# ---------------------------------------------------------------------------------------
# Acceptance and timing model
# ---------------------------------------------------------------------------------------
def _unit(*parts: object) -> float:
    """A deterministic number in [0, 1) from the parts."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _seed(*parts: object) -> int:
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big")


@dataclass(frozen=True)
class SpecModel:
    """The deployment's speculative configuration, as the acceptance model sees it."""

    algorithm: str | None
    num_steps: int
    topk: int
    num_draft_tokens: int
    window: int | None
    #: DDTREE's node budget (None for the other algorithms)
    budget: int | None = None

    @classmethod
    def from_args(cls, a: dict[str, Any]) -> SpecModel:
        algo = a.get("speculative_algorithm")
        if algo is None:
            return cls(None, 0, 1, 1, None)
        return cls(algo, int(a.get("speculative_num_steps") or 1),
                   int(a.get("speculative_eagle_topk") or 1),
                   int(a.get("speculative_num_draft_tokens") or 1),
                   a.get("speculative_draft_window_size"), a.get("speculative_ddtree_budget"))

    @property
    def key(self) -> str:
        return (f"{self.algorithm}/{self.num_steps}/{self.topk}/{self.num_draft_tokens}/{self.window}"
                + (f"/{self.budget}" if self.budget is not None else ""))

    @property
    def cap(self) -> int:
        """Most tokens one verify step can commit (bonus included)."""
        if self.algorithm is None:
            return 1
        if self.algorithm in EAGLE_FAMILY:
            return self.num_steps + 1
        return max(1, self.num_draft_tokens)

    def mean_accept_length(self, q: float) -> float:
        algo = self.algorithm
        if algo is None:
            return 1.0
        if algo in EAGLE_FAMILY:
            rate = {"EAGLE3": 0.62, "STANDALONE": 0.45}.get(algo, 0.55)
            k = self.num_steps
            k_eff = k if k <= 4 else 4 + (k - 4) * 0.5
            tree = 1.0 + (0.08 * math.log2(self.topk) if self.topk > 1 else 0.0)
            value = 1.0 + rate * k_eff * q * tree
        elif algo in ("DFLASH", "DSPARK", "DDTREE"):
            b = self.num_draft_tokens
            gain = 7.5 * (1.0 - math.exp(-(b - 1) / 9.0))
            w = self.window
            ctx = 1.0 if w is None else 0.86 + 0.14 * (1.0 - math.exp(-w / 96))
            # a tree (budget > b - 1) keeps more than one candidate per depth: a modest gain
            tree = 1.0 + 0.08 * math.log2(self.budget / (b - 1)) if self.budget and b > 1 and \
                self.budget > b - 1 else 1.0
            value = 1.0 + gain * ctx * q * (0.95 if algo == "DSPARK" else 1.0) * tree
        else:  # NGRAM
            value = 1.0 + 0.8 * q * (1.0 - math.exp(-self.num_draft_tokens / 6.0))
        cap = self.cap
        return min(value, 1.0 + 0.97 * (cap - 1))

    def step_cost(self) -> float:
        algo = self.algorithm
        if algo is None:
            return 1.0
        if algo in EAGLE_FAMILY:
            return 1.0 + 0.1 * self.num_steps + 0.02 * self.num_draft_tokens
        if algo in ("DFLASH", "DSPARK", "DDTREE"):
            return 1.22 + 0.012 * self.num_draft_tokens + 0.004 * (self.budget or 0)
        return 1.05 + 0.01 * self.num_draft_tokens


def _geometric_p(mean: float, cap: int) -> float:
    """p with sum_{i<cap} p**i == mean (sequential acceptance, bonus token included)."""
    if cap <= 1 or mean <= 1.0:
        return 0.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        value = sum(mid**i for i in range(cap))
        if value < mean:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


_WORDS = ("the", "model", "drafts", "a", "block", "of", "tokens", "and", "target", "verifies",
          "them", "in", "one", "pass", "so", "accepted", "prefix", "grows", "while", "cost",
          "stays", "low", "we", "compute", "sum", "answer", "is", "therefore", "equal", "to",
          "first", "then", "next", "step", "value", "each", "number", "list", "function",
          "returns", "result", "because", "with", "this", "that", "for", "it", "can", "be",
          "seen", "from", "above", "let", "x", "y", "=", "+", "2", "3", "5", "7", ",", ".")

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    return max(1, len(_TOKEN_RE.findall(text)))


@dataclass
class Plan:
    """One request's simulated outcome (decided before it runs)."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: dict[str, Any]
    steps: list[int]
    prefill_s: float
    step_s: float

    @property
    def verify_ct(self) -> int:
        return len(self.steps)

    @property
    def decode_s(self) -> float:
        return self.step_s * len(self.steps)


def plan_request(spec: SpecModel, prompt_key: str, prompt_tokens: int, max_new_tokens: int,
                 temperature: float, step_ms: float, *, nonce: str = "") -> Plan:
    stochastic = temperature > 0
    salt = nonce if stochastic else ""
    q = 0.78 + 0.40 * _unit(prompt_key, "quality")
    if stochastic:
        q *= 1.0 - 0.15 * min(temperature, 1.0)
    # completion length: a quarter of the prompts stop early, deterministically
    u = _unit(prompt_key, "length", salt)
    if max_new_tokens > 0 and u < 0.25:
        completion = max(1, int(max_new_tokens * (0.4 + 0.6 * u / 0.25)))
        finish = {"type": "stop", "matched": 151645}
    else:
        completion = max_new_tokens
        finish = {"type": "length", "length": max_new_tokens}
    if completion >= max_new_tokens:
        finish = {"type": "length", "length": max_new_tokens}
    # One uniform per verify step, shared by every deployment (common random numbers): a
    # deployment with a higher mean accepts at least as much on every step of a prompt.
    rng = random.Random(_seed(prompt_key, "steps", salt))
    cap = spec.cap
    p = _geometric_p(spec.mean_accept_length(q), cap)
    steps: list[int] = []
    remaining = completion
    while remaining > 0:
        u = 1.0 - rng.random()  # (0, 1]
        if p <= 0.0:
            n = 1
        elif p >= 1.0:
            n = cap
        else:  # P(n > i) = p**i, truncated at the cap
            n = min(cap, 1 + int(math.log(u) / math.log(p)))
        n = min(n, remaining)
        steps.append(n)
        remaining -= n
    words = random.Random(_seed(prompt_key, "text", salt))
    text = " ".join(words.choice(_WORDS) for _ in range(completion))
    step_s = step_ms / 1000.0 * spec.step_cost()
    prefill_s = step_ms / 1000.0 * (1.0 + prompt_tokens / 2048.0)
    return Plan(text, prompt_tokens, completion, finish, steps, prefill_s, step_s)


# ---------------------------------------------------------------------------------------
# The engine: slots, queue, counters, metrics
# ---------------------------------------------------------------------------------------
THROUGHPUT_WINDOW_S = 5.0
ACCEPT_WINDOW_S = 30.0


@dataclass
class _Req:
    rid: str
    dp_rank: int
    prompt_tokens: int
    plan: Plan
    decode_start: float = 0.0
    decode_end: float = 0.0
    done: bool = False


@dataclass
class _RankStats:
    last_gen_throughput: float = 0.0
    last_accept_length: float = 0.0
    last_accept_rate: float = 0.0
    cum_accept_tokens: int = 0
    cum_verify: int = 0


class Engine:
    def __init__(self, resolved: Resolved, step_ms: float, metrics: bool) -> None:
        self.args = resolved.args
        self.spec = SpecModel.from_args(resolved.args)
        self.step_ms = step_ms
        self.dp_size = max(1, int(self.args.get("dp_size") or 1))
        self.max_running = int(self.args.get("max_running_requests") or 256)
        self.max_total_tokens = int(self.args.get("max_total_tokens") or 1_048_576)
        self.model_name = self.args["served_model_name"]
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(self.max_running * self.dp_size)
        self._queued = [0] * self.dp_size
        self._running: dict[str, _Req] = {}
        self._recent: deque[_Req] = deque()
        self._counter = 0
        self.ranks = [_RankStats() for _ in range(self.dp_size)]
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.requests_total = 0
        self.verify_total = 0
        self.prom: _Prom | None = _Prom(self) if metrics else None

    # -- requests -----------------------------------------------------------------------
    def next_rank(self) -> int:
        with self._lock:
            self._counter += 1
            return self._counter % self.dp_size

    def run(self, plan: Plan, rid: str, stop: threading.Event) -> float:
        """Run ``plan`` (blocking for its simulated duration); returns the e2e latency."""
        t0 = time.monotonic()
        rank = self.next_rank()
        with self._lock:
            self._queued[rank] += 1
        self._slots.acquire()
        try:
            with self._lock:
                self._queued[rank] -= 1
            req = _Req(rid, rank, plan.prompt_tokens, plan)
            started = time.monotonic()
            req.decode_start = started + plan.prefill_s
            req.decode_end = req.decode_start + plan.decode_s
            with self._lock:
                self._running[rid] = req
            stop.wait(max(0.0, req.decode_end - time.monotonic()))
            e2e = time.monotonic() - t0
            with self._lock:
                self._running.pop(rid, None)
                req.done = True
                self._recent.append(req)
                self._finish(req, e2e, started - t0)
            return e2e
        finally:
            self._slots.release()

    def _finish(self, req: _Req, e2e: float, queue_s: float) -> None:
        plan = req.plan
        self.prompt_tokens_total += plan.prompt_tokens
        self.generation_tokens_total += plan.completion_tokens
        self.requests_total += 1
        stats = self.ranks[req.dp_rank]
        if self.spec.algorithm is not None:
            self.verify_total += plan.verify_ct
            stats.cum_accept_tokens += plan.completion_tokens
            stats.cum_verify += plan.verify_ct
        if self.prom is not None:
            self.prom.observe(plan, e2e, queue_s)

    def _prune(self, now: float) -> None:
        horizon = now - max(THROUGHPUT_WINDOW_S, ACCEPT_WINDOW_S)
        while self._recent and self._recent[0].decode_end < horizon:
            self._recent.popleft()

    # -- gauges -------------------------------------------------------------------------
    def snapshot(self) -> list[dict[str, float]]:
        """Per DP rank: running, queued, gen_throughput, token_usage, accept length/rate."""
        now = time.monotonic()
        out = []
        with self._lock:
            self._prune(now)
            reqs = list(self._running.values()) + list(self._recent)
            for rank in range(self.dp_size):
                mine = [r for r in reqs if r.dp_rank == rank]
                lo = now - THROUGHPUT_WINDOW_S
                tokens = 0.0
                for r in mine:
                    dur = r.decode_end - r.decode_start
                    overlap = min(now, r.decode_end) - max(lo, r.decode_start)
                    if dur > 0 and overlap > 0:
                        tokens += r.plan.completion_tokens * overlap / dur
                running = [r for r in mine if not r.done]
                used = sum(r.prompt_tokens + self._progress(r, now) for r in running)
                stats = self.ranks[rank]
                stats.last_gen_throughput = tokens / THROUGHPUT_WINDOW_S
                window = [r for r in mine if r.decode_start <= now
                          and r.decode_end >= now - ACCEPT_WINDOW_S and r.plan.steps]
                if self.spec.algorithm is not None and window:
                    acc = sum(r.plan.completion_tokens for r in window)
                    ver = sum(r.plan.verify_ct for r in window)
                    stats.last_accept_length = acc / ver
                    proposed = ver * max(1, self.spec.num_draft_tokens - 1)
                    stats.last_accept_rate = (acc - ver) / proposed
                out.append({
                    "running": float(len(running)),
                    "queued": float(self._queued[rank]),
                    "gen_throughput": stats.last_gen_throughput,
                    "token_usage": used / self.max_total_tokens,
                    "num_used_tokens": float(used),
                    "accept_length": stats.last_accept_length,
                    "accept_rate": stats.last_accept_rate,
                })
        return out

    @staticmethod
    def _progress(r: _Req, now: float) -> float:
        dur = r.decode_end - r.decode_start
        if dur <= 0 or now <= r.decode_start:
            return 0.0
        return r.plan.completion_tokens * min(1.0, (now - r.decode_start) / dur)

    def internal_states(self) -> list[dict[str, Any]]:
        snap = self.snapshot()
        states = []
        for rank, stats in enumerate(self.ranks):
            item: dict[str, Any] = {
                "dp_rank": rank,
                "last_gen_throughput": snap[rank]["gen_throughput"],
                "memory_usage": {"weight": 16.38, "kvcache": 54.94, "token_capacity":
                                 self.max_total_tokens, "graph": 1.2},
                "load": int(snap[rank]["running"] + snap[rank]["queued"]),
            }
            if self.spec.algorithm is not None:
                item["avg_spec_accept_length"] = (
                    stats.cum_accept_tokens / stats.cum_verify if stats.cum_verify else 0.0
                )
            states.append(item)
        return states


class _Prom:
    """The metrics SGLang's collectors export, produced by prometheus_client."""

    def __init__(self, engine: Engine) -> None:
        import prometheus_client as pc

        pc.disable_created_metrics()
        self.pc = pc
        self.engine = engine
        self.registry = pc.CollectorRegistry(auto_describe=True)
        reg = self.registry
        sched = ["model_name", "engine_type", "tp_rank", "pp_rank"]
        if engine.dp_size > 1:
            sched.append("dp_rank")
        self.sched_labels = sched
        tok = ["model_name"]

        def gauge(name: str, doc: str) -> Any:
            return pc.Gauge(name, doc, sched, registry=reg)

        self.g = {
            "running": gauge("sglang:num_running_reqs", "The number of running requests."),
            "queued": gauge("sglang:num_queue_reqs",
                            "The number of requests in the waiting queue."),
            "gen_throughput": gauge("sglang:gen_throughput",
                                    "The generation throughput (token/s)."),
            "cache_hit_rate": gauge("sglang:cache_hit_rate", "The prefix cache hit rate."),
            "token_usage": gauge("sglang:token_usage", "The token usage."),
            "num_used_tokens": gauge("sglang:num_used_tokens", "The number of used tokens."),
            "is_cuda_graph": gauge("sglang:is_cuda_graph",
                                   "Whether the batch is using CUDA graph."),
            "max_total_num_tokens": gauge("sglang:max_total_num_tokens",
                                          "Maximum total number of tokens in the KV cache pool."),
        }
        if engine.spec.algorithm is not None:
            self.g["accept_length"] = gauge(
                "sglang:spec_accept_length",
                "Mean acceptance length of speculative decoding (accepted drafts + bonus token "
                "per forward).")
            self.g["accept_rate"] = gauge(
                "sglang:spec_accept_rate",
                "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).")
            self.g["spec_num_steps"] = gauge("sglang:spec_num_steps",
                                             "Currently active speculative_num_steps.")
            self.g["spec_num_draft_tokens"] = gauge(
                "sglang:spec_num_draft_tokens",
                "Currently active speculative_num_draft_tokens (decouples from steps under "
                "topk>1).")
        self.prompt_tokens = pc.Counter("sglang:prompt_tokens_total",
                                        "Number of prefill tokens processed.", tok, registry=reg)
        self.generation_tokens = pc.Counter("sglang:generation_tokens_total",
                                            "Number of generation tokens processed.", tok,
                                            registry=reg)
        self.cached_tokens = pc.Counter("sglang:cached_tokens_total",
                                        "Number of cached prompt tokens.", tok, registry=reg)
        self.num_requests = pc.Counter("sglang:num_requests_total",
                                       "Number of requests processed.", tok, registry=reg)
        self.verify_calls = pc.Counter("sglang:spec_verify_calls_total",
                                       "Number of speculative decoding verification calls.",
                                       tok, registry=reg)
        self.ttft = pc.Histogram(
            "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            tok, registry=reg,
            buckets=(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                     2.5, 5.0, 7.5, 10.0, 15.0, 20.0, 25.0, 30.0))
        self.itl = pc.Histogram(
            "sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
            tok, registry=reg,
            buckets=(0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04,
                     0.06, 0.08, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0))
        self.e2e = pc.Histogram(
            "sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in "
            "seconds", tok, registry=reg,
            buckets=(0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0,
                     80.0, 100.0, 200.0, 400.0, 800.0))
        self.queue_time = pc.Histogram(
            "sglang:queue_time_seconds", "Histogram of queueing time in seconds.", sched,
            registry=reg, buckets=(0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10))
        self.tok_labels = {"model_name": engine.model_name}
        for c in (self.prompt_tokens, self.generation_tokens, self.cached_tokens,
                  self.num_requests, self.verify_calls):
            c.labels(**self.tok_labels)
        self._rank_labels = [self._sched(rank) for rank in range(engine.dp_size)]

    def _sched(self, rank: int) -> dict[str, str]:
        labels = {"model_name": self.engine.model_name, "engine_type": "unified",
                  "tp_rank": "0", "pp_rank": "0"}
        if "dp_rank" in self.sched_labels:
            labels["dp_rank"] = str(rank)
        return labels

    def observe(self, plan: Plan, e2e: float, queue_s: float) -> None:
        lab = self.tok_labels
        self.prompt_tokens.labels(**lab).inc(plan.prompt_tokens)
        self.generation_tokens.labels(**lab).inc(plan.completion_tokens)
        self.num_requests.labels(**lab).inc()
        if self.engine.spec.algorithm is not None:
            self.verify_calls.labels(**lab).inc(plan.verify_ct)
        ttft = plan.prefill_s + (plan.step_s if plan.steps else 0.0)
        self.ttft.labels(**lab).observe(ttft)
        if plan.completion_tokens > 1:
            self.itl.labels(**lab).observe(
                max(0.0, e2e - ttft) / (plan.completion_tokens - 1))
        self.e2e.labels(**lab).observe(e2e)
        self.queue_time.labels(**self._rank_labels[0]).observe(max(0.0, queue_s))

    def render(self) -> bytes:
        eng = self.engine
        for rank, values in enumerate(eng.snapshot()):
            labels = self._rank_labels[rank]
            for key, gauge in self.g.items():
                if key in values:
                    gauge.labels(**labels).set(values[key])
            self.g["cache_hit_rate"].labels(**labels).set(0.0)
            self.g["is_cuda_graph"].labels(**labels).set(
                0.0 if eng.args.get("disable_cuda_graph") else 1.0)
            self.g["max_total_num_tokens"].labels(**labels).set(eng.max_total_tokens)
            if "spec_num_steps" in self.g:
                self.g["spec_num_steps"].labels(**labels).set(eng.spec.num_steps)
                self.g["spec_num_draft_tokens"].labels(**labels).set(eng.spec.num_draft_tokens)
        return self.pc.generate_latest(self.registry)


# ---------------------------------------------------------------------------------------
# HTTP
# ---------------------------------------------------------------------------------------
class BadRequest(Exception):
    pass


class Server:
    """Process state shared by the HTTP handler threads."""

    def __init__(self, resolved: Resolved, launch_command: str, startup_time: float) -> None:
        self.resolved = resolved
        self.args = resolved.args
        self.launch_command = launch_command
        self.startup_time = startup_time
        self.ready = False
        #: Set by the signal handler (a plain flag: a handler must not take locks).
        self.stopping = False
        #: The scheduler hangs (SIGUSR1, SGLANG_SIM_HANG_AFTER_S) until cleared (SIGUSR2); a
        #: plain flag like ``stopping``, polled by the requests it holds.
        self.hung = False
        #: Set by the main thread once stopping; the worker threads wait on it.
        self.stop = threading.Event()
        step_ms = _env_float("SGLANG_SIM_STEP_MS", 8.0)
        self.engine = Engine(resolved, step_ms, bool(self.args.get("enable_metrics")))
        cfg = resolved.target_config or {}
        self.architectures = cfg.get("architectures") or ["Qwen3ForCausalLM"]
        self.model_type = cfg.get("model_type") or "qwen3"
        self.context_len = int(self.args.get("context_length")
                               or cfg.get("max_position_embeddings") or 40960)
        self.exclude_prefixes = tuple(self.args.get("uvicorn_access_log_exclude_prefixes") or ())

    def pause(self, seconds: float) -> bool:
        """Sleep in the main thread; False (and ``stop`` set) once a signal asked to stop.

        Short sleeps, so signal handlers run promptly whichever thread the kernel picked.
        """
        end = time.monotonic() + seconds
        while True:
            if self.stopping:
                self.stop.set()
                return False
            left = end - time.monotonic()
            if left <= 0:
                return True
            time.sleep(min(0.05, left))

    def wait_scheduler(self, limit_s: float | None = None) -> bool:
        """Hold a request that needs the scheduler while it hangs: True once it runs again,
        False when ``limit_s`` passed or the server is stopping first."""
        end = None if limit_s is None else time.monotonic() + limit_s
        while self.hung:
            if self.stopping or self.stop.is_set() or (end is not None and time.monotonic() > end):
                return False
            time.sleep(0.05)
        return True

    # -- endpoint bodies ----------------------------------------------------------------
    def server_info(self) -> dict[str, Any]:
        info = {k: v for k, v in self.args.items() if k != "help"}
        info.update({
            "launch_command": self.launch_command,
            "startup_time": self.startup_time,
            "version": VERSION,
            "max_total_num_tokens": self.engine.max_total_tokens,
            "max_req_input_len": self.context_len - 5,
            "internal_states": self.engine.internal_states(),
        })
        if sglang_versions.has_ddtree(VERSION):  # renamed settings, reported under both names
            info["speculative_dflash_draft_window_size"] = info.get("speculative_draft_window_size")
            info["speculative_dflash_block_size"] = (info.get("speculative_num_draft_tokens")
                                                     if info.get("speculative_algorithm") in ("DFLASH", "DDTREE")
                                                     else None)
            info.setdefault("speculative_ddtree_budget", None)
        return info

    def model_info(self) -> dict[str, Any]:
        return {
            "model_path": self.args["model_path"],
            "tokenizer_path": self.args["tokenizer_path"],
            "is_generation": True,
            "preferred_sampling_params": self.args.get("preferred_sampling_params"),
            "weight_version": self.args.get("weight_version") or "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": self.model_type,
            "architectures": self.architectures,
        }

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{
            "id": self.args["served_model_name"], "object": "model",
            "created": int(self.startup_time), "owned_by": "sglang",
            "root": self.args["model_path"], "parent": None, "max_model_len": self.context_len,
        }]}

    def generate(self, body: Any) -> Any:
        if not isinstance(body, dict):
            raise BadRequest("The request body must be a JSON object.")
        text, ids = body.get("text"), body.get("input_ids")
        if (text is None) == (ids is None):
            if body.get("input_embeds") is not None:
                raise BadRequest("input_embeds is not supported by this server.")
            raise BadRequest("Either text, input_ids or input_embeds should be provided.")
        if body.get("stream"):
            raise BadRequest("stream=true is not supported by the simulator; send stream=false.")
        prompts: list[tuple[str, int]] = []
        batched = False
        if text is not None:
            if isinstance(text, str):
                prompts.append((text, count_tokens(text)))
            elif isinstance(text, list) and text and all(isinstance(t, str) for t in text):
                batched = True
                prompts.extend((t, count_tokens(t)) for t in text)
            else:
                raise BadRequest("text must be a string or a non-empty list of strings.")
        else:
            if isinstance(ids, list) and ids and all(_is_int(i) for i in ids):
                prompts.append((json.dumps(ids), len(ids)))
            elif isinstance(ids, list) and ids and all(
                isinstance(x, list) and x and all(_is_int(i) for i in x) for x in ids
            ):
                batched = True
                prompts.extend((json.dumps(x), len(x)) for x in ids)
            else:
                raise BadRequest(
                    "input_ids must be a non-empty list of ints or a list of such lists.")
        sp = body.get("sampling_params") or {}
        if not isinstance(sp, dict):
            raise BadRequest("sampling_params must be a JSON object.")
        max_new = sp.get("max_new_tokens", 128)
        if not _is_int(max_new):
            raise BadRequest(f"max_new_tokens must be an integer, got {max_new!r}.")
        if max_new < 0:
            raise BadRequest(f"max_new_tokens must be at least 0, got {max_new}.")
        temperature = sp.get("temperature", 1.0)
        if isinstance(temperature, bool) or not isinstance(temperature, int | float):
            raise BadRequest(f"temperature must be a number, got {temperature!r}.")
        if temperature < 0:
            raise BadRequest(f"temperature must be non-negative, got {temperature}.")
        for _, n in prompts:
            if n >= self.context_len:
                raise BadRequest(
                    f"The input ({n} tokens) is longer than the model's context length "
                    f"({self.context_len} tokens).")
        rid = body.get("rid")
        rids = rid if isinstance(rid, list) else None
        results: list[dict[str, Any] | None] = [None] * len(prompts)

        def one(i: int) -> None:
            key, n = prompts[i]
            this_rid = (rids[i] if rids and i < len(rids) else
                        rid if isinstance(rid, str) and not batched else uuid.uuid4().hex)
            results[i] = self._run_one(str(this_rid), key, n, max_new, float(temperature))

        if len(prompts) == 1:
            one(0)
        else:
            threads = [threading.Thread(target=one, args=(i,), daemon=True)
                       for i in range(len(prompts))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        return results if batched else results[0]

    def _run_one(self, rid: str, key: str, prompt_tokens: int, max_new: int,
                 temperature: float) -> dict[str, Any]:
        eng = self.engine
        plan = plan_request(eng.spec, key, prompt_tokens, max_new, temperature, eng.step_ms,
                            nonce=rid)
        e2e = eng.run(plan, rid, self.stop)
        meta: dict[str, Any] = {
            "id": rid,
            "finish_reason": plan.finish_reason,
            "prompt_tokens": plan.prompt_tokens,
            "weight_version": self.args.get("weight_version") or "default",
            "completion_tokens": plan.completion_tokens,
            "cached_tokens": 0,
            "e2e_latency": e2e,
        }
        if eng.spec.algorithm is not None:
            verify = plan.verify_ct
            proposed = verify * max(0, eng.spec.num_draft_tokens - 1)
            correct = plan.completion_tokens - verify
            meta.update({
                "spec_verify_ct": verify,
                "spec_accept_length": plan.completion_tokens / verify if verify else 0.0,
                "spec_accept_rate": correct / proposed if proposed else 0.0,
                "spec_num_correct_drafts": correct,
                "spec_num_proposed_drafts": proposed,
            })
        return {"text": plan.text, "output_ids": None, "meta_info": meta}


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def make_handler(server: Server) -> type[BaseHTTPRequestHandler]:
    api_key = server.args.get("api_key")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "uvicorn"
        sys_version = ""
        # TCP_NODELAY, as uvicorn sets: headers and body go out in two writes, and without
        # it a keep-alive client waits for its delayed ACK (~40 ms) on every answer.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            pass  # our own access log below

        def _send(self, status: int, body: bytes = b"",
                  content_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            path = self.path.split("?", 1)[0]
            if not (server.exclude_prefixes and path.startswith(server.exclude_prefixes)):
                phrase = HTTPStatus(status).phrase
                access_log(f'{self.client_address[0]}:{self.client_address[1]} - '
                           f'"{self.command} {self.path} HTTP/1.1" {status} {phrase}')

        def _json(self, status: int, obj: Any) -> None:
            self._send(status, json.dumps(obj).encode("utf-8"))

        def _error(self, status: int, message: str) -> None:
            self._json(status, {"error": {"message": message}})

        def _authorized(self, path: str) -> bool:
            if not api_key or path.startswith(("/health", "/metrics")):
                return True
            if self.headers.get("Authorization") == f"Bearer {api_key}":
                return True
            self._json(401, {"error": "Unauthorized"})
            return False

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if not self._authorized(path):
                return
            if path in ("/health", "/health_generate"):
                if server.ready and not (server.stopping or server.stop.is_set()):
                    if path == "/health_generate":
                        if not server.wait_scheduler(HEALTH_CHECK_TIMEOUT_S):
                            self._send(503)
                            return
                        time.sleep(server.engine.step_ms / 1000.0)
                    self._send(200)
                else:
                    self._send(503)
            elif path in ("/server_info", "/get_server_info"):
                self._json(200, server.server_info())
            elif path in ("/model_info", "/get_model_info"):
                self._json(200, server.model_info())
            elif path == "/v1/models":
                self._json(200, server.models())
            elif path == "/metrics" and server.engine.prom is not None:
                self._send(200, server.engine.prom.render(),
                           "text/plain; version=0.0.4; charset=utf-8")
            elif path in ("/generate",):
                self._json(405, {"detail": "Method Not Allowed"})
            else:
                self._json(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length > 0 else b""
            if not self._authorized(path):
                return
            if path != "/generate":
                if path in ("/health", "/server_info", "/model_info", "/metrics"):
                    self._json(405, {"detail": "Method Not Allowed"})
                else:
                    self._json(404, {"detail": "Not Found"})
                return
            if not server.ready:
                self._error(503, "The server is not ready yet; retry when /health answers 200.")
                return
            try:
                body = json.loads(raw.decode("utf-8")) if raw else None
            except (UnicodeDecodeError, ValueError) as exc:
                self._error(400, f"Invalid JSON body: {exc}")
                return
            if not server.wait_scheduler():
                self._error(503, "The server is shutting down.")
                return
            try:
                result = server.generate(body)
            except BadRequest as exc:
                self._error(400, str(exc))
                return
            self._json(200, result)

    return Handler


# ---------------------------------------------------------------------------------------
# Start-up, background load, shutdown
# ---------------------------------------------------------------------------------------
def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return max(0.0, float(raw))
    except ValueError:
        return default


def _fail_mode() -> str | None:
    raw = os.environ.get("SGLANG_SIM_FAIL", "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return None
    return raw if raw in ("oom", "weights", "cuda_graph") else "oom"


def _truncated_weights(model_dir: str | None) -> bool:
    """A draft checkpoint whose ``*.safetensors`` is shorter than its 8-byte header length
    (a copy that was cut short): real SGLang dies loading it, and so does the simulator."""
    if not model_dir or not os.path.isdir(model_dir):
        return False
    return any(name.endswith(".safetensors") and os.path.getsize(os.path.join(model_dir, name)) < 8
               for name in os.listdir(model_dir))


def _server_args_repr(args: dict[str, Any]) -> str:
    return "ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in args.items() if k != "help") + ")"


def _crash(kind: str, message: str, rank: str) -> None:
    log("Scheduler hit an exception: Traceback (most recent call last):", rank=rank)
    sys.stderr.write(f"{kind}: {message}\n\n")
    sys.stderr.flush()
    log("Received sigquit from a child process. It usually means the child failed.")


def startup(server: Server, total_s: float, fail: str | None) -> bool:
    """The start-up log over ``total_s`` seconds; False if it crashed or was stopped."""
    a = server.args
    rank = "TP0" if int(a.get("dp_size") or 1) == 1 else "DP0 TP0"
    spec = server.engine.spec

    def wait(frac: float) -> bool:
        return server.pause(total_s * frac)

    log("Init torch distributed begin.", rank=rank)
    if not wait(0.04):
        return False
    log("Init torch distributed ends. mem usage=0.00 GB", rank=rank)
    log("Load weight begin. avail mem=138.41 GB", rank=rank)
    for i in range(1, 5):
        if not wait(0.06):
            return False
        if fail == "weights" and i == 3:
            _crash("safetensors_rust.SafetensorError",
                   "Error while deserializing header: MetadataIncompleteBuffer", rank)
            return False
        pct = i * 25
        log(f"Loading safetensors checkpoint shards: {pct:3d}% Completed | {i}/4", rank=rank)
    log(f"Load weight end. type={server.architectures[0]}, dtype=torch.bfloat16, "
        "avail mem=122.03 GB, mem usage=16.38 GB.", rank=rank)
    if spec.algorithm is not None:
        draft_cfg = server.resolved.draft_config or {}
        draft_arch = (draft_cfg.get("architectures") or [server.architectures[0]])[0]
        log("Load weight begin. avail mem=121.90 GB", rank=rank)
        if not wait(0.06):
            return False
        if _truncated_weights(a.get("speculative_draft_model_path")):
            _crash("safetensors_rust.SafetensorError",
                   "Error while deserializing header: MetadataIncompleteBuffer", rank)
            return False
        log(f"Load weight end. type={draft_arch}, dtype=torch.bfloat16, avail mem=120.85 GB, "
            "mem usage=1.05 GB.", rank=rank)
        if spec.algorithm == "DDTREE":
            log(f"Initialized DDTree worker. block_size={spec.num_draft_tokens}, tree_budget={spec.budget}",
                rank=rank)
    if not wait(0.05):
        return False
    if fail == "oom":
        _crash("torch.OutOfMemoryError",
               "CUDA out of memory. Tried to allocate 54.94 GiB. GPU 0 has a total capacity of "
               "139.81 GiB of which 3.12 GiB is free. Including non-PyTorch memory, this "
               "process has 136.69 GiB memory in use. Of the allocated memory 133.20 GiB is "
               "allocated by PyTorch, and 1.98 GiB is reserved by PyTorch but unallocated.",
               rank)
        return False
    tokens = server.engine.max_total_tokens
    log(f"KV Cache is allocated. #tokens: {tokens}, K size: 27.47 GB, V size: 27.47 GB",
        rank=rank)
    log("Memory pool end. avail mem=65.91 GB", rank=rank)
    if a.get("disable_cuda_graph"):
        if not wait(0.3):
            return False
    else:
        log("Capture cuda graph begin. This can take up to several minutes. "
            "avail mem=65.40 GB", rank=rank)
        t0 = time.monotonic()
        batch_sizes = [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64]
        for i, bs in enumerate(reversed(batch_sizes), start=1):
            if not wait(0.4 / len(batch_sizes)):
                return False
            if fail == "cuda_graph" and i == 7:
                _crash("RuntimeError",
                       "CUDA error: an illegal memory access was encountered", rank)
                return False
            log(f"Capture cuda graph {i}/{len(batch_sizes)} (bs={bs}, avail_mem=64.2 GB)",
                rank=rank)
        log(f"Capture cuda graph end. Time elapsed: {time.monotonic() - t0:.2f} s. "
            "mem usage=1.20 GB. avail mem=64.20 GB.", rank=rank)
    log(f"max_total_num_tokens={tokens}, chunked_prefill_size={a.get('chunked_prefill_size')}, "
        f"max_prefill_tokens={a.get('max_prefill_tokens')}, "
        f"max_running_requests={server.engine.max_running}, context_len={server.context_len}, "
        "available_gpu_mem=64.20 GB", rank=rank)
    log(f"INFO:     Started server process [{os.getpid()}]")
    log("INFO:     Waiting for application startup.")
    log("INFO:     Application startup complete.")
    log(f"INFO:     Uvicorn running on http://{a['host']}:{a['port']} (Press CTRL+C to quit)")
    if not wait(0.1):
        return False
    log("Prefill batch. #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0.00, "
        "#running-req: 0, #queue-req: 0,", rank=rank)
    server.ready = True
    log("The server is fired up and ready to roll!")
    return True


def decode_logger(server: Server) -> None:
    """SGLang's periodic ``Decode batch.`` line while there is traffic."""
    eng = server.engine
    interval = max(1.0, 40 * eng.step_ms / 1000.0)
    while not server.stop.wait(interval):
        snap = eng.snapshot()
        for rank, s in enumerate(snap):
            if s["running"] <= 0:
                continue
            prefix = "TP0" if eng.dp_size == 1 else f"DP{rank} TP0"
            spec = ""
            if eng.spec.algorithm is not None:
                spec = (f"accept len: {s['accept_length']:.2f}, "
                        f"accept rate: {s['accept_rate']:.2f}, ")
            log(f"Decode batch. #running-req: {int(s['running'])}, "
                f"#token: {int(s['num_used_tokens'])}, token usage: {s['token_usage']:.2f}, "
                f"{spec}cuda graph: True, gen throughput (token/s): {s['gen_throughput']:.2f}, "
                f"#queue-req: {int(s['queued'])},", rank=prefix)


_LOAD_PROMPTS = (
    "Solve: a train travels 120 km in 1.5 hours. What is its average speed?",
    "Write a Python function that returns the n-th Fibonacci number.",
    "Summarise the causes of the French Revolution in three sentences.",
    "Explain speculative decoding to a new engineer.",
    "Translate 'the weather is nice today' into German and French.",
    "What is the derivative of x^3 * sin(x)?",
    "List five prime numbers greater than 100.",
    "Refactor this loop into a list comprehension: for x in xs: ys.append(x*x)",
)


def background_load(server: Server, rate: float) -> None:
    """Simulated internal traffic: a Poisson stream of fake requests at ``rate`` req/s."""
    rng = random.Random(_seed("load", server.engine.spec.key))
    eng = server.engine
    counter = 0
    while not server.stop.wait(rng.expovariate(rate)):
        if not server.ready:
            continue
        counter += 1
        prompt = rng.choice(_LOAD_PROMPTS) + f" (#{counter % 97})"
        max_new = rng.choice((128, 256, 256, 512))
        plan = plan_request(eng.spec, prompt, count_tokens(prompt), max_new, 0.0, eng.step_ms)
        threading.Thread(target=eng.run, args=(plan, f"sim-load-{counter}", server.stop),
                         daemon=True).start()


def hang_later(server: Server, after_s: float) -> None:
    """``SGLANG_SIM_HANG_AFTER_S``: the scheduler hangs ``after_s`` seconds after start-up."""
    if server.stop.wait(after_s):
        return
    server.hung = True
    log(f"SGLANG_SIM_HANG_AFTER_S={after_s:g}: the simulated scheduler hangs now (SIGUSR2 ends it); "
        "/health still answers 200, /health_generate and /generate block.")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    started = time.time()
    via_serve = bool(argv) and argv[0] == "serve"
    if via_serve:
        argv = argv[1:]
    else:
        warning, _, _ = _split_help()
        sys.stderr.write(warning.replace(
            "/tmp/sg/venv/lib/python3.11/site-packages/sglang/launch_server.py", __file__))
        sys.stderr.flush()
    parser = build_parser()
    ns = parser.parse_args(argv)
    launch = shlex.join(["sglang", "serve", *argv] if via_serve
                        else ["python", "-m", "sglang.launch_server", *argv])
    try:
        resolved = resolve_args(ns, argv)
    except UsageError as exc:  # real SGLang's argparse refused what the simulator's parser took
        sys.stderr.write(parser.format_usage() + f"{exc}\n")
        return 2
    except LaunchError as exc:
        sys.stderr.write(f"{exc.kind}: {exc.message}\n")
        return 1
    for w in resolved.warnings:
        log(w)
    log(f"server_args={_server_args_repr(resolved.args)}")
    server = Server(resolved, launch, started)

    def on_signal(signum: int, _frame: Any) -> None:
        server.stopping = True

    def on_hang(signum: int, _frame: Any) -> None:
        server.hung = signum == signal.SIGUSR1

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGUSR1, on_hang)
    signal.signal(signal.SIGUSR2, on_hang)
    host, port = resolved.args["host"], resolved.args["port"]
    try:
        httpd = ThreadingHTTPServer((host, port), make_handler(server))
    except OSError as exc:
        log(f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
            f"({host!r}, {port}): {exc.strerror.lower() if exc.strerror else exc}")
        return 1
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1},
                     daemon=True).start()
    ok = startup(server, _env_float("SGLANG_SIM_STARTUP_S", 3.0), _fail_mode())
    if not ok and not server.stopping:
        httpd.shutdown()
        return 1
    if ok:
        threading.Thread(target=decode_logger, args=(server,), daemon=True).start()
        rate = _env_float("SGLANG_SIM_LOAD", 0.0)
        if rate > 0:
            log(f"SGLANG_SIM_LOAD={rate:g}: generating simulated internal traffic "
                f"({rate:g} requests/s); the numbers it moves are not real requests.")
            threading.Thread(target=background_load, args=(server, rate), daemon=True).start()
        hang_after = os.environ.get("SGLANG_SIM_HANG_AFTER_S", "").strip()
        if hang_after:
            threading.Thread(target=hang_later, args=(server, _env_float("SGLANG_SIM_HANG_AFTER_S", 0.0)),
                             daemon=True).start()
    while server.pause(3600.0):
        pass
    server.ready = False
    log("INFO:     Shutting down")
    stop_s = _env_float("SGLANG_SIM_STOP_S", 0.0)
    if stop_s > 0:
        log(f"INFO:     Waiting for requests in flight and freeing GPU memory ({stop_s:g}s)")
        time.sleep(stop_s)
    httpd.shutdown()
    httpd.server_close()
    log("INFO:     Waiting for application shutdown.")
    log("INFO:     Application shutdown complete.")
    log(f"INFO:     Finished server process [{os.getpid()}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
