"""The host-side deploy agent's own functions, against real loopback servers and folders."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from specconsole.actions.deploy.execute import AGENT_FILES
from specconsole.remote import deploy_agent
from specconsole.remote.deploy_agent import Agent, tail_text
from specconsole.remote.deploy_agent_watch import CRASH_LINE, http_request


@contextlib.contextmanager
def dripping_server(headers_first: bool) -> Iterator[str]:
    """A loopback HTTP server that drips one byte per 0.2 s and never finishes its answer."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                conn.recv(65536)
                if headers_first:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
                else:
                    conn.sendall(b"HTTP/1.1 200 OK\r\n")
                with contextlib.suppress(OSError):
                    while not stop.is_set():
                        conn.sendall(b"x" if headers_first else b"X-Drip: y\r\n"[:1])
                        time.sleep(0.2)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}/health"
    finally:
        stop.set()
        t.join(5)
        srv.close()


@pytest.mark.parametrize("headers_first", [True, False], ids=["dripping-body", "dripping-headers"])
def test_http_request_has_a_total_deadline(headers_first: bool) -> None:
    # each read gets a byte well within the per-read timeout, so only a total deadline ends it
    with dripping_server(headers_first) as url:
        t0 = time.monotonic()
        status, text = http_request(url, timeout=1.0)
        took = time.monotonic() - t0
    assert status == 0
    assert "no complete response within the 1s deadline" in text
    assert took < 30, f"the request ran {took:.1f}s past its 1 s deadline"


def test_http_request_answers_normally() -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(201)
            self.end_headers()
            self.wfile.write(b"got " + body)

        def log_message(self, *_a: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        status, text = http_request(f"http://127.0.0.1:{httpd.server_port}/generate?x=1", {"a": 1}, timeout=10)
    finally:
        httpd.shutdown()
    assert (status, text) == (201, 'got {"a": 1}')
    status, text = http_request("http://127.0.0.1:9/health", timeout=5)  # nothing listens on port 9
    assert status == 0 and text.startswith("no answer (")


def test_tail_text_cuts_on_boundaries_with_a_marker() -> None:
    lines = [f"line {i}: Traceback detail number {i} of the failed restart" for i in range(40)]
    text = "\n".join(lines)
    out = tail_text(text, 300)
    assert out.startswith("… ") and len(out) <= 302
    # whole lines only, the last one included
    kept = out[2:].split(" / ")
    assert kept[-1] == lines[-1] and all(k in lines for k in kept)
    # one long line: cut between words, never mid-word
    words = " ".join(f"word{i}" for i in range(200))
    out = tail_text(words, 300)
    assert out.startswith("… ") and len(out) <= 300
    assert all(re.fullmatch(r"word\d+", w) for w in out[2:].split())
    assert out.endswith("word199")
    assert tail_text("short error", 300) == "short error"


def _agent(tmp_path: Path, deploy_id: str) -> Agent:
    base = tmp_path / "sglang.service.d" / ".specconsole"
    workdir = base / deploy_id
    workdir.mkdir(parents=True)
    plan = {"id": deploy_id, "workdir": str(workdir), "lock_path": str(base / "deploy.lock"), "unit": "x"}
    return Agent(plan, str(workdir / "progress.jsonl"))


def test_old_deploy_folders_are_pruned_keeping_the_last_five(tmp_path: Path) -> None:
    base = tmp_path / "sglang.service.d" / ".specconsole"
    ids = [f"20261203-0{i}0000-abc{i:03x}" for i in range(8)]
    for i in ids[:-1]:
        (base / i).mkdir(parents=True)
        (base / i / "progress.jsonl").write_text("{}\n")
    (base / "deploy.lock").parent.mkdir(parents=True, exist_ok=True)
    (base / "notes").mkdir()   # not a deploy folder: left alone
    agent = _agent(tmp_path, ids[-1])
    agent.prune_workdirs()
    left = sorted(p.name for p in base.iterdir())
    assert left == sorted([*ids[-deploy_agent.KEEP_WORKDIRS:], "notes"])
    events = [json.loads(ln) for ln in (base / ids[-1] / "progress.jsonl").read_text().splitlines()]
    assert any("removed 3 old deploy folder(s)" in e["message"] for e in events)


@pytest.mark.parametrize(("line", "crash"), [
    ("sglang.service: Main process exited, code=exited, status=1/FAILURE", True),
    ("sglang.service: Main process exited, code=killed, status=9/KILL", True),
    ("sglang.service: Main process exited, code=dumped, status=11/SEGV", True),
    ("sglang.service: Failed with result 'exit-code'.", True),
    ("sglang.service: Scheduled restart job, restart counter is at 2.", True),
    ("sglang.service: Main process exited, code=exited, status=0/SUCCESS", False),
    ("sglang.service: Main process exited, code=killed, status=15/TERM", False),
    ("sglang.service: Deactivated successfully.", False),
    ("[2026-12-03 07:57:42 TP0] Load weight begin. avail mem=138.41 GB", False),
])
def test_crash_lines_are_systemds_own(line: str, crash: bool) -> None:
    assert bool(CRASH_LINE.search(line)) is crash


def test_the_uploaded_files_run_as_a_script_from_their_folder(tmp_path: Path) -> None:
    """The host's view: ``agent.py`` and its sibling in one work folder, run as ``python agent.py``
    (no specconsole on the path); here the lock is held by a live pid, so it stops at once."""
    base = tmp_path / "sglang.service.d" / ".specconsole"
    workdir = base / "20261204-010000-abc123"
    workdir.mkdir(parents=True)
    for name, source in AGENT_FILES.items():
        (workdir / name).write_text(source.read_text())
    lock = base / "deploy.lock"
    lock.write_text(json.dumps({"pid": os.getpid(), "id": "20261204-000000-other", "since": time.time()}))
    plan = {"id": workdir.name, "workdir": str(workdir), "lock_path": str(lock), "unit": "x"}
    (workdir / "plan.json").write_text(json.dumps(plan))
    res = subprocess.run([sys.executable, "-I", "agent.py", "plan.json", "progress.jsonl"], cwd=workdir,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1, res.stderr
    events = [json.loads(ln) for ln in (workdir / "progress.jsonl").read_text().splitlines()]
    assert events[-1]["outcome"] == "locked" and "another deploy holds the lock" in events[-1]["message"]
    assert sorted(p.name for p in workdir.iterdir()) == sorted([*AGENT_FILES, "agent.run", "plan.json",
                                                                "progress.jsonl"])


@pytest.mark.parametrize("info", [
    {"speculative_draft_window_size": 64},  # SGLang 0.5.23
    {"speculative_dflash_draft_window_size": 64},  # builds from before the rename report only this
    {"speculative_draft_window_size": 64, "speculative_dflash_draft_window_size": 64},  # the DDTree build: both
], ids=["new-name", "old-name-only", "both"])
def test_verify_reads_the_window_under_either_name(info: dict[str, int]) -> None:
    expect = {"speculative_draft_window_size": 64}
    assert deploy_agent.disagreements(info, expect) == []
    assert deploy_agent.disagreements(info, {"speculative_draft_window_size": 32}) == [
        "speculative_draft_window_size=64 (wanted 32)"]


def test_verify_still_reports_a_missing_window() -> None:
    assert deploy_agent.disagreements({"speculative_algorithm": "DFLASH"}, {"speculative_draft_window_size": 64}) == [
        "speculative_draft_window_size=None (wanted 64)"]


@pytest.mark.parametrize(("meta", "quoted", "histogram"), [
    # SGLang 0.5.23's field
    ({"spec_verify_ct": 3, "spec_correct_drafts_histogram": [0, 1, 2]},
     "; accepted drafts per verify step [0, 1, 2] (spec_correct_drafts_histogram, 3 steps)", [0, 1, 2]),
    # an earlier SGLang's name for the same list
    ({"spec_verify_ct": 2, "spec_accept_histogram": [1, 0, 0, 1]},
     "; accepted drafts per verify step [1, 0, 0, 1] (spec_accept_histogram, 2 steps)", [1, 0, 0, 1]),
    # speculative, but no per-request detail: said, no error
    ({"spec_verify_ct": 4}, "; no per-request acceptance detail from this server", None),
    # no speculation: nothing to say
    ({}, "", None),
])
def test_the_smoke_line_quotes_the_servers_histogram(tmp_path: Path, meta: dict[str, object], quoted: str,
                                                     histogram: list[int] | None) -> None:
    from specconsole.actions.deploy.execute import _relay
    from specconsole.steps import StepEvent, Steps

    agent = _agent(tmp_path, "20261206-180000-abc123")
    agent.plan.update(smoke={"text": "x", "max_new_tokens": 8}, generate_url="http://127.0.0.1:1/generate")
    agent.drafts = 15
    answer = {"text": "y", "meta_info": {"completion_tokens": 8, "e2e_latency": 0.1, **meta}}
    agent.http = lambda *_args, **_kw: (200, json.dumps(answer))  # type: ignore[method-assign]
    agent.smoke()
    (ev,) = [json.loads(ln) for ln in Path(agent.plan["workdir"], "progress.jsonl").read_text().splitlines()
             if "smoke:" in ln]
    assert ev["message"].endswith(f"acceptance length {8 / meta.get('spec_verify_ct', 8):.2f}{quoted}")
    assert ev.get("accept_histogram") == histogram
    events: list[StepEvent] = []
    _relay(Steps("deploy", events.append), ev, "serve")
    if histogram is None:
        assert events[-1].acceptance == ()
    else:
        ((label, detail),) = events[-1].acceptance
        assert label == "serve" and list(detail.histogram) == histogram and detail.positions == 15
