"""The simulator's failures: a launch SGLang refuses or that crashes, a request it refuses."""

from __future__ import annotations


class LaunchError(Exception):
    """A start-up failure: printed as ``{kind}: {message}`` on stderr, exit status 1."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class UsageError(Exception):
    """Real SGLang's argparse refused the command line (exit status 2)."""


class BadRequest(Exception):
    """A request the server answers with 400 (``{"error": {"message": ...}}``)."""
