"""The deploy plan dialog: what changes, laid out to be read at 80 columns, buttons always visible.

Changed flags are one line each (``flag  current → new``); unchanged flags are collapsed behind
a count; then the unit file, the drop-in diff, what restarts, GPU memory and warnings. The body
scrolls (PageUp/PageDown, arrows, wheel); Cancel is focused.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import Collapsible, Static

from specconsole.actions.deploy.plan import resolved_summary
from specconsole.actions.deploy.preflight import DeployPlan
from specconsole.ui.screens.confirm import ConfirmScreen
from specconsole.ui.style.formatting import escape

VALUE_WIDTH = 22


def short(value: str | None, width: int = VALUE_WIDTH) -> str:
    """A flag value for the table: ``-`` when absent, ``on`` for a switch, long paths keep their end."""
    if value is None:
        return "-"
    if value == "":
        return "on"
    return value if len(value) <= width else "…" + value[-(width - 1):]


def flag_rows(plan: DeployPlan) -> tuple[list[tuple[str, str, str]], list[tuple[str, str]]]:
    """(changed: (flag, current, new)), (unchanged: (flag, value)), in the plan's flag order."""
    changed: list[tuple[str, str, str]] = []
    same: list[tuple[str, str]] = []
    for concept, flag in plan.flag_names.items():
        cur, new = plan.current.get(concept), plan.new.get(concept)
        if cur is None and new is None:
            continue
        if cur == new:
            same.append((flag, short(cur)))
        else:
            changed.append((flag, short(cur), short(new)))
    return changed, same


def plan_text(plan: DeployPlan) -> str:
    """The whole plan as plain text (tests, the audit log)."""
    changed, same = flag_rows(plan)
    lines = [f"{plan.unit.name} on {plan.host} · SGLang {plan.version or 'version unknown'}"]
    lines += [f"{flag}  {cur} → {new}" for flag, cur, new in changed]
    lines += [f"{len(same)} unchanged: " + ", ".join(f"{f} {v}" for f, v in same)] if same else []
    if plan.host_verdict is not None and plan.host_verdict.accepted:
        lines.append(f"SGLang resolves: {resolved_summary(plan.host_verdict.resolved)}")
    return "\n".join(lines)


class PlanScreen(ConfirmScreen):
    """Confirm a :class:`DeployPlan` (Cancel focused)."""

    def __init__(self, plan: DeployPlan) -> None:
        super().__init__(f"Deploy to {plan.host}?", plan_text(plan), f"Deploy and restart {plan.unit.name}",
                         destructive=True)
        self.plan = plan

    def body(self) -> ComposeResult:
        plan = self.plan
        changed, same = flag_rows(plan)
        width = max((len(f) for f, _, _ in changed), default=0)
        head = f"{escape(plan.unit.name)} on {escape(plan.host)} · SGLang {escape(plan.version or 'version unknown')}"
        rows = [f"[b]{escape(flag.ljust(width))}[/]  {escape(cur)} → [b]{escape(new)}[/]" for flag, cur, new in changed]
        yield Static(head + f"\n[b]{len(changed)} flag change{'s' if len(changed) != 1 else ''}[/]:\n"
                     + ("\n".join(rows) or "(none)"), classes="plan-flags")
        verdict = plan.host_verdict
        if verdict is not None:
            who = escape(verdict.who)
            said = (f"[b]{who} on {escape(plan.host)} resolves[/]: {escape(resolved_summary(verdict.resolved))}"
                    if verdict.accepted else f"[$warning]SGLang's own check could not run: "
                    f"{escape(verdict.message)}; the built-in rules decided[/]")
            yield Static(said, classes="plan-verdict")
        if same:
            with Collapsible(title=f"{len(same)} unchanged flag{'s' if len(same) != 1 else ''}",
                             collapsed=True, id="plan-unchanged"):
                yield Static("\n".join(f"{escape(f)}  {escape(v)}" for f, v in same))
        unit = plan.unit
        restarts = (f"[b]restarts {escape(unit.name)}[/]: requests in flight are dropped; health timeout "
                    f"{plan.health_timeout_s:g}s, then automatic rollback")
        yield Static(restarts, classes="plan-restart")
        extra = [*plan.gpu_lines, *[f"[$warning]warning: {escape(w)}[/]" for w in plan.warnings]]
        if extra:
            yield Static("\n".join(escape(x) if not x.startswith("[$warning]") else x for x in extra),
                         classes="plan-extra")
        diff = "\n".join(escape(ln) for ln in plan.diff()) or "(no change)"
        yield Static(f"[b]unit[/] {escape(unit.main_path)} (ExecStart from {escape(unit.exec_start_file)})\n"
                     f"[b]writes[/] {escape(unit.deploy_dropin)}:\n{diff}", classes="plan-diff")
