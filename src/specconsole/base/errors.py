"""Errors that carry a one-line, operator-facing message: what failed and how to fix it."""

from __future__ import annotations


class SpecConsoleError(Exception):
    """Base class: ``str(err)`` is a complete one-line message for the operator."""

    exit_code = 1


class ConfigError(SpecConsoleError):
    """A config file is missing, unreadable or invalid. Names the file, the key and the fix."""

    exit_code = 2

    def __init__(self, path: str, key: str | None, problem: str, fix: str) -> None:
        self.path, self.key, self.problem, self.fix = path, key, problem, fix
        where = f"{path}: {key}" if key else path
        super().__init__(f"{where}: {problem} (fix: {fix})")


class UsageError(SpecConsoleError):
    """A command-line value the command cannot use (``--grace nan``): refused before any host is
    contacted. The message names the option and the fix."""

    exit_code = 2


class HostError(SpecConsoleError):
    """A host cannot be reached or refused us; the message names the host."""


class HostKeyError(HostError):
    """The host's key is unknown or changed; never accepted silently."""


class HostUnavailable(HostError):
    """The host is (currently) not connected; the operation can be retried after reconnect."""


class CommandFailed(SpecConsoleError):
    """A remote command exited non-zero where success was required."""
