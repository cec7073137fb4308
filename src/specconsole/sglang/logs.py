"""Facts SGLang's workers print once at start-up, read from the unit's journal.

DDTree's worker (sgl-project/sglang PR #29907) logs ``Initialized DDTree worker.
block_size=16, tree_budget=32``: the settings it actually runs with, after SGLang's own
defaults (a budget left out is block size - 1).
"""

from __future__ import annotations

import re
import shlex

#: The start-up lines worth showing, by algorithm: a fixed text followed by ``key=value`` pairs.
WORKER_LINES: dict[str, str] = {"DDTREE": "Initialized DDTree worker."}

_PAIR = re.compile(r"(\w+)=([^,\s]+)")


def worker_facts(text: str, algorithm: str) -> tuple[tuple[str, str], ...]:
    """The ``key=value`` pairs of the last worker line of ``algorithm`` in ``text`` (() when none)."""
    needle = WORKER_LINES.get(algorithm.upper())
    if needle is None:
        return ()
    lines = [ln for ln in text.splitlines() if needle in ln]
    if not lines:
        return ()
    return tuple((k, v) for k, v in _PAIR.findall(lines[-1].split(needle, 1)[1]))


def worker_log_command(unit: str, algorithm: str, lines: int = 5000) -> str | None:
    """A shell command printing the unit's recent worker lines of ``algorithm`` (None: none to read)."""
    needle = WORKER_LINES.get(algorithm.upper())
    if needle is None:
        return None
    return (f"journalctl -u {shlex.quote(unit)} -n {lines} --no-pager 2>/dev/null | "
            f"grep -F {shlex.quote(needle)} | tail -n 1")
