"""Every HTTP body the console reads is streamed with a cap: a server answering 50 MB is hung up
on at the cap (8 MiB for SGLang's /metrics, 1 MiB for its JSON endpoints, [prometheus]
max_body_mib for Prometheus), and the reason is one line naming the endpoint, the cap and the key
that raises it. A real loopback server (``specconsole.lab.testing.flood_http``) generates the body
lazily and counts what it managed to send."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import wait_for
from specconsole.config import HostConfig, SglangConfig
from specconsole.hosts.local import LocalHost
from specconsole.lab.testing.flood_http import MIB, FloodServer
from specconsole.sglang import SglangClient, SglangError
from specconsole.sources.prometheus import PrometheusClient, PrometheusError
from specconsole.sources.sglang import ServerState, SglangSource

FLOOD = 50 * MIB
#: what loopback socket buffers may hold beyond what the client read before it hung up
IN_FLIGHT = 16 * MIB


@pytest.fixture
def flood() -> Iterator[Callable[..., FloodServer]]:
    servers: list[FloodServer] = []

    def make(paths: dict[str, int], **kw: bool) -> FloodServer:
        servers.append(FloodServer(paths, **kw))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


async def stopped_early(server: FloodServer, path: str, cap: int) -> None:
    """The server could not send the whole body: the client hung up near the cap."""
    await wait_for(lambda: server.hung_up(path) + server.finished(path) >= 1, 10,
                   what=f"the server's {path} answer to end")
    assert server.finished(path) == 0, f"the client read all {FLOOD} bytes of {path}"
    assert server.sent(path) <= cap + IN_FLIGHT


@pytest.mark.parametrize("declare_length", [False, True], ids=["until-close", "content-length"])
async def test_a_50_mb_metrics_answer_is_cut_at_8_mib(flood: Callable[..., FloodServer],
                                                     declare_length: bool) -> None:
    server = flood({"/metrics": FLOOD}, declare_length=declare_length)
    async with SglangClient(server.url, timeout_s=20) as client:
        t0 = time.monotonic()
        with pytest.raises(SglangError) as info:
            await client.metrics()
        took = time.monotonic() - t0
    assert info.value.kind == "too_large"
    assert str(info.value) == (f"{server.url}/metrics answered more than 8 MiB; raise "
                               "hosts.sglang.max_metrics_mib or check what the server sends there")
    assert took < 5
    await stopped_early(server, "/metrics", 8 * MIB)


async def test_json_endpoints_are_cut_at_their_own_cap(flood: Callable[..., FloodServer]) -> None:
    server = flood({"/server_info": FLOOD, "/health": FLOOD})
    async with SglangClient(server.url, timeout_s=20, max_body_bytes=MIB // 2) as client:
        for call, path in ((client.server_info, "/server_info"), (client.health, "/health")):
            with pytest.raises(SglangError) as info:
                await call()
            assert info.value.kind == "too_large"
            assert str(info.value) == (f"{server.url}{path} answered more than 0.5 MiB; raise "
                                       "hosts.sglang.max_body_mib or check what the server sends there")
            await stopped_early(server, path, MIB // 2)


async def test_the_source_reports_the_cap_as_its_error(flood: Callable[..., FloodServer]) -> None:
    """The serving pane and ``status --json`` show a snapshot's ``error``: here, the cap."""
    server = flood({"/metrics": FLOOD})
    cfg = SglangConfig(base_url=server.url, interval_s=0.2, timeout_s=20, max_metrics_mib=2)
    source = SglangSource(LocalHost(HostConfig(name="gpu1", role="serve")), cfg)
    snap = await source.poll()
    await source._drop_client()
    assert snap.state is ServerState.ERROR and snap.metrics is None
    assert snap.error == (f"{server.url}/metrics answered more than 2 MiB; raise "
                          "hosts.sglang.max_metrics_mib or check what the server sends there")
    await stopped_early(server, "/metrics", 2 * MIB)


async def test_prometheus_answers_are_capped(flood: Callable[..., FloodServer]) -> None:
    server = flood({"/api/v1/query": FLOOD})
    client = PrometheusClient(server.url, timeout_s=20, max_body_bytes=4 * MIB)
    try:
        with pytest.raises(PrometheusError) as info:
            await client.query("up")
    finally:
        await client.aclose()
    assert str(info.value) == (f"Prometheus at {server.url}/api/v1/query answered more than 4 MiB; "
                               "raise [prometheus] max_body_mib or check what answers there")
    await stopped_early(server, "/api/v1/query", 4 * MIB)


@pytest.mark.serial  # its peak RSS grows with the load (62 MiB alone, 151 MiB once under 4 workers)
def test_status_json_says_why_and_the_process_stays_small(flood: Callable[..., FloodServer],
                                                          tmp_path: Path) -> None:
    """``specconsole status --json`` against a 50 MB /metrics: the sglang error names the cap,
    and the process's peak RSS does not hold the body."""
    server = flood({"/metrics": FLOOD})
    config = tmp_path / "console.toml"
    config.write_text(f'[[hosts]]\nname = "serve"\nrole = "serve"\ngpu.source = "none"\n'
                      f'[hosts.sglang]\nbase_url = "{server.url}"\ntimeout_s = 20\n')
    script = ("import resource, runpy, sys; sys.argv = ['specconsole'] + sys.argv[1:]\n"
              "try:\n    runpy.run_module('specconsole', run_name='__main__')\n"
              "finally:\n    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n")
    res = subprocess.run([sys.executable, "-c", script, "status", "--json", "--config", str(config)],
                         capture_output=True, text=True, timeout=120)
    data = json.loads(res.stdout)
    sglang = data["hosts"][0]["sglang"]["value"]
    assert sglang["state"] == "error"
    assert sglang["error"] == (f"{server.url}/metrics answered more than 8 MiB; raise "
                               "hosts.sglang.max_metrics_mib or check what the server sends there")
    peak_kib = int(res.stderr.strip().splitlines()[-1])
    assert peak_kib < 150 * 1024, f"peak RSS {peak_kib / 1024:.0f} MiB"
