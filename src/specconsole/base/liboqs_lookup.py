"""asyncssh's look for liboqs, done beside the CLI's imports instead of in the way of the first connection.

Importing asyncssh looks for liboqs (its ``sntrup761`` key exchange) with
``ctypes.util.find_library("oqs")``, then ``("liboqs")``; on Linux each look runs ``ldconfig -p``,
then ``gcc`` and ``ld`` when that finds nothing: 25-45 ms of waiting for other programs (6 ms of
this process's CPU), before the first host can connect (issue 34, the time to the first frame).

:func:`start` (the entry point calls it first) runs those two looks in a thread while the CLI's
modules import. Under :func:`answers` (around the import of asyncssh), ``find_library`` gives the
thread's answers for those two names, the same answers, waiting for the thread if it is still
looking; any other name, or no thread started, goes to ``find_library`` itself.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

#: The names asyncssh (``asyncssh.crypto.pq``) looks for, in its order.
NAMES = ("oqs", "liboqs")

_found: dict[str, str | None] = {}
_thread: threading.Thread | None = None


def _look() -> None:
    import ctypes.util  # here: its own imports (subprocess, shutil) come in this thread

    for name in NAMES:
        _found[name] = ctypes.util.find_library(name)
        if _found[name]:  # asyncssh stops at the first name found
            return


def start() -> None:
    """Start looking for liboqs in a thread (once per process)."""
    global _thread
    if _thread is None:
        _thread = threading.Thread(target=_look, name="liboqs-lookup", daemon=True)
        _thread.start()


@contextlib.contextmanager
def answers() -> Iterator[None]:
    """``ctypes.util.find_library`` answers :data:`NAMES` from :func:`start`'s thread meanwhile."""
    thread = _thread
    if thread is None:
        yield
        return
    import ctypes.util

    find_library = ctypes.util.find_library

    def find(name: str) -> str | None:
        if name in NAMES:
            thread.join()
            if name in _found:
                return _found[name]
        return find_library(name)

    ctypes.util.find_library = find
    try:
        yield
    finally:
        ctypes.util.find_library = find_library
