"""A rollout's quality gate: the changed replica's acceptance length and tokens/s against a baseline.

The gate text (``--gate``, ``[router] gate``) is a comma-separated list of
``METRIC>=FACTOR*baseline`` with METRIC ``accept_len`` (completion tokens / verify steps over the
gate's prompts) or ``tok_s`` (completion tokens / the server's own end-to-end latency), e.g. the
default ``accept_len>=0.95*baseline,tok_s>=0.9*baseline``. The baseline is the same prompts on a
replica not yet changed in the same run; both go straight to the replica (not through the router),
one prompt at a time at temperature 0, so both runs see the same prompts the same way.

Where the replicas return per-request acceptance detail (``meta_info``'s histogram of accepted
drafts, :mod:`specconsole.sglang.acceptance`), the gate's figures carry it summed over the prompts,
and :func:`acceptance_figures` puts the changed replica beside the fleet's baseline for the plot;
a server without it is said once (``no per-request acceptance detail from this server``).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from specconsole.base.errors import SpecConsoleError
from specconsole.sglang.acceptance import NO_DETAIL, AcceptanceDetail, AcceptanceTally

METRICS = {"accept_len": "acceptance length", "tok_s": "tokens/s"}
_TERM = re.compile(r"^\s*(?P<metric>[a-z_]+)\s*>=\s*(?:(?P<factor>\d+(?:\.\d+)?)\s*\*\s*)?baseline\s*$")


class GateError(SpecConsoleError):
    """The gate text cannot be read; the message says what and the fix."""

    exit_code = 2


@dataclass(frozen=True)
class Threshold:
    metric: str
    factor: float

    def text(self) -> str:
        return f"{self.metric}>={self.factor:g}*baseline"


def parse_gate(text: str) -> tuple[Threshold, ...]:
    """``accept_len>=0.95*baseline,tok_s>=0.9*baseline`` -> thresholds; a one-line GateError else."""
    example = 'e.g. --gate "accept_len>=0.95*baseline,tok_s>=0.9*baseline"'
    terms = [t for t in text.split(",") if t.strip()]
    if not terms:
        raise GateError(f"--gate: empty gate {text!r}; {example}")
    out: list[Threshold] = []
    for term in terms:
        m = _TERM.match(term)
        if m is None:
            raise GateError(f"--gate: cannot read {term.strip()!r}: write METRIC>=FACTOR*baseline with METRIC "
                            f"{' or '.join(METRICS)}; {example}")
        if m["metric"] not in METRICS:
            raise GateError(f"--gate: unknown metric {m['metric']!r} in {term.strip()!r}: the gate compares "
                            f"{' and '.join(METRICS)}; {example}")
        factor = float(m["factor"] or 1.0)
        if not 0 < factor <= 10:
            raise GateError(f"--gate: factor {factor:g} in {term.strip()!r} must be in (0, 10]; {example}")
        out.append(Threshold(m["metric"], factor))
    return tuple(out)


@dataclass(frozen=True)
class Figures:
    """What the gate's prompts gave on one replica."""

    accept_len: float
    tok_s: float
    prompts: int
    tokens: int
    #: the histogram of accepted drafts over the prompts (None: the server gave none)
    acceptance: AcceptanceDetail | None = None
    #: the server answered speculatively without any histogram
    no_detail: bool = False
    #: the replica measured (its name)
    where: str = ""

    def get(self, metric: str) -> float:
        return float(getattr(self, metric))

    def text(self) -> str:
        return f"accept {self.accept_len:.2f}, {self.tok_s:.0f} tok/s ({self.prompts} prompts, {self.tokens} tokens)"


@dataclass(frozen=True)
class Verdict:
    passed: bool
    line: str


def judge(figures: Figures, baseline: Figures, thresholds: tuple[Threshold, ...]) -> Verdict:
    """Each threshold against the baseline; the line names every figure and what failed."""
    parts, failed = [], []
    for t in thresholds:
        need, got = t.factor * baseline.get(t.metric), figures.get(t.metric)
        ok = got >= need
        parts.append(f"{t.metric} {got:.2f} {'>=' if ok else '<'} {t.factor:g}*{baseline.get(t.metric):.2f} "
                     f"= {need:.2f}")
        if not ok:
            failed.append(f"{METRICS[t.metric]} {got:.2f} < {need:.2f} ({t.text()})")
    if failed:
        return Verdict(False, "gate FAILED: " + "; ".join(failed))
    return Verdict(True, "gate passed: " + "; ".join(parts))


Generate = Callable[[str, int], Awaitable[dict[str, Any]]]


async def measure(generate: Generate, prompts: list[tuple[str, int]],
                  progress: Callable[[int, int], None] | None = None, *, where: str = "", drafts: int = 0) -> Figures:
    """Send each ``(text, max_new_tokens)`` through ``generate`` (``SglangClient.generate``) one at
    a time; sum completion tokens, verify steps, the server's own latency and the acceptance
    histograms (``drafts``: draft tokens per verify step, when known)."""
    tokens = verify = 0
    latency = 0.0
    hist = AcceptanceTally(drafts)
    for i, (text, max_new) in enumerate(prompts):
        meta = (await generate(text, max_new)).get("meta_info") or {}
        hist.add(meta)
        n = int(meta.get("completion_tokens") or 0)
        tokens += n
        verify += int(meta.get("spec_verify_ct") or 0) or n  # no speculation: one token per step
        latency += float(meta.get("e2e_latency") or 0.0)
        if progress is not None:
            progress(i + 1, len(prompts))
    if tokens <= 0 or latency <= 0:
        raise GateError("the gate's prompts gave no tokens (or no e2e_latency in meta_info); "
                        "check the replica's /generate")
    return Figures(tokens / max(1, verify), tokens / latency, len(prompts), tokens, hist.detail(),
                   hist.speculative_without_detail, where)


def acceptance_figures(figures: Figures, baseline: Figures | None, *, role: str = "new config",
                       said: bool = False) -> tuple[str, tuple[tuple[str, AcceptanceDetail], ...]] | None:
    """The line and plot series for ``figures`` beside the fleet's ``baseline``: the changed
    replica first, the fleet second. None when there is nothing to show and nothing to say (or
    :data:`NO_DETAIL` was ``said`` already)."""
    series: list[tuple[str, AcceptanceDetail]] = []
    if figures.acceptance is not None:
        series.append((f"{figures.where or 'replica'} ({role})", figures.acceptance))
    if baseline is not None and baseline.acceptance is not None and baseline is not figures:
        series.append((f"{baseline.where or 'baseline'} (fleet)", baseline.acceptance))
    if not series:
        return (NO_DETAIL, ()) if figures.no_detail and not said else None
    lengths = " vs ".join(f"{label} {d.accept_length:.2f}" for label, d in series)
    line = f"acceptance per verify step: {lengths} (from {series[0][1].field})"
    if figures.acceptance is None and figures.no_detail:
        line = f"{figures.where}: {NO_DETAIL}; {line}"
    return line, tuple(series)
