"""The command palette's provider: every action of the registry, with its key and availability."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any, Protocol, runtime_checkable

from textual.command import DiscoveryHit, Hit, Hits, Provider

from specconsole.ui.registry import KeyPlan, key_display


@runtime_checkable
class PaletteHost(Protocol):
    """What the palette uses of the console."""

    @property
    def key_plan(self) -> KeyPlan: ...

    def unavailable_reason(self, action_id: str) -> str | None:
        """None when the action can run now, else why not."""

    def trigger_action(self, action_id: str) -> None:
        """Run the action (or say why it cannot run)."""


class ActionsProvider(Provider):
    """Lists the bound actions (read-only mode has already removed the destructive ones)."""

    def _entries(self) -> Iterator[tuple[str, str, Any]]:
        app = self.app
        if not isinstance(app, PaletteHost):
            return
        for bound in app.key_plan.bound:
            spec = bound.spec
            if spec.id == "command_palette":
                continue
            key = f" ({key_display(bound.key)})" if bound.key else ""
            why = app.unavailable_reason(spec.id)
            help_text = spec.help + (f" — unavailable: {why}" if why else "")
            yield f"{spec.description}{key}", help_text, partial(app.trigger_action, spec.id)

    async def discover(self) -> Hits:
        for text, help_text, command in self._entries():
            yield DiscoveryHit(text, command, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for text, help_text, command in self._entries():
            score = max(matcher.match(text), matcher.match(help_text) * 0.8)
            if score > 0:
                yield Hit(score, matcher.highlight(text), command, text=text, help=help_text)
