"""The rollout's gate text, verdicts and the one-line-per-replica board (no lab)."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from specconsole.actions.deploy.preflight import DeployRequest
from specconsole.actions.rollout.board import Board
from specconsole.actions.rollout.gate import Figures, GateError, Threshold, judge, parse_gate
from specconsole.actions.rollout.run import Replica, RolloutOptions, _canary_wait
from specconsole.config import RouterConfig, parse_config
from specconsole.hosts.local import LocalHost
from specconsole.steps import StepEvent, Steps
from tiny_http import TinyServer


def test_gate_text() -> None:
    assert parse_gate("accept_len>=0.95*baseline,tok_s>=0.9*baseline") == (
        Threshold("accept_len", 0.95), Threshold("tok_s", 0.9))
    assert parse_gate(" accept_len >= baseline ") == (Threshold("accept_len", 1.0),)


@pytest.mark.parametrize(("text", "needle"), [
    ("", "empty gate"),
    ("accept_len>0.9*baseline", "cannot read 'accept_len>0.9*baseline'"),
    ("latency>=0.9*baseline", "unknown metric 'latency'"),
    ("tok_s>=0*baseline", "must be in (0, 10]"),
])
def test_bad_gate_text_is_one_line(text: str, needle: str) -> None:
    with pytest.raises(GateError) as err:
        parse_gate(text)
    assert needle in str(err.value) and "\n" not in str(err.value) and "--gate" in str(err.value)


def test_judge_names_every_figure_and_what_failed() -> None:
    base = Figures(5.0, 400.0, 3, 300)
    gate = parse_gate("accept_len>=0.95*baseline,tok_s>=0.9*baseline")
    ok = judge(Figures(4.9, 380.0, 3, 300), base, gate)
    assert ok.passed and "accept_len 4.90 >= 0.95*5.00 = 4.75" in ok.line
    bad = judge(Figures(3.1, 390.0, 3, 300), base, gate)
    assert not bad.passed and bad.line == "gate FAILED: acceptance length 3.10 < 4.75 (accept_len>=0.95*baseline)"


def test_board_fits_eight_replicas_at_80_columns() -> None:
    hosts = [{"name": f"serve{i}", "role": "serve", "sglang": {"base_url": f"http://127.0.0.1:{3000 + i}"}}
             for i in range(1, 9)]
    config = parse_config({"hosts": hosts})
    replicas = [Replica(c, host=None) for c in config.hosts]  # type: ignore[arg-type]
    board = Board(replicas, Figures(5.1, 437.0, 3, 357))
    replicas[0].state, replicas[0].figures = "promoted", Figures(5.25, 449.6, 3, 357)
    replicas[1].state = "deploying"
    board.feed(StepEvent("rollout", "step", "restarting sglang.service", step="restart", host="serve2", at=100.0))
    board.feed(StepEvent("rollout", "heartbeat", "`systemctl restart -- sglang.service` running for 1.5s; "
                         "activating (start), MainPID 4242, last journal line: Loading safetensors checkpoint shards",
                         step="restart", host="serve2", at=101.5))
    lines = board.lines(80, now=102.0)
    assert len(lines) == 8 and all(len(line) <= 80 for line in lines)
    assert lines[0].startswith("serve1   promoted") and "acc 5.25/5.10 450/437 tok/s" in lines[0]
    assert lines[1].startswith("serve2   deploying   restart             2.0s  … `systemctl restart")
    assert lines[2].rstrip() == "serve3   waiting     -                      -"


async def canary_wait_of(server: TinyServer) -> list[StepEvent]:
    """The events of a 0 s canary wait on a replica whose SGLang is ``server`` (closed after)."""
    try:
        config = parse_config({"hosts": [{"name": "serve", "role": "serve",
                                          "sglang": {"base_url": server.url, "timeout_s": 10}}]})
        replica = Replica(config.hosts[0], LocalHost(config.hosts[0]))
        opts = RolloutOptions(DeployRequest(draft_window=32), RouterConfig(url="http://127.0.0.1:1"), (), [],
                              canary_wait_s=0.0)
        events: list[StepEvent] = []
        assert await _canary_wait(replica, opts, Steps("rollout", events.append), asyncio.Event()) == ""
    finally:
        server.close()
    return events


async def test_the_canary_wait_names_live_figures_even_when_it_is_over_before_the_first_reading() -> None:
    """On a loaded machine, opening the canary's client can take the whole wait: it still reads /metrics once."""
    page = (b'sglang:gen_throughput{model_name="m"} 437.0\n'
            b'sglang:spec_accept_length{model_name="m"} 5.1\nsglang:num_running_reqs{model_name="m"} 3\n')
    server = TinyServer({"/metrics": lambda: (200, "text/plain", page)})
    events = await canary_wait_of(server)
    assert server.hits == ["/metrics"]
    lines = [e.message for e in events]
    assert "canary serve: 0s left; live: 437 tok/s, accept 5.10, 3 running" in lines
    assert lines[-1] == "canary wait over; serve live: 437 tok/s, accept 5.10, 3 running"


async def test_a_slow_metrics_answer_in_the_canary_wait_is_not_silence() -> None:
    """The canary's /metrics answering after 2.5 s: heartbeats name the request while it runs."""
    def slow() -> tuple[int, str, bytes]:
        time.sleep(2.5)
        return 200, "text/plain", b'sglang:gen_throughput{model_name="m"} 437.0\n'
    server = TinyServer({"/metrics": slow})
    events = await canary_wait_of(server)
    asking = f"GET {server.url}/metrics of the canary serve"
    beats = [e for e in events if e.kind == "heartbeat" and asking in e.message]
    assert len(beats) >= 2, [e.message for e in events]
    assert max(b.at - a.at for a, b in itertools.pairwise(events)) < 1.5
