"""A bounded load generator: requests through the router for as long as a rollout runs.

``with RouterLoad(router_url, concurrency=4) as load: ...; load.stats()`` keeps ``concurrency``
clients each sending ``POST /generate`` (a few tokens, temperature 0) one after the other, at
most ``max_requests`` in all (bounded), until the block ends; every answer other than a 200
with ``meta_info`` counts as failed, with its reason kept. Used by the rollout tests and
``bench/rollout.py``: a rollout must drop none.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from types import TracebackType

import httpx


@dataclass
class LoadStats:
    sent: int = 0
    ok: int = 0
    failed: int = 0
    failures: list[str] = field(default_factory=list)
    longest_s: float = 0.0

    def line(self) -> str:
        why = f" (first: {self.failures[0]})" if self.failures else ""
        return f"requests sent {self.sent}, ok {self.ok}, failed {self.failed}{why}; slowest {self.longest_s:.2f}s"


class RouterLoad:
    def __init__(self, router_url: str, *, concurrency: int = 4, max_new_tokens: int = 16,
                 max_requests: int = 20_000, pause_s: float = 0.02, timeout_s: float = 60.0) -> None:
        self.url = router_url.rstrip("/") + "/generate"
        self.concurrency = concurrency
        self.max_new_tokens = max_new_tokens
        self.max_requests = max_requests
        self.pause_s = pause_s
        self.timeout_s = timeout_s
        self._stats = LoadStats()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def stats(self) -> LoadStats:
        with self._lock:
            return LoadStats(self._stats.sent, self._stats.ok, self._stats.failed, list(self._stats.failures),
                             self._stats.longest_s)

    def start(self) -> RouterLoad:
        for i in range(self.concurrency):
            t = threading.Thread(target=self._client, args=(i,), name=f"router-load-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> LoadStats:
        self._stop.set()
        for t in self._threads:
            t.join(self.timeout_s + 5)
        return self.stats()

    def _take(self) -> bool:
        with self._lock:
            if self._stats.sent >= self.max_requests:
                return False
            self._stats.sent += 1
            return True

    def _client(self, index: int) -> None:
        n = 0
        with httpx.Client(timeout=self.timeout_s) as client:
            while not self._stop.is_set() and self._take():
                n += 1
                body = {"text": f"load {index}-{n}: def add(a, b):", "sampling_params": {
                    "max_new_tokens": self.max_new_tokens, "temperature": 0}}
                t0 = time.monotonic()
                problem = None
                try:
                    resp = client.post(self.url, json=body)
                    if resp.status_code != 200 or "meta_info" not in resp.json():
                        problem = f"HTTP {resp.status_code}: {resp.text[:120]}"
                except (httpx.HTTPError, ValueError) as err:
                    problem = f"{type(err).__name__}: {err}"
                took = time.monotonic() - t0
                with self._lock:
                    self._stats.longest_s = max(self._stats.longest_s, took)
                    if problem is None:
                        self._stats.ok += 1
                    else:
                        self._stats.failed += 1
                        if len(self._stats.failures) < 10:
                            self._stats.failures.append(problem)
                self._stop.wait(self.pause_s)

    def __enter__(self) -> RouterLoad:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
