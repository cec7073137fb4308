"""The host side of a deploy: one supervised step that ends on the old config or the new one.

The console copies this file (standard library only) and a plan JSON to the serving host and
starts it detached (``setsid nohup``), so the write-restart-verify-rollback sequence does not
depend on the operator's SSH connection. It appends one JSON event per line to its progress
file; the console follows that file and, after a dropped connection, re-attaches to it.

Sequence: lock -> back up the deploy drop-in -> write the new drop-in atomically ->
daemon-reload -> restart -> wait for /health (following the journal) -> check /server_info
-> smoke generation. Any failure after the write restores the backup, restarts, waits for
health, and says both what failed and that the old config serves again.

Every wait says something at least every HEARTBEAT_S: the restart and the health wait stream
the unit's journal (``journalctl -f``) and heartbeat with the unit's state and the last line
seen. A new config that crashes at start-up is rolled back at once, also under
``Restart=on-failure`` (the crash is seen in NRestarts, a changed MainPID, the state or
systemd's "Main process exited" journal line), not after the health timeout. Every HTTP
request has a total deadline. Only one agent runs per deploy (an flock on ``agent.run``),
so the console may start it again after a dropped connection. The agent keeps the last
KEEP_WORKDIRS deploy folders under ``.specconsole/`` and removes older ones.

The agent is three files, uploaded together into the deploy's work folder: this one (as
``agent.py``), :mod:`specconsole.remote.deploy_agent_watch` and
:mod:`specconsole.remote.deploy_agent_router` (under their own names), which it imports as
siblings there (a script's folder is on ``sys.path``) and from the package here. A rollout's plan
has a ``router`` section: the agent then also takes the replica out of the router and drains it
before the change, holds it for the gate's verdict and puts it back (deploy_agent_router).

Run: ``python3 agent.py PLAN.json PROGRESS.jsonl`` (with ``deploy_agent_watch.py`` beside it)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING or __package__:  # imported from the package (the console, the tests)
    from specconsole.remote.deploy_agent_router import RouterLink
    from specconsole.remote.deploy_agent_watch import Poller, UnitWatch, cursor_command, http_request, journal_cursor
else:  # run on the host as agent.py: its sibling files in the same work folder
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # also under -P / PYTHONSAFEPATH
    sys.dont_write_bytecode = True  # leave no __pycache__ (root's, under sudo) in the work folder
    from deploy_agent_router import RouterLink
    from deploy_agent_watch import Poller, UnitWatch, cursor_command, http_request, journal_cursor

HEARTBEAT_S = 0.5          #: the longest silence during any wait (the console promises <= 1 s)
KEEP_WORKDIRS = 5          #: deploy folders kept under UNIT.d/.specconsole/ (this one included)
ERROR_TAIL_CHARS = 300     #: how much of a failed command's output an error message quotes
WORKDIR_NAME = re.compile(r"^\d{8}-\d{6}-[0-9a-f]+$")


class Failed(Exception):
    """A step failed; the message says what and why."""


#: /server_info keys an SGLang build may report a setting under instead: builds from before the
#: window flag's rename report only ``speculative_dflash_draft_window_size``.
#: SGLang's per-request acceptance histogram in ``meta_info`` (0.5.23's name, then the earlier
#: releases'; same shape: steps by drafts accepted): the smoke line quotes it as the server gave it
HISTOGRAM_FIELDS = ("spec_correct_drafts_histogram", "spec_accept_histogram")
NO_DETAIL = "no per-request acceptance detail from this server"
SERVER_INFO_ALIASES = {"speculative_draft_window_size": ("speculative_dflash_draft_window_size",)}


def reported(info: dict[str, Any], key: str) -> Any:
    """``info[key]``, or its older name's value when this build reports only that."""
    if info.get(key) is None:
        for alias in SERVER_INFO_ALIASES.get(key, ()):
            if info.get(alias) is not None:
                return info[alias]
    return info.get(key)


def disagreements(info: dict[str, Any], expect: dict[str, Any]) -> list[str]:
    """The expected /server_info values the running server does not report."""
    wrong = []
    for key, want in expect.items():
        got = reported(info, key)
        accepted = want if isinstance(want, list) else [want]  # e.g. NEXTN reports as EAGLE
        if str(got) not in {str(w) for w in accepted}:
            wrong.append(f"{key}={got!r} (wanted {' or '.join(map(repr, accepted))})")
    return wrong


class Agent:
    def __init__(self, plan: dict[str, Any], progress_path: str) -> None:
        self.plan = plan
        self.progress = open(progress_path, "a", encoding="utf-8")  # noqa: SIM115
        self.seq = 0
        self.drafts = 0  # draft tokens per verify step, from the new server's /server_info
        self._emitting = threading.Lock()
        self.t0 = time.monotonic()
        self.step = ""
        self.locked = False
        self.outcome = ""  # the first final event's outcome
        #: a rollout's agent owns the replica's place in the router (deploy_agent_router)
        self.router: RouterLink | None = RouterLink(self, plan["router"]) if plan.get("router") else None

    # -- reporting ---------------------------------------------------------------------
    def emit(self, kind: str, message: str, **extra: Any) -> None:
        with self._emitting:  # the router link's guard thread speaks too
            self.seq += 1
            event = {"seq": self.seq, "t": round(time.monotonic() - self.t0, 3), "at": time.time(),
                     "kind": kind, "step": self.step, "message": message, **extra}
            self.progress.write(json.dumps(event) + "\n")
            self.progress.flush()   # readers see it at once; only the outcome waits for the disk
        if kind == "final":
            self.outcome = self.outcome or str(extra.get("outcome", ""))
            os.fsync(self.progress.fileno())

    def begin(self, step: str, message: str | None = None) -> None:
        self.step = step
        self.emit("step", message or step)

    def sh(self, argv: list[str], timeout: float = 120) -> None:
        """Run a command, with a heartbeat naming it while it runs (no journal)."""
        self.sh_watched(argv, None, timeout)

    # -- HTTP ----------------------------------------------------------------------------
    def http(self, url: str, body: dict[str, Any] | None = None, timeout: float = 5) -> tuple[int, str]:
        return http_request(url, body, timeout)

    def waiting(self, what: str, fn: Any) -> Any:
        """``fn()`` in a thread, with a heartbeat naming ``what`` every HEARTBEAT_S meanwhile."""
        out: list[Any] = []
        worker = threading.Thread(target=lambda: out.append(fn()), daemon=True)
        t = time.monotonic()
        worker.start()
        while worker.is_alive():
            worker.join(HEARTBEAT_S)
            if worker.is_alive():
                self.emit("heartbeat", f"{what}: waiting for {time.monotonic() - t:.1f}s")
        if not out:
            raise Failed(f"{what} failed")
        return out[0]

    def journal_tail(self, lines: int) -> list[str]:
        with contextlib.suppress(Exception):
            res = subprocess.run(["journalctl", "-u", self.plan["unit"], "-n", str(lines), "--no-pager"],
                                 capture_output=True, text=True, timeout=10)
            return [ln for ln in res.stdout.splitlines() if ln.strip()][-lines:]
        return []

    # -- watching the unit -------------------------------------------------------------------
    def watch_unit(self) -> UnitWatch:
        """A :class:`UnitWatch` whose journal follows from a cursor taken now (the command, its
        result and time reported, with heartbeats while it runs)."""
        import shlex

        line = shlex.join(cursor_command(self.plan["unit"]))
        self.emit("command", line, command=line)
        t = time.monotonic()
        status, cursor = self.waiting(line, lambda: journal_cursor(self.plan["unit"]))
        took = time.monotonic() - t
        said = f"cursor {cursor}" if cursor else "no cursor: the journal is followed from new lines only"
        exit_text = f"exit {status}" if status is not None else "exit status unknown (it did not run)"
        self.emit("result", f"{exit_text} in {took:.2f}s: {said}", command=line, exit_status=status,
                  took_s=round(took, 3))
        return UnitWatch(self.plan["unit"], cursor)

    def relay_journal(self, watch: UnitWatch) -> None:
        for line in watch.journal_lines():
            self.emit("info", f"journal: {line[-160:]}", journal=True)

    def heartbeat(self, watch: UnitWatch | None, what: str, started: float, seen: str = "") -> None:
        state = watch.describe() if watch is not None else "no output yet"
        self.emit("heartbeat", f"{what} for {time.monotonic() - started:.1f}s; {seen}{state}")

    def sh_watched(self, argv: list[str], watch: UnitWatch | None, timeout: float) -> None:
        """Run a command with a heartbeat every HEARTBEAT_S while it runs; with a ``watch``
        (``systemctl restart``), the unit's journal lines are streamed meanwhile."""
        import shlex

        line = shlex.join(argv)
        self.emit("command", line, command=line)
        t = time.monotonic()
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise Failed(f"`{argv[0]}` not found on this host") from None
        outs: list[str] = []
        reader = threading.Thread(target=lambda: outs.extend(proc.communicate()), daemon=True)
        reader.start()
        next_beat = t + HEARTBEAT_S
        while reader.is_alive():
            reader.join(0.1)
            if watch is not None:
                self.relay_journal(watch)
            now = time.monotonic()
            if now - t > timeout:
                proc.kill()
                reader.join(5)
                raise Failed(f"`{line}` did not finish within {timeout:g}s")
            if now >= next_beat and reader.is_alive():
                self.heartbeat(watch, f"`{line}` running", t)
                next_beat = now + HEARTBEAT_S
        if watch is not None:
            self.relay_journal(watch)
        took = time.monotonic() - t
        stdout, stderr = [*outs, "", ""][:2]
        out = ((stdout or "").strip() or (stderr or "").strip()).splitlines()
        first = f": {out[0][:120]}" if out else ""
        self.emit("result", f"exit {proc.returncode} in {took:.2f}s{first}", command=line,
                  exit_status=proc.returncode, took_s=round(took, 3))
        if proc.returncode != 0:
            raise Failed(f"`{line}` exited {proc.returncode}: "
                         f"{tail_text((stderr or stdout or '').strip(), ERROR_TAIL_CHARS)}")

    def wait_healthy(self, timeout: float, watch: UnitWatch) -> None:
        url = self.plan["health_url"]
        self.emit("info", f"waiting up to {timeout:g}s for GET {url} to answer 200")
        start = time.monotonic()
        next_beat = start + HEARTBEAT_S
        status, text = 0, ""
        checker = Poller(lambda: self.http(url, timeout=2))
        try:
            while time.monotonic() - start < timeout:
                got = checker.result(0.1)
                if got is not None:
                    status, text = got
                    if status == 200:
                        self.relay_journal(watch)
                        self.emit("info", f"/health answered 200 after {time.monotonic() - start:.1f}s")
                        return
                self.relay_journal(watch)
                crash = watch.crashed()
                if crash:
                    raise Failed(f"{self.plan['unit']} crashed during start-up ({crash})")
                now = time.monotonic()
                if now >= next_beat:
                    seen = f"HTTP {status}" if status else (text or "no answer yet")
                    self.heartbeat(watch, f"waiting for /health (last: {seen})", start)
                    next_beat = now + HEARTBEAT_S
        finally:
            checker.stop()
        seen = f"HTTP {status}" if status else text
        raise Failed(f"/health did not answer 200 within {timeout:g}s (last: {seen})")

    # -- the sequence ----------------------------------------------------------------------
    def run(self) -> int:
        p = self.plan
        self.emit("info", f"deploy {p['id']} started on the host (pid {os.getpid()})", pid=os.getpid())
        if not self.lock():
            return 1
        written = False
        existed = True
        try:
            if self.router is not None:
                self.router.remove_and_drain(Failed)
            if p.get("restore_from"):  # a rollout halted: back to what the deploy in restore_from replaced
                return self.restore()
            self.begin("back up", f"backing up {p['dropin_path']}")
            backup = os.path.join(p["workdir"], "backup.conf")
            existed = os.path.exists(p["dropin_path"])
            if existed:
                with open(p["dropin_path"], encoding="utf-8") as src, open(backup, "w", encoding="utf-8") as dst:
                    dst.write(src.read())
                self.emit("info", f"saved the previous drop-in to {backup}")
            else:
                self.emit("info", "no previous deploy drop-in: rollback removes the new one")

            self.begin("write the unit", f"writing {p['dropin_path']} (temp file + rename)")
            self.write_atomic(p["dropin_path"], p["dropin_text"])
            written = True
            self.emit("info", f"wrote {len(p['dropin_text'])} bytes")
            self.begin("daemon-reload")
            self.sh(["systemctl", "daemon-reload"])
            self.begin("restart", f"restarting {p['unit']} (following its journal)")
            with self.watch_unit() as watch:
                self.sh_watched(["systemctl", "restart", "--", p["unit"]], watch, p.get("restart_timeout_s", 120))
                watch.restarted()
                self.begin("wait for health")
                self.wait_healthy(p["health_timeout_s"], watch)
            self.begin("verify", "checking /server_info reports the new settings")
            self.verify()
            self.begin("smoke test", "one generation through /generate")
            self.smoke()
            self.step = ""
            self.emit("final", f"deployed: {p['summary']}", outcome="deployed")
            return 0
        except Exception as err:  # Failed, or anything unexpected: never leave the new unit half-tried
            reason = str(err) if isinstance(err, Failed) else f"agent error {err!r}"
            self.emit("error", reason)
            if not written:
                self.emit("final", f"deploy failed before anything changed: {reason}", outcome="unchanged",
                          reason=reason)
                return 1
            return self.rollback(reason, existed)
        finally:
            if self.router is None or not self.router.removed:
                self.unlock()   # else held through the hold, a rollback by verdict and the rejoin (main)
            self.prune_workdirs()

    def prune_workdirs(self) -> None:
        """Keep the newest KEEP_WORKDIRS deploy folders (ids sort by time), remove the rest."""
        mine = os.path.abspath(self.plan["workdir"])
        parent = os.path.dirname(mine)
        with contextlib.suppress(OSError):
            names = sorted(n for n in os.listdir(parent) if WORKDIR_NAME.match(n)
                           and os.path.isdir(os.path.join(parent, n)))
            old = [n for n in names[:-KEEP_WORKDIRS] if os.path.join(parent, n) != mine]
            for name in old:
                shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
            if old:
                self.emit("info", f"removed {len(old)} old deploy folder(s) from {parent} "
                          f"(keeping the last {KEEP_WORKDIRS})")

    def verify(self) -> None:
        url = self.plan["server_info_url"]
        status, text = self.waiting(f"GET {url}", lambda: self.http(url))
        if status != 200:
            raise Failed(f"/server_info answered {status or text}")
        info = json.loads(text)
        drafts = info.get("speculative_num_draft_tokens") if isinstance(info, dict) else None
        self.drafts = drafts - 1 if isinstance(drafts, int) and drafts > 1 else 0
        wrong = disagreements(info, self.plan["expect"])
        if wrong:
            raise Failed("the running server disagrees with the new config: " + ", ".join(wrong))
        self.emit("info", "server_info: " + ", ".join(f"{k}={reported(info, k)}" for k in self.plan["expect"])
                  + f", version {info.get('version')}")

    def smoke(self) -> None:
        s = self.plan["smoke"]
        t = time.monotonic()
        body = {"text": s["text"], "sampling_params": {"max_new_tokens": s["max_new_tokens"], "temperature": 0}}
        status, text = self.waiting(f"POST {self.plan['generate_url']} ({s['max_new_tokens']} tokens)",
                                    lambda: self.http(self.plan["generate_url"], body, timeout=s.get("timeout_s", 60)))
        took = time.monotonic() - t
        if status != 200:
            raise Failed(f"smoke generation answered {status or text}: {text[:200]}")
        meta = json.loads(text).get("meta_info", {})
        tokens = meta.get("completion_tokens") or 0
        if tokens <= 0:
            raise Failed("smoke generation returned no tokens")
        latency = meta.get("e2e_latency") or took
        verify = meta.get("spec_verify_ct")
        accept = (tokens / verify) if verify else 1.0
        extra: dict[str, Any] = {}
        detail = ""
        found = next(((name, meta[name]) for name in HISTOGRAM_FIELDS if isinstance(meta.get(name), list)
                      and meta[name] and all(isinstance(n, int) and n >= 0 for n in meta[name])), None)
        if found is not None:
            extra = {"accept_histogram": found[1], "histogram_field": found[0], "drafts": self.drafts}
            detail = (f"; accepted drafts per verify step [{', '.join(map(str, found[1]))}] "
                      f"({found[0]}, {sum(found[1])} steps)")
        elif verify:
            detail = f"; {NO_DETAIL}"
        self.emit("info", f"smoke: {tokens} tokens in {latency:.2f}s = {tokens / latency:.1f} tok/s, "
                  f"acceptance length {accept:.2f}{detail}", tokens_per_s=tokens / latency, accept_length=accept,
                  **extra)

    def restore(self) -> int:
        """Roll back a deploy that succeeded earlier (its work folder ``restore_from``): its backup
        (or no drop-in, if it had none) goes back, health-gated."""
        p = self.plan
        backup = os.path.join(p["restore_from"], "backup.conf")
        existed = os.path.exists(backup)
        if existed:
            shutil.copyfile(backup, os.path.join(p["workdir"], "backup.conf"))
        return self.rollback(p.get("restore_reason") or "the rollout was halted", existed, journal=False)

    def rollback(self, reason: str, existed: bool, *, journal: bool = True) -> int:
        """Restore the previous drop-in (or none), restart, wait for health. ``journal``: quote the
        failed start's journal first (not for a rollback of a healthy deploy)."""
        p = self.plan
        lines = self.waiting(f"journalctl -u {p['unit']} -n 12", lambda: self.journal_tail(12)) if journal else []
        for line in lines:  # under the step that failed: they are why, not what the rollback does
            self.emit("info", f"the failed start's journal: {line[-160:]}")
        self.begin("roll back", f"deploy failed ({reason}); restoring the previous config")
        try:
            if existed:
                with open(os.path.join(p["workdir"], "backup.conf"), encoding="utf-8") as f:
                    self.write_atomic(p["dropin_path"], f.read())
                self.emit("info", f"restored {p['dropin_path']} from the backup")
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(p["dropin_path"])
                self.emit("info", f"removed {p['dropin_path']}")
            self.sh(["systemctl", "daemon-reload"])
            with self.watch_unit() as watch:
                self.sh_watched(["systemctl", "restart", "--", p["unit"]], watch, p.get("restart_timeout_s", 120))
                watch.restarted()
                self.wait_healthy(p.get("rollback_health_timeout_s", p["health_timeout_s"]), watch)
        except Failed as err:
            self.emit("final", f"ROLLBACK FAILED: {err}; the deploy failed because: {reason}",
                      outcome="rollback_failed", reason=reason, journal=lines)
            return 2
        self.emit("final", f"rolled back: the previous config is serving again (deploy failed: {reason})",
                  outcome="rolled_back", reason=reason, journal=lines)
        return 1

    # -- files and the lock ------------------------------------------------------------------
    @staticmethod
    def write_atomic(path: str, text: str) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        with contextlib.suppress(OSError):
            dfd = os.open(os.path.dirname(path), os.O_RDONLY)
            os.fsync(dfd)
            os.close(dfd)

    def lock(self) -> bool:
        path = self.plan["lock_path"]
        os.makedirs(os.path.dirname(path), exist_ok=True)
        me = json.dumps({"pid": os.getpid(), "id": self.plan["id"], "operator": self.plan.get("operator"),
                         "since": time.time()})
        for _ in range(2):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = read_lock(path)
                if holder and pid_alive(holder.get("pid")):
                    self.begin("lock")
                    since = time.strftime("%H:%M:%S", time.localtime(holder.get("since", 0)))
                    self.emit("final", f"another deploy holds the lock {path} (deploy {holder.get('id')}, "
                              f"pid {holder.get('pid')}, since {since}); nothing was changed",
                              outcome="locked")
                    return False
                self.emit("warning", f"removing a stale lock {path} (its pid is gone)")
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                continue
            with os.fdopen(fd, "w") as f:
                f.write(me)
            self.locked = True
            self.emit("info", f"took the lock {path}")
            return True
        return False

    def unlock(self) -> None:
        if self.locked:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.plan["lock_path"])
            self.locked = False


def tail_text(text: str, limit: int) -> str:
    """The end of ``text`` in at most ``limit`` characters, cut on a line (or else word)
    boundary, with an explicit "…" where something was left out."""
    text = text.strip()
    if len(text) <= limit:
        return text
    kept: list[str] = []
    size = 0
    for line in reversed(text.splitlines()):
        if size + len(line) + 1 > limit:
            break
        kept.insert(0, line)
        size += len(line) + 1
    if kept:
        return "… " + " / ".join(ln.strip() for ln in kept if ln.strip())
    words = text.splitlines()[-1].split()
    out: list[str] = []
    for word in reversed(words):
        if sum(len(w) + 1 for w in out) + len(word) + 1 > limit - 2:
            break
        out.insert(0, word)
    return "… " + (" ".join(out) if out else words[-1][-(limit - 2):])


def read_lock(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            lock = json.loads(f.read() or "{}")
        return lock if isinstance(lock, dict) else None
    except (OSError, ValueError):
        return None


def pid_alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)   # the operator's session may go away
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with open(argv[0], encoding="utf-8") as f:
        plan = json.load(f)
    # one agent per deploy: the console may start it again after a dropped connection
    guard = open(os.path.join(os.path.dirname(os.path.abspath(argv[1])), "agent.run"), "a")  # noqa: SIM115
    try:
        fcntl.flock(guard, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0      # this deploy's agent is already running
    if os.path.exists(argv[1]) and os.path.getsize(argv[1]) > 0:
        return 0      # this deploy already ran (its progress file has its events)
    agent = Agent(plan, argv[1])
    try:
        rc = agent.run()
    except Exception as err:  # report, never leave the console waiting on silence
        agent.emit("final", f"deploy agent crashed: {err!r}", outcome="crashed")
        rc = 3
    if agent.router is not None:  # back into the router, whatever happened (deploy_agent_router)
        try:
            rc = agent.router.finish(rc, agent.outcome)
        except Exception as err:
            agent.emit("final", f"deploy agent crashed re-adding the replica: {err!r}", outcome="out_of_router",
                       phase="router")
        finally:
            agent.unlock()  # held through the hold and the rejoin (RouterLink.release); never left behind
    return rc


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
