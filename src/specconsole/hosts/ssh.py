"""A remote host over one persistent, supervised asyncssh connection.

- Host keys are verified against known_hosts (OpenSSH's by default); an unknown or changed key
  is refused with its fingerprint and the command that would trust it.
- ``~/.ssh/config`` and the ssh agent are honoured the way OpenSSH does (asyncssh reads both).
- The connection is supervised: keepalives detect a dead peer, and a lost connection is
  re-established with capped exponential backoff while the state says ``reconnecting n``.
- Streams are wrapped in :func:`~specconsole.hosts.commands.stdin_watchdog`, so a remote
  ``tail -F`` or ``nvidia-smi -lms`` ends when its channel closes and never piles up on the host.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncssh

from specconsole.base.backoff import backoff_delay
from specconsole.base.errors import HostError, HostKeyError, HostUnavailable
from specconsole.config import HostConfig
from specconsole.hosts.address import ssh_address
from specconsole.hosts.base import STREAM_LINE_LIMIT, CommandResult, ConnState, Host, StreamProcess
from specconsole.hosts.commands import Command, stdin_watchdog, to_shell
from specconsole.hosts.ssh_files import shared_client_keys, shared_known_hosts

#: Lost connections are "reconnecting n" for this many attempts, then "down".
RECONNECTING_ATTEMPTS = 3
#: Closing: how long the supervisor and then the connection each get before being aborted.
CLOSE_TIMEOUT_S = 1.0
#: Closing one stream: how long its channel gets to close (the remote watchdog ends the command).
STREAM_CLOSE_TIMEOUT_S = 3.0
#: Reading a stream: at most this many characters per read (a read returns what has arrived).
READ_CHUNK = 65536


def gcm_first(chosen: Any) -> list[str] | None:
    """asyncssh's default ciphers with AES-GCM first, when ``chosen`` is that default (no
    ``Ciphers`` in the host's ssh config); None to keep ``chosen``.

    asyncssh (like OpenSSH) prefers chacha20-poly1305, which it runs as several calls into
    ``cryptography`` a packet: 20 µs to decrypt one, against 3.3 µs for AES-GCM's single call
    (AES-NI), and a fleet's streams are a packet per host and second or more (issue 34, 200 hosts:
    headless 6.2-6.6 -> 4.6-5.0 CPU-s/min). Both are authenticated ciphers OpenSSH offers by
    default; an operator's own ``Ciphers`` line is left as it is."""
    default = asyncssh.encryption.get_default_encryption_algs()
    if list(chosen) != default:
        return None
    gcm = [alg for alg in default if alg.endswith(b"-gcm@openssh.com")]
    return [alg.decode("ascii") for alg in gcm + [alg for alg in default if alg not in gcm]]


class SshStream(StreamProcess):
    def __init__(self, host: SshHost, proc: asyncssh.SSHClientProcess[str], command: str) -> None:
        self._host = host
        self._proc = proc
        self.command = command
        self._stderr: list[str] = []
        self._stderr_task = asyncio.ensure_future(self._read_stderr())

    async def _read_stderr(self) -> None:
        with contextlib.suppress(asyncssh.Error, OSError):
            async for chunk in self._proc.stderr:
                self._stderr.append(chunk)

    def lines(self) -> AsyncIterator[str]:
        """The stream's lines (:meth:`line_batches`, one at a time)."""
        return self._batched_lines()

    async def line_batches(self) -> AsyncIterator[list[str]]:
        """The stream's lines, read a chunk at a time (whatever has arrived, up to
        :data:`READ_CHUNK`): one wake-up per SSH packet, not one ``readline`` per line, and the
        chunk's complete lines in one list. A line over :data:`STREAM_LINE_LIMIT` characters is
        cut out as it arrives (never held whole)."""
        stdout = self._proc.stdout
        limit = STREAM_LINE_LIMIT
        partial = ""
        skipping = False  # dropping the rest of an over-long line, up to its newline
        try:
            while chunk := await stdout.read(READ_CHUNK):
                self.bytes_read += len(chunk)
                if skipping:
                    end = chunk.find("\n")
                    if end < 0:
                        continue
                    skipping, chunk = False, chunk[end + 1:]
                text = partial + chunk
                *complete, partial = text.split("\n")
                if complete:
                    if "\r" in text or len(text) > limit:
                        complete = self._kept(complete)
                    if complete:
                        yield complete
                if len(partial) > limit:
                    self._oversized(partial)
                    partial, skipping = "", True
            if partial:
                yield [partial.rstrip("\r")]
        except (asyncssh.Error, OSError) as err:
            raise HostUnavailable(f"{self._host.name}: connection lost while streaming ({err})") from None

    def _kept(self, lines: list[str]) -> list[str]:
        """``lines`` without the over-long ones (counted) and their ``\\r`` ends."""
        kept = []
        for line in lines:
            if len(line) > STREAM_LINE_LIMIT:
                self._oversized(line)
            else:
                kept.append(line.rstrip("\r"))
        return kept

    async def wait(self) -> int | None:
        try:
            result = await self._proc.wait()
        except (asyncssh.Error, OSError):
            return None
        # asyncio.wait, not wait_for: on 3.11 wait_for loses a cancellation that arrives as the
        # stderr reader ends (as it does when the connection closes): the source would then
        # sleep through its back-off before noticing it was cancelled
        await asyncio.wait([self._stderr_task], timeout=2)
        return result.exit_status

    @property
    def stderr_text(self) -> str:
        return "".join(self._stderr)

    async def close(self) -> None:
        if self._host.closing:  # the connection's one DISCONNECT ends this channel with the rest
            self._stderr_task.cancel()
            return
        with contextlib.suppress(Exception):
            self._proc.stdin.write_eof()  # the watchdog on the host terminates the command
        with contextlib.suppress(Exception):
            self._proc.close()
            # asyncio.wait, not wait_for: on 3.11 wait_for loses a cancellation that arrives as
            # the channel closes (as it does when the whole connection is being closed)
            await asyncio.wait([asyncio.ensure_future(self._proc.wait_closed())], timeout=STREAM_CLOSE_TIMEOUT_S)
        self._stderr_task.cancel()


class SshHost(Host):
    """A host reached over SSH. One connection, supervised; see the module docstring."""

    def __init__(self, config: HostConfig) -> None:
        super().__init__(config)
        self._conn: asyncssh.SSHClientConnection | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self._tunnels: dict[tuple[str, int], tuple[str, int]] = {}
        self._ever_connected = False

    @property
    def address(self) -> str:
        return ssh_address(self.config)

    @property
    def closing(self) -> bool:
        """:meth:`close` has begun: streams then leave their channels to the connection's close
        (one message per host instead of an EOF and a close per stream, at 200 hosts 1,400
        packets to encrypt and send while leaving)."""
        return self._closing.is_set()

    # -- connection supervision ---------------------------------------------------------
    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._supervise(), name=f"ssh-{self.name}")

    def _options(self) -> dict[str, Any]:
        c, s = self.config, self.config.ssh
        opts: dict[str, Any] = {
            "keepalive_interval": s.keepalive_s,
            "keepalive_count_max": 3,
            "connect_timeout": s.connect_timeout_s,
        }
        if c.port:
            opts["port"] = c.port
        if c.user:
            opts["username"] = c.user
        if c.identity_file:
            opts["client_keys"] = [str(Path(c.identity_file).expanduser())]
        if s.known_hosts:
            opts["known_hosts"] = str(Path(s.known_hosts).expanduser())
        if s.ssh_config:
            opts["config"] = [str(Path(s.ssh_config).expanduser())]
        return opts

    async def connect_once(self) -> asyncssh.SSHClientConnection:
        """One connection attempt; errors become one-line :class:`HostError` messages."""
        assert self.config.host
        opts = self._options()
        try:
            known = opts.get("known_hosts")  # parsed once for every host that names this file
            shared: dict[str, Any] = {"known_hosts": shared_known_hosts(known)} if known else {}
            keys = opts.get("client_keys")  # and each identity file loaded once
            if keys:
                shared["client_keys"] = [pair for key in keys for pair in shared_client_keys(key)]
            kwargs = {**opts, **shared}
            # the options asyncssh would make (the ssh config read for this host, in a thread as
            # asyncssh does), to see whether that config chose the ciphers
            options = await asyncio.to_thread(asyncssh.SSHClientConnectionOptions, host=self.config.host,
                                              **kwargs)
            fast = gcm_first(options.encryption_algs)
            return await asyncssh.connect(self.config.host, options=options,
                                          **({"encryption_algs": fast} if fast else {}))
        except asyncssh.HostKeyNotVerifiable:
            raise await self._host_key_error(opts) from None
        except asyncssh.ConfigParseError as err:  # a ValueError: "FILE line 2: Invalid Port integer value: abc"
            given = opts.get("config")
            path, fix = ((given[0], "correct that line, or remove ssh.ssh_config to use ~/.ssh/config") if given
                         else ("~/.ssh/config", "correct that line"))
            raise HostUnavailable(f"{self.name}: ssh_config file {path} is invalid ({err}); fix: {fix}") from None
        except FileNotFoundError as err:
            raise self._missing_file_error(err, opts) from None
        except asyncssh.PermissionDenied:
            raise HostUnavailable(
                f"{self.name}: {self.address} refused our key (permission denied); check "
                f"identity_file / ssh-agent and the host's authorized_keys"
            ) from None
        except TimeoutError:
            raise HostUnavailable(
                f"{self.name}: {self.address} did not answer within "
                f"{self.config.ssh.connect_timeout_s:g}s; check the address and network"
            ) from None
        except OSError as err:
            if err.filename is not None:  # a local file we were to read (a key, a config)
                raise HostUnavailable(
                    f"{self.name}: cannot read {self._file_role(err.filename, opts)} "
                    f"{err.filename}: {err.strerror}; fix: check the path and its permissions"
                ) from None
            raise HostUnavailable(f"{self.name}: cannot connect to {self.address}: "
                                  f"{err.strerror or err}") from None
        except asyncssh.Error as err:
            reason = getattr(err, "strerror", None) or getattr(err, "reason", None) or str(err) or type(err).__name__
            raise HostUnavailable(f"{self.name}: cannot connect to {self.address}: {reason}") from None

    def _keyscan_args(self) -> str:
        port = f"-p {self.config.port} " if self.config.port else ""
        return f"{port}{shlex.quote(self.config.host or '')}"

    def _known_hosts_name(self) -> str:
        """The host as known_hosts records it: ``host``, or ``[host]:port`` off port 22."""
        host, port = self.config.host or "", self.config.port
        return f"[{host}]:{port}" if port and port != 22 else host

    def _file_role(self, filename: str, opts: dict[str, Any]) -> str:
        same = {str(Path(filename).expanduser())}
        if same & set(opts.get("client_keys") or ()):
            return "identity_file"
        if same & {opts.get("known_hosts")}:
            return "known_hosts file"
        if same & set(opts.get("config") or ()):
            return "ssh_config file"
        return "file"

    def _missing_file_error(self, err: FileNotFoundError, opts: dict[str, Any]) -> HostError:
        """A local file asyncssh could not find, named with its role and the fix."""
        path = str(err.filename or opts.get("known_hosts") or "known_hosts")
        role = self._file_role(path, opts)
        if role == "known_hosts file":
            return HostKeyError(
                f"{self.name}: known_hosts file {path} does not exist; create it with "
                f"`ssh-keyscan {self._keyscan_args()} >> {shlex.quote(path)}` after checking "
                f"the fingerprint"
            )
        if role == "identity_file":
            return HostUnavailable(
                f"{self.name}: identity_file {path} does not exist; fix: point identity_file at "
                f"the private key for {self.address} (e.g. ~/.ssh/id_ed25519), or remove it to "
                f"use ~/.ssh/config and the ssh agent"
            )
        if role == "ssh_config file":
            return HostUnavailable(
                f"{self.name}: ssh_config file {path} does not exist; fix: correct ssh.ssh_config "
                f"or remove it to use ~/.ssh/config"
            )
        return HostUnavailable(f"{self.name}: {path} does not exist (needed to connect to "
                               f"{self.address}); fix: check the path in the config")

    async def _host_key_error(self, opts: dict[str, Any]) -> HostKeyError:
        """Build the refusal message: the key the host offered and how to trust it."""
        fingerprint = "unknown fingerprint"
        with contextlib.suppress(Exception):
            key = await asyncio.wait_for(
                asyncssh.get_server_host_key(self.config.host or "", opts.get("port", ())), 5
            )
            if key is not None:
                fingerprint = f"{key.get_algorithm()} {key.get_fingerprint()}"
        known = opts.get("known_hosts") or "~/.ssh/known_hosts"
        changed = self._has_other_key(known)
        what = "CHANGED since it was recorded" if changed else "not in known_hosts"
        shown = known if known.startswith("~/") and " " not in known else shlex.quote(known)
        scan = f"`ssh-keyscan {self._keyscan_args()} >> {shown}`"
        fix = (
            f"if the host was really re-installed, remove the old entry with "
            f"`ssh-keygen -R {shlex.quote(self._known_hosts_name())} -f {shown}` and add the new "
            f"one with {scan}"
            if changed
            else f"verify it on the host, then {scan}"
        )
        return HostKeyError(f"{self.name}: host key of {self.address} is {what}: {fingerprint}; {fix}")

    def _has_other_key(self, known: str) -> bool:
        with contextlib.suppress(Exception):
            kh = asyncssh.read_known_hosts(str(Path(known).expanduser()))
            host = self.config.host or ""
            trusted = kh.match(host, host, self.config.port or 22)[0]
            return bool(trusted)
        return False

    async def _supervise(self) -> None:
        s = self.config.ssh
        attempt = 0
        while not self._closing.is_set():
            try:
                conn = await self.connect_once()
            except HostUnavailable as err:
                attempt += 1
                lost = self._ever_connected and attempt <= RECONNECTING_ATTEMPTS
                self._set_status(
                    state=ConnState.RECONNECTING if lost else ConnState.DOWN,
                    attempt=attempt, last_error=str(err),
                )
            except HostKeyError as err:
                attempt += 1
                self._set_status(state=ConnState.DOWN, attempt=attempt, last_error=str(err))
            else:
                self._conn = conn
                self._tunnels.clear()
                self._ever_connected = True
                attempt = 0
                self._set_status(state=ConnState.CONNECTED, attempt=0, last_ok=time.time(),
                                 last_error=None, next_retry_at=None)
                await self._wait_closed(conn)
                self._conn = None
                self._tunnels.clear()
                if self._closing.is_set():
                    break
                attempt = 1
                self._set_status(state=ConnState.RECONNECTING, attempt=attempt,
                                 last_error=f"{self.name}: connection to {self.address} lost")
            delay = backoff_delay(max(attempt, 1), s.backoff_initial_s, s.backoff_max_s)
            self._set_status(next_retry_at=time.time() + delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), delay)

    @staticmethod
    async def _wait_closed(conn: asyncssh.SSHClientConnection) -> None:
        with contextlib.suppress(Exception):
            await conn.wait_closed()

    async def close(self) -> None:
        """Stop supervising and close the connection (every stream over it ends with it; the
        host's stdin watchdogs end the remote commands). Bounded by :data:`CLOSE_TIMEOUT_S`
        per step; never swallows its own cancellation."""
        self._closing.set()
        task, self._task = self._task, None
        if task is not None:  # first, so that a connection it is just making cannot slip past
            task.cancel()
            await asyncio.wait([task], timeout=CLOSE_TIMEOUT_S)
        conn, self._conn = self._conn, None
        self._tunnels.clear()
        if conn is not None:
            conn.close()
            closed = asyncio.ensure_future(conn.wait_closed())
            await asyncio.wait([closed], timeout=CLOSE_TIMEOUT_S)
            if not closed.done():
                closed.cancel()
                conn.abort()
            elif not closed.cancelled():
                closed.exception()  # retrieved: a close reports nothing
        self._set_status(state=ConnState.CLOSED)

    def abort(self) -> None:
        self._closing.set()
        if self._task is not None:
            self._task.cancel()
        if self._conn is not None:
            self._conn.abort()

    def drop(self) -> None:
        """Abort the current connection (the supervisor reconnects); used by tests and actions."""
        if self._conn is not None:
            self._conn.abort()

    async def _demanded(self) -> asyncssh.SSHClientConnection:
        """The connection, opened first if the host was left on demand."""
        if self._status.state is ConnState.ON_DEMAND:
            await self.wait_connected(self.config.ssh.connect_timeout_s + 2)
        return self._require()

    def _require(self) -> asyncssh.SSHClientConnection:
        if self._conn is None:
            reason = f" ({self._status.last_error})" if self._status.last_error else ""
            raise HostUnavailable(f"{self.name}: not connected, state {self._status.state}{reason}")
        return self._conn

    # -- operations -----------------------------------------------------------------------
    async def run(self, cmd: Command, *, timeout: float = 30.0, input: str | None = None) -> CommandResult:
        conn = await self._demanded()
        line = to_shell(cmd)
        t0 = time.monotonic()
        try:
            res = await conn.run(line, check=False, timeout=timeout, input=input)
        except asyncssh.TimeoutError:
            raise TimeoutError(f"{self.name}: `{line}` did not finish within {timeout:g}s") from None
        except (asyncssh.Error, OSError) as err:
            raise HostUnavailable(f"{self.name}: connection lost while running `{line}` ({err})") from None
        self._set_status(last_ok=time.time())
        return CommandResult(line, res.exit_status, _text(res.stdout), _text(res.stderr),
                             time.monotonic() - t0)

    @contextlib.asynccontextmanager
    async def _open_stream(self, cmd: Command) -> AsyncIterator[StreamProcess]:
        conn = await self._demanded()
        line = to_shell(cmd)
        try:
            proc = await conn.create_process(stdin_watchdog(cmd), encoding="utf-8", errors="replace")
        except (asyncssh.Error, OSError) as err:
            raise HostUnavailable(f"{self.name}: cannot start `{line}` ({err})") from None
        stream = SshStream(self, proc, line)
        try:
            yield stream
        finally:
            await stream.close()

    async def reach(self, host: str, port: int) -> tuple[str, int]:
        key = (host, port)
        if key in self._tunnels:
            return self._tunnels[key]
        conn = await self._demanded()
        try:
            listener = await conn.forward_local_port("127.0.0.1", 0, host, port)
        except (asyncssh.Error, OSError) as err:
            raise HostUnavailable(f"{self.name}: cannot open a tunnel to {host}:{port} ({err})") from None
        self._tunnels[key] = ("127.0.0.1", listener.get_port())
        return self._tunnels[key]


def _text(value: str | bytes | None) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
