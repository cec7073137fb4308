"""``specconsole status --tmux``: one short line for tmux's ``status-right``, in milliseconds.

The recorder (console or ``status --watch --record``) rewrites a small state file with the facts
(:func:`summary`) at every flush that changes them and at least every 5 s; this command only
reads that file (no config, no SSH, nothing heavy imported), so tmux can run it every
``status-interval``. A file older than :data:`STALE_S` is shown as such.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

TYPE_CHECKING = False  # not typing's: its import is a tenth of this command's time
if TYPE_CHECKING:
    from typing import Any

    from specconsole.monitor import HostStatus
    from specconsole.recorder.records import Alert

#: a state file not rewritten for this long: no console is recording (it rewrites every 5 s)
STALE_S = 30.0
STATE_NAME = "tmux-status.json"


def summary(statuses: list[HostStatus], alert: Alert | None, now: float) -> dict[str, Any]:
    """The facts the line shows: hosts up/total, the worst alert firing, the training job's step
    and ETA (the least advanced running job), serving tok/s (summed) and acceptance length (mean)."""
    up = sum(1 for s in statuses if s.reachable)
    facts: dict[str, Any] = {"hosts_up": up, "hosts": len(statuses), "alert": None, "training": None,
                             "serving": None}
    if alert is not None:
        facts["alert"] = {"name": alert.name, "host": alert.host, "level": alert.level, "message": alert.message}
    jobs = [s.training.value for s in statuses if s.training is not None and s.training.value.step is not None]
    if jobs:
        job = min(jobs, key=lambda p: p.fraction if p.fraction is not None else math.inf)
        facts["training"] = {"step": job.step, "total": job.total_steps, "eta": job.eta_text, "state": job.state}
    metrics = [s.sglang.value.metrics for s in statuses if s.sglang is not None and s.sglang.value.metrics]
    if metrics:
        tps = [m.tokens_per_s for m in metrics if m.tokens_per_s is not None and math.isfinite(m.tokens_per_s)]
        acc = [m.spec_accept_length for m in metrics
               if m.spec_accept_length is not None and math.isfinite(m.spec_accept_length)]
        facts["serving"] = {"tokens_per_s": round(sum(tps), 1) if tps else None,
                            "accept_length": round(sum(acc) / len(acc), 2) if acc else None}
    return facts


def line(facts: dict[str, Any], age_s: float = 0.0) -> str:
    """``2/2 up · ! train stall · step 1200/33000 ETA 3h 10m · 812 tok/s acc 3.41``."""
    parts = [f"{facts.get('hosts_up', 0)}/{facts.get('hosts', 0)} up"]
    alert = facts.get("alert")
    if alert:
        mark = "!!" if alert.get("level") == "error" else "!"
        parts.append(f"{mark} {alert.get('host', '')} {alert.get('name', '')}".replace("  ", " "))
    job = facts.get("training")
    if job:
        total = f"/{job['total']}" if job.get("total") else ""
        eta = f" ETA {job['eta']}" if job.get("eta") else ""
        stopped = f" ({job['state']})" if job.get("state") not in (None, "running") else ""
        parts.append(f"step {job['step']}{total}{eta}{stopped}")
    serving = facts.get("serving")
    if serving:
        tps = serving.get("tokens_per_s")
        acc = serving.get("accept_length")
        parts.append(f"{'-' if tps is None else f'{tps:.0f}'} tok/s acc {'-' if acc is None else f'{acc:.2f}'}")
    text = " · ".join(parts)
    if age_s > STALE_S:
        text = f"stale {age_s:.0f}s: {text}"
    return "".join(c if c.isprintable() else "?" for c in text)  # what a host named cannot move tmux's cursor


def default_state_file() -> Path:
    """Where the recorder writes the facts by default (``recorder.state_file``)."""
    from specconsole.base import paths

    return paths.state_dir() / STATE_NAME


def status_tmux(state_file: str | None, now: float | None = None) -> tuple[int, str]:
    """The line to print and the exit status (1: no state file to read)."""
    path = Path(state_file).expanduser() if state_file else default_state_file()
    try:
        facts = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 1, "specconsole: no recorder state (is a console or status --watch --record running?)"
    if not isinstance(facts, dict) or "hosts" not in facts:
        return 1, f"specconsole: {path}: not a recorder state file"
    at = facts.get("at")
    age = (time.time() if now is None else now) - at if isinstance(at, int | float) else math.inf
    return 0, line(facts, age)


USAGE = "usage: specconsole status --tmux [--state FILE]"


def main(argv: list[str]) -> int:
    """``specconsole status --tmux [--state FILE]`` (run by :mod:`specconsole.launch` before the
    CLI's own imports, ~100 ms of them; its few options are read by hand for the same reason)."""
    state = None
    args = iter(argv)
    for arg in args:
        if arg in ("--state", "--config"):
            value = next(args, None)
            if value is None:
                print(f"specconsole: {arg} needs a value; {USAGE}")
                return 2
            state = value if arg == "--state" else state  # --config: the line comes from the state file alone
        elif arg.startswith(("--state=", "--config=")):
            state = arg.split("=", 1)[1] if arg.startswith("--state=") else state
        elif arg != "--tmux":
            print(f"specconsole: status --tmux: unexpected {arg!r}; {USAGE}")
            return 2
    code, text = status_tmux(state)
    print(text)
    return code
