"""The acceptance and timing model: what one request accepts per verify step, and how long it takes.

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

The draft model's acceptance profile: a draft folder whose ``config.json`` holds
``"specconsole_lab_acceptance": F`` (the lab's weaker drafts) scales the gain over 1.0 by ``F``
(0.6: a draft that accepts clearly less), so a rollout's quality gate has something to catch.

Per-step accept lengths are drawn from a truncated geometric whose mean is that value,
from one uniform per step seeded by the prompt alone (common random numbers: for a
given prompt a deployment with a higher mean never accepts less), so at temperature 0
the same prompt gives the same numbers (temperature > 0 adds per-request randomness and lowers ``q``
slightly). ``spec_accept_length = completion_tokens / spec_verify_ct``,
``spec_num_proposed_drafts = spec_verify_ct * (num_draft_tokens - 1)``,
``spec_accept_rate = spec_num_correct_drafts / spec_num_proposed_drafts``, and
``spec_correct_drafts_histogram`` (SGLang 0.5.23's name; earlier releases' ``spec_accept_histogram``)
counts the same steps: index ``n`` = drafts accepted in a step (its tokens minus the bonus), value =
steps that accepted ``n``; the list is as long as the most accepted plus one (SGLang grows it as
needed), so ``sum == spec_verify_ct`` and ``sum(n * count) == spec_num_correct_drafts``.
Generation really takes ``prefill + verify_steps * SGLANG_SIM_STEP_MS * step_cost``
(step_cost: 1.0 vanilla, 1 + 0.1*steps + 0.02*draft tokens for EAGLE, 1.22 + 0.012*b
for DFLASH), so tokens / e2e_latency is a meaningful tokens/s.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import re
from dataclasses import dataclass
from typing import Any

EAGLE_FAMILY = ("EAGLE", "EAGLE3", "STANDALONE", "UNO", "FROZEN_KV_MTP")


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
    #: the draft model's acceptance profile: the gain over 1.0 is scaled by this
    profile: float = 1.0

    @classmethod
    def from_args(cls, a: dict[str, Any]) -> SpecModel:
        algo = a.get("speculative_algorithm")
        if algo is None:
            return cls(None, 0, 1, 1, None)
        return cls(algo, int(a.get("speculative_num_steps") or 1),
                   int(a.get("speculative_eagle_topk") or 1),
                   int(a.get("speculative_num_draft_tokens") or 1),
                   a.get("speculative_draft_window_size"), a.get("speculative_ddtree_budget"),
                   draft_profile(a.get("speculative_draft_model_path")))

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
        value = 1.0 + (value - 1.0) * self.profile
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


#: The key in a draft model's ``config.json`` that sets its simulated acceptance profile.
PROFILE_KEY = "specconsole_lab_acceptance"


def draft_profile(draft_path: object) -> float:
    """The acceptance profile of the draft model in ``draft_path`` (1.0: none given)."""
    if not draft_path:
        return 1.0
    try:
        with open(os.path.join(str(draft_path), "config.json"), encoding="utf-8") as f:
            value = json.load(f).get(PROFILE_KEY, 1.0)
    except (OSError, ValueError, AttributeError):
        return 1.0
    return float(value) if isinstance(value, (int, float)) and 0 < value <= 2 else 1.0


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

    def correct_drafts_histogram(self) -> list[int]:
        """Verify steps by drafts accepted (a step's tokens minus its bonus token), as SGLang's
        ``Req.update_spec_correct_drafts_histogram`` counts them."""
        hist: list[int] = []
        for tokens in self.steps:
            n = max(0, tokens - 1)
            if len(hist) <= n:
                hist.extend([0] * (n + 1 - len(hist)))
            hist[n] += 1
        return hist


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
