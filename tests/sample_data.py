"""A fixed, realistic console state built from the real dataclasses (no hosts behind it).

Used by the layout snapshots (with a frozen clock, so every run draws the same frame) and handy
for trying a theme without a lab: ``ConsoleApp(sample_config(), fleet=sample_fleet(now),
clock=lambda: now)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specconsole.base.events import Event, EventLog
from specconsole.base.samples import Sample
from specconsole.config import Config, parse_config
from specconsole.formats.nvidia_smi import GpuProcess, GpuReading, GpuSnapshot, GpuState
from specconsole.formats.training_log import TrainingRecord
from specconsole.hosts import Connection, ConnState
from specconsole.monitor import HostStatus
from specconsole.sglang import ServerInfo, SglangMetrics
from specconsole.sources.sglang import ServerState, SglangSnapshot
from specconsole.sources.training_progress import TrainingProgress
from specconsole.ui.console.provider import FixedStatuses
from specconsole.ui.panes.history import History

#: 2025-06-02 09:30:00 UTC: the frozen "now" of the snapshots.
FROZEN_NOW = 1748856600.0


def sample_config(state_dir: str = "/nonexistent/specconsole-state", audit_log: str | None = None,
                  **console: Any) -> Config:
    return parse_config({
        "console": {"refresh_s": 1.0, "state_dir": state_dir,
                    "audit_log": audit_log or f"{state_dir}/audit.log", **console},
        "hosts": [
            {"name": "train", "role": "train", "connect": "ssh", "host": "gpu-train-01", "user": "ops",
             "training": {"log_path": "/data/runs/dflash-qwen3-8b/train.jsonl", "total_epochs": 6,
                          "steps_per_epoch": 33000, "stall_warning_min": 10}},
            {"name": "serve", "role": "serve", "connect": "ssh", "host": "gpu-serve-01", "user": "ops",
             "sglang": {"base_url": "http://127.0.0.1:30000", "unit": "sglang.service"}},
        ],
    }, "<sample>")


def _gpu(index: int, util: float, mem_used: float, power: float, temp: float) -> GpuReading:
    return GpuReading(index=index, uuid=f"GPU-{index:08x}", name="NVIDIA H200", utilization_pct=util,
                      memory_util_pct=util * 0.6, memory_used_mib=mem_used, memory_total_mib=143771.0,
                      power_draw_w=power, power_limit_w=700.0, temperature_c=temp, sm_clock_mhz=1980.0,
                      pstate="P0")


def sample_statuses(now: float = FROZEN_NOW, *, train_state: ConnState = ConnState.CONNECTED) -> list[HostStatus]:
    train_gpus = tuple(_gpu(i, 97.0 - (i % 3), 61000.0 + 37 * i, 612.0 + 4 * i, 64.0 + i % 4) for i in range(8))
    train_procs = tuple(GpuProcess(41200 + i, "/usr/bin/python3", 60990.0, f"GPU-{i:08x}", i) for i in range(8))
    serve_gpus = tuple(_gpu(i, 62.0 + 3 * i, 118000.0, 455.0 + 10 * i, 58.0 + i) for i in range(2))
    serve_procs = (GpuProcess(7311, "sglang::scheduler", 117990.0, "GPU-00000000", 0),
                   GpuProcess(7312, "sglang::scheduler", 117990.0, "GPU-00000001", 1))
    info = ServerInfo(version="0.5.23", algorithm="DFLASH",
                      draft_model_path="/models/dflash-qwen3-8b-b16", block_size=16, num_draft_tokens=16,
                      draft_window=16, model_path="/models/Qwen3-8B", avg_accept_length=6.41)
    metrics = SglangMetrics(gen_throughput=1843.2, tokens_per_s=1843.2, running_reqs=6, queued_reqs=1,
                            spec_accept_length=6.38, generation_tokens_total=9.1e6, token_usage=0.41)
    losses = tuple(2.9 * math.exp(-i / 40) + 0.55 + 0.03 * math.sin(i) for i in range(120))
    progress = TrainingProgress(
        log_path="/data/runs/dflash-qwen3-8b/train.jsonl",
        last=TrainingRecord(step=12345, epoch=0.3741, loss=losses[-1], lr=3e-4, tokens_per_s=48210.0),
        step=12345, total_steps=198000, epoch=0.3741, total_epochs=6.0, steps_per_epoch=33000.0,
        loss=losses[-1], loss_history=losses, lr=3e-4, tokens_per_s=48210.0, steps_per_s=0.318,
        eta_s=7 * 86400 + 2 * 3600, eta_target="6 epochs", eta_text="7d 2h to 6 epochs", target_steps=198000,
        last_line_at=now - 2.4, lines_seen=12400, recent_lines=(
            '{"step": 12343, "epoch": 0.374, "loss": 0.6012, "lr": 0.0003, "tokens_per_s": 48190}',
            '{"step": 12344, "epoch": 0.374, "loss": 0.5987, "lr": 0.0003, "tokens_per_s": 48230}',
            '{"step": 12345, "epoch": 0.3741, "loss": 0.5969, "lr": 0.0003, "tokens_per_s": 48210}',
        ),
    )
    if train_state is ConnState.CONNECTED:
        train_conn = Connection(ConnState.CONNECTED, since=now - 3600, last_ok=now - 0.3)
        train_at = now - 0.4
    else:
        train_conn = Connection(train_state, since=now - 42, attempt=2, last_ok=now - 45,
                                last_error="train: connection to ops@gpu-train-01 lost")
        train_at = now - 44.0
    return [
        HostStatus(
            name="train", role="train", address="ops@gpu-train-01", connection=train_conn,
            gpu=Sample(GpuSnapshot(GpuState.OK, train_gpus, train_procs, at=train_at), at=train_at, interval=1.0),
            sglang=None,
            training=Sample(progress, at=train_at, interval=1.0),
            expected=("gpu", "training"),
        ),
        HostStatus(
            name="serve", role="serve", address="ops@gpu-serve-01",
            connection=Connection(ConnState.CONNECTED, since=now - 3600, last_ok=now - 0.2),
            gpu=Sample(GpuSnapshot(GpuState.OK, serve_gpus, serve_procs, at=now - 0.6), at=now - 0.6, interval=1.0),
            sglang=Sample(SglangSnapshot(ServerState.HEALTHY, 200, None, info, metrics, at=now - 0.7),
                          at=now - 0.7, interval=2.0),
            training=None,
            expected=("gpu", "sglang"),
        ),
    ]


def sample_events(now: float = FROZEN_NOW) -> EventLog:
    log = EventLog(None)
    for dt, message, source, level in (
        (-3600.2, "connected to ops@gpu-train-01", "train", "info"),
        (-3600.1, "connected to ops@gpu-serve-01", "serve", "info"),
        (-1800.0, "reconnecting (attempt 1): serve: connection to ops@gpu-serve-01 lost", "serve", "warning"),
        (-1797.5, "connected to ops@gpu-serve-01", "serve", "info"),
        (-60.0, "theme: dark", "console", "info"),
    ):
        log.recent.append(Event(message, source, level, at=now + dt))  # type: ignore[arg-type]
    return log


def sample_fleet(now: float = FROZEN_NOW, **kwargs: Any) -> FixedStatuses:
    return FixedStatuses(sample_statuses(now, **kwargs), sample_events(now))


def seed_history(history: History, now: float = FROZEN_NOW, points: int = 240) -> None:
    """Deterministic histories: utilization dips during an eval, throughput follows the load."""
    for i in range(points):
        at = now - (points - i)
        dip = 40.0 if 150 <= i < 165 else 0.0
        history.series("train", "util").add(at, 96.5 - dip + (i % 3))
        history.series("train", "tokens").add(at, 48000.0 + 400 * math.sin(i / 9) - dip * 900)
        history.series("serve", "util").add(at, 55.0 + 15 * math.sin(i / 14))
        history.series("serve", "tokens").add(at, 1700.0 + 300 * math.sin(i / 14) if i % 50 else None)
        history.series("serve", "accept").add(at, 6.2 + 0.3 * math.sin(i / 6))


def sample_deploy_events(now: float = FROZEN_NOW) -> list[Any]:
    """A deploy caught mid-restart: a fixed step list for the action view's snapshots."""
    from specconsole.steps import StepEvent

    t0 = now - 14.2
    rows: list[tuple[float, str, str, str, dict[str, Any]]] = [
        (0.0, "step", "read the unit", "reading sglang.service", {}),
        (0.1, "command", "read the unit", "systemctl cat sglang.service", {}),
        (0.4, "result", "read the unit", "exit 0 in 0.30s: # /etc/systemd/system/sglang.service (+31 lines)",
         {"exit_status": 0}),
        (0.5, "step", "SGLang flags", "asking the installed SGLang which flags it has", {}),
        (0.6, "command", "SGLang flags", "/opt/sglang/bin/python -m sglang.launch_server --help", {}),
        (2.9, "result", "SGLang flags", "exit 0 in 2.30s: 1712 lines of --help", {"exit_status": 0}),
        (3.0, "step", "draft model", "reading the draft model's config.json", {}),
        (3.2, "info", "draft model", "architectures ['DFlashDraftModel'], block_size 16", {}),
        (3.3, "step", "constraints", "checking SGLang's DFLASH constraints", {}),
        (3.4, "info", "constraints", "block 16, window 16: draft window >= block size holds", {}),
        (3.5, "step", "lock", "checking no other deploy is running", {}),
        (3.7, "info", "lock", "plan: draft_window=16", {}),
        (6.0, "step", "upload", "copying the deploy agent and plan to the host", {}),
        (6.4, "step", "start the agent", "starting the supervised restart-verify-rollback step on the host", {}),
        (6.7, "step", "write the drop-in", "writing zz-specconsole-deploy.conf", {}),
        (6.9, "step", "restart", "restarting sglang.service", {}),
        (7.0, "command", "restart", "systemctl restart sglang.service", {}),
        (13.9, "heartbeat", "restart", "waiting for /health: 7s of 600s; HTTP 503; journal: loading draft "
         "model weights (2/4 shards)", {}),
    ]
    return [StepEvent("deploy", kind, message, step=step, host="serve",  # type: ignore[arg-type]
                      elapsed_s=dt, at=t0 + dt, **extra)
            for dt, kind, step, message, extra in rows]


SAMPLE_TASKS = ("fizzbuzz", "binary_search", "linked_list_reverse", "json_parser", "async_rate_limiter",
                "trie_autocomplete", "merge_sort", "lru_cache", "graph_bfs", "matrix_multiply")


def comparison_runs() -> list[Any]:
    """z-lab's published run and ours: the eval pane opens on their comparison (the newest two)."""
    return sample_runs()[:2]


def save_runs(results: Path, runs: Sequence[Any]) -> Path:
    """``runs`` stored in the results folder ``results`` (for ``$SPECCONSOLE_EVAL_RESULTS``)."""
    from specconsole.eval.store import ResultStore

    store = ResultStore(results)
    for run in runs:
        store.save(run)
    return results


def frozen_console(state_dir: str, **kwargs: Any) -> Any:
    """The console on this module's state with the clock frozen at :data:`FROZEN_NOW` and seeded
    plot histories: every run draws the same frame (the snapshots, scripts/screenshots.py). The eval
    pane reads ``$SPECCONSOLE_EVAL_RESULTS`` (set it to a :func:`save_runs` folder first)."""
    from specconsole.ui.console.app import ConsoleApp
    from specconsole.ui.style.themes import BUNDLED_DIR, load_themes

    now = FROZEN_NOW
    app = ConsoleApp(sample_config(state_dir), fleet=sample_fleet(now, **kwargs), clock=lambda: now,
                     themes=load_themes([BUNDLED_DIR]))
    seed_history(app.history, now)
    return app


def sample_runs() -> list[Any]:
    """Three stored eval runs (published baseline, ours, vanilla) with fixed numbers."""
    from specconsole.eval.store import Deployment, EvalRun, TaskResult

    def run(run_id: str, label: str, when: str, base: float, algo: str | None, tps: float,
            kind: str = "measured") -> EvalRun:
        tasks = tuple(TaskResult(t, acceptance_length=round(base + (i % 4) * 0.37 - (i % 3) * 0.21, 2) if algo
                                 else 1.0, tokens_per_s=round(tps * (1 + (i % 5) * 0.03), 1),
                                 latency_s=round(2.0 + i * 0.11, 2))
                      for i, t in enumerate(SAMPLE_TASKS))
        dep = Deployment(algo, block_size=16 if algo else None, draft_window=16 if algo else None,
                         draft_model="/models/dflash-qwen3-8b-b16" if algo else None, model="/models/Qwen3-8B")
        return EvalRun(id=run_id, label=label, created_at=when, deployment=dep, tasks=tasks,
                       source={"kind": kind})

    return [run("zlab-b16", "z-lab DFlash b16 (published)", "2026-11-01T00:00:00Z", 6.4, "DFLASH", 1810.0,
                "published"),
            run("ours-4000", "ours step 4000", "2026-12-01T00:00:00Z", 5.9, "DFLASH", 1690.0),
            run("vanilla", "vanilla (Qwen3-8B)", "2026-12-02T00:00:00Z", 1.0, None, 420.0)]


SAMPLE_UNIT = """# /etc/systemd/system/sglang.service
[Unit]
Description=SGLang server
[Service]
ExecStart=/opt/sglang/bin/python -m sglang.launch_server --model-path /models/Qwen3-8B --port 30000 \\
  --tp-size 2 --speculative-algorithm NEXTN --speculative-draft-model-path /models/dflash-qwen3-8b-b16 \\
  --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --enable-metrics
Restart=on-failure
"""


def sample_plan() -> Any:
    """A deploy plan NEXTN -> DFLASH window 16 (the plan dialog's snapshot), built like preflight does."""
    from importlib.resources import files

    from specconsole.actions.deploy.preflight import DeployPlan
    from specconsole.sglang.flags import Argv, SglangCli
    from specconsole.sglang.unit import dropin_text, parse_unit

    unit = parse_unit("sglang.service", SAMPLE_UNIT)
    cli = SglangCli.from_help(files("specconsole.lab.data").joinpath("serve-help-0.5.23.txt").read_text())
    args = Argv.parse(unit.exec_start, cli)
    concepts = ("algorithm", "draft_model", "block_size", "num_draft_tokens", "draft_window", "num_steps",
                "eagle_topk")
    names = {c: n for c in concepts if (n := cli.name_for(c))}
    current = {c: args.get(cli.aliases(n)) for c, n in names.items()}
    new = dict(current, algorithm="DFLASH", block_size="16", num_draft_tokens="16", draft_window="16",
               num_steps=None, eagle_topk=None)
    for concept, value in new.items():
        if value is None:
            args.remove(cli.aliases(names[concept]))
        else:
            args.set(names[concept], value, cli.aliases(names[concept]))
    plan = DeployPlan(host="serve", unit=unit, cli=cli, version="0.5.23", old_argv=unit.exec_start,
                      new_argv=args.argv(), current=current, new=new, flag_names=names, old_dropin=None,
                      new_dropin="", expect={}, base_url="http://127.0.0.1:30000", draft_config=None,
                      gpu_lines=["GPU 0: 25771 MiB free of 143771 MiB (the restart frees what the old server holds)",
                                 "GPU 1: 25771 MiB free of 143771 MiB (the restart frees what the old server holds)"],
                      id="20250602-093000-abc123")
    plan.new_dropin = dropin_text(plan.new_argv, f"deploy {plan.id}: {plan.summary()}")
    return plan
