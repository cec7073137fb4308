"""SSH hosts share one parse of a known_hosts file (and one load of an identity file) and still
verify every host's key."""

from __future__ import annotations

import os
from pathlib import Path

import asyncssh
import pytest

from specconsole.base.errors import HostKeyError
from specconsole.hosts.ssh import SshHost
from specconsole.hosts.ssh_files import shared_client_keys, shared_known_hosts
from specconsole.lab.parts.environment import Lab
from test_ssh_host import host_config


def test_known_hosts_is_parsed_once_until_the_file_changes(tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    key = "AAAAC3NzaC1lZDI1NTE5AAAAIBs+ePXbH/HfM5dFXQH7jGuF6sV1oFgFCd1D1LGq0Ei1"
    known.write_text(f"[127.0.0.2]:2222 ssh-ed25519 {key}\n")
    first = shared_known_hosts(str(known))
    assert shared_known_hosts(str(known)) is first
    known.write_text(known.read_text() * 2)  # any change: size, mtime or inode
    assert shared_known_hosts(str(known)) is not first
    with pytest.raises(FileNotFoundError) as info:
        shared_known_hosts(str(tmp_path / "absent"))
    assert info.value.filename == str(tmp_path / "absent")


def test_an_identity_file_is_loaded_once_until_it_or_its_certificate_changes(tmp_path: Path) -> None:
    path = tmp_path / "id_ed25519"
    key = asyncssh.generate_private_key("ssh-ed25519")
    key.write_private_key(str(path))
    first = shared_client_keys(str(path))
    assert [pair.public_data for pair in first] == [key.public_data]
    assert shared_client_keys(str(path)) is first
    other = asyncssh.generate_private_key("ssh-ed25519")
    other.write_private_key(str(path))  # replaced: the new key is used from the next connection
    assert [pair.public_data for pair in shared_client_keys(str(path))] == [other.public_data]
    again = shared_client_keys(str(path))
    cert = other.generate_user_certificate(other, "ops", principals=["root"])
    cert.write_certificate(str(path) + "-cert.pub")  # a certificate beside it counts too
    assert shared_client_keys(str(path)) is not again
    with pytest.raises(FileNotFoundError) as info:
        shared_client_keys(str(tmp_path / "absent"))
    assert info.value.filename == str(tmp_path / "absent")


async def test_hosts_sharing_known_hosts_still_verify_each_key(lab_hosts: Lab, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    lines = (lab_hosts.keys / "known_hosts").read_text().splitlines()
    known.write_text(lines[0] + "\n")  # the train host's key only
    train = SshHost(host_config(lab_hosts, "train", known_hosts=str(known)))
    serve = SshHost(host_config(lab_hosts, "serve", known_hosts=str(known)))
    conn = await train.connect_once()
    conn.close()
    parsed = shared_known_hosts(str(known))
    with pytest.raises(HostKeyError, match="not in known_hosts"):
        await serve.connect_once()
    assert shared_known_hosts(str(known)) is parsed  # the refusal used the same parse
    # trusting the serve host's key counts from the next attempt
    known.write_text("\n".join(lines) + "\n")
    os.utime(known, ns=(1, 1))  # a different mtime even within the clock's resolution
    conn = await serve.connect_once()
    conn.close()
