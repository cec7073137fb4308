"""The host side of a deploy: one supervised step that ends on the old config or the new one.

The console copies this file (standard library only) and a plan JSON to the serving host and
starts it detached (``setsid nohup``), so the write-restart-verify-rollback sequence does not
depend on the operator's SSH connection. It appends one JSON event per line to its progress
file; the console follows that file and, after a dropped connection, re-attaches to it.

Sequence: lock -> back up the deploy drop-in -> write the new drop-in atomically ->
daemon-reload -> restart -> wait for /health (following the journal) -> check /server_info
-> smoke generation. Any failure after the write restores the backup, restarts, waits for
health, and says both what failed and that the old config serves again.

Run: ``python3 deploy_agent.py PLAN.json PROGRESS.jsonl``
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

HEARTBEAT_S = 2.0


class Failed(Exception):
    """A step failed; the message says what and why."""


class Agent:
    def __init__(self, plan: dict[str, Any], progress_path: str) -> None:
        self.plan = plan
        self.progress = open(progress_path, "a", encoding="utf-8")  # noqa: SIM115
        self.seq = 0
        self.t0 = time.monotonic()
        self.step = ""
        self.locked = False

    # -- reporting ---------------------------------------------------------------------
    def emit(self, kind: str, message: str, **extra: Any) -> None:
        self.seq += 1
        event = {"seq": self.seq, "t": round(time.monotonic() - self.t0, 3), "at": time.time(),
                 "kind": kind, "step": self.step, "message": message, **extra}
        self.progress.write(json.dumps(event) + "\n")
        self.progress.flush()
        os.fsync(self.progress.fileno())

    def begin(self, step: str, message: str | None = None) -> None:
        self.step = step
        self.emit("step", message or step)

    def sh(self, argv: list[str], timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        import shlex

        line = shlex.join(argv)
        self.emit("command", line, command=line)
        t = time.monotonic()
        try:
            res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise Failed(f"`{line}` did not finish within {timeout:g}s") from None
        except FileNotFoundError:
            raise Failed(f"`{argv[0]}` not found on this host") from None
        took = time.monotonic() - t
        out = (res.stdout.strip() or res.stderr.strip()).splitlines()
        first = f": {out[0][:120]}" if out else ""
        self.emit("result", f"exit {res.returncode} in {took:.2f}s{first}", command=line,
                  exit_status=res.returncode, took_s=round(took, 3))
        if check and res.returncode != 0:
            raise Failed(f"`{line}` exited {res.returncode}: {(res.stderr or res.stdout).strip()[-300:]}")
        return res

    # -- HTTP ----------------------------------------------------------------------------
    def http(self, url: str, body: dict[str, Any] | None = None, timeout: float = 5) -> tuple[int, str]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode("utf-8", "replace")
        except (urllib.error.URLError, OSError, TimeoutError) as err:
            reason = getattr(err, "reason", err)
            return 0, f"no answer ({reason})"

    def journal_tail(self, lines: int) -> list[str]:
        with contextlib.suppress(Exception):
            res = subprocess.run(["journalctl", "-u", self.plan["unit"], "-n", str(lines), "--no-pager"],
                                 capture_output=True, text=True, timeout=10)
            return [ln for ln in res.stdout.splitlines() if ln.strip()][-lines:]
        return []

    def active_state(self) -> str:
        with contextlib.suppress(Exception):
            res = subprocess.run(["systemctl", "is-active", self.plan["unit"]], capture_output=True,
                                 text=True, timeout=10)
            return res.stdout.strip() or "unknown"
        return "unknown"

    def wait_healthy(self, timeout: float) -> None:
        url = self.plan["health_url"]
        self.emit("info", f"waiting up to {timeout:g}s for GET {url} to answer 200")
        start = time.monotonic()
        next_beat = start + 1.0
        status, text = 0, ""
        while time.monotonic() - start < timeout:
            status, text = self.http(url, timeout=2)
            if status == 200:
                self.emit("info", f"/health answered 200 after {time.monotonic() - start:.1f}s")
                return
            now = time.monotonic()
            if now >= next_beat:
                state = self.active_state()
                journal = self.journal_tail(1)
                last = journal[-1][-100:] if journal else "(journal empty)"
                seen = f"{status}" if status else text
                self.emit("heartbeat", f"waiting for /health: {seen} for {now - start:.0f}s; "
                          f"service {state}; journal: {last}")
                if state in ("failed", "inactive") and now - start > 1.0:
                    raise Failed(f"{self.plan['unit']} is {state} (it exited during start-up)")
                next_beat = now + HEARTBEAT_S
            time.sleep(0.5)
        seen = f"HTTP {status}" if status else text
        raise Failed(f"/health did not answer 200 within {timeout:g}s (last: {seen})")

    # -- the sequence ----------------------------------------------------------------------
    def run(self) -> int:
        p = self.plan
        self.emit("info", f"deploy {p['id']} started on the host (pid {os.getpid()})", pid=os.getpid())
        if not self.lock():
            return 1
        written = False
        try:
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
            self.begin("restart", f"restarting {p['unit']}")
            self.sh(["systemctl", "restart", p["unit"]], timeout=p.get("restart_timeout_s", 120))
            self.begin("wait for health")
            self.wait_healthy(p["health_timeout_s"])
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
            self.unlock()

    def verify(self) -> None:
        status, text = self.http(self.plan["server_info_url"])
        if status != 200:
            raise Failed(f"/server_info answered {status or text}")
        info = json.loads(text)
        wrong = []
        for key, want in self.plan["expect"].items():
            got = info.get(key)
            accepted = want if isinstance(want, list) else [want]  # e.g. NEXTN reports as EAGLE
            if str(got) not in {str(w) for w in accepted}:
                wrong.append(f"{key}={got!r} (wanted {' or '.join(map(repr, accepted))})")
        if wrong:
            raise Failed("the running server disagrees with the new config: " + ", ".join(wrong))
        self.emit("info", "server_info: " + ", ".join(f"{k}={info.get(k)}" for k in self.plan["expect"])
                  + f", version {info.get('version')}")

    def smoke(self) -> None:
        s = self.plan["smoke"]
        t = time.monotonic()
        status, text = self.http(self.plan["generate_url"], {
            "text": s["text"], "sampling_params": {"max_new_tokens": s["max_new_tokens"], "temperature": 0}},
            timeout=s.get("timeout_s", 60))
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
        self.emit("info", f"smoke: {tokens} tokens in {latency:.2f}s = {tokens / latency:.1f} tok/s, "
                  f"acceptance length {accept:.2f}", tokens_per_s=tokens / latency, accept_length=accept)

    def rollback(self, reason: str, existed: bool) -> int:
        p = self.plan
        journal = self.journal_tail(12)
        self.begin("roll back", f"deploy failed ({reason}); restoring the previous config")
        for line in journal:
            self.emit("info", f"journal: {line[-160:]}")
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
            self.sh(["systemctl", "restart", p["unit"]], timeout=p.get("restart_timeout_s", 120))
            self.wait_healthy(p.get("rollback_health_timeout_s", p["health_timeout_s"]))
        except Failed as err:
            self.emit("final", f"ROLLBACK FAILED: {err}; the deploy failed because: {reason}",
                      outcome="rollback_failed", reason=reason, journal=journal)
            return 2
        self.emit("final", f"rolled back: the previous config is serving again (deploy failed: {reason})",
                  outcome="rolled_back", reason=reason, journal=journal)
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


def read_lock(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            return json.loads(f.read() or "{}")
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
    agent = Agent(plan, argv[1])
    try:
        return agent.run()
    except Exception as err:  # report, never leave the console waiting on silence
        agent.emit("final", f"deploy agent crashed: {err!r}", outcome="crashed")
        return 3


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
