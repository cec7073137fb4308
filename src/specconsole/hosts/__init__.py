"""Hosts: the local machine or an SSH connection, behind one interface (:class:`Host`)."""

from __future__ import annotations

from specconsole.config import HostConfig
from specconsole.hosts.base import CommandResult, Connection, ConnState, Host, StreamProcess
from specconsole.hosts.commands import Command, to_shell

__all__ = ["Command", "CommandResult", "ConnState", "Connection", "Host", "StreamProcess",
           "make_host", "to_shell"]


def make_host(config: HostConfig) -> Host:
    """The right :class:`Host` for a configured host (ssh only imported when used)."""
    if config.connect == "ssh":
        from specconsole.base import liboqs_lookup

        with liboqs_lookup.answers():  # asyncssh's import: its look for liboqs was started early
            from specconsole.hosts.ssh import SshHost

        return SshHost(config)
    from specconsole.hosts.local import LocalHost

    return LocalHost(config)
