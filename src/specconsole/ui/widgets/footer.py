"""The console's footer: Textual's, recomposed once per change of the keys it shows."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer


class ConsoleFooter(Footer):
    """Textual's :class:`Footer`, recomposed only when the keys it shows change, at most once a refresh.

    Textual's footer composes its keys only after the first bindings signal, and recomposes (a new
    key widget per binding, each styled twice: its ``compact`` watcher) at every signal, seven
    times while the console opens, most of them for the same keys. Here the keys are composed from
    the first compose, the signals of one refresh make one check, and a recompose happens only when
    the keys, their descriptions or their enabled state differ from those shown (issue 34).

    It also fills in its keys while the app has no focus: Textual's recomposes only with focus, and
    a browser session whose page had no focus when the console started (textual-serve's AppBlur
    came before the first bindings) kept an empty footer row until the operator clicked into it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # its keys from its first compose: the screen's bindings are known when it mounts (Textual's
        # waits for the first bindings signal, then recomposes and lays the screen out twice more)
        self.set_reactive(Footer._bindings_ready, True)
        self._check_armed = False
        self._shown: tuple[Any, ...] | None = None

    def compose(self) -> ComposeResult:
        self._shown = self._keys_shown()
        yield from super().compose()

    def bindings_changed(self, screen: Screen[Any]) -> None:
        self._bindings_ready = True
        if self._check_armed or not self.is_attached or screen is not self.screen:
            return
        self._check_armed = True
        self.call_after_refresh(self._recompose_if_changed)

    def _keys_shown(self) -> tuple[Any, ...]:
        """What :meth:`Footer.compose` builds its keys from."""
        return (self.compact, self.show_command_palette, tuple(
            (binding.key, binding.action, binding.description, binding.group, enabled, tooltip)
            for (_node, binding, enabled, tooltip) in self.screen.active_bindings.values() if binding.show))

    async def _recompose_if_changed(self) -> None:
        self._check_armed = False
        if not self.is_attached:
            return
        shown = self._keys_shown()
        if shown != self._shown:
            self._shown = shown
            await self.recompose()
