"""Building remote command lines: argv is always quoted with :func:`shlex.join`."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

#: A command is an argv (quoted for you) or a shell snippet you have quoted yourself.
Command = Sequence[str] | str


def to_shell(cmd: Command) -> str:
    """The exact shell line that runs ``cmd`` (what the console prints as "the remote command")."""
    return cmd if isinstance(cmd, str) else shlex.join(cmd)


# The stream wrapper: the command runs in the background and is killed as soon as our stdin
# reaches EOF. sshd closes that pipe when the channel closes or the connection drops, so a
# streaming command (tail -F, nvidia-smi -lms) never outlives the console's connection.
# `read` is a shell builtin, so killing the watcher subshell leaves no child behind. The command runs
# in a process group of its own (setsid, where the host has it) and the whole group is terminated: a
# shell snippet's own children (`a; sleep 30`) went on after their shell was killed.
_WATCHDOG = (
    'exec 3<&0 </dev/null; '
    'if command -v setsid >/dev/null 2>&1; then setsid "$@" & c=$!; g=-$c; else "$@" & c=$!; g=$c; fi; '
    "{ while read -r _ <&3; do :; done; kill -TERM $g 2>/dev/null; } >/dev/null 2>&1 & w=$!; "
    "wait $c; s=$?; kill $w 2>/dev/null; exit $s"
)


def stdin_watchdog(cmd: Command) -> str:
    """Wrap ``cmd`` so that it is terminated when the caller's stdin closes."""
    argv = ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
    return shlex.join(["sh", "-c", _WATCHDOG, "specconsole-stream", *argv])
