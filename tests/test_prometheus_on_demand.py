"""SSH on demand: an SSH host whose every sample comes from Prometheus opens no connection at
start (checked in its REAL sshd's log), reads ``on_demand`` / "via Prometheus", and an action on
it connects first (a step saying so) and then works over that connection."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import running_lab, wait_for
from specconsole.actions.on_demand import connect_on_demand
from specconsole.config import load_config
from specconsole.hosts import ConnState
from specconsole.lab.parts.environment import Lab, LabOptions, console_and_ssh, toml_str
from specconsole.lab.testing import prometheus_fleet
from specconsole.monitor import Fleet
from specconsole.process_tree import process_table
from specconsole.report import status_json, status_text
from specconsole.steps import StepEvent, Steps
from specconsole.ui.style.formatting import badge

pytestmark = pytest.mark.lab


@pytest.fixture
def labs(tmp_path: Path, lab_parts: None) -> Iterator[tuple[Lab, prometheus_fleet.PromLab]]:
    """The lab's two sshd hosts and a real Prometheus scraping the DCGM double's node-000."""
    if prometheus_fleet.prometheus_binary() is None:
        pytest.skip("the prometheus binary is absent (apt-get install prometheus)")
    for lab in running_lab(tmp_path / "lab", LabOptions(trainer=False, sglang=False)):
        prom = prometheus_fleet.start(tmp_path / "prom", hosts=1, gpus=2, scrape_interval_s=0.5)
        try:
            yield lab, prom
        finally:
            prom.stop()


def _config(lab: Lab, prom: prometheus_fleet.PromLab, tmp_path: Path) -> Path:
    serve = lab.state.hosts["serve"]
    path = tmp_path / "console.toml"
    path.write_text(f"""{console_and_ssh(lab, tmp_path / "audit.log", tmp_path / "state", connect_timeout_s=5)}
[prometheus]
url = {toml_str(prom.url)}
interval_s = 0.5
timeout_s = 3
history_s = 0
host_map = {{ "node-000" = "serve" }}

[[hosts]]
name = "serve"
role = "serve"
connect = "ssh"
host = {toml_str(serve.address)}
port = {serve.port}
user = "root"
identity_file = {toml_str(lab.keys / "client_ed25519")}
gpu.source = "prometheus"

[hosts.sglang]
source = "prometheus"
base_url = "http://127.0.0.1:30000"
""")
    return path


def _logins(lab: Lab) -> int:
    """Connections the serve host's sshd accepted (its own log, LogLevel VERBOSE)."""
    log = lab.root("serve") / "logs" / "sshd.log"
    return log.read_text(errors="replace").count("Accepted publickey") if log.exists() else 0


async def test_prometheus_fed_ssh_host_connects_only_when_an_action_needs_it(
        labs: tuple[Lab, prometheus_fleet.PromLab], tmp_path: Path) -> None:
    lab, prom = labs
    await asyncio.to_thread(prom.wait_scraped, 60.0)
    fleet = Fleet(load_config(_config(lab, prom, tmp_path)))
    messages: list[str] = []
    fleet.events.subscribe(lambda e: messages.append(e.message))
    before = _logins(lab)
    await fleet.start()
    try:
        def gpus_read() -> bool:
            s = fleet.statuses()[0]
            return s.gpu is not None and s.gpu.value.ok and len(s.gpu.value.gpus) == 2
        await wait_for(gpus_read, 45, what="serve's GPUs read through Prometheus")
        await asyncio.sleep(1.0)  # a connection made at start would have been accepted by now
        status = fleet.statuses()[0]
        assert _logins(lab) == before, "an SSH connection was opened although nothing needed it"
        assert status.connection.state is ConnState.ON_DEMAND and status.reachable
        assert status_json([status])["hosts"][0]["connection"]["state"] == "on_demand"
        assert "serve (serve, root@" in status_text([status])
        assert "via Prometheus (ssh on demand)" in status_text([status])
        assert badge(status.connection, 0.0)[0].startswith("◇ via Prometheus")
        assert any("not connected at start (serve)" in m for m in messages), messages

        # an action: connects first (a step saying so), then runs over that connection
        host = fleet.host("serve")
        assert host is not None
        events: list[StepEvent] = []
        steps = Steps("check", events.append, host="serve")
        await connect_on_demand(host, steps, 15)
        table = await process_table(host, steps)
        lines = [e.line() for e in events]
        assert any("connecting to serve over SSH" in line and "Prometheus" in line for line in lines), lines
        assert any("connected to serve" in line for line in lines), lines
        assert host.status.state is ConnState.CONNECTED
        assert lab.state.hosts["serve"].sshd_pid in table  # the host's own process table
        await wait_for(lambda: _logins(lab) == before + 1, 10, what="one login in sshd's log")
        assert json.dumps(status_json(fleet.statuses())).count('"state": "connected"') == 1
        await connect_on_demand(host, steps, 15)  # already connected: no second step, no login
        assert sum("connecting to serve over SSH" in e.line() for e in events) == 1
        assert _logins(lab) == before + 1
    finally:
        await fleet.stop()


async def test_a_command_on_an_on_demand_host_opens_the_connection_itself(
        labs: tuple[Lab, prometheus_fleet.PromLab], tmp_path: Path) -> None:
    """Logs, eval, checkpoints and tunnels use the host directly: the first command connects."""
    lab, prom = labs
    fleet = Fleet(load_config(_config(lab, prom, tmp_path)))
    await fleet.start()
    try:
        host = fleet.host("serve")
        assert host is not None and host.status.state is ConnState.ON_DEMAND
        before = _logins(lab)
        result = await host.run(["hostname"], timeout=20)
        assert result.ok and result.stdout.strip()
        assert host.status.up  # connected now
        await wait_for(lambda: _logins(lab) == before + 1, 10, what="one login in sshd's log")
    finally:
        await fleet.stop()
