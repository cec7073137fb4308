"""``/metrics``: the Prometheus text of SGLang's collectors, produced by prometheus_client."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specconsole.lab.doubles.sglang_sim.acceptance import Plan
    from specconsole.lab.doubles.sglang_sim.engine import Engine


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
