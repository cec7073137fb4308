"""SGLang's Prometheus ``/metrics`` page, aggregated over label sets."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SglangMetrics:
    """One ``/metrics`` scrape, aggregated over label sets (DP/TP ranks, models).

    Sums: throughput, running/queued requests, counters. Means: accept length and rate.
    Max: token_usage (the fullest rank is the bottleneck). ``tokens_per_s`` is the
    ``gen_throughput`` gauge, or, when the server has no such gauge, the rate of
    ``generation_tokens_total`` since the previous scrape (None on the first one).
    """

    gen_throughput: float | None
    tokens_per_s: float | None
    running_reqs: int | None
    queued_reqs: int | None
    spec_accept_length: float | None
    generation_tokens_total: float | None
    token_usage: float | None
    spec_accept_rate: float | None = None
    spec_verify_calls_total: float | None = None
    prompt_tokens_total: float | None = None
    num_requests_total: float | None = None



_SUM = {
    "sglang:gen_throughput": "gen_throughput",
    "sglang:num_running_reqs": "running_reqs",
    "sglang:num_queue_reqs": "queued_reqs",
    "sglang:generation_tokens_total": "generation_tokens_total",
    "sglang:prompt_tokens_total": "prompt_tokens_total",
    "sglang:spec_verify_calls_total": "spec_verify_calls_total",
    "sglang:num_requests_total": "num_requests_total",
}
_MEAN = {
    "sglang:spec_accept_length": "spec_accept_length",
    "sglang:spec_accept_rate": "spec_accept_rate",
}
_MAX = {"sglang:token_usage": "token_usage"}


_WANTED = {**_SUM, **_MEAN, **_MAX}
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def _samples(text: str) -> list[tuple[str, float]]:
    """The wanted ``(name, value)`` samples of a Prometheus text page, in order.

    A line-by-line reader (prometheus_client's parser cost 10 ms a page, at 1 Hz per host):
    every sample line must read ``name[{labels}] value [timestamp]``; only the wanted names'
    values are converted. Raises ValueError, naming the line, on anything else.
    """
    out: list[tuple[str, float]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] == "#":
            continue
        brace = line.find("{")
        if brace >= 0:
            close = line.rfind("}")
            name, rest = line[:brace], line[close + 1:].split() if close > brace else []
        else:
            name, _, tail = line.partition(" ")
            rest = tail.split()
        if not rest or len(rest) > 2 or _NAME.fullmatch(name) is None:
            raise ValueError(f"line {number} is not `name{{labels}} value`: {line[:80]!r}")
        if name in _WANTED:
            out.append((name, float(rest[0])))
    return out


def parse_metrics(text: str) -> dict[str, float]:
    """Aggregate the SGLang series of a Prometheus text page (see :class:`SglangMetrics`).

    Raises ValueError on text that is not the Prometheus format.
    """
    sums: dict[str, float] = {}
    means: dict[str, list[float]] = {}
    maxes: dict[str, float] = {}
    for name, value in _samples(text):
        if math.isnan(value):
            continue
        if name in _SUM:
            key = _SUM[name]
            sums[key] = sums.get(key, 0.0) + value
        elif name in _MEAN:
            means.setdefault(_MEAN[name], []).append(value)
        else:
            key = _MAX[name]
            maxes[key] = max(maxes.get(key, value), value)
    out = dict(sums)
    out.update({k: sum(v) / len(v) for k, v in means.items() if v})
    out.update(maxes)
    return out
