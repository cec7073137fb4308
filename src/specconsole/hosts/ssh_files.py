"""Files every SSH connection reads (known_hosts, the identity file), read once and shared.

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
from collections.abc import Callable
from typing import Any

import asyncssh

_CACHE: dict[tuple[str, str], tuple[object, Any]] = {}


def _stamp(path: str) -> tuple[int, int, int]:
    st = os.stat(path)
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _shared(kind: str, path: str, stamp: object, load: Callable[[str], Any]) -> Any:
    cached = _CACHE.get((kind, path))
    if cached is not None and cached[0] == stamp:
        return cached[1]
    value = load(path)
    _CACHE[(kind, path)] = (stamp, value)
    return value


def shared_known_hosts(path: str) -> asyncssh.SSHKnownHosts:
    """The parsed known_hosts file at ``path``, from cache while the file is unchanged.

    Raises what reading it raises (``FileNotFoundError`` with the file name, ``OSError``)."""
    return _shared("known_hosts", path, _stamp(path), asyncssh.read_known_hosts)  # type: ignore[no-any-return]


def shared_client_keys(path: str) -> list[asyncssh.SSHKeyPair]:
    """The key pair(s) in the identity file at ``path`` (and its ``-cert.pub``, as asyncssh
    reads it), loaded once while both files are unchanged: asyncssh would read and parse the key
    again for every connection (200 hosts: 200 reads and parses at start-up).

    Raises what loading it raises (``FileNotFoundError`` with the file name, ``OSError``,
    asyncssh's ``KeyImportError`` for an encrypted key), as ``asyncssh.connect`` would."""
    cert = path + "-cert.pub"
    stamp = (_stamp(path), _stamp(cert) if os.path.exists(cert) else None)
    return _shared("client_keys", path, stamp, asyncssh.load_keypairs)  # type: ignore[no-any-return]
