"""Whether a process on this machine runs: the one check the console (a rollout journal's console)
and the lab (the processes it started) share."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def alive(pid: int | None) -> bool:
    """Whether ``pid`` runs (a zombie does not; a process we may not signal does)."""
    if pid is None or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    with contextlib.suppress(OSError, IndexError):  # /proc/PID/stat's state: Z (zombie) or X (dead) is gone
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    return True
