"""The ``specconsole`` command's entry point: ``status --tmux`` answers before the CLI's imports.

tmux runs ``specconsole status --tmux`` every ``status-interval``; it reads one small file
(:mod:`specconsole.recorder.tmux`), so it does not wait ~100 ms for the CLI's modules. Every other
command goes to :func:`specconsole.cli.main`, with the dependencies' warnings filtered first
(:mod:`specconsole.dependency_warnings`: the operator's stderr carries what specconsole says), and
httpx's command-line client kept out of the process. asyncssh's look for liboqs starts first, in a
thread (:mod:`specconsole.base.liboqs_lookup`).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["status"] and "--tmux" in args:
        from specconsole.recorder.tmux import main as tmux_main

        return tmux_main(args[1:])
    from specconsole.base import liboqs_lookup

    liboqs_lookup.start()  # asyncssh's import waits for that look otherwise (issue 34)
    # httpx imports its own command-line client (click, pygments, rich's syntax and progress) with
    # the library, for the `httpx` command, which specconsole never runs: 20-25 ms of every start
    # (issue 34). A None entry makes that import fail, and httpx then defines a stub in its place.
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
    from specconsole import dependency_warnings

    dependency_warnings.quiet()
    from specconsole.cli import main as cli_main

    return cli_main(args)
