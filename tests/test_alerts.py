"""Alert rules and the engine on synthetic statuses with a fake clock (no hosts): every shipped
rule fires after its duration, once, and resolves; the condition language refuses what it does not
allow; bad rules are one-line config errors; the eval baseline is the deployment's own run."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest

import sample_data as sd
from specconsole.alert_rules.expr import ExprError, Memory, evaluate, parse
from specconsole.alert_rules.rules import DEFAULT_RULES, AlertRule
from specconsole.alerts.baseline import EvalBaseline
from specconsole.alerts.engine import AlertEngine
from specconsole.alerts.figures import FIGURES
from specconsole.base.errors import ConfigError
from specconsole.base.events import EventLog
from specconsole.base.samples import Sample
from specconsole.config import parse_config
from specconsole.eval.schema import Deployment, EvalRun, TaskResult
from specconsole.eval.store import ResultStore
from specconsole.formats.nvidia_smi import GpuSnapshot
from specconsole.hosts import Connection, ConnState
from specconsole.monitor import HostStatus
from specconsole.sources.sglang import ServerState

T0 = sd.FROZEN_NOW
DEFAULTS = {r.name: r for r in DEFAULT_RULES}
KEYS = {"alert", "host", "state", "value", "message"}


def fresh(statuses: list[HostStatus], now: float, **changes: Any) -> list[HostStatus]:
    """The sample fleet observed at ``now`` (new sample objects, connected), with ``changes``:
    ``training=dict(...)``, ``sglang=dict(...)``, ``metrics=dict(...)``, ``gpu_util=x``, ``train_conn=state``."""
    out = []
    for s in statuses:
        conn = Connection(ConnState.CONNECTED, since=T0 - 3600, last_ok=now)
        if s.name == "train" and "train_conn" in changes:
            conn = Connection(changes["train_conn"], since=T0, attempt=2, last_error="lost")
        gpu = s.gpu.value if s.gpu else None
        if gpu is not None and "gpu_util" in changes and s.name == "train":
            gpu = GpuSnapshot(gpu.state, tuple(replace(g, utilization_pct=changes["gpu_util"]) for g in gpu.gpus),
                              gpu.processes, at=now)
        training = sglang = None
        if s.training is not None:
            wanted = {"state": "running", **changes.get("training", {})}
            training = Sample(replace(s.training.value, **wanted), now, 1.0)
        if s.sglang is not None:
            v = s.sglang.value
            metrics = replace(v.metrics, **changes.get("metrics", {})) if v.metrics else None
            sglang = Sample(replace(v, metrics=metrics, **changes.get("sglang", {})), now, 1.0)
        out.append(replace(s, connection=conn, gpu=Sample(gpu, now, 1.0) if gpu else None,
                           training=training, sglang=sglang))
    return out


def run(engine: AlertEngine, start: float, stop: float, step: float = 1.0,
        **changes: Any) -> list[tuple[float, dict[str, Any]]]:
    """Evaluate every ``step`` s from ``start`` to ``stop`` (inclusive); the events, with their times."""
    base = sd.sample_statuses(T0)
    out = []
    t = start
    while t <= stop + 1e-9:
        for ev in engine.evaluate(fresh(base, t, **changes), t):
            out.append((t, {**ev.data, "level": ev.level, "source": ev.source}))
        t += step
    return out


def only(name: str, **kwargs: Any) -> AlertEngine:
    return AlertEngine([DEFAULTS[name]], EventLog(), **kwargs)


@pytest.mark.parametrize(("rule", "bad", "good", "host"), [
    ("training-stalled", {"training": {"step": 500}}, None, "train"),
    ("loss-not-finite", {"training": {"loss": math.nan}}, {"training": {"loss": 0.5}}, "train"),
    ("gpu-idle-while-training", {"gpu_util": 1.0}, {"gpu_util": 90.0}, "train"),
    ("host-down", {"train_conn": ConnState.RECONNECTING}, {}, "train"),
    ("sglang-unhealthy", {"sglang": {"state": ServerState.HUNG}}, {}, "serve"),
    ("acceptance-collapsed", {"metrics": {"spec_accept_length": 2.0}}, {}, "serve"),
])
def test_every_shipped_rule_fires_once_after_its_duration_and_resolves(
        rule: str, bad: dict[str, Any], good: dict[str, Any] | None, host: str) -> None:
    duration = DEFAULTS[rule].for_s or 0.0
    engine = only(rule, baseline=lambda _s: 6.0)
    assert run(engine, T0, T0 + 5, **(good or {})) == []  # healthy: nothing
    start = T0 + 10
    events = run(engine, start, start + duration + 30, **bad)
    assert [(t - start, e["state"]) for t, e in events] == [(duration + (1 if rule == "training-stalled" else 0),
                                                            "firing")]
    _, fired = events[0]
    assert set(fired) - {"level", "source"} == KEYS and fired["source"] == "alert"
    assert fired["alert"] == rule and fired["host"] == host and fired["level"] == DEFAULTS[rule].level
    assert "\n" not in fired["message"] and rule in fired["message"]
    worst = engine.worst()
    assert worst is not None and worst.rule == rule
    after = start + duration + 31
    recovery = good if good is not None else {"training": {"step": 900}}
    resolved = run(engine, after, after + 2, **recovery)  # (a stalled step moves on: 500 -> 900)
    assert [e["state"] for _, e in resolved] == ["resolved"]
    assert resolved[0][1]["level"] == "warning" and engine.active == []


def test_throughput_halved_fires_against_its_own_median_and_resolves() -> None:
    engine = only("throughput-halved")
    assert run(engine, T0, T0 + 300, metrics={"tokens_per_s": 1800.0}) == []
    events = run(engine, T0 + 301, T0 + 400, metrics={"tokens_per_s": 800.0})
    assert [(t - (T0 + 301), e["state"]) for t, e in events] == [(60, "firing")]
    assert events[0][1]["value"] == 800.0
    assert [e["state"] for _, e in run(engine, T0 + 401, T0 + 402, metrics={"tokens_per_s": 1700.0})] == ["resolved"]


def test_a_condition_that_breaks_restarts_the_wait() -> None:
    engine = only("gpu-idle-while-training")
    assert run(engine, T0, T0 + 50, gpu_util=1.0) == []
    assert run(engine, T0 + 51, T0 + 51, gpu_util=50.0) == []  # busy once: the 60 s start again
    assert run(engine, T0 + 52, T0 + 111, gpu_util=1.0) == []
    assert [e["state"] for _, e in run(engine, T0 + 112, T0 + 115, gpu_util=1.0)] == ["firing"]


def test_unknown_figures_never_fire_and_a_stopped_job_does_not_stall() -> None:
    engine = AlertEngine(DEFAULT_RULES, EventLog())  # no eval baseline: acceptance is unknown
    assert run(engine, T0, T0 + 200, metrics={"spec_accept_length": 0.5}, training={"state": "stopped"},
               gpu_util=0.0) == []


def test_events_reach_the_log_with_exactly_the_interface_keys() -> None:
    log = EventLog()
    seen: list[Any] = []
    log.subscribe(seen.append)
    engine = AlertEngine([DEFAULTS["loss-not-finite"]], log)
    run(engine, T0, T0, training={"loss": math.inf})
    (event,) = seen
    assert event.source == "alert" and event.level == "error" and set(event.data) == KEYS
    assert event.data["value"] is None and event.data["state"] == "firing" and event.data["host"] == "train"


def test_a_rule_watches_only_its_hosts_and_reports_its_value() -> None:
    rule = AlertRule(name="hot", when="gpu.temp_max > 58", for_s=0, level="warning", hosts=("serve",),
                     value="gpu.temp_max")
    events = run(AlertEngine([rule], EventLog()), T0, T0)
    assert [(e["host"], e["value"]) for _, e in events] == [("serve", 59.0)]


def test_a_condition_without_memory_is_evaluated_again_only_when_a_figure_it_reads_moves(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 34: at 200 hosts the rules ran every second for every host. A condition without
    unchanged() or median() answers the same for the same figures: it is evaluated again when one
    of them moved (its duration still counts each second); one with memory is evaluated every time."""
    from specconsole.alerts import engine as engine_module

    asked: list[str] = []
    real = engine_module.evaluate
    monkeypatch.setattr(engine_module, "evaluate",
                        lambda cond, *a, **k: (asked.append(cond.text), real(cond, *a, **k))[1])
    engine = AlertEngine([DEFAULTS["gpu-idle-while-training"], DEFAULTS["training-stalled"]], EventLog())
    idle, stalled = engine.rules
    assert not idle.condition.stateful and stalled.condition.stateful
    assert run(engine, T0, T0 + 4, gpu_util=1.0) == []  # the same figures for 5 s (a new step each time)
    per_rule = {text: asked.count(text) for text in (idle.condition.text, stalled.condition.text)}
    assert per_rule == {idle.condition.text: 2, stalled.condition.text: 10}  # 2 hosts: once each, and every second
    asked.clear()
    assert run(engine, T0 + 5, T0 + 5, gpu_util=50.0) == []
    assert asked.count(idle.condition.text) == 1  # the train host's GPUs moved; the serve host's did not
    events = run(engine, T0 + 6, T0 + 70, gpu_util=1.0)  # held again: fires after its 60 s, not evaluated each second
    assert [(t - (T0 + 6), e["state"]) for t, e in events] == [(60, "firing")]


def test_only_the_gpu_figures_a_rule_reads_are_worked_out() -> None:
    from specconsole.alerts.figures import figures

    serve = sd.sample_statuses(T0)[1]
    every = figures(serve, T0)
    some = figures(serve, T0, wanted={"gpu.util_max", "host.stale"})
    assert {k for k in every if k.startswith("gpu.")} == {"gpu.util", "gpu.util_max", "gpu.mem_pct",
                                                           "gpu.temp_max", "gpu.power_w"}
    assert {k for k in some if k.startswith("gpu.")} == {"gpu.util", "gpu.util_max"}
    assert {k: v for k, v in every.items() if not k.startswith("gpu.") or k in some} == some
    assert parse("median(sglang.tokens_per_s, 60) > 1", FIGURES).stateful
    assert not parse("not finite(training.loss)", FIGURES).stateful


# ------------------------------------------------------------------------------------ language

def truth(text: str, **figs: object) -> bool | None:
    return evaluate(parse(text, FIGURES), figs, Memory(), 0.0)


def test_the_language_is_three_valued_over_known_figures() -> None:
    assert truth("gpu.util < 5", **{"gpu.util": 3}) is True
    assert truth("gpu.util < 5") is None
    assert truth("gpu.util < 5 and host.reachable", **{"host.reachable": False}) is False
    assert truth("gpu.util < 5 or host.reachable", **{"host.reachable": True}) is True
    assert truth("not finite(training.loss)", **{"training.loss": math.nan}) is True
    assert truth('sglang.state in ("down", "hung")', **{"sglang.state": "hung"}) is True
    assert truth("sglang.accept_len < 0.8 * eval.accept_len", **{"sglang.accept_len": 4.0, "eval.accept_len": 6.0})
    assert truth("host.stale == true", **{"host.stale": True}) is True
    assert truth("0 < gpu.util < 5", **{"gpu.util": 3}) is True
    assert truth("0 < gpu.util < 5", **{"gpu.util": 7}) is False
    assert truth("-gpu.util < 0 and gpu.util / 0 > 1e9", **{"gpu.util": 3}) is True
    assert truth('sglang.state < 3', **{"sglang.state": "down"}) is None  # not comparable: unknown


@pytest.mark.parametrize(("text", "problem"), [
    ('__import__("os").system("id")', "unknown function"),
    ("eval('1')", "unknown function 'eval'"),
    ("gpu.util.real > 1", "unknown figure 'gpu.util.real'"),
    ("gpu.utl < 5", "did you mean gpu.util?"),
    ("(lambda: 1)()", "unknown function 'lambda: 1'"),
    ("lambda: 1", "not allowed"),
    ("[x for x in (1, 2)]", "not allowed"),
    ("gpu.util[0] < 1", "not allowed"),
    ("median(gpu.util, 0) > 1", "median()'s window"),
    ("median(3, 10) > 1", "first argument must be a figure"),
    ("finite()", "takes 1 argument"),
    ("gpu.util ** 2 > 1", "not allowed"),
    ("gpu.util <", "not a valid condition"),
    ("x > 1", "unknown name 'x'"),
])
def test_the_language_refuses_what_it_does_not_allow(text: str, problem: str) -> None:
    with pytest.raises(ExprError) as err:
        parse(text, FIGURES)
    assert problem in str(err.value) and "\n" not in str(err.value)


# ------------------------------------------------------------------------------------- config

def config(*alerts: dict[str, Any], **alerting: Any) -> Any:
    return parse_config({"hosts": [{"name": "train", "role": "train", "training": {"log_path": "/x"}}],
                         "alerts": list(alerts), "alerting": alerting})


def test_config_ships_the_defaults_and_lets_a_table_change_or_drop_one() -> None:
    assert [r.name for r in config().alerts or ()] == [r.name for r in DEFAULT_RULES]
    c = config({"name": "training-stalled", "for_s": 3}, {"name": "host-down", "enabled": False},
               {"name": "hot", "when": "gpu.temp_max > 85", "for_s": 10})
    rules = {r.name: r for r in c.alerts or ()}
    assert rules["training-stalled"].for_s == 3 and rules["training-stalled"].when == DEFAULTS["training-stalled"].when
    assert "host-down" not in rules and rules["hot"].level is None
    assert [r.name for r in config({"name": "hot", "when": "gpu.util > 1"}, defaults=False).alerts or ()] == ["hot"]


@pytest.mark.parametrize(("alerts", "alerting", "words"), [
    ([{"name": "mine", "for_s": 3}], {},
     "alerts[0] (mine).when: 'mine' is not a shipped rule, so it needs a condition"),
    ([{"name": "hot", "when": "gpu.tmp > 1"}], {}, "alerts[0] (hot).when: unknown figure 'gpu.tmp'"),
    ([{"name": "hot", "when": "open('/etc/passwd')"}], {}, "alerts[0] (hot).when: unknown function 'open'"),
    ([{"name": "hot", "when": "gpu.util > 1", "for_s": -1}], {}, "alerts[0] (hot).for_s: must be >= 0"),
    ([{"name": "hot", "when": "gpu.util > 1", "level": "page"}], {}, "alerts[0] (hot).level"),
    ([{"name": "hot", "when": "gpu.util > 1", "hosts": ["nope"]}], {}, "alerts[0] (hot).hosts: no host named 'nope'"),
    ([{"name": "a", "when": "gpu.util > 1"}, {"name": "a", "when": "gpu.util > 2"}], {}, "a second rule named 'a'"),
    ([], {"webhook": "ftp://x"}, "alerting.webhook: not an http(s) URL"),
    ([], {"webhook_timeout_s": 0}, "alerting.webhook_timeout_s: must be"),
])
def test_a_bad_rule_is_one_line_naming_the_rule_and_the_fix(
        alerts: list[dict[str, Any]], alerting: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError) as err:
        config(*alerts, **alerting)
    text = str(err.value)
    assert words in text and "(fix: " in text and "\n" not in text


# ------------------------------------------------------------------------------------ baseline

def run_of(run_id: str, algorithm: str, accept: float, created: str, kind: str = "measured") -> EvalRun:
    return EvalRun(id=run_id, label=run_id, created_at=created,
                   tasks=(TaskResult("t1", acceptance_length=accept), TaskResult("t2", acceptance_length=accept + 1)),
                   deployment=Deployment(algorithm=algorithm), source={"kind": kind})


def test_the_eval_baseline_is_the_newest_measured_run_of_the_served_algorithm(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    for run_ in (run_of("old", "DFLASH", 3.0, "2026-01-01T00:00:00Z"),
                 run_of("new", "DFLASH", 5.0, "2026-02-01T00:00:00Z"),
                 run_of("eagle", "EAGLE", 2.0, "2026-03-01T00:00:00Z"),
                 run_of("zlab", "DFLASH", 9.0, "2026-04-01T00:00:00Z", kind="published")):
        store.save(run_)
    serve = sd.sample_statuses(T0)[1]  # serves DFLASH
    assert EvalBaseline(store)(serve) == 5.5
    assert EvalBaseline(ResultStore(tmp_path / "none"))(serve) is None
    assert EvalBaseline(store)(sd.sample_statuses(T0)[0]) is None  # no SGLang: no baseline


async def test_status_alerts_without_watch_is_one_line() -> None:
    from specconsole.base.errors import SpecConsoleError
    from specconsole.status_watch import print_status

    with pytest.raises(SpecConsoleError) as err:
        await print_status(cast(Any, None), as_json=False, watch=False, interval=1.0, timeout=0, alerts=True)
    assert str(err.value) == ("status --alerts: alerts need time to fire "
                              "(fix: specconsole status --watch --alerts)")
