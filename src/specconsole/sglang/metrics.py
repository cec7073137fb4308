"""SGLang's Prometheus ``/metrics`` page, aggregated over label sets."""

from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


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


def parse_metrics(text: str) -> dict[str, float]:
    """Aggregate the SGLang series of a Prometheus text page (see :class:`SglangMetrics`).

    Raises ValueError on text that is not the Prometheus format.
    """
    sums: dict[str, float] = {}
    means: dict[str, list[float]] = {}
    maxes: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, value = sample.name, sample.value
            if value is None or math.isnan(value):
                continue
            if name in _SUM:
                key = _SUM[name]
                sums[key] = sums.get(key, 0.0) + value
            elif name in _MEAN:
                means.setdefault(_MEAN[name], []).append(value)
            elif name in _MAX:
                key = _MAX[name]
                maxes[key] = max(maxes.get(key, value), value)
    out = dict(sums)
    out.update({k: sum(v) / len(v) for k, v in means.items() if v})
    out.update(maxes)
    return out

