"""The alert engine: evaluates the rules on every host's figures at each refresh; pure.

``AlertEngine.evaluate(statuses, now)`` is called with the fleet's statuses and the time (the
console's clock, the watch loop's, a test's fake one). A rule whose condition holds on a host
for ``for_s`` seconds *fires* once: one :class:`~specconsole.base.events.Event` (``source="alert"``,
the rule's level) and the alert stays active; when the condition is false again it *resolves*:
one more event (level "warning"), and it is gone. A condition that cannot be judged now (a figure
unknown) neither fires nor resolves an alert, and restarts the wait of one not fired yet.

Every event's ``data`` is exactly ``{"alert", "host", "state", "value", "message"}`` (the
recorder and ``status --tmux`` read these keys).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from specconsole.alert_rules.expr import Memory, evaluate, value_of
from specconsole.alert_rules.rules import DEFAULT_RULES, AlertLevel, AlertRule, Rule, compile_rules
from specconsole.alerts.figures import Baseline, figures, source_of
from specconsole.base.events import Event, EventLog
from specconsole.base.values import printable

if TYPE_CHECKING:
    from specconsole.config import Config
    from specconsole.monitor import HostStatus

SOURCE = "alert"
_KINDS = ("gpu", "sglang", "training")


@dataclass(frozen=True)
class Alert:
    """An active (firing) alert."""

    rule: str
    host: str
    level: AlertLevel
    since: float
    value: float | None
    message: str

    @property
    def short(self) -> str:
        """``training-stalled on train``: what the summary bar shows."""
        return f"{self.rule} on {self.host}"


@dataclass
class _State:
    memory: Memory = field(default_factory=Memory)
    since: float | None = None  # the condition has held since then
    alert: Alert | None = None
    #: a condition without unchanged() or median(): the figures it read at its last evaluation and
    #: its answer then (the same figures give the same answer)
    read: tuple[object, ...] | None = None
    truth: bool | None = None


class AlertEngine:
    """Fires and resolves ``rules`` over hosts' statuses; emits each change into ``events``."""

    def __init__(self, rules: Iterable[AlertRule], events: EventLog | None = None,
                 baseline: Baseline | None = None) -> None:
        self.rules: tuple[Rule, ...] = compile_rules(tuple(rules))
        self.events = events if events is not None else EventLog()
        self.baseline = baseline
        self._states: dict[tuple[str, str], _State] = {}
        #: host -> the rules that watch it, each with its state there (made at the host's first evaluation)
        self._plans: dict[str, list[tuple[Rule, _State]]] = {}
        self._samples: dict[str, tuple[object, object, object]] = {}  # host -> samples last seen
        self._wants_baseline = any("eval.accept_len" in r.condition.figures for r in self.rules)
        #: every figure a rule's condition or value reads (the only ones worked out)
        self._reads = frozenset(name for r in self.rules for c in (r.condition, r.value) if c is not None
                                for name in c.figures)

    @classmethod
    def for_config(cls, config: Config, events: EventLog | None = None,
                   baseline: Baseline | None = None) -> AlertEngine:
        """The engine of ``config``'s rules (a Config made in code, not read from a file: the shipped ones)."""
        rules = config.alerts if config.alerts is not None else DEFAULT_RULES if config.alerting.defaults else ()
        return cls(rules, events, baseline)

    @property
    def active(self) -> list[Alert]:
        """The firing alerts, errors first, then the oldest first."""
        alerts = [s.alert for s in self._states.values() if s.alert is not None]
        return sorted(alerts, key=lambda a: (a.level != "error", a.since, a.rule, a.host))

    def worst(self) -> Alert | None:
        active = self.active
        return active[0] if active else None

    def evaluate(self, statuses: Iterable[HostStatus], now: float) -> list[Event]:
        """One evaluation of every rule on every host at ``now``; the events it emitted. A condition
        without unchanged() or median() is worked out again only when a figure it reads moved (the
        same figures, the same answer; its duration counts on), and only the GPU figures some rule
        reads are worked out."""
        out: list[Event] = []
        if not self.rules:
            return out
        baseline = self.baseline if self._wants_baseline else None
        for s in statuses:
            seen = self._samples.get(s.name)
            samples = self._samples[s.name] = s.samples
            fresh = {k for i, k in enumerate(_KINDS)
                     if samples[i] is not None and (seen is None or seen[i] is not samples[i])}
            figs = figures(s, now, baseline, self._reads)

            def is_fresh(name: str, fresh: set[str] = fresh) -> bool:
                return source_of(name) in fresh

            plan = self._plans.get(s.name)
            if plan is None:
                plan = self._plans[s.name] = [(rule, self._states.setdefault((rule.name, s.name), _State()))
                                              for rule in self.rules if rule.watches(s.name)]
            for rule, state in plan:
                cond = rule.condition
                if cond.stateful:
                    truth = evaluate(cond, figs, state.memory, now, is_fresh)
                else:  # a function of the figures it reads: evaluated again when one of them moved
                    read = tuple([figs.get(name) for name in cond.figures])
                    if read != state.read:
                        state.read, state.truth = read, evaluate(cond, figs, state.memory, now, is_fresh)
                    truth = state.truth
                event = self._step(rule, s.name, state, truth, figs, now)
                if event is not None:
                    out.append(event)
        return out

    def _step(self, rule: Rule, host: str, state: _State, truth: bool | None, figs: dict[str, object],
              now: float) -> Event | None:
        if truth is None:
            state.since = None
            return None
        if not truth:
            state.since = None
            if state.alert is None:
                return None
            alert, state.alert = state.alert, None
            message = f"{rule.name} resolved on {host}: {printable(rule.summary)}"
            return self._emit(message, "warning", alert.rule, host, "resolved", _value(rule, figs))
        if state.since is None:
            state.since = now
        if state.alert is not None or now - state.since < rule.for_s:
            return None
        value = _value(rule, figs)
        shown = f" (value {value:.6g})" if value is not None else ""
        held = f", for {now - state.since:.0f} s" if rule.for_s else ""
        message = f"{rule.name} firing on {host}: {printable(rule.summary)}{shown}{held}"
        state.alert = Alert(rule.name, host, rule.level, now, value, message)
        return self._emit(message, rule.level, rule.name, host, "firing", value)

    def _emit(self, message: str, level: AlertLevel, rule: str, host: str, state: str,
              value: float | None) -> Event:
        return self.events.emit(message, SOURCE, level, alert=rule, host=host, state=state, value=value,
                                message=message)


def _value(rule: Rule, figs: dict[str, object]) -> float | None:
    if rule.value is not None:
        return value_of(rule.value, figs, whole=True)
    return value_of(rule.condition, figs)


def is_alert(event: Event) -> bool:
    """An alert's firing or resolving (what delivery and the console's bell act on)."""
    return event.source == SOURCE and "state" in event.data
