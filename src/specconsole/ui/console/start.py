"""Opening the console: the hosts are connected first, and the console's own imports overlap their
first readings.

Importing the Textual app (Textual, Rich, the panes, the flows) takes about half a second, and a
host's first readings about as long again (the SSH handshake, the first ``nvidia-smi`` rows, the
training log's tail, SGLang's first answers), most of it waiting on the host. Done one after the
other, the first full frame came after both. Here the fleet is made and started on the event loop
the console will run on, and the app is imported in a worker thread while that loop serves the
hosts; the console then runs on the same loop with the fleet already under way.

A browser's session (``web_session``: textual-serve's web driver is the terminal) keeps the plain
start: with the early one, its first layout was kept at the page's first size (the footer empty, the
events pane wrapped narrow; tests/test_web.py failed 3 runs of 3), which was not looked into further.

This module imports no Textual: :func:`run_console` is what the CLI and the demo call.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Callable
from typing import Any

from specconsole.base.events import EventLog
from specconsole.base.shutdown import child_pids
from specconsole.config import Config

#: What a console without a terminal (stdin and stdout) is told; checked before any host is connected.
NEEDS_TERMINAL = ("specconsole: the console needs a terminal; for a headless snapshot use "
                  "`specconsole status` (or `status --watch`)")


def run_console(config: Config, *, read_only: bool, theme: str | None,
                cleanup: Callable[[], None] | None = None, leave_process: bool = False,
                no_audit: bool = False, web_session: bool = False) -> int:
    """``specconsole`` without a subcommand: connect the hosts, import the console meanwhile, run it
    (:func:`specconsole.ui.console.app.run_console`, whose arguments these are)."""
    if not web_session and (not sys.stdout.isatty() or not sys.stdin.isatty()):
        print(NEEDS_TERMINAL, file=sys.stderr)
        return 2
    if web_session:  # a browser's session (textual-serve's web driver) starts the console's own way
        from specconsole.ui.console import app as console_app

        return console_app.run_console(config, read_only=read_only, theme=theme, cleanup=cleanup,
                                       leave_process=leave_process, no_audit=no_audit, web_session=True)
    from specconsole.monitor import Fleet

    loop = asyncio.new_event_loop()
    fleet = Fleet(config, events=EventLog(config.console.audit_log))
    spare = frozenset(child_pids())  # the demo's lab: what the fleet starts (local streams) is the console's
    try:
        loop.run_until_complete(fleet.start())
        app: Any = loop.run_until_complete(asyncio.to_thread(importlib.import_module, "specconsole.ui.console.app"))
        return int(app.run_console(config, read_only=read_only, theme=theme, cleanup=cleanup,
                                   leave_process=leave_process, no_audit=no_audit, web_session=web_session,
                                   fleet=fleet, loop=loop, spare=spare))
    finally:
        if not fleet.stopped:  # Ctrl-C, a failed import, a refused --theme: leave no connection
            loop.run_until_complete(fleet.stop())
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()
