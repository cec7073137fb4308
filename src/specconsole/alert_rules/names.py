"""The figures' names: what a condition may read (:mod:`specconsole.alerts.figures` computes them
from a host's status).

Apart from the figures so that the config (through :mod:`.rules`) can check a condition's
names without importing the monitor and its sources.
"""

from __future__ import annotations

#: figure name -> what it is (the README's list and the config's "unknown figure" fix)
FIGURES: dict[str, str] = {
    "host.reachable": "connected (or read through Prometheus)",
    "host.down": "not reachable: down, reconnecting or not connected yet",
    "host.stale": "one of the host's samples is older than its interval (+0.5 s)",
    "host.age_s": "age of the host's newest sample, s",
    "host.role": 'the host\'s role: "train", "serve" or "both"',
    "gpu.util": "mean GPU utilization over the host's GPUs, %",
    "gpu.util_max": "the busiest GPU's utilization, %",
    "gpu.mem_pct": "mean GPU memory used, %",
    "gpu.temp_max": "the hottest GPU's temperature, C",
    "gpu.power_w": "total GPU power draw, W",
    "training.running": "the training job's processes run",
    "training.state": 'the job\'s state: "running", "stopped" or "unknown"',
    "training.step": "the latest step in the training log",
    "training.loss": "the latest loss (nan/inf when the log says so)",
    "training.steps_per_s": "steps per second",
    "training.tokens_per_s": "training tokens per second",
    "training.line_age_s": "seconds since the log's last line",
    "sglang.state": 'SGLang\'s state: "healthy", "starting", "down", "error", "unreachable", "hung"',
    "sglang.healthy": "SGLang answers healthy",
    "sglang.accept_len": "speculative acceptance length (/metrics)",
    "sglang.tokens_per_s": "generation throughput, tokens/s",
    "sglang.running_reqs": "requests running",
    "sglang.queued_reqs": "requests queued",
    "eval.accept_len": "the eval baseline's mean acceptance length: the newest stored eval run measured on "
                       "the deployment the host serves now",
}
