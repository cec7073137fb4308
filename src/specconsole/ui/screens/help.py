"""The ``?`` help screen: every key binding, what it does, and why an action is unavailable."""

from __future__ import annotations

from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from specconsole.ui.registry import KeyPlan, key_display
from specconsole.ui.style.formatting import escape


class HelpScreen(ModalScreen[None]):
    """Every binding of the registry: key, action, what it does, and whether it is available now."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "Close", show=False),
        Binding("question_mark", "dismiss", "Close", show=False),
        Binding("q", "dismiss", "Close", show=False),
    ]

    def __init__(self, plan: KeyPlan, unavailable: dict[str, str], read_only: bool) -> None:
        super().__init__(id="help")
        self.plan = plan
        self.unavailable = unavailable
        self.read_only = read_only

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box", classes="dialog"):
            yield Static("[b]Keys[/]  [dim](escape or ? closes; ctrl+p opens the command palette)[/]",
                         classes="dialog-title")
            with VerticalScroll(id="help-rows"):
                with Horizontal(classes="help-row help-header"):
                    yield Static("Key", classes="help-key")
                    yield Static("Action", classes="help-action")
                    yield Static("What it does", classes="help-text")
                for bound in self.plan.bound:
                    spec = bound.spec
                    key = key_display(bound.key) if bound.key else "(none)"
                    why = self.unavailable.get(spec.id)
                    flag = " [$warning]⚠[/]" if spec.destructive else ""
                    text = escape(spec.help)
                    if why:
                        text += f" [$text-muted](unavailable: {escape(why)})[/]"
                    with Horizontal(classes="help-row" + (" -unavailable" if why else ""), id=f"help-{spec.id}"):
                        yield Static(f"[b]{escape(key)}[/]", classes="help-key")
                        yield Static(escape(spec.description) + flag, classes="help-action")
                        yield Static(text, classes="help-text")
            notes = []
            if self.read_only:
                removed = ", ".join(s.description.lower() for s in self.plan.removed) or "none"
                notes.append(f"Read-only mode: destructive actions are removed ({escape(removed)}).")
            else:
                notes.append("[$warning]⚠[/] destructive: asks for confirmation first (Cancel is the default button).")
            notes.append(escape('Remap a key by action id in the config: [keys] kill_training = "ctrl+k".'))
            for warning in self.plan.warnings:
                notes.append(f"[$warning]{escape(warning)}[/]")
            yield Static("\n".join(notes), classes="dialog-notes")

    @property
    def rows(self) -> list[str]:
        """The action ids listed, in order (tests)."""
        return [str(w.id).removeprefix("help-") for w in self.query(".help-row") if w.id]

    async def action_dismiss(self, result: Any = None) -> None:
        self.dismiss(None)
