"""What a deploy is: the operator's request, the plan preflight computes, and the outcome.

:func:`specconsole.actions.deploy.preflight` builds a :class:`DeployPlan` from a
:class:`DeployRequest`; :func:`specconsole.actions.deploy.execute.execute` carries it out and
returns a :class:`DeployOutcome`.
"""

from __future__ import annotations

import difflib
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from specconsole.actions.deploy.algorithms import DeployRefused
from specconsole.actions.deploy.host_check import HostVerdict
from specconsole.actions.deploy.privilege import Privilege
from specconsole.sglang.flags import SglangCli
from specconsole.sglang.rebase import BaseDrift
from specconsole.sglang.unit import ServiceUnit, show_word


def lock_path(unit: ServiceUnit) -> str:
    """The host-side lock a running deploy of ``unit`` holds."""
    return f"{unit.dropin_dir}/.specconsole/deploy.lock"


class BaseUnitChanged(DeployRefused):
    """The base unit changed under the deploy drop-in; ``drift`` says how. Rebase to go on
    (``DeployRequest(rebase=True)``, ``specconsole deploy --rebase``)."""

    def __init__(self, drift: BaseDrift) -> None:
        super().__init__(drift.line())
        self.drift = drift


@dataclass(frozen=True)
class DeployRequest:
    """What the operator asked for; ``None`` keeps the current value. Values are raw input."""

    algorithm: str | None = None
    draft_window: str | int | None = None
    block_size: str | int | None = None
    draft_model: str | None = None
    #: DDTREE's tree budget (``--speculative-ddtree-budget``; default: block size - 1)
    tree_budget: str | int | None = None
    #: SGLang's ``--attention-backend`` (DDTREE's full-tree mode needs triton; default: keep)
    attention_backend: str | None = None
    #: EAGLE/EAGLE3/NEXTN/STANDALONE: ``--speculative-num-steps``, ``--speculative-eagle-topk`` and
    #: ``--speculative-num-draft-tokens`` (all three unset: SGLang chooses them itself); NGRAM: the draft tokens
    num_steps: str | int | None = None
    eagle_topk: str | int | None = None
    draft_tokens: str | int | None = None
    health_timeout_s: float = 600.0
    smoke_tokens: int = 64
    #: Ask the host's own SGLang to parse and resolve the planned command line before anything changes
    #: (:mod:`specconsole.actions.deploy.host_check`); ``False``: the built-in rules only (``--no-host-check``).
    host_check: bool = True
    #: Build the new ExecStart from the current base unit (without the deploy drop-in) instead
    #: of the drop-in's; needed when the base unit changed since the drop-in was written.
    rebase: bool = False


@dataclass
class DeployPlan:
    host: str
    unit: ServiceUnit
    cli: SglangCli
    version: str | None
    old_argv: list[str]
    new_argv: list[str]
    current: dict[str, str | None]
    new: dict[str, str | None]
    flag_names: dict[str, str]
    old_dropin: str | None
    new_dropin: str
    expect: dict[str, Any]
    base_url: str
    draft_config: dict[str, Any] | None
    warnings: list[str] = field(default_factory=list)
    gpu_lines: list[str] = field(default_factory=list)
    #: what SGLang will do with these settings (DDTREE's mode, overlap scheduling)
    notes: list[str] = field(default_factory=list)
    health_timeout_s: float = 600.0
    smoke_tokens: int = 64
    #: Set when this plan rebases: how the base unit had drifted from the old drop-in.
    rebased: BaseDrift | None = None
    #: what the host's SGLang said of the new command line (None: not asked, ``--no-host-check``)
    host_verdict: HostVerdict | None = None
    #: root login, or ``sudo = true``: the agent starts under ``sudo -n`` (actions/deploy/privilege.py)
    privilege: Privilege = field(default_factory=Privilege)
    id: str = field(default_factory=lambda: time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3))

    @property
    def changes(self) -> bool:
        return self.old_argv != self.new_argv

    @property
    def lock_path(self) -> str:
        return lock_path(self.unit)

    @property
    def workdir(self) -> str:
        parent = self.privilege.work_parent(self.unit.name) or f"{self.unit.dropin_dir}/.specconsole"
        return f"{parent}/{self.id}"

    def diff(self) -> list[str]:
        old = (self.old_dropin or "").splitlines(keepends=True)
        new = self.new_dropin.splitlines(keepends=True)
        path = self.unit.deploy_dropin
        return [ln.rstrip("\n") for ln in difflib.unified_diff(
            old, new, fromfile=path if self.old_dropin is not None else "/dev/null", tofile=path)]

    def summary(self) -> str:
        parts = [f"{k}={v}" for k, v in self.new.items() if v is not None and self.current.get(k) != v]
        return ", ".join(parts) or "no flag changes"

    def describe(self) -> list[str]:
        """Current vs new flags, the unit diff, what restarts and the expected downtime."""
        lines = [f"deploy plan for {self.unit.name} on {self.host} (SGLang {self.version or 'version unknown'})",
                 f"  {'setting':17} {'flag':38} {'current':>12} -> new"]
        for concept, flag in self.flag_names.items():
            cur, new = self.current.get(concept), self.new.get(concept)
            if cur is None and new is None:
                continue
            mark = "" if cur == new else "   *"
            lines.append(f"  {concept:17} {flag:38} {_show(cur):>12} -> {_show(new)}{mark}")
        lines.append(f"  unit: {self.unit.main_path}; effective ExecStart from {self.unit.exec_start_file}")
        if self.rebased is not None:
            lines.append(f"  rebase: ExecStart rebuilt from {self.rebased.base_file} "
                         f"({self.rebased.summary()}); the base unit's values win")
        lines.append(f"  change: drop-in {self.unit.deploy_dropin}")
        if self.privilege.sudo:
            lines.append(f"  as: {self.privilege.user} through `sudo -n {self.privilege.python}` (the agent runs as "
                         f"root); its files in {self.workdir}")
        lines += ["    " + ln for ln in self.diff()] or ["    (no change)"]
        lines.append(f"  restarts: {self.unit.name} (every request in flight is dropped); expected downtime: "
                     f"the server's start-up time, health timeout {self.health_timeout_s:g}s, then rollback")
        lines += self._verdict_lines()
        lines += [f"  {g}" for g in self.gpu_lines]
        lines += [f"  note: {n}" for n in self.notes]
        lines += [f"  warning: {w}" for w in self.warnings]
        return lines

    def _verdict_lines(self) -> list[str]:
        v = self.host_verdict
        if v is None:
            return ["  SGLang's own check: skipped (--no-host-check); only the built-in rules were checked"]
        if not v.accepted:
            return [f"  SGLang's own check: could not run ({v.message}); the built-in rules decided"]
        return [f"  {v.who} on {self.host} accepts the new command line and resolves: {resolved_summary(v.resolved)}"]


def resolved_summary(resolved: dict[str, Any]) -> str:
    """What SGLang resolved, in the operator's terms: algorithm, draft tokens, steps/topk, window,
    budget and the attention backends (prefill/decode)."""
    r = resolved

    def get(*keys: str) -> Any:
        return next((r[k] for k in keys if r.get(k) is not None), None)

    algo = get("speculative_algorithm")
    if algo is None:
        return "no speculative decoding"
    parts = [str(algo), f"draft tokens {get('speculative_num_draft_tokens')}",
             f"steps {get('speculative_num_steps')}/topk {get('speculative_eagle_topk')}"]
    window = get("speculative_draft_window_size", "speculative_dflash_draft_window_size")
    if window is not None:
        parts.append(f"window {window}")
    if get("speculative_ddtree_budget") is not None:
        parts.append(f"budget {get('speculative_ddtree_budget')}")
    backend = get("attention_backend")
    prefill, decode = get("prefill_attention_backend") or backend, get("decode_attention_backend") or backend
    parts.append(f"attention {prefill or 'auto'}/{decode or 'auto'} (prefill/decode)")
    return ", ".join(parts)


@dataclass
class DeployOutcome:
    outcome: str   # deployed | rolled_back | rollback_failed | locked | unchanged | crashed | dry_run
    message: str
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.outcome in ("deployed", "dry_run")

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else (2 if self.outcome == "locked" else 1)


def _show(value: str | None) -> str:
    if value is None:
        return "-"
    if value == "":
        return "on"
    value = show_word(value)
    return value if len(value) <= 28 else "…" + value[-27:]
