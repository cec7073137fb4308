"""The Prometheus source: config, query building and conversion, and the whole path through a
REAL Prometheus server (Debian package ``prometheus``) scraping the DCGM exporter double and the
SGLang simulator, both on loopback."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import shared_sglang_judge, wait_for
from specconsole.base.errors import ConfigError
from specconsole.config import load_config, parse_config
from specconsole.formats.nvidia_smi import GpuState
from specconsole.lab.doubles.dcgm_exporter import FB_RESERVED_MIB, FB_TOTAL_MIB, MODEL, expected, gpu_uuid
from specconsole.lab.doubles.dcgm_exporter import Fleet as ExporterFleet
from specconsole.lab.parts.environment import free_port
from specconsole.lab.testing import prometheus_fleet
from specconsole.monitor import Fleet
from specconsole.sources.prometheus import (
    FB_RESERVED,
    UTIL,
    HostNames,
    Queries,
    gpu_fields,
    gpu_identities,
    gpu_snapshots,
    uses_prometheus,
)
from specconsole.sources.sglang import ServerState
from specconsole.ui.panes.history import History

HOSTS, GPUS = 3, 2


def _cfg(extra: str = "", gpu: str = "prometheus") -> dict[str, Any]:
    import tomllib

    return tomllib.loads(f"""
{extra}
[[hosts]]
name = "a"
role = "serve"
connect = "ssh"
host = "gpu-node-7"
gpu.source = "{gpu}"
sglang.base_url = "http://127.0.0.1:30000"
""")


# -- config and conversion (no server) ---------------------------------------------------------
def test_config_reads_prometheus_and_refuses_a_source_without_it() -> None:
    c = parse_config(_cfg('[prometheus]\nurl = "http://prom:9090"\nhost_map = { "n7" = "a" }'))
    assert c.prometheus is not None and c.prometheus.host_map == {"n7": "a"}
    assert c.prometheus.host_label == "Hostname" and c.prometheus.interval_s == 5.0
    assert uses_prometheus(c, c.hosts[0], "gpu") and not uses_prometheus(c, c.hosts[0], "sglang")
    with pytest.raises(ConfigError, match=r"gpu.source: \"prometheus\" needs a \[prometheus\]"):
        parse_config(_cfg())
    with pytest.raises(ConfigError, match=r"prometheus.url: not an http\(s\) URL"):
        parse_config(_cfg('[prometheus]\nurl = "prom:9090"'))
    with pytest.raises(ConfigError, match=r"prometheus.host_map.n7: must be a non-empty string, got 3"):
        parse_config(_cfg('[prometheus]\nurl = "http://p:1"\nhost_map = { "n7" = 3 }'))
    with pytest.raises(ConfigError, match=r"prometheus.host_label: not a Prometheus label name"):
        parse_config(_cfg('[prometheus]\nurl = "http://p:1"\nhost_label = "host-name"'))
    every = parse_config(_cfg('[prometheus]\nurl = "http://p:1"\nall_hosts = true', gpu="auto"))
    assert uses_prometheus(every, every.hosts[0], "gpu")
    assert uses_prometheus(every, every.hosts[0], "sglang")


def test_host_names_follow_label_fallbacks_and_the_map() -> None:
    c = parse_config(_cfg('[prometheus]\nurl = "http://p:1"\nhost_map = { "n7" = "a" }'))
    assert c.prometheus is not None
    names = HostNames(c.prometheus, c.hosts)
    assert names({"Hostname": "n7"}) == "a"            # host_map
    assert names({"hostname": "gpu-node-7"}) == "a"    # lowercase label, the SSH host
    assert names({"instance": "gpu-node-7:9400"}) == "a"  # instance without its port
    assert names({"Hostname": "other"}) is None and names.unknown == {"other"}
    assert "by (__name__, Hostname, hostname, instance, gpu)" in Queries().gpu_values()
    assert Queries("node").gpu_util() == "max by (node, hostname, instance, gpu) (DCGM_FI_DEV_GPU_UTIL)"


def test_gpu_snapshots_convert_dcgm_vectors() -> None:
    c = parse_config(_cfg('[prometheus]\nurl = "http://p:1"'))
    assert c.prometheus is not None
    names = HostNames(c.prometheus, c.hosts)
    lab = {"Hostname": "a", "gpu": "1"}
    util = gpu_fields([(lab, 1.0, 40.0), ({"Hostname": "a", "gpu": "2"}, 1.0, 7.0)], names, UTIL)
    detail = gpu_fields([({**lab, "__name__": "DCGM_FI_DEV_FB_USED"}, 1.0, 1000.0),
                         ({**lab, "__name__": "DCGM_FI_DEV_FB_FREE"}, 1.0, 3000.0),
                         ({"Hostname": "gone", "gpu": "0", "__name__": "DCGM_FI_DEV_FB_USED"}, 1.0,
                          1.0)], names)
    ident = gpu_identities([({**lab, "UUID": "GPU-x", "modelName": "NVIDIA H200"}, 1.0, 1.0)], names)
    snaps = gpu_snapshots(util, detail, ident, 5.0)
    assert list(snaps) == ["a"]  # a GPU is there while it has a utilization series
    snap = snaps["a"]
    assert [g.index for g in snap.gpus] == [1, 2] and snap.gpus[1].memory_used_mib is None
    g = snap.gpus[0]
    assert snap.state is GpuState.OK and g.index == 1 and g.uuid == "GPU-x"
    assert g.name == "NVIDIA H200" and g.utilization_pct == 40.0 and g.memory_total_mib == 4000.0
    assert g.power_draw_w is None and "power.draw" in g.unavailable


@pytest.mark.parametrize("reserved", [True, False], ids=["with FB_RESERVED", "without"])
def test_memory_total_counts_the_reserved_memory_when_the_exporter_has_it(reserved: bool) -> None:
    """FB_FREE leaves the driver's reserved memory out: total = USED + FREE + RESERVED where
    dcgm-exporter publishes RESERVED, USED + FREE where it does not (older counters files);
    the exporter double's text goes through the same query shape Prometheus answers with."""
    c = parse_config(_cfg('[prometheus]\nurl = "http://p:1"'))
    assert c.prometheus is not None
    names = HostNames(c.prometheus, c.hosts)
    assert FB_RESERVED in Queries().gpu_values()
    want = expected(0, 1, reserved=reserved)
    assert (FB_RESERVED in want) is reserved
    lab = {"Hostname": "a", "gpu": "1"}
    detail = gpu_fields([({**lab, "__name__": k}, 1.0, float(v)) for k, v in want.items()
                         if k != UTIL], names)
    util = gpu_fields([(lab, 1.0, want[UTIL])], names, UTIL)
    g = gpu_snapshots(util, detail, {}, 5.0)["a"].gpus[0]
    assert g.memory_used_mib == want["DCGM_FI_DEV_FB_USED"]
    assert g.memory_total_mib == FB_TOTAL_MIB
    assert g.unavailable == {}
    # a missing field is still said, RESERVED present or not
    del detail["a"][1]["DCGM_FI_DEV_GPU_TEMP"]
    g = gpu_snapshots(util, detail, {}, 5.0)["a"].gpus[0]
    assert g.temperature_c is None and "temperature.gpu" in g.unavailable


def test_the_exporter_double_publishes_fb_reserved_unless_told_not_to() -> None:
    """What the lab's exporter serves, as dcgm-exporter's default-counters.csv does."""
    with_it = ExporterFleet(hosts=1, gpus=1).text()
    without = ExporterFleet(hosts=1, gpus=1, reserved=False).text()
    assert f"# TYPE {FB_RESERVED} gauge" in with_it
    assert f'{FB_RESERVED}{{gpu="0",' in with_it and f"}} {FB_RESERVED_MIB}\n" in with_it
    assert FB_RESERVED not in without
    free = {t: int(next(line for line in t.splitlines()
                        if line.startswith("DCGM_FI_DEV_FB_FREE{")).rsplit(" ", 1)[1])
            for t in (with_it, without)}
    assert free[without] - free[with_it] == FB_RESERVED_MIB


# -- through a real Prometheus -----------------------------------------------------------------
def _need_prometheus() -> None:
    if prometheus_fleet.prometheus_binary() is None:
        pytest.skip("the prometheus binary is absent (apt-get install prometheus; "
                    "scripts/setup.sh installs it)")


def _start_sim(tmp_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text(
        '{"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "block_size": 16}')
    port = free_port()
    shared_sglang_judge()
    env = dict(os.environ, SGLANG_SIM_STARTUP_S="0.2", SGLANG_SIM_STEP_MS="1")
    with (tmp_path / "sim.err").open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "specconsole.lab.doubles.sglang_sim", "serve",
                                 "--model-path", "Qwen/Qwen3-8B", "--speculative-algorithm",
                                 "DFLASH", "--speculative-draft-model-path", str(draft),
                                 "--enable-metrics", "--port", str(port)],
                                stdout=subprocess.DEVNULL, stderr=err, env=env)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert proc.poll() is None, (tmp_path / "sim.err").read_text()
        try:
            return httpx.get(f"{url}/health", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    if not wait_for(healthy, 60, step=0.05):
        proc.kill()
        raise AssertionError("the SGLang simulator did not become healthy")
    return proc, url


@pytest.fixture
def prom_lab(tmp_path: Path) -> Iterator[tuple[prometheus_fleet.PromLab, str]]:
    _need_prometheus()
    sim, sim_url = _start_sim(tmp_path)
    lab = None
    try:
        lab = prometheus_fleet.start(tmp_path / "prom", hosts=HOSTS, gpus=GPUS, scrape_interval_s=0.5,
                               sglang_targets={"serve-0": sim_url})
        yield lab, sim_url
    finally:
        if lab is not None:
            lab.stop()
        sim.send_signal(signal.SIGTERM)
        try:
            sim.wait(10)
        except subprocess.TimeoutExpired:
            sim.kill()
            sim.wait(5)


@pytest.mark.lab
async def test_fleet_reads_gpus_sglang_and_history_through_prometheus(
        prom_lab: tuple[prometheus_fleet.PromLab, str], tmp_path: Path) -> None:
    lab, sim_url = prom_lab
    await asyncio.to_thread(lab.wait_scraped, 60.0, 4)  # history exists before the console
    cfg_path = prometheus_fleet.write_console_config(tmp_path / "console.toml", lab, interval_s=0.5,
                                               history_s=60, serve_hosts={"serve-0": sim_url})
    config = load_config(cfg_path)
    fleet = Fleet(config)
    assert fleet.prometheus is not None
    await fleet.start()
    try:
        def ready() -> bool:
            st = {s.name: s for s in fleet.statuses()}
            gpus = [st[h].gpu for h in lab.host_names]
            serve = st["serve-0"].sglang
            return all(g is not None and g.value.ok and g.value.gpus[0].uuid is not None
                       and g.value.gpus[0].memory_used_mib is not None for g in gpus) and \
                serve is not None and serve.value.state is ServerState.HEALTHY
        await wait_for(ready, 45, what="GPU samples of every host and serve-0 healthy")
        statuses = {s.name: s for s in fleet.statuses()}
        assert len(statuses) == HOSTS + 1
        for h, name in enumerate(lab.host_names):
            sample = statuses[name].gpu
            assert sample is not None and not sample.is_stale()
            gpus = sample.value.gpus
            assert [g.index for g in gpus] == list(range(GPUS))
            for g in gpus:
                want = expected(h, g.index)
                assert g.uuid == gpu_uuid(lab.prefix, h, g.index) and g.name == MODEL
                assert g.utilization_pct == want["DCGM_FI_DEV_GPU_UTIL"]
                assert g.memory_used_mib == want["DCGM_FI_DEV_FB_USED"]
                assert g.memory_total_mib == FB_TOTAL_MIB
                assert g.power_draw_w == pytest.approx(want["DCGM_FI_DEV_POWER_USAGE"])
                assert g.temperature_c == want["DCGM_FI_DEV_GPU_TEMP"]
            # the exporter's hosts have no SGLang series: said so, naming the label and host
            sg = statuses[name].sglang
            assert sg is not None and sg.value.state is ServerState.DOWN
            assert f"no sglang:* series in Prometheus at {lab.url} for Hostname='{name}'" in sg.value.error
        serve = statuses["serve-0"].sglang
        assert serve is not None and serve.value.metrics is not None
        assert serve.value.metrics.running_reqs == 0 and serve.value.metrics.tokens_per_s == 0.0
        assert statuses["serve-0"].gpu is None  # gpu.source = "none"

        # the plots' history came from query_range: the scrapes from before the console started
        await wait_for(lambda: fleet.prometheus is not None and fleet.prometheus.backfilled, 45,
                       what="the query_range history")
        seeded = fleet.prometheus.take_history()
        history = History()
        history.seed(seeded)
        for h, name in enumerate(lab.host_names):
            mean = sum(expected(h, g)["DCGM_FI_DEV_GPU_UTIL"] for g in range(GPUS)) / GPUS
            points = history.series(name, "util").values()
            assert len(points) >= 3 and set(points) == {mean}
            first, last_ok = history.series(name, "util").first_at, fleet.prometheus.last_ok
            assert first is not None and last_ok is not None and first < last_ok - 1.0
        assert len(history.series("serve-0", "tokens").values()) >= 3
        assert fleet.prometheus.take_history() == {}  # handed over once
    finally:
        await fleet.stop()


@pytest.mark.lab
async def test_prometheus_down_marks_fed_hosts_stale_with_the_reason_then_recovers(
        prom_lab: tuple[prometheus_fleet.PromLab, str], tmp_path: Path) -> None:
    lab, sim_url = prom_lab
    config = load_config(prometheus_fleet.write_console_config(
        tmp_path / "console.toml", lab, interval_s=0.3, timeout_s=1, history_s=0,
        serve_hosts={"serve-0": sim_url}))
    fleet = Fleet(config)
    messages: list[str] = []
    fleet.events.subscribe(lambda e: messages.append(e.message))
    await fleet.start()
    try:
        def gpu_states() -> set[GpuState]:
            return {s.gpu.value.state for s in fleet.statuses() if s.gpu is not None}

        def all_fresh() -> bool:
            st = fleet.statuses()
            return all(s.gpu is not None and s.gpu.value.ok and not s.gpu.is_stale()
                       for s in st if s.name != "serve-0") and \
                st[-1].sglang is not None and st[-1].sglang.value.state is ServerState.HEALTHY
        await wait_for(all_fresh, 45, what="fresh samples of every host")

        await asyncio.to_thread(lab.stop_prometheus)

        def stale_with_reason() -> bool:
            st = fleet.statuses()
            return all(s.gpu is not None and s.gpu.value.state is GpuState.ERROR and s.gpu.is_stale()
                       for s in st if s.name != "serve-0") and \
                st[-1].sglang is not None and st[-1].sglang.is_stale() and \
                st[-1].sglang.value.state is ServerState.ERROR
        await wait_for(stale_with_reason, 45, what="every fed host stale with an error")
        for s in fleet.statuses():
            sample = s.gpu if s.name != "serve-0" else s.sglang
            assert sample is not None
            error = sample.value.error
            assert error.startswith(f"Prometheus at {lab.url} is unreachable") and "\n" not in error
        assert any(m.startswith(f"Prometheus at {lab.url} is unreachable") for m in messages)

        await asyncio.to_thread(lab.start_prometheus)
        await wait_for(all_fresh, 45, what="recovery after Prometheus is back")
        assert gpu_states() == {GpuState.OK}
        assert f"Prometheus at {lab.url} answers again" in messages
    finally:
        await fleet.stop()


@pytest.mark.lab
async def test_console_plots_start_with_prometheus_history(
        prom_lab: tuple[prometheus_fleet.PromLab, str], tmp_path: Path) -> None:
    """The TUI reading through Prometheus: GPU rows of every host, plots seeded from query_range
    with the scrapes from before the console started."""
    from specconsole.ui.console.app import ConsoleApp
    from specconsole.ui.panes.host_pane import HostPane
    from specconsole.ui.style.themes import BUNDLED_DIR, load_themes

    lab, sim_url = prom_lab
    await asyncio.to_thread(lab.wait_scraped, 60.0, 4)
    started = time.time()
    config = load_config(prometheus_fleet.write_console_config(
        tmp_path / "console.toml", lab, interval_s=0.5, history_s=60,
        serve_hosts={"serve-0": sim_url}))
    app = ConsoleApp(config, themes=load_themes([BUNDLED_DIR]), handle_signals=False)
    async with app.run_test(size=(160, 48)) as pilot:
        def seeded() -> bool:
            series = [app.history.series(n, "util") for n in lab.host_names]
            rows = [len(app.query_one(f"#host-{n}", HostPane).row_keys) for n in lab.host_names]
            return all(s.first_at is not None and s.first_at < started - 1.0 for s in series) \
                and rows == [GPUS] * HOSTS
        await wait_for(seeded, 45, what="the plots seeded from query_range (and every GPU row)", pilot=pilot)
        for h, name in enumerate(lab.host_names):
            points = app.history.series(name, "util").values()
            mean = sum(expected(h, g)["DCGM_FI_DEV_GPU_UTIL"] for g in range(GPUS)) / GPUS
            assert len(points) >= 3 and points[0] == mean
