"""Modal screens: the ``?`` help screen and the confirm dialog of destructive actions."""

from __future__ import annotations

from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from specconsole.ui.format import escape
from specconsole.ui.registry import KeyPlan, key_display
from specconsole.ui.widgets import scroll_bindings


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


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question whose default (focused) button is Cancel; escape also cancels.

    The body scrolls (PageUp/PageDown, arrows, the wheel) and the buttons stay on screen below
    it, so a long plan never pushes them off an 80x24 terminal.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", show=False),
        *scroll_bindings(lambda name: f"scroll_body('{name}')"),
    ]
    AUTO_FOCUS = "#cancel"  # focused as the screen activates (on_mount repeats it for older Textual)

    def __init__(self, title: str, body: str, confirm_label: str, *, destructive: bool = True) -> None:
        super().__init__(id="confirm")
        self.title_text = title
        self.body_text = body
        self.confirm_label = confirm_label
        self.destructive = destructive

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box", classes="dialog"):
            yield Static(f"[b]{escape(self.title_text)}[/]", classes="dialog-title")
            with VerticalScroll(id="confirm-scroll", classes="dialog-scroll"):
                yield from self.body()
            with Horizontal(classes="dialog-buttons"):
                yield Static("PgDn: more", classes="dialog-keys")
                yield Button("Cancel", id="cancel", variant="primary", compact=True)
                yield Button(self.confirm_label, id="confirm-button",
                             variant="error" if self.destructive else "success", compact=True)

    def body(self) -> ComposeResult:
        """The scrollable body (subclasses draw richer ones)."""
        yield Static(escape(self.body_text), classes="dialog-body")

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    def action_scroll_body(self, how: str) -> None:
        getattr(self.query_one("#confirm-scroll", VerticalScroll), f"action_{how}")()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "confirm-button")

    def action_cancel(self) -> None:
        self.dismiss(False)
