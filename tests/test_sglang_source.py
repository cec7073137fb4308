"""The SGLang source and client: a real simulator process and tiny loopback HTTP servers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from conftest import shared_sglang_judge, wait_for
from specconsole.base.samples import Sample
from specconsole.config import HostConfig, SglangConfig
from specconsole.hosts.local import LocalHost
from specconsole.hosts.ssh import SshHost
from specconsole.lab.parts.environment import Lab
from specconsole.lab.parts.state import free_port
from specconsole.sglang import SglangClient, SglangError, parse_metrics
from specconsole.sources.sglang import ServerState, SglangSnapshot, SglangSource
from tiny_http import Route, TinyServer


# -- helpers ------------------------------------------------------------------------------
def local_host() -> LocalHost:
    return LocalHost(HostConfig(name="gpu1", role="serve"))


def cfg(url: str, **kw: object) -> SglangConfig:
    return SglangConfig(base_url=url, interval_s=0.2, timeout_s=0.5, **kw)  # type: ignore[arg-type]


@pytest.fixture
def tiny() -> Iterator[Callable[..., TinyServer]]:
    servers: list[TinyServer] = []

    def make(routes: dict[str, Route], default: Route | None = None) -> TinyServer:
        servers.append(TinyServer(routes, default))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def ok_json(obj: object) -> Route:
    return lambda: (200, "application/json", json.dumps(obj).encode())


HEALTH_OK: Route = lambda: (200, "text/plain", b"")  # noqa: E731
INFO = {"version": "0.5.23", "model_path": "Qwen/Qwen3-8B", "speculative_algorithm": "DFLASH",
        "speculative_draft_model_path": "/models/d", "speculative_num_draft_tokens": 16,
        "speculative_dflash_block_size": None, "speculative_draft_window_size": 32,
        "internal_states": [{"avg_spec_accept_length": 6.0}, {"avg_spec_accept_length": 5.0}]}


async def collect(source: SglangSource, until: Callable[[SglangSnapshot], bool],
                  timeout: float = 15.0) -> list[Sample[SglangSnapshot]]:
    """Run ``source`` until a published snapshot satisfies ``until``; return all samples."""
    samples: list[Sample[SglangSnapshot]] = []
    done = asyncio.Event()

    def publish(sample: Sample[SglangSnapshot]) -> None:
        samples.append(sample)
        if until(sample.value):
            done.set()

    task = asyncio.create_task(source.run(publish))
    try:
        await asyncio.wait_for(done.wait(), timeout)
    except TimeoutError:
        last = samples[-1].value if samples else None
        raise AssertionError(f"no matching snapshot in {timeout}s; last: {last}") from None
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return samples


def start_sim(tmp_path: Path, *args: str, startup_s: str = "1.0",
              env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    shared_sglang_judge()
    env = dict(os.environ, SGLANG_SIM_STARTUP_S=startup_s, SGLANG_SIM_STEP_MS="1", **(env or {}))
    err = (tmp_path / "sim.err").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "specconsole.lab.doubles.sglang_sim", "serve",
                             *args, "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=err, env=env)
    err.close()
    url = f"http://127.0.0.1:{port}"

    def listening() -> bool:
        assert proc.poll() is None, (tmp_path / "sim.err").read_text()
        try:
            httpx.get(f"{url}/health", timeout=2)
        except httpx.TransportError:
            return False
        return True

    if not wait_for(listening, 30, step=0.03):
        proc.kill()
        raise AssertionError("simulator did not listen")
    return proc, url


# -- against the simulator ----------------------------------------------------------------
async def test_source_follows_a_simulator_start_serve_and_stop(tmp_path: Path) -> None:
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps(
        {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "block_size": 16}))
    proc, url = start_sim(tmp_path, "--model-path", "Qwen/Qwen3-8B", "--speculative-algorithm",
                          "DFLASH", "--speculative-draft-model-path", str(draft),
                          "--speculative-draft-window-size", "16", "--enable-metrics")
    try:
        source = SglangSource(local_host(), cfg(url), info_refresh_s=0.5)
        samples = await collect(source, lambda s: s.state is ServerState.HEALTHY)
        states = [s.value.state for s in samples]
        assert states[0] is ServerState.STARTING and samples[0].value.status_code == 503
        snap = samples[-1].value
        assert snap.error is None and snap.status_code == 200
        assert snap.info is not None and snap.info.algorithm == "DFLASH"
        assert snap.info.block_size == 16 and snap.info.num_draft_tokens == 16
        assert snap.info.draft_window == 16 and snap.info.draft_model_path == str(draft)
        assert snap.info.version == "0.5.23" and snap.info.model_path == "Qwen/Qwen3-8B"
        assert snap.metrics is not None and snap.metrics.tokens_per_s == 0.0  # idle
        assert all(s.interval == 0.2 for s in samples)
        assert abs(samples[-1].at - time.time()) < 5

        async with SglangClient(url, timeout_s=5) as client:
            out = await client.generate("Explain DFlash in one line.", 128)
        assert out["meta_info"]["completion_tokens"] > 0
        samples = await collect(
            source, lambda s: bool(s.metrics and s.metrics.tokens_per_s
                                   and s.info and s.info.avg_accept_length))
        snap = samples[-1].value
        assert snap.state is ServerState.HEALTHY
        assert snap.metrics is not None and snap.metrics.tokens_per_s > 0
        assert snap.metrics.generation_tokens_total >= out["meta_info"]["completion_tokens"]
        assert snap.metrics.spec_accept_length is not None and snap.metrics.spec_accept_length > 1
        assert snap.info is not None and snap.info.avg_accept_length > 1

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        samples = await collect(source, lambda s: s.state is ServerState.DOWN)
        down = samples[-1].value
        assert down.info is None and down.metrics is None
        assert down.error is not None and f"nothing listening at {url}" in down.error
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def hung_reason(url: str, limit: str = "1") -> str:
    return (f"{url}/health_generate did not answer within {limit} s while /health answers 200 — the "
            "scheduler runs no requests (hung?); check `journalctl -u sglang.service`, then "
            "`systemctl restart sglang.service`")


async def test_health_generate_sees_a_hung_scheduler_that_plain_health_misses(tmp_path: Path) -> None:
    """The simulator's scheduler hangs (SIGUSR1): /health still answers 200, /health_generate
    blocks. health = "generate" says "hung" (not "down": the server answers), "plain" stays
    healthy; the hang ends (SIGUSR2): healthy again; the server stops: down."""
    proc, url = start_sim(tmp_path, "--model-path", "Qwen/Qwen3-8B", "--enable-metrics")
    try:
        generate = SglangSource(local_host(), cfg(url, health="generate", health_generate_timeout_s=1.0,
                                                  health_interval_s=0.3))
        plain = SglangSource(local_host(), cfg(url, health_interval_s=0.3))
        await collect(generate, lambda s: s.state is ServerState.HEALTHY and s.metrics is not None)
        await collect(plain, lambda s: s.state is ServerState.HEALTHY and s.metrics is not None)

        proc.send_signal(signal.SIGUSR1)
        samples = await collect(generate, lambda s: s.state is not ServerState.HEALTHY)
        hung = samples[-1]
        assert hung.value.state is ServerState.HUNG, hung.value
        assert hung.value.error == hung_reason(url)
        assert hung.value.status_code is None and hung.value.info is not None  # deployment still shown
        assert hung.interval == 1.5  # a poll waits out /health_generate: due every 1 + 0.5 s
        assert not hung.is_stale(hung.at + 1.9)
        async with SglangClient(url, timeout_s=2) as client:
            assert await client.health() == 200
            with pytest.raises(SglangError) as blocked:
                await client.health_generate(0.5)
        assert blocked.value.kind == "timeout"
        seen = {"n": 0}

        def fifth(s: SglangSnapshot) -> bool:
            seen["n"] += 1
            return seen["n"] >= 5

        assert {s.value.state for s in await collect(plain, fifth)} == {ServerState.HEALTHY}

        proc.send_signal(signal.SIGUSR2)
        samples = await collect(generate, lambda s: s.state is ServerState.HEALTHY)
        assert {s.value.state for s in samples} <= {ServerState.HUNG, ServerState.HEALTHY}

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        down = (await collect(generate, lambda s: s.state is ServerState.DOWN))[-1].value
        assert down.error is not None and down.error.startswith(f"nothing listening at {url}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_status_json_says_hung(tmp_path: Path) -> None:
    """SGLANG_SIM_HANG_AFTER_S=0: the scheduler hangs once the server is ready; `status --json`
    with health = "generate" gives the sglang state "hung" and why."""
    proc, url = start_sim(tmp_path, "--model-path", "Qwen/Qwen3-8B",
                          env={"SGLANG_SIM_HANG_AFTER_S": "0"})
    try:
        assert wait_for(lambda: httpx.get(f"{url}/health", timeout=2).status_code == 200, 30,
                        what="the simulator to become ready", step=0.05)
        with pytest.raises(httpx.TimeoutException):
            httpx.get(f"{url}/health_generate", timeout=0.5)
        config = tmp_path / "console.toml"
        config.write_text(f'[[hosts]]\nname = "serve"\nrole = "serve"\ngpu.source = "none"\n'
                          f'[hosts.sglang]\nbase_url = "{url}"\nhealth = "generate"\n'
                          f'health_generate_timeout_s = 1\n')
        res = subprocess.run([sys.executable, "-m", "specconsole", "status", "--json", "--config", str(config)],
                             capture_output=True, text=True, timeout=60)
        sglang = json.loads(res.stdout)["hosts"][0]["sglang"]
        assert sglang["value"]["state"] == "hung", res.stdout + res.stderr
        assert sglang["value"]["error"] == hung_reason(url)
        assert sglang["interval_s"] == 4.0  # 1 s for /health_generate + timeout_s (3 s) for /health
    finally:
        proc.kill()
        proc.wait()


async def test_health_generate_failures_other_than_silence(tiny: Callable[..., TinyServer]) -> None:
    """A /health_generate that answers 503 or 500 while /health answers 200 is hung; both 503
    is starting (as at start-up); nothing listening is down, not hung."""
    codes = {"/health": 200, "/health_generate": 503}
    server = tiny({path: (lambda path=path: (codes[path], "text/plain", b"")) for path in codes}
                  | {"/server_info": ok_json(INFO), "/metrics": lambda: (200, "text/plain", b"")})
    source = SglangSource(local_host(), cfg(server.url, health="generate"))
    snap = (await collect(source, lambda s: s.state is not ServerState.HEALTHY))[-1].value
    assert snap.state is ServerState.HUNG and snap.status_code == 503
    assert snap.error is not None and snap.error.startswith(
        f"{server.url}/health_generate answered 503 while /health answers 200 — the scheduler")
    codes["/health_generate"] = 500
    snap = (await collect(source, lambda s: s.status_code == 500))[-1].value
    assert snap.state is ServerState.HUNG
    assert snap.error is not None and f"{server.url}/health_generate answered 500 while" in snap.error
    codes["/health"] = 503
    snap = (await collect(source, lambda s: s.state is not ServerState.HUNG))[-1].value
    assert snap.state is ServerState.STARTING and snap.error is None
    codes.update({"/health": 200, "/health_generate": 200})
    await collect(source, lambda s: s.state is ServerState.HEALTHY)
    assert server.hits.count("/health_generate") >= 4
    server.close()
    snap = (await collect(source, lambda s: s.state is not ServerState.HEALTHY))[-1].value
    assert snap.state is ServerState.DOWN


# -- against failures ---------------------------------------------------------------------
async def test_nothing_listening_is_down() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    samples = await collect(SglangSource(local_host(), cfg(url)),
                            lambda s: s.state is ServerState.DOWN)
    snap = samples[-1].value
    assert snap.status_code is None and snap.info is None
    assert snap.error == (f"nothing listening at {url} — is the service running? "
                          "`systemctl status sglang.service`")


async def test_http_500_is_an_error(tiny: Callable[..., TinyServer]) -> None:
    server = tiny({}, default=lambda: (500, "text/plain", b"Internal Server Error"))
    samples = await collect(SglangSource(local_host(), cfg(server.url)),
                            lambda s: s.state is ServerState.ERROR)
    snap = samples[-1].value
    assert snap.status_code == 500
    assert snap.error is not None
    assert snap.error.startswith(f"{server.url}/health answered 500 Internal Server Error")
    assert "\n" not in snap.error


async def test_silent_server_times_out() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)  # accepts connections in the kernel, never answers
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        t0 = time.monotonic()
        samples = await collect(SglangSource(local_host(), cfg(url)),
                                lambda s: s.state is ServerState.ERROR)
        assert time.monotonic() - t0 < 5
    finally:
        sock.close()
    snap = samples[-1].value
    assert snap.error is not None and f"{url}/health did not answer within 0.5 s" in snap.error


async def test_starting_and_metrics_disabled(tiny: Callable[..., TinyServer]) -> None:
    health = {"code": 503}
    server = tiny({"/health": lambda: (health["code"], "text/plain", b""),
                   "/server_info": ok_json(INFO)})
    source = SglangSource(local_host(), cfg(server.url))
    samples = await collect(source, lambda s: s.state is ServerState.STARTING)
    assert samples[-1].value.error is None and samples[-1].value.status_code == 503
    assert "/server_info" not in server.hits
    health["code"] = 200
    samples = await collect(source, lambda s: s.state is ServerState.HEALTHY)
    snap = samples[-1].value
    assert snap.metrics is None and snap.info is not None
    assert snap.info.block_size == 16 and snap.info.draft_window == 32
    assert snap.info.avg_accept_length == pytest.approx(5.5)
    assert snap.error == f"{server.url}/metrics: metrics disabled: launch with --enable-metrics"


async def test_health_is_asked_every_health_interval_while_metrics_answer(
    tiny: Callable[..., TinyServer],
) -> None:
    """SGLang's /health runs a one-token generation on an idle server: while healthy, /metrics
    is read every poll and /health asked every ``health_interval_s``. A /health that turns 503
    shows at the next check (and then every poll asks it); a failing /metrics shows at once."""
    codes = {"/health": 200, "/metrics": 200}
    server = tiny({"/health": lambda: (codes["/health"], "text/plain", b""), "/server_info": ok_json(INFO),
                   "/metrics": lambda: (codes["/metrics"], "text/plain", b"")})
    source = SglangSource(local_host(), SglangConfig(base_url=server.url, interval_s=0.05, timeout_s=0.5,
                                                     health_interval_s=0.6))
    healthy = {"n": 0}

    def twentieth_healthy(s: SglangSnapshot) -> bool:
        healthy["n"] += s.state is ServerState.HEALTHY and s.metrics is not None
        return healthy["n"] >= 20

    t0 = time.monotonic()
    await collect(source, twentieth_healthy)
    elapsed = time.monotonic() - t0
    assert server.hits.count("/metrics") >= 20
    assert 1 <= server.hits.count("/health") <= 2 + elapsed / 0.6  # not one per poll

    codes["/health"] = 503  # shutting down: /metrics still answers
    samples = await collect(source, lambda s: s.state is ServerState.STARTING)
    assert all(s.value.state is ServerState.HEALTHY for s in samples[:-1])
    before = {path: server.hits.count(path) for path in ("/health", "/metrics")}
    starting = {"n": 0}

    def third_starting(s: SglangSnapshot) -> bool:
        starting["n"] += s.state is ServerState.STARTING
        return starting["n"] >= 3

    await collect(source, third_starting)
    assert server.hits.count("/health") >= before["/health"] + 3  # every poll while not healthy
    assert server.hits.count("/metrics") == before["/metrics"]

    codes["/health"] = 200
    await collect(source, lambda s: s.state is ServerState.HEALTHY and s.metrics is not None)
    codes["/metrics"] = 500
    samples = await collect(source, lambda s: s.state is ServerState.ERROR)
    assert len(samples) <= 2  # the next poll, not the next health check
    error = samples[-1].value.error
    assert error is not None and error.startswith(f"{server.url}/metrics answered 500")


@pytest.mark.parametrize("info", [lambda: (200, "application/json", b"<html>oops"),
                                  lambda: (500, "application/json", b'{"error": "boom"}')], ids=["malformed", "500"])
async def test_a_failing_server_info_alone_keeps_the_server_healthy_and_says_why(
        tiny: Callable[..., TinyServer], info: Route) -> None:
    # /health and /metrics answer: the server serves; only its details are unknown (the header used
    # to turn to "error" for the whole server)
    page = "sglang:gen_throughput{model_name=\"m\"} 123.0\n"
    server = tiny({"/health": HEALTH_OK, "/server_info": info,
                   "/metrics": lambda: (200, "text/plain; version=0.0.4", page.encode())})
    samples = await collect(SglangSource(local_host(), cfg(server.url)), lambda s: s.metrics is not None)
    last = samples[-1].value
    assert last.state is ServerState.HEALTHY and last.info is None
    assert last.metrics is not None and last.metrics.gen_throughput == 123.0
    assert last.error is not None and last.error.startswith(f"{server.url}/server_info answered ")
    assert all(s.value.state is not ServerState.ERROR for s in samples)


async def test_tokens_per_s_from_counter_rate_and_cached_info(
    tiny: Callable[..., TinyServer],
) -> None:
    t0 = time.monotonic()

    def metrics() -> tuple[int, str, bytes]:
        tokens = int(1000 * (time.monotonic() - t0))  # 1000 tokens/s
        page = ("# HELP sglang:generation_tokens_total Number of generation tokens processed.\n"
                "# TYPE sglang:generation_tokens_total counter\n"
                f'sglang:generation_tokens_total{{model_name="m"}} {tokens}.0\n')
        return 200, "text/plain; version=0.0.4", page.encode()

    server = tiny({"/health": HEALTH_OK, "/server_info": ok_json(INFO), "/metrics": metrics})
    source = SglangSource(local_host(), cfg(server.url))
    samples = await collect(source, lambda s: bool(s.metrics and s.metrics.tokens_per_s))
    first_ok = next(s.value for s in samples if s.value.metrics)
    assert first_ok.metrics is not None and first_ok.metrics.tokens_per_s is None
    rate = samples[-1].value.metrics.tokens_per_s  # type: ignore[union-attr]
    assert 300 < rate < 3000
    assert samples[-1].value.metrics.gen_throughput is None  # type: ignore[union-attr]
    assert server.hits.count("/server_info") == 1  # cached while healthy


def test_parse_metrics_aggregates_ranks() -> None:
    page = "\n".join([
        "# TYPE sglang:gen_throughput gauge",
        'sglang:gen_throughput{model_name="m",dp_rank="0",tp_rank="0"} 100.0',
        'sglang:gen_throughput{model_name="m",dp_rank="1",tp_rank="0"} 50.0',
        "# TYPE sglang:spec_accept_length gauge",
        'sglang:spec_accept_length{model_name="m",dp_rank="0",tp_rank="0"} 6.0',
        'sglang:spec_accept_length{model_name="m",dp_rank="1",tp_rank="0"} 4.0',
        "# TYPE sglang:token_usage gauge",
        'sglang:token_usage{model_name="m",dp_rank="0",tp_rank="0"} 0.2',
        'sglang:token_usage{model_name="m",dp_rank="1",tp_rank="0"} 0.7',
        "# TYPE sglang:num_running_reqs gauge",
        'sglang:num_running_reqs{model_name="m",dp_rank="0",tp_rank="0"} 3.0',
        'sglang:num_running_reqs{model_name="m",dp_rank="1",tp_rank="0"} 2.0',
        "# TYPE sglang:generation_tokens_total counter",
        'sglang:generation_tokens_total{model_name="m"} 1000.0',
        "# TYPE sglang:fwd_occupancy gauge",
        'sglang:fwd_occupancy{model_name="m"} NaN',
        "",
    ])
    v = parse_metrics(page)
    assert v["gen_throughput"] == 150.0 and v["running_reqs"] == 5.0
    assert v["spec_accept_length"] == 5.0 and v["token_usage"] == 0.7
    assert v["generation_tokens_total"] == 1000.0


async def test_client_errors_are_one_line(tiny: Callable[..., TinyServer]) -> None:
    server = tiny({"/health": HEALTH_OK,
                   "/server_info": lambda: (401, "application/json", b'{"error":"Unauthorized"}')})
    async with SglangClient(server.url, timeout_s=0.5) as client:
        assert await client.health() == 200
        with pytest.raises(SglangError) as exc:
            await client.server_info()
        assert exc.value.kind == "unauthorized" and exc.value.status_code == 401
        assert "--api-key" in str(exc.value)
        with pytest.raises(SglangError) as exc:
            await client.metrics()
        assert exc.value.kind == "metrics_disabled"


async def test_clients_share_one_tls_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through a tunnel the source makes a new client after every failed poll (each second while
    SGLang is down): the CA bundle (30-90 ms of CPU to load) is loaded once per process, not per client,
    and not at all for a plain-http server (issue 34: 0.1 s of the console's first second)."""
    import ssl

    from specconsole.sglang import client as client_module

    made: list[object] = []
    original = ssl.create_default_context

    def counting(*args: object, **kwargs: object) -> ssl.SSLContext:
        made.append(args)
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ssl, "create_default_context", counting)
    client_module.tls_context.cache_clear()
    for _ in range(4):
        async with SglangClient("http://127.0.0.1:9", timeout_s=0.5):
            pass
    assert made == []
    for _ in range(4):
        async with SglangClient("https://127.0.0.1:9", timeout_s=0.5):
            pass
    assert len(made) == 1


# -- through a tunnel ---------------------------------------------------------------------
class TunnelHost(LocalHost):
    """A host whose ``reach`` hands out a configurable local address (like an SSH tunnel)."""

    def __init__(self, target: tuple[str, int]) -> None:
        super().__init__(HostConfig(name="gpu1", role="serve"))
        self.target = target
        self.calls: list[tuple[str, int]] = []

    async def reach(self, host: str, port: int) -> tuple[str, int]:
        self.calls.append((host, port))
        return self.target


async def test_tunnel_is_reached_and_reached_again_after_failure(
    tiny: Callable[..., TinyServer],
) -> None:
    server = tiny({"/health": HEALTH_OK, "/server_info": ok_json(INFO),
                   "/metrics": lambda: (200, "text/plain", b"")})
    port = int(server.url.rsplit(":", 1)[1])
    host = TunnelHost(("127.0.0.1", port))
    await host.start()
    source = SglangSource(host, cfg("http://10.0.0.7:30000", tunnel=True))
    count = {"n": 0}

    def third_healthy(s: SglangSnapshot) -> bool:
        count["n"] += s.state is ServerState.HEALTHY
        return count["n"] >= 3

    await collect(source, third_healthy)
    assert host.calls == [("10.0.0.7", 30000)]  # one tunnel, reused
    host.target = ("127.0.0.1", free_port())  # the tunnel broke: nothing behind it
    count["n"] = 0

    def third_down(s: SglangSnapshot) -> bool:
        count["n"] += s.state is ServerState.DOWN
        return count["n"] >= 3

    samples = await collect(source, third_down)
    assert len(host.calls) >= 4  # reached again after each failure
    assert samples[-1].value.error == (
        "nothing listening at http://10.0.0.7:30000 (tunnel through gpu1) — is the service "
        "running? `systemctl status sglang.service`")

    # an SSH forward whose far end refuses: accepted locally, closed at once
    closer = socket.socket()
    closer.bind(("127.0.0.1", 0))
    closer.listen(16)
    stop = threading.Event()

    def accept_and_close() -> None:
        closer.settimeout(0.05)
        while not stop.is_set():
            try:
                conn, _ = closer.accept()
            except OSError:
                continue
            conn.close()

    thread = threading.Thread(target=accept_and_close, daemon=True)
    thread.start()
    host.target = closer.getsockname()
    try:
        samples = await collect(source, lambda s: s.state is ServerState.DOWN
                                and "closed at once" in (s.error or ""))
    finally:
        stop.set()
        thread.join()
        closer.close()
    assert samples[-1].value.error.startswith("nothing listening at http://10.0.0.7:30000")


# -- a stopped server and an unreachable host: one stable state each ------------------------
class Resetter:
    """A port that accepts connections and resets them at once (RST), as a server going away."""

    def __init__(self, port: int) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(16)
        self.sock.settimeout(0.05)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        import struct

        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.sock.close()


async def samples_of(source: SglangSource, count: int, timeout: float = 60.0) -> list[SglangSnapshot]:
    got: list[SglangSnapshot] = []
    await collect(source, lambda s: got.append(s) or len(got) >= count, timeout)  # type: ignore[func-returns-value]
    return got


async def test_a_stopped_server_that_resets_connections_stays_down() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    source = SglangSource(local_host(), cfg(url))
    await collect(source, lambda s: s.state is ServerState.DOWN)  # refused: down
    resetter = Resetter(port)  # the port now resets instead of refusing (a server going away)
    try:
        snaps = await samples_of(source, 6)
    finally:
        resetter.close()
    assert [s.state for s in snaps] == [ServerState.DOWN] * 6, [s.error for s in snaps]
    for s in snaps:
        assert s.error is not None and s.error.startswith(f"nothing listening at {url}")
        assert "is the service running?" in s.error
    # the resets themselves (not only refusals) were seen, their detail kept
    assert any(s.error.startswith(f"nothing listening at {url} (") for s in snaps if s.error)


def ssh_serve(lab: Lab) -> SshHost:
    from specconsole.config import load_config

    return SshHost(load_config(lab.config_path).host("serve"))


async def test_through_a_real_tunnel_stopped_is_down_and_a_lost_host_is_unreachable(lab_hosts: Lab) -> None:
    host = ssh_serve(lab_hosts)
    await host.start()
    assert await host.wait_connected(30)
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there on the host
    # a generous timeout: under load a slow answer must not read as an error here
    source = SglangSource(host, SglangConfig(base_url=url, tunnel=True, interval_s=0.2, timeout_s=10))
    try:
        # a stopped server through the forward: closed or reset at once, always "down"
        snaps = await samples_of(source, 12)
        assert {s.state for s in snaps} == {ServerState.DOWN}, [s.error for s in snaps]
        assert all((s.error or "").startswith(f"nothing listening at {url} (the tunnel through serve "
                                              "closed at once: ") for s in snaps)
        # the host goes away: the SGLang state says so, never "is the service running?"
        lab_hosts.stop_sshd("serve")
        await collect(source, lambda s: s.state is ServerState.UNREACHABLE)
        snaps = await samples_of(source, 5)
        assert {s.state for s in snaps} == {ServerState.UNREACHABLE}, [s.error for s in snaps]
        for s in snaps:
            assert (s.error or "").startswith("host serve is unreachable (")
            assert "is the service running" not in (s.error or "") and s.info is None
        # back: the server's own state again
        lab_hosts.start_sshd("serve")
        await collect(source, lambda s: s.state is ServerState.DOWN, timeout=60)
    finally:
        await host.close()


async def test_a_host_that_never_connected_is_unreachable_at_once(lab_hosts: Lab) -> None:
    lab_hosts.stop_sshd("serve")
    host = ssh_serve(lab_hosts)
    await host.start()
    try:
        t0 = time.monotonic()
        snap = (await collect(SglangSource(host, cfg("http://127.0.0.1:30000", tunnel=True)),
                              lambda s: True))[-1].value
        assert time.monotonic() - t0 < 20  # a sample, not a wait for the connection
        assert snap.state is ServerState.UNREACHABLE and "host serve is unreachable" in (snap.error or "")
    finally:
        await host.close()
