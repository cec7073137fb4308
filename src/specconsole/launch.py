"""The ``specconsole`` command's entry point: ``status --tmux`` answers before the CLI's imports.

tmux runs ``specconsole status --tmux`` every ``status-interval``; it reads one small file
(:mod:`specconsole.recorder.tmux`), so it does not wait ~100 ms for the CLI's modules. Every other
command goes to :func:`specconsole.cli.main`, with the dependencies' warnings filtered first
(:mod:`specconsole.dependency_warnings`: the operator's stderr carries what specconsole says).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["status"] and "--tmux" in args:
        from specconsole.recorder.tmux import main as tmux_main

        return tmux_main(args[1:])
    from specconsole import dependency_warnings

    dependency_warnings.quiet()
    from specconsole.cli import main as cli_main

    return cli_main(args)
