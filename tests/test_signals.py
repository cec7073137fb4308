"""Leaving promptly and leaving nothing behind (issue 9, item 7).

The real ``specconsole`` in a tmux pane, watching a fleet of SSH hosts (all served by the lab's
two sshds) plus a local host: ``q``, SIGTERM, SIGINT and the terminal going away (tmux
``kill-session``: the pty closes and the kernel sends SIGHUP) each end it within the issue's 2 s
(asserted with a margin for a loaded machine), leaving nothing behind: no process that carries
this run's environment marker (the local host's ``tail -F`` and ``nvidia-smi -lms``), and no
remote stream (each one's stdin watchdog ends it when its channel closes). ``status --watch``
stops on SIGINT and SIGTERM the same way. Below them, the stop path itself: a closed host ends
its waiters, and ``Fleet.stop`` is bounded even when a task ignores its cancellation.

Robust by construction: the console's pid is known from the start (the pane runs it with
``exec``) and its end is read from ``/proc``, never from tmux's pane status; the clock starts
right before the key or signal is sent and stops when the pid is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import running_lab, wait_for
from specconsole.base.pids import alive
from specconsole.lab.parts.environment import Lab, LabOptions
from specconsole.lab.procs import sessions, with_environ
from specconsole.lab.testing.synthetic_fleet import write_fleet_config, write_training_log

pytestmark = [pytest.mark.timeout(240), pytest.mark.xdist_group("signals-lab")]  # one module lab per run

EXE = Path(sys.executable).parent / "specconsole"
#: SSH hosts in the fleet (each its own connection and streams), plus one local host.
HOSTS = 24
#: The issue's bar is 2 s from the key or signal until the process is gone; the margin is for a
#: machine shared with other test runs (figures from bench/console_exit.py are in the report).
EXIT_BOUND_S = 4.0


class Tmux:
    """A private tmux server (never the user's), kept up by a "keep" session."""

    def __init__(self, tmp_path: Path) -> None:
        self.base = ["tmux", "-L", f"specconsole-signals-{os.getpid()}-{uuid.uuid4().hex[:8]}", "-f", "/dev/null"]
        self("new-session", "-d", "-s", "keep", "sleep 86400")

    def __call__(self, *args: str, check: bool = True) -> str:
        res = subprocess.run([*self.base, *args], capture_output=True, text=True, check=False)
        if check and res.returncode != 0:
            raise AssertionError(f"tmux {args[:3]}: {res.stderr.strip()}")
        return res.stdout

    def kill_server(self) -> None:
        subprocess.run([*self.base, "kill-server"], capture_output=True, check=False)


def marked(mark: str) -> list[int]:
    """Live processes whose environment carries this run's marker (the console and its children)."""
    return with_environ(f"SPECCONSOLE_EXIT_MARK={mark}".encode())


def connected_hosts(audit: Path) -> set[str]:
    """Hosts the console reported connected (its audit log), local excepted."""
    names = set()
    lines = audit.read_text().splitlines() if audit.exists() else []
    for line in lines:
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if event["message"].startswith("connected to ") and event["source"] != "local":
                names.add(event["source"])
    return names


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    if not shutil.which("tmux"):
        pytest.fail("tmux is required: apt-get install -y tmux (scripts/setup.sh does this)")
    server = Tmux(tmp_path)
    try:
        yield server
    finally:
        server.kill_server()


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory, lab_parts: None) -> Iterator[Lab]:
    """Two SSH hosts for the tests that only connect to them (each ends when its remote streams have)."""
    yield from running_lab(tmp_path_factory.mktemp("signals") / "lab", LabOptions(trainer=False, sglang=False))


@pytest.mark.parametrize("how", ["q", "SIGTERM", "SIGINT", "SIGHUP"])
@pytest.mark.serial  # asserts a time bound
def test_console_leaves_within_bound_and_leaves_nothing(hosts: Lab, tmux: Tmux, tmp_path: Path,
                                                        how: str) -> None:
    lab_hosts = hosts
    audit = tmp_path / "audit.log"
    config = write_fleet_config(lab_hosts, tmp_path / "fleet.toml", HOSTS, log_path=write_training_log(
        tmp_path / "train.jsonl"), audit_log=audit, state_dir=tmp_path / "state", gpu_every=4, local=True)
    mark = uuid.uuid4().hex
    path = f"{lab_hosts.root('train') / 'bin'}:{os.environ.get('PATH', '')}"  # the local host's nvidia-smi
    frame = tmp_path / "first-full-frame"  # written once every host's first data is on screen
    tmux("new-session", "-d", "-s", "c", "-x", "160", "-y", "48", "-e", f"SPECCONSOLE_EXIT_MARK={mark}",
         "-e", f"SPECCONSOLE_FIRST_FRAME_FILE={frame}", "-e", f"PATH={path}", f"exec {EXE} --config {config}")
    pid = int(tmux("display-message", "-p", "-t", "c", "#{pane_pid}").strip())
    try:
        # running for real and settled: every host connected and shown, the local streams are our
        # children, remote streams run on the lab's sshds
        def connected() -> int:
            return len(connected_hosts(audit))

        ready = wait_for(lambda: alive(pid) and frame.exists() and connected() == HOSTS and len(marked(mark)) >= 3
                     and len(sessions(lab_hosts)) >= HOSTS, 150, step=0.5)
        assert ready, (f"console not running with every host: alive={alive(pid)}, frame={frame.exists()}, "
                       f"connected={connected()}, "
                       f"children={len(marked(mark)) - 1}, remote={len(sessions(lab_hosts))}\n"
                       + tmux("capture-pane", "-p", "-t", "c", check=False))
        t0 = time.monotonic()
        if how == "q":
            tmux("send-keys", "-t", "c", "q")
        elif how == "SIGHUP":
            tmux("kill-session", "-t", "c")  # the terminal goes away
        else:
            os.kill(pid, getattr(signal, how))
        gone = wait_for(lambda: not alive(pid), 30, step=0.01)
        took = time.monotonic() - t0
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    print(f"\n{how}: gone {took:.2f} s after it was sent ({HOSTS} SSH hosts + 1 local)")
    assert gone, f"still running 30 s after {how}"
    assert took < EXIT_BOUND_S, f"took {took:.2f} s to leave after {how} (the bar is 2 s)"
    left = marked(mark)
    assert not left, f"processes left behind: {[Path(f'/proc/{p}/cmdline').read_bytes() for p in left]}"
    assert wait_for(lambda: not sessions(lab_hosts), 30, step=0.2), \
        f"remote streams left on the hosts: {len(sessions(lab_hosts))} processes"
    if how != "q":
        assert f"{how} received" in audit.read_text()


#: ``status --watch``: SSH hosts in the fleet (the issue saw SIGINT ignored for 30 s at 800).
STATUS_HOSTS = 40


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_status_watch_stops_on_signal(hosts: Lab, tmp_path: Path, name: str) -> None:
    lab_hosts = hosts
    sig = signal.Signals[name]
    config = write_fleet_config(lab_hosts, tmp_path / "fleet.toml", STATUS_HOSTS, log_path=write_training_log(
        tmp_path / "train.jsonl"), audit_log=tmp_path / "audit.log", state_dir=tmp_path / "state", gpu_every=8)
    proc = subprocess.Popen([str(EXE), "status", "--config", str(config), "--json", "--watch", "--interval", "0.5",
                             "--timeout", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline() or "{}")  # every host connected or given up on
        assert len(first.get("hosts", [])) == STATUS_HOSTS, first
        assert wait_for(lambda: len(sessions(lab_hosts)) >= STATUS_HOSTS, 60, step=0.2)
        t0 = time.monotonic()
        proc.send_signal(sig)
        gone = wait_for(lambda: proc.poll() is not None, 30, step=0.01)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
        _, err = proc.communicate(timeout=30)
    print(f"\nstatus --watch, {sig.name}: gone {took:.2f} s after it was sent ({STATUS_HOSTS} SSH hosts)", err)
    assert gone, f"status --watch still running 30 s after {sig.name}"
    assert took < EXIT_BOUND_S, f"took {took:.2f} s to stop after {sig.name} (the bar is 2 s)"
    assert proc.returncode == 128 + sig, err
    assert f"{sig.name} received" in err and "Traceback" not in err, err
    assert wait_for(lambda: not sessions(lab_hosts), 30, step=0.2), \
        f"remote streams left on the hosts: {len(sessions(lab_hosts))} processes"


# -- the stop path itself: bounded, and nothing keeps waiting for a closed host -----------------

async def test_a_closed_host_ends_its_waiters(lab_hosts: Lab) -> None:
    """A source loop that lost its cancellation (Python 3.11's ``wait_for`` drops one that arrives
    as the awaited channel closes) goes back to ``wait_connected()``: once the host is closed that
    must end, not wait forever (it kept ``q`` waiting for its 10 s timeout)."""
    from specconsole.base.errors import HostUnavailable
    from specconsole.config import load_config
    from specconsole.hosts.ssh import SshHost

    host = SshHost(load_config(lab_hosts.config_path).host("train"))
    await host.start()
    assert await host.wait_connected(30), host.status
    lab_hosts.stop_sshd("train")  # the host goes away; the supervisor keeps retrying
    host.drop()
    assert await wait_for(lambda: not host.status.up, 10), host.status
    waiter = asyncio.ensure_future(host.wait_connected())
    await host.close()
    done, _ = await asyncio.wait([waiter], timeout=10)
    assert waiter in done, "wait_connected() still waiting 10 s after the host was closed"
    assert isinstance(waiter.exception(), HostUnavailable)
    with pytest.raises(HostUnavailable, match="closed"):
        await host.wait_connected()


class StubbornSource:
    """A source whose task ignores cancellation until released (a lost cancellation, made certain)."""

    def __init__(self) -> None:
        self.released = False

    async def run(self, publish: object) -> None:
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if self.released:
                    raise


async def test_fleet_stop_is_bounded_and_closes_every_connection(hosts: Lab, tmp_path: Path) -> None:
    lab_hosts = hosts
    from specconsole.config import load_config
    from specconsole.hosts import ConnState
    from specconsole.monitor import Fleet

    config = load_config(write_fleet_config(
        lab_hosts, tmp_path / "fleet.toml", 6, log_path=write_training_log(tmp_path / "train.jsonl"),
        audit_log=tmp_path / "audit.log", state_dir=tmp_path / "state", gpu_every=2))
    fleet = Fleet(config)
    stubborn = StubbornSource()
    first = next(iter(fleet.monitors.values()))
    first._sources["stubborn"] = stubborn  # one task that will not end when cancelled
    await fleet.start()
    try:
        statuses = await fleet.first_snapshot(60)
        assert all(s.reachable for s in statuses), [(s.name, s.connection) for s in statuses]
        assert await wait_for(lambda: len(sessions(lab_hosts)) >= 6, 30)
        stop = asyncio.ensure_future(fleet.stop())
        done, _ = await asyncio.wait([stop], timeout=20)
        assert stop in done, "Fleet.stop() still running 20 s later: one stubborn task held it"
        assert stop.exception() is None
        assert all(m.host.status.state is ConnState.CLOSED for m in fleet.monitors.values())
        # every connection is closed, so every remote stream ends (its stdin watchdog)
        assert await wait_for(lambda: not sessions(lab_hosts), 30), \
            f"remote streams left on the hosts: {len(sessions(lab_hosts))} processes"
    finally:
        stubborn.released = True
        for task in asyncio.all_tasks():
            if task.get_name().endswith("-stubborn"):
                task.cancel()
        await fleet.stop()


