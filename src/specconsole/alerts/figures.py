"""A host's figures: the named values an alert condition reads, taken from one :class:`HostStatus`.

Every figure is a number, a bool, a string or ``None`` (not known now). A figure of a source
(``gpu.*``, ``sglang.*``, ``training.*``) comes from that source's latest sample; a sample that
is stale still gives its figures (the ``host.stale`` figure says that it is stale).
"""

from __future__ import annotations

from collections.abc import Callable, Container
from typing import TYPE_CHECKING

from specconsole.alert_rules.names import FIGURES

__all__ = ["FIGURES", "Baseline", "figures", "source_of"]

if TYPE_CHECKING:
    from specconsole.base.samples import Sample
    from specconsole.monitor import HostStatus


def source_of(name: str) -> str:
    """The sample a figure comes from (``median`` counts a figure once per new sample of it)."""
    return name.split(".", 1)[0]


Baseline = Callable[["HostStatus"], float | None]


def figures(s: HostStatus, now: float, baseline: Baseline | None = None,
            wanted: Container[str] | None = None) -> dict[str, object]:
    """Every figure of host ``s`` at ``now`` (``baseline``: the host's eval baseline, if any);
    with ``wanted``, of the GPU figures (each a pass over the host's GPUs) only those it holds."""
    reachable = s.reachable
    samples: list[Sample[object]] = [x for x in (s.gpu, s.sglang, s.training) if x is not None]
    out: dict[str, object] = {
        "host.reachable": reachable,
        "host.down": not reachable and s.connection.state.value != "closed",
        "host.stale": any(x.is_stale(now) for x in samples) if samples else None,
        "host.age_s": min(x.age(now) for x in samples) if samples else None,
        "host.role": s.role,
    }
    if s.gpu is not None and s.gpu.value.gpus:
        gpus = s.gpu.value.gpus
        if wanted is None or "gpu.util" in wanted or "gpu.util_max" in wanted:
            util = [g.utilization_pct for g in gpus if g.utilization_pct is not None]
            out["gpu.util"] = sum(util) / len(util) if util else None
            out["gpu.util_max"] = max(util) if util else None
        if wanted is None or "gpu.mem_pct" in wanted:
            mem = [pct for g in gpus if (pct := g.memory_used_pct) is not None]
            out["gpu.mem_pct"] = sum(mem) / len(mem) if mem else None
        if wanted is None or "gpu.temp_max" in wanted:
            temp = [g.temperature_c for g in gpus if g.temperature_c is not None]
            out["gpu.temp_max"] = max(temp) if temp else None
        if wanted is None or "gpu.power_w" in wanted:
            power = [g.power_draw_w for g in gpus if g.power_draw_w is not None]
            out["gpu.power_w"] = sum(power) if power else None
    if s.training is not None:
        p = s.training.value
        out["training.running"] = None if p.state in (None, "unknown") else p.state == "running"
        out["training.state"] = p.state
        out["training.step"] = p.step
        out["training.loss"] = p.loss
        out["training.steps_per_s"] = p.steps_per_s
        out["training.tokens_per_s"] = p.tokens_per_s
        out["training.line_age_s"] = p.line_age(now)
    if s.sglang is not None:
        v = s.sglang.value
        m = v.metrics
        out["sglang.state"] = v.state.value
        out["sglang.healthy"] = v.state.value == "healthy"
        if m is not None:
            out["sglang.accept_len"] = m.spec_accept_length
            out["sglang.tokens_per_s"] = m.tokens_per_s
            out["sglang.running_reqs"] = m.running_reqs
            out["sglang.queued_reqs"] = m.queued_reqs
        if baseline is not None:
            out["eval.accept_len"] = baseline(s)
    return out
