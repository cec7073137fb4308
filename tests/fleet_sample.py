"""A fixed fleet of N hosts (no hosts behind it), built from tests/sample_data.py's
two realistic hosts: the fleet view's tests and a quick look at it without a lab."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import sample_data as sd
from specconsole.base.samples import Sample
from specconsole.config import Config, parse_config
from specconsole.hosts import Connection, ConnState
from specconsole.monitor import HostStatus
from specconsole.ui.console.provider import FixedStatuses


def fleet_names(n: int) -> list[str]:
    return [f"{'train' if i % 2 == 0 else 'serve'}-{i:03d}" for i in range(n)]


def fleet_config(n: int, state_dir: str = "/nonexistent/specconsole-state", **console: Any) -> Config:
    hosts = []
    for i, name in enumerate(fleet_names(n)):
        host: dict[str, Any] = {"name": name, "role": "train" if i % 2 == 0 else "serve", "connect": "ssh",
                                "host": f"gpu-{i:03d}", "user": "ops"}
        if i % 2 == 0:
            host["training"] = {"log_path": "/data/runs/dflash/train.jsonl", "total_epochs": 6,
                                "steps_per_epoch": 33000}
        else:
            host["sglang"] = {"base_url": "http://127.0.0.1:30000"}
        hosts.append(host)
    return parse_config({"console": {"refresh_s": 1.0, "state_dir": state_dir, "audit_log": f"{state_dir}/audit.log",
                                     **console}, "hosts": hosts}, "<fleet sample>")


def _aged(sample: Sample[Any] | None, at: float) -> Sample[Any] | None:
    return None if sample is None else Sample(sample.value, at=at, interval=sample.interval)


def fleet_statuses(n: int, now: float = sd.FROZEN_NOW, *, down: Iterable[int] = (),
                   stale: Iterable[int] = ()) -> list[HostStatus]:
    """``n`` hosts, alternately training and serving; indexes in ``down`` lost their connection
    42 s ago, those in ``stale`` have had no sample for 12 s."""
    train, serve = sd.sample_statuses(now)
    down, stale = set(down), set(stale)
    out = []
    for i, name in enumerate(fleet_names(n)):
        base = train if i % 2 == 0 else serve
        s = replace(base, name=name, address=f"ops@gpu-{i:03d}")
        if i in down:
            s = replace(s, connection=Connection(ConnState.DOWN, since=now - 42, attempt=3, last_ok=now - 45,
                                                 last_error=f"{name}: connection lost"),
                        gpu=_aged(s.gpu, now - 44), training=_aged(s.training, now - 44),
                        sglang=_aged(s.sglang, now - 44))
        elif i in stale:
            s = replace(s, gpu=_aged(s.gpu, now - 12), training=_aged(s.training, now - 12),
                        sglang=_aged(s.sglang, now - 12))
        out.append(s)
    return out


def fixed_fleet(n: int, now: float = sd.FROZEN_NOW, **kwargs: Any) -> FixedStatuses:
    return FixedStatuses(fleet_statuses(n, now, **kwargs), sd.sample_events(now))
