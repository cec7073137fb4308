"""Files every SSH connection reads, read once and shared.

asyncssh parses a ``known_hosts`` given by path on every connection attempt: at N hosts sharing
one file of N entries that is O(N²) at start-up and again on each reconnect wave (about 4 ms
per parse of 200 entries). :func:`shared_known_hosts` parses a file once and hands the same
parsed object to every connection, re-reading it as soon as the file changes (its size, mtime
or inode), so a key added with ``ssh-keyscan`` or removed with ``ssh-keygen -R`` counts from the
next attempt, as before. Verification itself is unchanged: asyncssh matches the host's key
against the parsed entries exactly as it does for the path.
"""

from __future__ import annotations

import os

import asyncssh

_KNOWN_HOSTS: dict[str, tuple[tuple[int, int, int], asyncssh.SSHKnownHosts]] = {}


def shared_known_hosts(path: str) -> asyncssh.SSHKnownHosts:
    """The parsed known_hosts file at ``path``, from cache while the file is unchanged.

    Raises what reading it raises (``FileNotFoundError`` with the file name, ``OSError``)."""
    st = os.stat(path)
    stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
    cached = _KNOWN_HOSTS.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    parsed = asyncssh.read_known_hosts(path)
    _KNOWN_HOSTS[path] = (stamp, parsed)
    return parsed
