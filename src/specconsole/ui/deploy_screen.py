"""The deploy wizard's form: the settings to change, prefilled so the common case is Enter."""

from __future__ import annotations

from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from specconsole.actions.deploy import DeployRequest
from specconsole.config import HostConfig
from specconsole.samples import Sample

#: The window the wizard proposes when the deployment has none: the usual DFlash block size.
DEFAULT_WINDOW = "16"


def prefill(cfg: HostConfig, sglang: Sample[Any] | None) -> dict[str, str]:
    """Form values from the config and what the server reports now."""
    info = getattr(sglang.value, "info", None) if sglang is not None else None
    window = getattr(info, "draft_window", None)
    draft = (cfg.sglang.draft_model_path if cfg.sglang else None) or getattr(info, "draft_model_path", None)
    return {"algorithm": "DFLASH", "draft_window": str(window) if window else DEFAULT_WINDOW,
            "block_size": "", "draft_model": draft or ""}


class DeployForm(ModalScreen[DeployRequest | None]):
    """Algorithm, draft window, block size, draft model; Enter plans, Escape cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel", show=False)]

    FIELDS: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("algorithm", "Speculative algorithm", "DFLASH or NEXTN"),
        ("draft_window", "DFLASH draft window", ">= the block size"),
        ("block_size", "Block size", "empty: the draft model's config.json"),
        ("draft_model", "Draft model path on the host", "empty: keep / from the config"),
    )

    def __init__(self, values: dict[str, str]) -> None:
        super().__init__(id="deploy-form")
        self.values = values

    def compose(self) -> ComposeResult:
        with Vertical(id="deploy-box", classes="dialog"):
            yield Static("[b]Deploy: change the SGLang speculative settings[/]", classes="dialog-title")
            yield Static("Nothing changes until you confirm the plan on the next screen.", classes="dialog-body")
            for key, label, hint in self.FIELDS:
                yield Label(label)
                yield Input(self.values.get(key, ""), placeholder=hint, id=f"deploy-{key}")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Cancel", id="cancel", variant="primary")
                yield Button("Plan", id="plan", variant="success")

    def on_mount(self) -> None:
        self.query_one("#deploy-draft_window", Input).focus()

    def request(self) -> DeployRequest:
        v = {key: self.query_one(f"#deploy-{key}", Input).value.strip() for key, _, _ in self.FIELDS}
        return DeployRequest(algorithm=v["algorithm"] or None, draft_window=v["draft_window"] or None,
                             block_size=v["block_size"] or None, draft_model=v["draft_model"] or None)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(self.request())

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(self.request() if event.button.id == "plan" else None)

    def action_cancel(self) -> None:
        self.dismiss(None)
