"""``enter`` on a run in the eval pane's list: what that run was measured on, read-only.

Only what the run's record stores (``deployment``, ``created_at``, ``source``; see
``docs/eval-results-schema.md``): algorithm, block size, draft window, tree budget, draft tokens,
draft model, target model, SGLang version, when it ran and where the numbers come from. A field
the record does not hold reads "not recorded" (an imported benchmark file says nothing about its
deployment); nothing is guessed. ``escape`` (or ``enter``, ``q``) closes it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from specconsole.eval.store import EvalRun
from specconsole.ui.style.formatting import escape

NOT_RECORDED = "not recorded"


def _text(value: object) -> str:
    return NOT_RECORDED if value is None or value == "" else str(value)


def _when(run: EvalRun) -> str:
    """``2026-12-02 18:30 UTC`` from ``created_at`` (ISO 8601, UTC)."""
    at = run.created_at
    return f"{at[:10]} {at[11:16]} UTC" if len(at) >= 16 and at[10:11] == "T" else _text(at)


def _source(run: EvalRun) -> str:
    src = run.source
    kind = run.kind
    if kind == "imported":
        files = src.get("imported_from")
        where = ", ".join(map(str, files)) if isinstance(files, list) and files else None
        return f"imported from {where}" if where else "imported"
    if kind == "measured":
        host = src.get("host")
        return f"measured by specconsole on {host}" if host else "measured by specconsole"
    notes = src.get("notes")
    return f"{kind}: {notes}" if notes else str(kind)


def deployment_rows(run: EvalRun) -> list[tuple[str, str]]:
    """``(what, value)`` rows of ``run``'s deployment as its record stores it."""
    dep = run.deployment
    if dep.unknown:
        algorithm = NOT_RECORDED
    elif dep.algorithm is None:
        algorithm = "none (vanilla decoding)"
    else:
        algorithm = dep.algorithm
    speculative = not dep.vanilla
    rows = [("algorithm", algorithm)]
    if speculative:
        rows += [("block size", _text(dep.block_size)), ("draft window", _text(dep.draft_window)),
                 ("tree budget", _text(dep.tree_budget)), ("draft tokens", _text(dep.num_draft_tokens)),
                 ("draft model", _text(dep.draft_model))]
        if dep.num_steps is not None or dep.topk is not None:
            rows.append(("steps x top-k", f"{_text(dep.num_steps)} x {_text(dep.topk)}"))
    rows += [("target model", _text(dep.model)), ("SGLang", _text(dep.sglang_version)),
             ("when", _when(run)), ("source", _source(run))]
    imported_at = run.source.get("imported_at")
    if imported_at:
        rows.append(("imported", str(imported_at)))
    if dep.url:
        rows.append(("measured at", dep.url))
    return rows


class RunDetail(ModalScreen[None]):
    """One run's deployment (:func:`deployment_rows`); escape closes it."""

    DEFAULT_CSS = """
    RunDetail #run-detail-box { max-width: 100; }
    RunDetail #run-detail-rows { height: auto; max-height: 16; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close", show=False),
        Binding("enter", "close", "Close", show=False),
        Binding("q", "close", "Close", show=False),
    ]

    def __init__(self, run: EvalRun) -> None:
        super().__init__(id="run-detail")
        self.run = run

    @property
    def rows(self) -> list[tuple[str, str]]:
        return deployment_rows(self.run)

    def compose(self) -> ComposeResult:
        width = max(len(what) for what, _ in self.rows)
        with Vertical(id="run-detail-box", classes="dialog"):
            yield Static(f"[b]{escape(self.run.label)}[/]  [dim](escape closes)[/]", classes="dialog-title")
            with VerticalScroll(id="run-detail-rows"):
                yield Static("\n".join(f"[$text-muted]{what:<{width}}[/]  {escape(value)}"
                                       for what, value in self.rows), id="run-detail-body")

    async def action_close(self, result: Any = None) -> None:
        self.dismiss(None)
