"""The eval runner against the lab's SGLang simulator (real HTTP, a subprocess on a free port)."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from conftest import shared_sglang_judge
from specconsole.base.errors import SpecConsoleError
from specconsole.config import parse_config
from specconsole.eval.cli import add_eval_parser, run_eval_command, start_eval
from specconsole.eval.runner import run_and_save, run_eval
from specconsole.eval.store import ResultStore, load_run_file
from specconsole.eval.suite import Suite, Task, load_suite
from specconsole.lab.parts.environment import Lab
from specconsole.lab.testing.sim_server import SimServer, dflash_draft_dir, free_port
from specconsole.sglang import SglangClient
from specconsole.steps import StepEvent, Steps

pytestmark = [pytest.mark.timeout(60), pytest.mark.xdist_group("eval-runner")]  # its module simulators: one set per run



@pytest.fixture(autouse=True, scope="module")
def _sglang_judge() -> None:
    """The simulators these tests start ask the session's warm real-SGLang judge (not a cold import each)."""
    shared_sglang_judge()

@pytest.fixture(scope="module")
def draft(tmp_path_factory: pytest.TempPathFactory) -> str:
    return dflash_draft_dir(tmp_path_factory.mktemp("draft"), 16)


@pytest.fixture(scope="module")
def dflash(draft: str) -> Iterator[SimServer]:
    with SimServer(["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", draft,
                    "--speculative-draft-window-size", "16"]) as sim:
        yield sim


@pytest.fixture(scope="module")
def nextn() -> Iterator[SimServer]:
    with SimServer(["--speculative-algorithm", "NEXTN"]) as sim:
        yield sim


@pytest.fixture(scope="module")
def vanilla() -> Iterator[SimServer]:
    with SimServer([]) as sim:
        yield sim


@pytest.fixture
def suite() -> Suite:
    return load_suite()


def _events() -> tuple[list[StepEvent], Steps]:
    events: list[StepEvent] = []
    return events, Steps("eval", events.append)


async def _run(url: str, suite: Suite, store: ResultStore, **kw: object):
    events, steps = _events()
    run = await run_and_save(url, suite, store, steps=steps, **kw)  # type: ignore[arg-type]
    return run, events


async def test_dflash_run_arithmetic_from_stored_meta_info(dflash: SimServer, suite: Suite, tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    run, events = await _run(dflash.url, suite, store, label="ours step 4000, DFLASH-16", concurrency=2)
    # the file on disk is the record: recompute every number from the raw meta_info it keeps
    data = json.loads(Path(run.path).read_text())
    assert data["schema"] == "specconsole.eval/1"
    assert [t["task"] for t in data["tasks"]] == list(suite.task_names)
    assert len(data["tasks"]) == 10
    for t in data["tasks"]:
        meta = t["meta_info"]
        assert t["status"] == "ok"
        assert t["completion_tokens"] == meta["completion_tokens"]
        assert t["verify_ct"] == meta["spec_verify_ct"]
        assert t["acceptance_length"] == meta["completion_tokens"] / meta["spec_verify_ct"]
        assert t["acceptance_length"] == pytest.approx(meta["spec_accept_length"], rel=1e-12)
        assert t["latency_s"] == meta["e2e_latency"]
        assert t["tokens_per_s"] == meta["completion_tokens"] / meta["e2e_latency"]
        assert 1.0 <= t["acceptance_length"] <= 16.0
        assert t["max_new_tokens"] == 512
        assert t["text"]
    mean = sum(t["acceptance_length"] for t in data["tasks"]) / 10
    assert data["summary"]["acceptance_length_avg"] == pytest.approx(mean, rel=1e-12)
    assert run.average() == pytest.approx(mean, rel=1e-12)
    # the deployment it measured, from /server_info
    dep = data["deployment"]
    assert dep["algorithm"] == "DFLASH"
    assert dep["block_size"] == 16 and dep["draft_window"] == 16 and dep["num_draft_tokens"] == 16
    assert dep["draft_model"].endswith("dflash-b16")
    assert dep["sglang_version"] == "0.5.23"
    assert dep["model"] == "Qwen/Qwen3-8B"
    assert "--speculative-draft-window-size 16" in dep["server_args"]["launch_command"]
    assert data["suite"]["temperature"] == 0.0 and data["suite"]["concurrency"] == 2
    # one progress line per task, then done
    progress = [e for e in events if e.step == "tasks" and e.kind == "info"]
    assert len(progress) == 10
    assert {e.message.split("] ")[1].split(":")[0] for e in progress} == set(suite.task_names)
    assert sorted(int(e.message[1:].split("/")[0]) for e in progress) == list(range(1, 11))
    # the simulator's per-request histograms (spec_correct_drafts_histogram), summed over the tasks
    (shown,) = [e for e in events if e.step == "acceptance" and e.kind == "info"]
    ((label, detail),) = shown.acceptance
    assert label == run.label and detail.requests == 10 and detail.positions == 15
    assert detail.steps == sum(t["meta_info"]["spec_verify_ct"] for t in data["tasks"])
    assert detail.accepted == sum(t["meta_info"]["spec_num_correct_drafts"] for t in data["tasks"])
    assert shown.message == detail.summary()
    assert events[-1].kind == "done" and run.id in events[-1].message
    # same prompts, temperature 0: the same numbers again (deterministic)
    again, _ = await _run(dflash.url, suite.select(["fizzbuzz", "lru_cache"]), store)
    for name in ("fizzbuzz", "lru_cache"):
        assert again.task(name).acceptance_length == run.task(name).acceptance_length  # type: ignore[union-attr]


async def test_nextn_and_dflash_window16_differ(dflash: SimServer, nextn: SimServer, suite: Suite,
                                                tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    small = suite.select(["fizzbuzz", "json_parser", "merge_sort", "graph_bfs"])
    d, _ = await _run(dflash.url, small, store, concurrency=4)
    n, _ = await _run(nextn.url, small, store, concurrency=4)
    assert n.deployment.algorithm == "EAGLE"  # SGLang resolves NEXTN to EAGLE
    assert n.deployment.num_draft_tokens == 4 and n.deployment.num_steps == 3
    assert n.deployment.block_size is None and n.deployment.draft_window is None
    assert d.label == "DFLASH b16 w16 (dflash-b16)" and n.label.startswith("EAGLE 3x1/4")
    for name in small.task_names:
        dt, nt = d.task(name), n.task(name)
        assert dt is not None and nt is not None
        assert nt.acceptance_length is not None and dt.acceptance_length is not None
        assert nt.acceptance_length <= 4.0  # a chain of 3 drafts + bonus
        assert dt.acceptance_length > nt.acceptance_length
    assert d.average() > 1.5 * n.average()  # type: ignore[operator]


async def test_vanilla_is_one_per_step(vanilla: SimServer, suite: Suite, tmp_path: Path) -> None:
    run, _ = await _run(vanilla.url, suite.select(["fizzbuzz", "trie_autocomplete"]), ResultStore(tmp_path))
    assert run.deployment.vanilla and run.label == "vanilla (Qwen3-8B)"
    for t in run.tasks:
        assert t.ok and t.acceptance_length == 1.0 and t.verify_ct is None
        assert t.meta_info is not None and "spec_verify_ct" not in t.meta_info
        assert t.tokens_per_s == t.completion_tokens / t.latency_s  # type: ignore[operator]


# ------------------------------------------------------------------------ a failing server


class FaultyProxy:
    """A tiny HTTP server in front of the simulator: 500 for one prompt, a broken body for another,
    a stall for a third; everything else is forwarded. Counts requests in flight."""

    def __init__(self, upstream: str, *, fail_500: str, bad_json: str | None = None,
                 stall: str | None = None) -> None:
        self.upstream = upstream
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _reply(self, status: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                r = httpx.get(proxy.upstream + self.path, timeout=10, trust_env=False)
                self._reply(r.status_code, r.content)

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                with proxy.lock:
                    proxy.in_flight += 1
                    proxy.max_in_flight = max(proxy.max_in_flight, proxy.in_flight)
                try:
                    text = json.loads(raw)["text"]
                    if fail_500 in text:
                        self._reply(500, b'{"error": {"message": "CUDA error: an illegal memory access"}}')
                        return
                    if stall is not None and stall in text:
                        time.sleep(1.5)  # the client times out first; nothing to forward
                        return
                    r = httpx.post(proxy.upstream + self.path, content=raw, timeout=10, trust_env=False)
                    body = r.content[: len(r.content) // 2] if bad_json and bad_json in text else r.content
                    with contextlib.suppress(OSError):  # the client may have given up
                        self._reply(r.status_code, body)
                finally:
                    with proxy.lock:
                        proxy.in_flight -= 1

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FaultyProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


async def test_failed_tasks_are_recorded_and_the_rest_complete(dflash: SimServer, suite: Suite,
                                                               tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    small = suite.select(["fizzbuzz", "json_parser", "lru_cache", "graph_bfs", "merge_sort"])
    with FaultyProxy(dflash.url, fail_500="LRU cache", bad_json="JSON parser", stall="breadth-first") as proxy:
        # 2 s: the stalled task's deadline, far above a loaded machine's answer time for the others
        run, events = await _run(proxy.url, small, store, concurrency=3, timeout_s=2.0)
        assert proxy.max_in_flight <= 3
    by = {t.task: t for t in run.tasks}
    assert [t.task for t in run.tasks] == list(small.task_names)
    assert not by["lru_cache"].ok
    assert by["lru_cache"].error == (f"{proxy.url}/generate answered 500 Internal Server Error: "
                                     "CUDA error: an illegal memory access")
    assert not by["json_parser"].ok and "malformed JSON" in (by["json_parser"].error or "")
    assert not by["graph_bfs"].ok and "did not answer within 2 s" in (by["graph_bfs"].error or "")
    for name in ("fizzbuzz", "merge_sort"):
        assert by[name].ok and by[name].acceptance_length is not None and by[name].acceptance_length > 1
    for t in run.failed_tasks:
        assert "\n" not in (t.error or "") and t.acceptance_length is None
    # saved, failures included; averages over the ok tasks only
    stored = load_run_file(run.path)  # type: ignore[arg-type]
    assert [t.ok for t in stored.tasks] == [True, False, False, False, True]
    ok_values = [by[n].acceptance_length for n in ("fizzbuzz", "merge_sort")]
    assert stored.average() == pytest.approx(sum(ok_values) / 2)  # type: ignore[arg-type]
    errors = [e for e in events if e.kind == "error"]
    assert len(errors) == 3 and all(": failed: " in e.message for e in errors)
    assert any(e.kind == "warning" and "3 of 5 tasks failed" in e.message for e in events)


async def test_unreachable_server_is_one_line_and_saves_nothing(suite: Suite, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    events, steps = _events()
    with pytest.raises(SpecConsoleError) as err:
        await run_and_save(url, suite, ResultStore(tmp_path), steps=steps)
    assert "nothing listening at" in str(err.value) and "\n" not in str(err.value)
    assert events[-1].kind == "failed"
    assert list(tmp_path.iterdir()) == []


async def test_run_eval_without_saving(nextn: SimServer, suite: Suite) -> None:
    client = SglangClient(nextn.url, timeout_s=5)
    seen: list[tuple[str, int, int]] = []
    try:
        one = Suite("one", (Task("tiny", "say hi", max_new_tokens=7),))
        run = await run_eval(client, one, on_result=lambda r, d, n: seen.append((r.task, d, n)))
    finally:
        await client.aclose()
    assert seen == [("tiny", 1, 1)]
    t = run.tasks[0]
    assert t.max_new_tokens == 7 and t.completion_tokens is not None and t.completion_tokens <= 7


# ------------------------------------------------------------------------------- the CLI


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specconsole")
    p.add_argument("--config")
    add_eval_parser(p.add_subparsers(dest="command"))
    return p


def test_cli_run_list_compare(dflash: SimServer, vanilla: SimServer, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    p = _parser()
    res = str(tmp_path)
    # bare `eval` is `eval run`; options may come before or after `run`
    a = p.parse_args(["eval", "--url", dflash.url, "--tasks", "fizzbuzz,merge_sort", "--label", "ours step 4000",
                      "--results", res, "--max-new-tokens", "64"])
    assert a.eval_command is None
    assert run_eval_command(a, None) == 0
    b = p.parse_args(["eval", "--results", res, "run", "--url", vanilla.url, "--tasks", "fizzbuzz,merge_sort",
                      "--label", "vanilla", "--max-new-tokens", "64", "--concurrency", "2"])
    assert b.eval_command == "run" and b.results == res and b.concurrency == 2
    assert run_eval_command(b, None) == 0
    out = capsys.readouterr().out
    assert "[1/2]" in out and "[2/2]" in out and "saved to" in out
    store = ResultStore(res)
    runs = store.runs()
    assert [r.label for r in runs] == ["ours step 4000", "vanilla"]
    assert all(t.max_new_tokens == 64 for r in runs for t in r.tasks)
    assert run_eval_command(p.parse_args(["eval", "list", "--results", res]), None) == 0
    listing = capsys.readouterr().out
    assert "ours step 4000" in listing and "DFLASH b16 w16" in listing and "2 run(s)" in listing
    assert run_eval_command(p.parse_args(["eval", "compare", "ours", "vanilla", "--markdown", "--results", res]),
                            None) == 0
    md = capsys.readouterr().out
    ours, van = runs
    lines = md.splitlines()
    assert lines[0] == "| task | ours step 4000 | vanilla | ours / vanilla |"
    avg = ours.average()
    assert f"| average | {avg:.2f} | 1.00 | {avg * 100:.1f} % |" in lines
    sp = ours.average("tokens_per_s") / van.average("tokens_per_s")  # type: ignore[operator]
    assert f"| tok/s vs vanilla | {sp:.2f}× | 1.00× |  |" in lines
    assert run_eval_command(p.parse_args(["eval", "compare", ours.id, van.id, "--json", "--results", res]),
                            None) == 0
    js = json.loads(capsys.readouterr().out)
    assert js["baseline"] == van.id and js["vanilla"] == van.id
    assert js["average"][ours.id] == avg


def test_cli_run_through_config(dflash: SimServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = parse_config({"hosts": [{"name": "serve-1", "role": "serve", "connect": "local",
                                      "sglang": {"base_url": dflash.url}}]}, "lab.toml")
    p = _parser()
    args = p.parse_args(["eval", "--tasks", "graph_bfs", "--results", str(tmp_path)])
    assert run_eval_command(args, config) == 0
    (run,) = ResultStore(tmp_path).runs()
    assert run.source["host"] == "serve-1" and run.deployment.url == dflash.url
    no_host = parse_config({"hosts": [{"name": "t", "role": "train", "training": {"log_path": "/x"}}]}, "c.toml")
    with pytest.raises(SpecConsoleError, match="no serving host"):
        run_eval_command(p.parse_args(["eval", "--results", str(tmp_path)]), no_host)


async def test_start_eval_needs_a_target(tmp_path: Path) -> None:
    with pytest.raises(SpecConsoleError, match="--url"):
        await start_eval(None, emit=lambda e: None, results=str(tmp_path))


def test_cli_run_through_an_ssh_tunnel(lab_hosts: Lab, dflash: SimServer, tmp_path: Path) -> None:
    """A serve host with sglang.tunnel = true: the run goes through an SSH tunnel the eval opens."""
    from dataclasses import replace

    from specconsole.config import load_config

    config = load_config(lab_hosts.config_path)
    serve = config.host("serve")
    assert serve.connect == "ssh" and serve.sglang is not None
    tunnelled = replace(serve, sglang=replace(serve.sglang, base_url=dflash.url, tunnel=True))
    config = replace(config, hosts=tuple(tunnelled if h.name == "serve" else h for h in config.hosts))
    events: list[StepEvent] = []
    args = _parser().parse_args(["eval", "--tasks", "fizzbuzz", "--results", str(tmp_path)])
    assert run_eval_command(args, config, emit=events.append) == 0
    (run,) = ResultStore(tmp_path).runs()
    assert run.task("fizzbuzz").ok  # type: ignore[union-attr]
    assert run.deployment.url == dflash.url  # the configured address, not the tunnel's local end
    tunnel = next(e for e in events if e.message.startswith("tunnel "))
    assert tunnel.host == "serve" and f"-> serve:127.0.0.1:{dflash.port}" in tunnel.message


@pytest.mark.serial  # asserts a time bound
async def test_a_status_line_at_least_every_second_between_tasks(suite: Suite) -> None:
    """A slow server (300 ms per decode step): between the per-task lines the runner says what it
    waits for (the task in flight and for how long) at least every second."""
    with SimServer(["--speculative-algorithm", "NEXTN"], step_ms=300.0) as slow:
        client = SglangClient(slow.url, timeout_s=30)
        events, steps = _events()
        one = Suite("one", (Task("slow_task", "say hi", max_new_tokens=20),))  # seconds: several beats
        try:
            await run_eval(client, one, steps=steps)
        finally:
            await client.aclose()
    beats = [e for e in events if e.kind == "heartbeat"]
    assert beats, [e.line() for e in events]
    assert all("waiting for /generate: slow_task" in e.message and "0/1 done" in e.message for e in beats)
    during = [e.at for e in events if e.step == "tasks"]
    gaps = [b - a for a, b in itertools.pairwise(during)]
    assert max(gaps) <= 1.0 + 0.5, (gaps, [e.line() for e in events])  # the 0.8 s cadence, with CPU slack


async def test_the_console_tunnels_through_the_monitors_connection(lab_hosts: Lab, dflash: SimServer,
                                                                   tmp_path: Path) -> None:
    """``e`` in the console passes the monitor's connected host: the tunnel goes through it (no
    second SSH connection), and it is still connected after the run."""
    from dataclasses import replace

    from specconsole.config import load_config
    from specconsole.hosts import make_host

    config = load_config(lab_hosts.config_path)
    serve = config.host("serve")
    assert serve.sglang is not None
    tunnelled = replace(serve, sglang=replace(serve.sglang, base_url=dflash.url, tunnel=True))
    config = replace(config, hosts=tuple(tunnelled if h.name == "serve" else h for h in config.hosts))
    host = make_host(tunnelled)
    await host.start()
    try:
        assert await host.wait_connected(30)
        events: list[StepEvent] = []
        run = await start_eval(config, emit=events.append, tasks=["fizzbuzz"], results=str(tmp_path),
                               connection=host)
        assert run.task("fizzbuzz").ok  # type: ignore[union-attr]
        assert any(e.message.startswith("using the open connection to serve") for e in events)
        assert not any(e.message.startswith("connecting to") for e in events)
        assert host.status.up  # left open for the monitor
        assert (await host.run(["true"])).ok
    finally:
        await host.close()
