"""The eval result schema ``specconsole.eval/1``: a run, its tasks and its deployment.

The schema is documented in ``docs/eval-results-schema.md``; :mod:`specconsole.eval.result_file`
reads and validates files of it, :mod:`specconsole.eval.store` keeps them in the results folder.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from specconsole.base.errors import SpecConsoleError

SCHEMA = "specconsole.eval/1"
SCHEMA_PREFIX = "specconsole.eval/"
RESULTS_ENV = "SPECCONSOLE_EVAL_RESULTS"
DOC = "docs/eval-results-schema.md"
METRICS = ("acceptance_length", "tokens_per_s", "latency_s")
#: Imported values may be rounded (published tables print 2 decimals).
_CONSISTENCY_TOL = 0.006


class ResultFileError(SpecConsoleError):
    """A results file is unreadable, of another schema/version, or invalid: names the file and the fix."""

    exit_code = 2

    def __init__(self, path: str | os.PathLike[str], problem: str, fix: str) -> None:
        self.path, self.problem, self.fix = str(path), problem, fix
        super().__init__(f"{path}: {problem} (fix: {fix})")


class RunNotFound(SpecConsoleError):
    """A RUN reference matched no stored run, or several."""

    exit_code = 2


# ------------------------------------------------------------------------------------ model


@dataclass(frozen=True)
class Deployment:
    """What a run was measured on. ``algorithm`` None means vanilla (no speculative decoding)."""

    algorithm: str | None = None
    block_size: int | None = None
    draft_window: int | None = None
    draft_model: str | None = None
    model: str | None = None
    sglang_version: str | None = None
    num_draft_tokens: int | None = None
    num_steps: int | None = None
    topk: int | None = None
    tree_budget: int | None = None
    url: str | None = None
    server_args: Mapping[str, Any] = field(default_factory=dict)
    #: True when the file did not say (no ``algorithm`` key, or ``"unknown"``): not assumed vanilla.
    unknown: bool = False

    @property
    def vanilla(self) -> bool:
        return self.algorithm is None and not self.unknown

    def short(self) -> str:
        """``DFLASH b16 w16`` / ``EAGLE 3x1/4`` / ``vanilla`` / ``unknown``."""
        if self.unknown:
            return "unknown"
        if self.algorithm is None:
            return "vanilla"
        parts = [self.algorithm]
        if self.tree_budget is not None:
            parts.append(f"budget {self.tree_budget}")
        if self.block_size is not None:
            parts.append(f"b{self.block_size}")
        elif self.num_steps is not None and self.num_draft_tokens is not None:
            parts.append(f"{self.num_steps}x{self.topk or 1}/{self.num_draft_tokens}")
        if self.draft_window is not None:
            parts.append(f"w{self.draft_window}")
        return " ".join(parts)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "algorithm": "unknown" if self.unknown else self.algorithm,
            "block_size": self.block_size, "draft_window": self.draft_window,
            "draft_model": self.draft_model, "model": self.model, "sglang_version": self.sglang_version,
            "num_draft_tokens": self.num_draft_tokens, "num_steps": self.num_steps, "topk": self.topk,
            "tree_budget": self.tree_budget, "url": self.url,
        }
        if self.server_args:
            out["server_args"] = dict(self.server_args)
        return out


@dataclass(frozen=True)
class TaskResult:
    """One task of one run. ``ok`` False: ``error`` says why (one line) and the values are None."""

    task: str
    ok: bool = True
    error: str | None = None
    acceptance_length: float | None = None
    tokens_per_s: float | None = None
    latency_s: float | None = None
    client_latency_s: float | None = None
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    verify_ct: int | None = None
    max_new_tokens: int | None = None
    meta_info: Mapping[str, Any] | None = None
    text: str | None = None

    def value(self, metric: str) -> float | None:
        if not self.ok:
            return None
        values = {"acceptance_length": self.acceptance_length, "tokens_per_s": self.tokens_per_s,
                  "latency_s": self.latency_s}
        return values[metric]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "task": self.task, "status": "ok" if self.ok else "failed", "error": self.error,
            "acceptance_length": self.acceptance_length, "tokens_per_s": self.tokens_per_s,
            "latency_s": self.latency_s, "client_latency_s": self.client_latency_s,
            "completion_tokens": self.completion_tokens, "prompt_tokens": self.prompt_tokens,
            "verify_ct": self.verify_ct, "max_new_tokens": self.max_new_tokens,
        }
        if self.meta_info is not None:
            out["meta_info"] = dict(self.meta_info)
        if self.text is not None:
            out["text"] = self.text
        return out


@dataclass(frozen=True)
class EvalRun:
    id: str
    label: str
    created_at: str  # ISO 8601, UTC, e.g. 2026-12-02T18:30:00Z
    tasks: tuple[TaskResult, ...]
    deployment: Deployment = field(default_factory=lambda: Deployment(unknown=True))
    suite: Mapping[str, Any] = field(default_factory=dict)
    source: Mapping[str, Any] = field(default_factory=dict)
    path: str | None = None  # where it was loaded from / saved to (not part of the file)

    @property
    def ok_tasks(self) -> tuple[TaskResult, ...]:
        return tuple(t for t in self.tasks if t.ok)

    @property
    def failed_tasks(self) -> tuple[TaskResult, ...]:
        return tuple(t for t in self.tasks if not t.ok)

    def task(self, name: str) -> TaskResult | None:
        for t in self.tasks:
            if t.task == name:
                return t
        return None

    def average(self, metric: str = "acceptance_length") -> float | None:
        """Arithmetic mean of ``metric`` over this run's ok tasks that report it."""
        values = [v for t in self.tasks if (v := t.value(metric)) is not None]
        return sum(values) / len(values) if values else None

    @property
    def kind(self) -> str:
        return str(self.source.get("kind") or "measured")

    def summary(self) -> dict[str, Any]:
        return {"tasks": len(self.tasks), "ok": len(self.ok_tasks), "failed": len(self.failed_tasks),
                **{f"{m}_avg": self.average(m) for m in METRICS}}

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "id": self.id,
            "label": self.label,
            "created_at": self.created_at,
            "source": dict(self.source),
            "suite": dict(self.suite),
            "deployment": self.deployment.to_json(),
            "tasks": [t.to_json() for t in self.tasks],
            "summary": self.summary(),
        }


# --------------------------------------------------------------------------------- helpers


def utc_now_iso(now: float | None = None) -> str:
    return datetime.fromtimestamp(time.time() if now is None else now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def slug(text: str, width: int = 40) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return (s[:width].rstrip("-")) or "run"


def make_run_id(label: str, created_at: str) -> str:
    """``20261202T183000Z-ours-step-4000-ddtree-8``."""
    stamp = re.sub(r"[^0-9TZ]", "", created_at)[:16] or "run"
    return f"{stamp}-{slug(label)}"
