"""SGLang-style log lines: Python logging's on stderr, uvicorn's access lines on stdout."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

_log_lock = threading.Lock()


def _ts() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def log(msg: str, *, rank: str = "", stream: Any = None) -> None:
    """``[2026-12-02 18:11:00 TP0] msg`` on stderr (Python logging's stream)."""
    out = stream if stream is not None else sys.stderr
    prefix = f"[{_ts()} {rank}]" if rank else f"[{_ts()}]"
    with _log_lock:
        try:
            out.write(f"{prefix} {msg}\n")
            out.flush()
        except (OSError, ValueError):
            pass


def access_log(msg: str) -> None:
    log(f"INFO:     {msg}", stream=sys.stdout)
