"""A broken ssh_config is the host's error, named, not a host stuck "connecting" (issue 24 item 5).

asyncssh's ConfigParseError is a ValueError: it used to end the supervising task, leaving the
host "connecting" forever with ``last_error: null``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from conftest import wait_for
from specconsole.config import load_config
from specconsole.hosts import ConnState
from specconsole.hosts.ssh import SshHost
from specconsole.lab.parts.environment import Lab


async def test_an_invalid_ssh_config_is_the_hosts_one_line_error_and_fixing_it_connects(
        lab_hosts: Lab, tmp_path: Path) -> None:
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text("Host *\n    Port abc\n")
    cfg = load_config(lab_hosts.config_path).host("train")
    host = SshHost(dataclasses.replace(cfg, ssh=dataclasses.replace(cfg.ssh, ssh_config=str(ssh_config))))
    await host.start()
    try:
        assert await wait_for(lambda: host.status.last_error is not None, 10)
        status = host.status
        assert status.state == ConnState.DOWN
        assert status.last_error == (
            f"train: ssh_config file {ssh_config} is invalid ({ssh_config} line 2: Invalid Port integer value: "
            f"abc); fix: correct that line, or remove ssh.ssh_config to use ~/.ssh/config")
        assert "\n" not in status.last_error
        # the supervisor is still alive: the corrected file is read on the next attempt
        ssh_config.write_text("Host *\n    ServerAliveInterval 15\n")
        assert await host.wait_connected(15), host.status
        assert (await host.run(["echo", "ok"])).stdout == "ok\n"
    finally:
        await host.close()


async def test_aes_gcm_is_preferred_unless_the_ssh_config_names_ciphers(lab_hosts: Lab, tmp_path: Path) -> None:
    """Issue 34: with asyncssh's default ciphers (no ``Ciphers`` in the host's ssh config) the
    connection asks for AES-GCM first (a packet costs asyncssh 3.3 µs against chacha20's 20); an
    operator's own ``Ciphers`` line is what the connection uses."""
    cfg = load_config(lab_hosts.config_path).host("train")
    chosen: dict[str, str] = {}
    for name, text in (("default", "Host *\n    ServerAliveInterval 15\n"),
                       ("chacha", "Host *\n    Ciphers chacha20-poly1305@openssh.com\n")):
        ssh_config = tmp_path / f"ssh_config-{name}"
        ssh_config.write_text(text)
        host = SshHost(dataclasses.replace(cfg, ssh=dataclasses.replace(cfg.ssh, ssh_config=str(ssh_config))))
        await host.start()
        try:
            assert await host.wait_connected(15), host.status
            assert host._conn is not None
            chosen[name] = host._conn.get_extra_info("send_cipher")
            assert (await host.run(["echo", "ok"])).stdout == "ok\n"
        finally:
            await host.close()
    assert chosen == {"default": "aes256-gcm@openssh.com", "chacha": "chacha20-poly1305@openssh.com"}
