"""The SSH host layer against real OpenSSH sshd hosts on loopback (the lab)."""

from __future__ import annotations

import asyncio
import dataclasses
import http.server
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import wait_for
from specconsole.base.errors import HostKeyError, HostUnavailable
from specconsole.config import HostConfig, load_config
from specconsole.hosts import ConnState
from specconsole.hosts.ssh import SshHost, backoff_delay
from specconsole.lab.parts.environment import Lab


def host_config(lab: Lab, name: str = "train", **ssh: object) -> HostConfig:
    cfg = load_config(lab.config_path).host(name)
    return dataclasses.replace(cfg, ssh=dataclasses.replace(cfg.ssh, **ssh)) if ssh else cfg


async def connected(lab: Lab, name: str = "train", **ssh: object) -> SshHost:
    host = SshHost(host_config(lab, name, **ssh))
    await host.start()
    assert await host.wait_connected(15), host.status
    return host


def remote_pids(needle: str) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if needle in cmd and "sh -c" not in cmd:
                out.append(int(d.name))
    return out


def test_backoff_is_exponential_and_capped() -> None:
    assert [backoff_delay(n, 0.5, 4) for n in range(1, 7)] == [0.5, 1, 2, 4, 4, 4]


async def test_runs_commands_with_exact_quoting(lab_hosts: Lab) -> None:
    host = await connected(lab_hosts)
    try:
        tricky = ["printf", "%s|", "a b", "it's", "$HOME", "; rm -rf /", '"q"', "*"]
        res = await host.run(tricky)
        assert res.ok
        assert res.stdout == "a b|it's|$HOME|; rm -rf /|\"q\"|*|"
        assert res.command.startswith("printf '%s|' 'a b' 'it'\"'\"'s'")
        # the host's own tools come first on its PATH
        which = await host.run(["sh", "-c", "command -v nvidia-smi; command -v systemctl"])
        assert which.stdout.split() == [str(lab_hosts.root("train") / "bin" / t) for t in ("nvidia-smi", "systemctl")]
        fail = await host.run("echo oops >&2; exit 3")
        assert fail.exit_status == 3 and fail.stderr == "oops\n"
    finally:
        await host.close()


async def test_unknown_host_key_is_refused_with_fingerprint(lab_hosts: Lab, tmp_path: Path) -> None:
    only_train = tmp_path / "known_hosts"
    lines = (lab_hosts.keys / "known_hosts").read_text().splitlines()
    only_train.write_text(lines[0] + "\n")  # the serve host's key is not there
    host = SshHost(host_config(lab_hosts, "serve", known_hosts=str(only_train)))
    with pytest.raises(HostKeyError) as info:
        await host.connect_once()
    msg = str(info.value)
    pub = (lab_hosts.root("serve") / "ssh" / "ssh_host_ed25519_key.pub").read_text().split()
    import asyncssh

    expected = asyncssh.import_public_key(" ".join(pub[:2])).get_fingerprint()
    assert "not in known_hosts" in msg and expected in msg
    assert f"ssh-keyscan -p {lab_hosts.state.hosts['serve'].port} 127.0.0.3 >> {only_train}" in msg
    # the supervised host reports it as down with the same message, never connects
    await host.start()
    assert not await host.wait_connected(1.5)
    assert host.status.state is ConnState.DOWN and "not in known_hosts" in (host.status.last_error or "")
    await host.close()


async def test_changed_host_key_is_refused(lab_hosts: Lab, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    serve = lab_hosts.state.hosts["serve"]
    train_key = (lab_hosts.root("train") / "ssh" / "ssh_host_ed25519_key.pub").read_text().split()
    known.write_text(f"[{serve.address}]:{serve.port} {train_key[0]} {train_key[1]}\n")  # wrong key
    host = SshHost(host_config(lab_hosts, "serve", known_hosts=str(known)))
    with pytest.raises(HostKeyError, match="CHANGED since it was recorded") as info:
        await host.connect_once()
    # the fix names the entry as known_hosts records it off port 22, and it works when run
    msg = str(info.value)
    remove = f"ssh-keygen -R '[{serve.address}]:{serve.port}' -f {known}"
    add = f"ssh-keyscan -p {serve.port} {serve.address} >> {known}"
    assert f"`{remove}`" in msg and f"`{add}`" in msg, msg
    for command in (remove, add):
        subprocess.run(["sh", "-c", command], check=True, capture_output=True, timeout=30)
    assert train_key[1] not in known.read_text()
    conn = await host.connect_once()
    conn.close()


async def test_missing_known_hosts_file_is_named(lab_hosts: Lab, tmp_path: Path) -> None:
    host = SshHost(host_config(lab_hosts, known_hosts=str(tmp_path / "absent")))
    with pytest.raises(HostKeyError, match=r"known_hosts file .*absent does not exist"):
        await host.connect_once()


async def test_missing_identity_file_is_named_not_known_hosts(lab_hosts: Lab, tmp_path: Path) -> None:
    absent = tmp_path / "keys" / "id_ed25519"
    host = SshHost(dataclasses.replace(host_config(lab_hosts), identity_file=str(absent)))
    with pytest.raises(HostUnavailable) as info:
        await host.connect_once()
    msg = str(info.value)
    assert f"identity_file {absent} does not exist" in msg and "fix: " in msg
    assert "known_hosts" not in msg and "ssh-keyscan" not in msg
    # supervised, the host is down with that message
    await host.start()
    assert not await host.wait_connected(1.0)
    assert host.status.state is ConnState.DOWN and "identity_file" in (host.status.last_error or "")
    await host.close()


async def test_wrong_user_key_is_permission_denied(lab_hosts: Lab, tmp_path: Path) -> None:
    import asyncssh

    other = tmp_path / "other_key"
    other.write_text(asyncssh.generate_private_key("ssh-ed25519").export_private_key().decode())
    cfg = dataclasses.replace(host_config(lab_hosts), identity_file=str(other))
    with pytest.raises(HostUnavailable, match="refused our key"):
        await SshHost(cfg).connect_once()


@pytest.mark.serial  # asserts a time bound
async def test_dropped_connection_recovers_within_backoff_bound(lab_hosts: Lab) -> None:
    host = await connected(lab_hosts, backoff_initial_s=0.2, backoff_max_s=1.0, keepalive_s=1)
    states: list[tuple[ConnState, int]] = []
    host.add_listener(lambda c: states.append((c.state, c.attempt)))
    try:
        lab_hosts.stop_sshd("train")
        assert await wait_for(lambda: host.status.state is not ConnState.CONNECTED, 10, step=0.05)
        with pytest.raises(HostUnavailable):
            await host.run(["true"])
        # several failed attempts: backoff grows to its cap
        await wait_for(lambda: host.status.attempt >= 3, 15, what="three failed reconnect attempts", step=0.05)
        restarted = time.monotonic()
        lab_hosts.start_sshd("train")
        assert await host.wait_connected(10)
        took = time.monotonic() - restarted
        # the next attempt comes at most backoff_max_s later, plus one connection set-up
        assert took <= 1.0 + 1.5, took
        assert (await host.run(["echo", "back"])).stdout == "back\n"
        seen = [s for s, _ in states]
        assert ConnState.RECONNECTING in seen and seen[-1] is ConnState.CONNECTED
        assert any(s is ConnState.RECONNECTING and a >= 2 for s, a in states)
    finally:
        await host.close()


async def test_streams_end_on_the_host_when_closed_or_dropped(lab_hosts: Lab) -> None:
    log = lab_hosts.root("train") / "quiet.log"
    log.write_text("one\n")
    host = await connected(lab_hosts, backoff_initial_s=0.2, backoff_max_s=1.0)
    try:
        # closed by us: the remote tail ends
        async with host.stream(["tail", "-n", "5", "-F", str(log)]) as s:
            first = await anext(aiter(s.lines()))
            assert first == "one"
            assert await wait_for(lambda: len(remote_pids(f"tail -n 5 -F {log}")) == 1, 5, step=0.05)
        assert await wait_for(lambda: not remote_pids(f"tail -n 5 -F {log}"), 5, step=0.05)

        # a shell snippet: its shell's own children end too (they once outlived the killed shell)
        async with host.stream(f"printf 'started\\n'; sleep 37; echo {log}") as s:
            assert await anext(aiter(s.lines())) == "started"
            assert await wait_for(lambda: len(remote_pids("sleep 37")) == 1, 5, step=0.05)
        assert await wait_for(lambda: not remote_pids("sleep 37"), 5, step=0.05)

        # dropped connection (sshd killed): the remote tail does not outlive it
        async with host.stream(["tail", "-n", "1", "-F", str(log)]) as s:
            it = aiter(s.lines())
            assert await anext(it) == "one"
            assert await wait_for(lambda: len(remote_pids(f"tail -n 1 -F {log}")) == 1, 5, step=0.05)
            lab_hosts.stop_sshd("train")
            with pytest.raises((HostUnavailable, StopAsyncIteration)):
                await asyncio.wait_for(anext(it), 10)
        assert await wait_for(lambda: not remote_pids(f"tail -n 1 -F {log}"), 5, step=0.05)
        lab_hosts.start_sshd("train")
        assert await host.wait_connected(10)
        # after reconnecting, a new stream works and there is exactly one tail again
        async with host.stream(["tail", "-n", "1", "-F", str(log)]) as s:
            assert await anext(aiter(s.lines())) == "one"
            assert len(remote_pids(f"tail -n 1 -F {log}")) == 1
    finally:
        await host.close()


async def test_tunnel_reaches_a_port_on_the_host(lab_hosts: Lab) -> None:
    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"hello from the host")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host = await connected(lab_hosts, "serve")
    try:
        local = await host.reach("127.0.0.1", server.server_address[1])
        assert local[0] == "127.0.0.1" and local[1] != server.server_address[1]
        assert await host.reach("127.0.0.1", server.server_address[1]) == local  # reused
        import httpx

        async with httpx.AsyncClient() as client:
            r = await client.get(f"http://{local[0]}:{local[1]}/")
        assert r.text == "hello from the host"
    finally:
        await host.close()
        server.shutdown()


async def test_a_4mb_line_without_newline_is_cut_out_not_held(lab_hosts: Lab) -> None:
    from test_local_host import read_a_4mb_line_without_newline

    host = await connected(lab_hosts)
    try:
        await read_a_4mb_line_without_newline(host)
    finally:
        await host.close()
