"""The host agent's router part (standard library only): out of the router, drain, hold, back in.

A rollout (:mod:`specconsole.actions.rollout.run`) gives the agent's plan a ``router`` section::

    {"url": ROUTER, "worker_url": URL the router knows this replica by, "metrics_url": its /metrics,
     "drain_timeout_s": S, "hold": true, "verdict_path": WORKDIR/verdict}

Then the agent, on the host, owns the replica's place in the router:

1. after taking the deploy lock it removes the replica (``GET /workers`` for its id, ``DELETE
   /workers/{id}``, until the router no longer lists it) and waits until ``sglang:num_running_reqs``
   on its ``/metrics`` is 0 (at most ``drain_timeout_s``; past that it goes on and says so);
2. the deploy runs as always (write, restart, health, verify, smoke; rollback on failure);
3. a deployed replica is *held* out of the router for the console's quality gate: the console
   writes ``promote`` or ``rollback REASON`` into ``verdict_path``; ``rollback`` restores the
   previous config (health-gated). If no verdict comes within ``drain_timeout_s`` (the console
   crashed, its SSH connection dropped) the agent stops waiting;
4. in every case it puts the replica back (``POST /workers``, until the router lists it
   healthy) unless the replica does not serve at all (a failed rollback), and ends with a second
   ``final`` event: ``in_router`` or ``out_of_router``.

So no replica stays out of the router longer than the drain timeout after the console is gone.
A rollout's roll-back of a replica already promoted is an agent run with ``restore_from`` (the
promoting deploy's work folder): take out, drain, restore that deploy's backup, health, back in.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING or __package__:
    from specconsole.remote.deploy_agent_watch import http_request
else:  # on the host, beside agent.py
    from deploy_agent_watch import http_request

if TYPE_CHECKING:
    from specconsole.remote.deploy_agent import Agent

HEARTBEAT_S = 0.5
#: how long the router may take to process a queued worker removal or addition
ROUTER_JOB_S = 60.0


def running_requests(metrics: str) -> float | None:
    """The sum of ``sglang:num_running_reqs`` (and the queue) in a /metrics text; None if absent."""
    total, seen = 0.0, False
    for line in metrics.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in ("sglang:num_running_reqs", "sglang:num_queue_reqs"):
            try:
                total += float(line.rsplit(" ", 1)[1])
                seen = True
            except (IndexError, ValueError):
                continue
    return total if seen else None


class RouterLink:
    def __init__(self, agent: Agent, cfg: dict[str, Any]) -> None:
        self.agent = agent
        self.cfg = cfg
        self.url = str(cfg["url"]).rstrip("/")
        self.worker = str(cfg["worker_url"]).rstrip("/")
        self.removed = False
        self.verdict = ""  # what the hold ended with: promote, rollback ..., timeout (the final event says it)

    # -- the router's worker API ------------------------------------------------------------
    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, str]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status, r.read(1 << 20).decode("utf-8", "replace")
        except urllib.error.HTTPError as err:
            return err.code, err.read(4096).decode("utf-8", "replace")
        except OSError as err:
            return 0, f"{type(err).__name__}: {err}"

    def listed(self) -> list[dict[str, Any]] | None:
        """This replica's entries in ``GET /workers`` (None: the router did not answer)."""
        status, text = self._call("GET", "/workers")
        if status != 200:
            return None
        try:
            workers = json.loads(text).get("workers", [])
        except (ValueError, AttributeError):
            return None
        return [w for w in workers if isinstance(w, dict) and str(w.get("url", "")).rstrip("/") == self.worker]

    def _until(self, what: str, done: Any, timeout: float) -> bool:
        start = next_beat = time.monotonic()
        while time.monotonic() - start < timeout:
            ok, seen = done()
            if ok:
                return True
            if time.monotonic() >= next_beat:
                self.agent.emit("heartbeat", f"{what} for {time.monotonic() - start:.1f}s; {seen}")
                next_beat = time.monotonic() + HEARTBEAT_S
            time.sleep(0.1)
        return False

    # -- 1: out of the router, drained ----------------------------------------------------------
    def remove_and_drain(self, failed: type[Exception]) -> None:
        a = self.agent
        a.begin("leave the router", f"removing {self.worker} from the router {self.url}")
        entries = self.listed()
        if entries is None:
            raise failed(f"the router {self.url} does not answer GET /workers; nothing was changed")
        if not entries:
            a.emit("warning", f"the router does not list {self.worker}; nothing to remove")
        for w in entries:
            wid = urllib.parse.quote(str(w.get("id", "")))
            a.emit("command", f"DELETE {self.url}/workers/{wid}", command=f"DELETE {self.url}/workers/{wid}")
            status, text = self._call("DELETE", f"/workers/{wid}")
            a.emit("result", f"HTTP {status}: {text[:120]}", exit_status=0 if status in (200, 202) else 1)
            if status not in (200, 202, 404):
                raise failed(f"the router refused to remove {self.worker}: HTTP {status} {text[:160]}")
        self.removed = True

        def gone() -> tuple[bool, str]:
            now = self.listed()
            return now == [], "the router still lists it" if now else "the router does not answer"

        if not self._until("waiting for the router to drop the worker", gone, ROUTER_JOB_S):
            raise failed(f"the router still lists {self.worker} {ROUTER_JOB_S:g}s after its removal")
        a.emit("info", f"the router no longer sends requests to {self.worker}")
        self.drain()

    def drain(self) -> None:
        a = self.agent
        limit = float(self.cfg.get("drain_timeout_s", 60))
        url = self.cfg["metrics_url"]
        a.begin("drain", f"waiting for the running requests on {self.worker} to finish (up to {limit:g}s)")
        last: list[float | None] = [None]

        def idle() -> tuple[bool, str]:
            status, text = http_request(url, None, 3)
            if status != 200:
                return False, f"GET {url}: {status or text}"
            last[0] = running_requests(text)
            if last[0] is None:
                return True, "no sglang:num_running_reqs in /metrics"
            return last[0] == 0, f"{last[0]:g} request(s) running or queued"

        start = time.monotonic()
        if self._until("draining", idle, limit):
            a.emit("info", f"drained in {time.monotonic() - start:.1f}s: no request running")
        else:
            a.emit("warning", f"still {last[0]} request(s) after the drain timeout {limit:g}s; going on")

    # -- 3 and 4: held for the gate, then back in ---------------------------------------------------
    def finish(self, rc: int, outcome: str) -> int:
        """After the deploy's final event: hold for the verdict (a deployed replica), then put it
        back unless it does not serve. Returns the exit status."""
        if not self.removed:
            return rc
        a = self.agent
        if outcome == "deployed" and self.cfg.get("hold"):
            verdict = self.verdict = self.wait_verdict()
            if verdict.startswith("rollback"):
                reason = verdict[len("rollback"):].strip() or "the rollout's quality gate failed"
                existed = os.path.exists(os.path.join(a.plan["workdir"], "backup.conf"))
                rc = a.rollback(reason, existed, journal=False)
                outcome = "rolled_back" if rc == 1 else "rollback_failed"
        if outcome == "rollback_failed":
            a.step = ""
            a.emit("final", f"{self.worker} stays out of the router {self.url}: it does not serve "
                   "(the rollback failed)", outcome="out_of_router", phase="router")
            return rc
        self.put_back()
        return rc

    def wait_verdict(self) -> str:
        a = self.agent
        limit = float(self.cfg.get("drain_timeout_s", 60))
        path = self.cfg["verdict_path"]
        a.begin("hold", f"held out of the router for the quality gate (up to {limit:g}s; then back in as is)")
        got: list[str] = [""]

        def arrived() -> tuple[bool, str]:
            try:
                with open(path, encoding="utf-8") as f:
                    got[0] = f.read().strip()
            except OSError:
                return False, "no verdict yet"
            return bool(got[0]), "verdict written"

        if self._until("waiting for the gate's verdict", arrived, limit):
            a.emit("info", f"verdict: {got[0]}")
            return got[0]
        a.emit("warning", f"no verdict within {limit:g}s (the console is gone?); putting the replica back as it is")
        return "timeout"

    def put_back(self) -> None:
        a = self.agent
        a.begin("rejoin the router", f"adding {self.worker} back to the router {self.url}")
        line = f"POST {self.url}/workers {json.dumps({'url': self.worker})}"
        deadline = time.monotonic() + ROUTER_JOB_S
        while True:
            a.emit("command", line, command=line)
            status, text = self._call("POST", "/workers", {"url": self.worker})
            a.emit("result", f"HTTP {status}: {text[:120]}", exit_status=0 if status in (200, 201, 202) else 1)
            if status in (200, 201, 202) or time.monotonic() > deadline:
                break
            time.sleep(1.0)

        def healthy() -> tuple[bool, str]:
            now = self.listed()
            ok = bool(now) and all(w.get("is_healthy", True) for w in now or [])
            return ok, "listed, not yet healthy" if now else "not listed yet"

        if self._until("waiting for the router to list the worker healthy", healthy, ROUTER_JOB_S):
            a.step = ""
            a.emit("final", f"{self.worker} is back in the router {self.url}", outcome="in_router", phase="router",
                   verdict=self.verdict)
        else:
            a.step = ""
            a.emit("final", f"{self.worker} is NOT back in the router {self.url} after {ROUTER_JOB_S:g}s (last: "
                   f"HTTP {status}); add it: curl -X POST {self.url}/workers -d '{{\"url\": \"{self.worker}\"}}'",
                   outcome="out_of_router", phase="router", verdict=self.verdict)
