"""Alert rules: the ``[[alerts]]`` tables, the shipped defaults, and how the two are merged.

A rule is a condition (:mod:`specconsole.alert_rules.expr`) over one host's figures
(:mod:`specconsole.alerts.figures`) that must hold for ``for_s`` seconds. The shipped rules
(:data:`DEFAULT_RULES`) are on unless ``[alerting] defaults = false``; an ``[[alerts]]`` table
with a shipped rule's name changes only what it sets (``for_s = 30``, ``enabled = false``), one
with a new name is a rule of its own and needs ``when``.

This module imports nothing of the console but the validation helpers: ``config.py`` declares
its tables with it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Annotated, Literal

from specconsole.alert_rules.expr import Condition, ExprError, parse
from specconsole.alert_rules.names import FIGURES
from specconsole.base.validation import Invalid, Text, num, text

AlertLevel = Literal["warning", "error"]

RuleName = Annotated[str, text(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
                               "must be a short name of letters, digits, -, _ and .",
                               'e.g. name = "training-stalled"', "letters, digits, - _ . (64 at most)")]
Seconds = Annotated[float, num(ge=0, le=7 * 86400, example=60,
                               why="how long the condition must hold before the alert fires; 0: at once")]


@dataclass(frozen=True)
class AlertRule:
    """One ``[[alerts]]`` table: ``when`` held for ``for_s`` seconds on a host fires the alert."""

    name: RuleName
    #: the condition (required for a new rule; a shipped rule's own when it is left out)
    when: Text | None = None
    for_s: Seconds | None = None
    level: AlertLevel | None = None
    #: the hosts it watches (names); empty: every host
    hosts: tuple[Text, ...] = ()
    #: what the alert reports as its value (an expression; default: the condition's first figure)
    value: Text | None = None
    #: the one line shown and sent (default: the condition and its duration)
    summary: Text | None = None
    enabled: bool = True


@dataclass(frozen=True)
class Alerting:
    """``[alerting]``: the shipped rules on or off, and where alerts go besides the console."""

    defaults: bool = True
    bell: bool = True
    #: inside tmux ($TMUX set): ``tmux display-message`` in the console's own session
    tmux: bool = True
    #: a URL each alert (firing and resolved) is POSTed to as JSON
    webhook: Text | None = None
    webhook_timeout_s: Annotated[float, num(gt=0, le=300, why="the most one POST may take")] = 5.0
    webhook_retries: Annotated[int, num(ge=0, le=10, why="tries after the first failed POST")] = 2
    webhook_queue: Annotated[int, num(ge=1, le=100000,
                                      why="alerts waiting to be sent; past it the oldest is dropped")] = 100


def _rule(name: str, when: str, for_s: float, level: AlertLevel, summary: str, value: str | None = None) -> AlertRule:
    return AlertRule(name=name, when=when, for_s=for_s, level=level, summary=summary, value=value)


#: The shipped rules (``[alerting] defaults = false`` turns them all off; ``enabled = false`` one).
DEFAULT_RULES: tuple[AlertRule, ...] = (
    _rule("training-stalled", "training.running and host.reachable and unchanged(training.step)", 120, "error",
          "training step unchanged while the job runs"),
    _rule("loss-not-finite", "not finite(training.loss)", 0, "error", "training loss is NaN or infinite"),
    _rule("gpu-idle-while-training", "training.running and host.reachable and gpu.util_max < 5", 60, "warning",
          "every GPU below 5 % while the training job runs"),
    _rule("host-down", "host.down or host.stale", 30, "error", "host down or its data stale",
          value="host.age_s"),
    _rule("sglang-unhealthy", 'sglang.state in ("down", "error", "hung")', 30, "error",
          "SGLang down, failing or hung"),
    _rule("acceptance-collapsed", "sglang.accept_len < 0.8 * eval.accept_len and sglang.running_reqs > 0", 60,
          "warning", "acceptance length below 80 % of the eval baseline"),
    _rule("throughput-halved",
          "sglang.tokens_per_s < 0.5 * median(sglang.tokens_per_s, 600) and sglang.running_reqs > 0", 60,
          "warning", "tokens/s below half of its 10-minute median"),
)
DEFAULTS_BY_NAME = {r.name: r for r in DEFAULT_RULES}


@dataclass(frozen=True)
class Rule:
    """A rule ready to evaluate: its table with every field filled, its checked condition and value."""

    spec: AlertRule
    condition: Condition
    value: Condition | None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def for_s(self) -> float:
        return self.spec.for_s or 0.0

    @property
    def level(self) -> AlertLevel:
        return self.spec.level or "warning"

    @property
    def summary(self) -> str:
        return self.spec.summary or f"{self.condition.text} for {self.for_s:g} s"

    def watches(self, host: str) -> bool:
        return not self.spec.hosts or host in self.spec.hosts


def resolve(written: tuple[AlertRule, ...], defaults: bool = True, label: str = "alerts",
            hosts: tuple[str, ...] | None = None) -> tuple[AlertRule, ...]:
    """The rules in force: the shipped ones (when ``defaults``), each changed by a table of its name,
    then the new ones, in the order written; disabled ones left out. Raises :class:`Invalid` keyed
    ``label[i] (name).field`` for the first bad table (``hosts``: the configured host names)."""
    out: dict[str, AlertRule] = {r.name: r for r in DEFAULT_RULES} if defaults else {}
    seen: set[str] = set()
    for i, r in enumerate(written):
        key = f"{label}[{i}] ({r.name})"
        if r.name in seen:
            raise Invalid(f"{key}.name", f"a second rule named {r.name!r}", "give every [[alerts]] table its own name")
        seen.add(r.name)
        base = DEFAULTS_BY_NAME.get(r.name)
        if base is None and r.when is None:
            if not r.enabled:
                continue
            raise Invalid(f"{key}.when", f"{r.name!r} is not a shipped rule, so it needs a condition",
                          f'add when = "gpu.util_max < 5" (shipped rules: {", ".join(DEFAULTS_BY_NAME)})')
        merged = r if base is None else replace(base, **{f: getattr(r, f) for f in _SET if getattr(r, f) is not None})
        merged = replace(merged, hosts=r.hosts or merged.hosts, enabled=r.enabled)
        for field_name in ("when", "value"):
            expression = getattr(merged, field_name)
            if expression is not None:
                try:
                    parse(expression, FIGURES)
                except ExprError as err:
                    raise Invalid(f"{key}.{field_name}", err.problem, err.fix) from None
        unknown = [h for h in merged.hosts if hosts is not None and h not in hosts]
        if unknown:
            raise Invalid(f"{key}.hosts", f"no host named {unknown[0]!r}",
                          f"use configured host names ({', '.join(hosts or ())})")
        out[r.name] = merged
    return tuple(r for r in out.values() if r.enabled)


_SET = ("when", "for_s", "level", "value", "summary")


def compile_rules(rules: tuple[AlertRule, ...]) -> tuple[Rule, ...]:
    """:func:`resolve`'s rules, parsed (they were checked there: a bad one raises ExprError here)."""
    return tuple(Rule(r, parse(r.when or "", FIGURES), parse(r.value, FIGURES) if r.value else None)
                 for r in rules)
