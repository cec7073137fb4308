"""The lab's SSH keys: the operator's client key, each host's host key, and the known_hosts file
naming both hosts (``keys/`` and each host's ``ssh/``)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path

from specconsole.lab.files import write_file
from specconsole.lab.parts.state import LabHost, Say


def keygen(path: Path, comment: str, say: Say) -> None:
    """An ed25519 key pair at ``path`` (and ``path.pub``), unless one is there already."""
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, capture_output=True)
    say(f"generated key {path}")


def client_key(keys: Path, say: Say) -> None:
    """The operator's key, ``keys/client_ed25519``."""
    keygen(keys / "client_ed25519", "specconsole-lab-operator", say)


def host_key(root: Path, name: str, say: Say) -> None:
    """Host ``name``'s host key, ``ssh/ssh_host_ed25519_key`` under its root."""
    keygen(root / "ssh" / "ssh_host_ed25519_key", f"lab-{name}-host", say)


def write_known_hosts(keys: Path, hosts: Iterable[LabHost]) -> None:
    """``keys/known_hosts``: every host's key at its address and port."""
    lines = []
    for h in hosts:
        pub = (Path(h.root) / "ssh" / "ssh_host_ed25519_key.pub").read_text().split()
        lines.append(f"[{h.address}]:{h.port} {pub[0]} {pub[1]}")
    write_file(keys / "known_hosts", "\n".join(lines) + "\n")
