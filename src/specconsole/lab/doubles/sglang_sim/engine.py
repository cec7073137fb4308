"""The simulated engine: request slots per DP rank, the queue, counters and the gauges SGLang reports."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from specconsole.lab.doubles.sglang_sim.acceptance import Plan, SpecModel
from specconsole.lab.doubles.sglang_sim.metrics import _Prom
from specconsole.lab.doubles.sglang_sim.resolve import Resolved

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
