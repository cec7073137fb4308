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

The router's own faults, each said in one line and ended safely:

- ``/workers`` answering 5xx or not at all: every call is retried (heartbeats say what it last
  answered) for ``router_wait_s`` (default 30 s); a removal that never gets through ends the run
  before anything changed (the replica stays in the router on its old config);
- a worker the router already dropped: said, deployed out of the router, and put back at the end;
- the router restarted while the replica is out: a restarted router re-adds the workers on its
  command line once they answer /health, the replica being changed among them. A guard thread
  (:meth:`RouterLink.keep_out`) reads ``GET /workers`` every second while the replica is out and
  takes it out again at once, saying so; it says when the router stops and starts answering;
  putting back a replica the router lists already (healthy) adds it no second time.

The deploy lock is held until the replica is back (the hold and a rollback by verdict included):
no other deploy can start on the host in between.

A rollout's roll-back of a replica already promoted is an agent run with ``restore_from`` (the
promoting deploy's work folder): take out, drain, restore that deploy's backup, health, back in.
"""

from __future__ import annotations

import json
import os
import threading
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
#: how long a router that answers /workers with 5xx (or not at all) is retried before giving up
ROUTER_WAIT_S = 30.0
#: how often the guard reads the router's workers while the replica is out
GUARD_S = 1.0
#: how long a worker the router took a removal of may still be listed healthy before it is removed
#: again (the router finishes a queued removal meanwhile; later, the removal was lost)
REMOVAL_GRACE_S = 5.0


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
        self.problem = ""  # what the router's last failed GET /workers answered
        self.wait_s = float(cfg.get("router_wait_s", ROUTER_WAIT_S))
        self._guard: threading.Thread | None = None
        self._guarding = threading.Event()
        self._calls = threading.Lock()  # the guard and the main thread share the router's API

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
        """This replica's entries in ``GET /workers`` (None: the router did not answer with a list;
        :attr:`problem` says what it answered)."""
        with self._calls:
            status, text = self._call("GET", "/workers")
        if status != 200:
            self.problem = (f"HTTP {status}: {text.strip()[:100]}" if status else text[:120]) or "no answer"
            return None
        try:
            workers = json.loads(text).get("workers", [])
        except (ValueError, AttributeError):
            self.problem = f"not a worker list: {text.strip()[:80]!r}"
            return None
        return [w for w in workers if isinstance(w, dict) and str(w.get("url", "")).rstrip("/") == self.worker]

    def listed_waiting(self) -> list[dict[str, Any]] | None:
        """:meth:`listed`, retried with heartbeats for ``router_wait_s`` while the router answers
        5xx or nothing (None: it never did)."""
        got: list[list[dict[str, Any]] | None] = [None]

        def answered() -> tuple[bool, str]:
            got[0] = self.listed()
            return got[0] is not None, f"GET {self.url}/workers answered {self.problem}; retrying"

        first = self.listed()
        if first is not None:
            return first
        self.agent.emit("warning", f"the router {self.url} answered GET /workers with {self.problem}; retrying "
                        f"for up to {self.wait_s:g}s")
        if self._until("waiting for the router's worker list", answered, self.wait_s):
            self.agent.emit("info", f"the router {self.url} answers GET /workers again")
            return got[0]
        return None

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
        entries = self.listed_waiting()
        if entries is None:
            raise failed(f"the router {self.url} answered GET /workers with {self.problem} for {self.wait_s:g}s; "
                         f"{self.worker} stays in the router on its old config (nothing was changed)")
        if not entries:
            a.emit("warning", f"the router does not list {self.worker} (it dropped it already); deploying it out of "
                   "the router, and adding it back after")
        self.delete(entries, failed)
        self.removed = True

        again = [time.monotonic() + REMOVAL_GRACE_S]

        def gone() -> tuple[bool, str]:
            now = self.listed()
            live = [w for w in now or [] if w.get("is_healthy", True)]
            if live and time.monotonic() > again[0]:  # the removal was lost (a router restarted meanwhile)
                a.emit("warning", f"the router still lists {self.worker} healthy {REMOVAL_GRACE_S:g}s after its "
                       "removal; removing it again")
                self.delete(live, None)
                again[0] = time.monotonic() + REMOVAL_GRACE_S
            if now is None:
                return False, f"the router answers {self.problem}"
            # smg lists a removed worker unhealthy (no requests) for a few seconds before it drops it
            return now == [], ("the router still lists it" if live else
                               "the router lists it unhealthy (its removal in progress)") if now else ""

        if not self._until("waiting for the router to drop the worker", gone, ROUTER_JOB_S):
            raise failed(f"the router still lists {self.worker} {ROUTER_JOB_S:g}s after its removal")
        a.emit("info", f"the router no longer sends requests to {self.worker}")
        self.keep_out()
        self.drain()

    def delete(self, entries: list[dict[str, Any]], failed: type[Exception] | None) -> None:
        """``DELETE /workers/{id}`` for each entry, retried while the router answers 5xx or nothing
        (``failed``: raise it when the router never took the removal; None: say so and go on)."""
        a = self.agent
        for w in entries:
            wid = urllib.parse.quote(str(w.get("id", "")))
            line = f"DELETE {self.url}/workers/{wid}"
            deadline = time.monotonic() + self.wait_s
            while True:
                a.emit("command", line, command=line)
                with self._calls:
                    status, text = self._call("DELETE", f"/workers/{wid}")
                a.emit("result", f"HTTP {status}: {text[:120]}", exit_status=0 if status in (200, 202) else 1)
                if status in (200, 202, 404):
                    break
                if (status and status < 500) or time.monotonic() > deadline:
                    if failed is not None:
                        raise failed(f"the router refused to remove {self.worker}: HTTP {status} {text[:160]}; "
                                     "nothing was changed")
                    a.emit("warning", f"the router did not take the removal of {self.worker} (HTTP {status})")
                    break
                time.sleep(HEARTBEAT_S)

    # -- while out: the guard -----------------------------------------------------------------
    def keep_out(self) -> None:
        """Start the guard: while the replica is out, a router that lists it again (restarted with it on
        its command line) has it taken out again at once; a router that stops answering is said."""
        if self._guard is not None:
            return
        self._guarding.set()
        self._guard = threading.Thread(target=self._guard_loop, daemon=True)
        self._guard.start()

    def stop_guard(self) -> None:
        self._guarding.clear()
        if self._guard is not None:
            self._guard.join(10)
            self._guard = None

    def _guard_loop(self) -> None:
        a = self.agent
        down_since: float | None = None
        removed_at: dict[str, float] = {}  # the worker ids this guard removed, and when
        while self._guarding.is_set():
            now = self.listed()
            if not self._guarding.is_set():
                break
            if now is None and down_since is None:
                down_since = time.monotonic()
                a.emit("warning", f"the router {self.url} stopped answering GET /workers ({self.problem}); "
                       f"{self.worker} stays out; watching for its return")
            elif now is not None and down_since is not None:
                a.emit("info", f"the router {self.url} answers again after {time.monotonic() - down_since:.1f}s "
                       "(restarted?)")
                down_since = None
            live = [w for w in now or [] if w.get("is_healthy", True)]  # an unhealthy entry gets no requests
            # one just removed may be listed until the router has finished its queued removal
            live = [w for w in live if time.monotonic() - removed_at.get(str(w.get("id", "")), -1e9) > REMOVAL_GRACE_S]
            if live:
                a.emit("warning", f"the router lists {self.worker} again while it is out (a restarted router "
                       "re-adds the workers on its command line); taking it out again")
                self.delete(live, None)
                removed_at.update((str(w.get("id", "")), time.monotonic()) for w in live)
            self._guarding.wait(GUARD_S)

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
        a = self.agent
        if not self.removed:  # never taken out (the lock or the router refused): it stays where it was
            self.release()
            a.emit("final", f"{self.worker} was not taken out of the router {self.url}; nothing to put back",
                   outcome="in_router", phase="router", verdict="")
            return rc
        if outcome == "deployed" and self.cfg.get("hold"):
            verdict = self.verdict = self.wait_verdict()
            if verdict.startswith("rollback"):
                reason = verdict[len("rollback"):].strip() or "the rollout's quality gate failed"
                existed = os.path.exists(os.path.join(a.plan["workdir"], "backup.conf"))
                rc = a.rollback(reason, existed, journal=False)
                outcome = "rolled_back" if rc == 1 else "rollback_failed"
        self.stop_guard()
        if outcome == "rollback_failed":
            self.release()
            a.emit("final", f"{self.worker} stays out of the router {self.url}: it does not serve "
                   "(the rollback failed)", outcome="out_of_router", phase="router")
            return rc
        self.put_back()
        return rc

    def release(self) -> None:
        """Before the router's final event: the deploy lock, held since the deploy began, goes now
        (a console that follows the final event with another deploy of this host finds it free)."""
        a = self.agent
        a.step = ""
        if a.locked:
            a.unlock()
            a.emit("info", f"released the lock {a.plan['lock_path']}")

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
        status = 0
        while True:
            now = self.listed()
            if now and all(w.get("is_healthy", True) for w in now):
                a.emit("info", f"the router lists {self.worker} already, healthy (a restarted router re-added it); "
                       "not adding it twice")
                status = 200
                break
            a.emit("command", line, command=line)
            with self._calls:
                status, text = self._call("POST", "/workers", {"url": self.worker})
            a.emit("result", f"HTTP {status}: {text[:120]}", exit_status=0 if status in (200, 201, 202) else 1)
            if status in (200, 201, 202) or time.monotonic() > deadline:
                break
            a.emit("warning", f"the router did not take {self.worker} back (HTTP {status or text[:80]}); "
                   f"retrying for {deadline - time.monotonic():.0f}s more")
            time.sleep(1.0)

        def healthy() -> tuple[bool, str]:
            now = self.listed()
            ok = bool(now) and all(w.get("is_healthy", True) for w in now or [])
            return ok, "listed, not yet healthy" if now else "not listed yet"

        if self._until("waiting for the router to list the worker healthy", healthy, ROUTER_JOB_S):
            self.release()
            a.emit("final", f"{self.worker} is back in the router {self.url}", outcome="in_router", phase="router",
                   verdict=self.verdict)
        else:
            self.release()
            a.emit("final", f"{self.worker} is NOT back in the router {self.url} after {ROUTER_JOB_S:g}s (last: "
                   f"HTTP {status}); add it: curl -X POST {self.url}/workers -d '{{\"url\": \"{self.worker}\"}}'",
                   outcome="out_of_router", phase="router", verdict=self.verdict)
