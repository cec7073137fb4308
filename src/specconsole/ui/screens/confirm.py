"""The confirm dialog of destructive actions (its default button is Cancel)."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from specconsole.ui.style.formatting import escape
from specconsole.ui.widgets.scroll import scroll_bindings


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
