"""The console's footer: Textual's, with its keys shown from the first bindings even without focus."""

from __future__ import annotations

from typing import Any

from textual.screen import Screen
from textual.widgets import Footer


class ConsoleFooter(Footer):
    """Textual's :class:`Footer`, which fills in its keys once even while the app has no focus.

    Textual's footer recomposes only while the app has focus (textual-web's blur). A browser session
    whose page had no focus when the console started (textual-serve's AppBlur came before the first
    bindings) kept an empty footer row: no keys until the operator clicked into the page."""

    def bindings_changed(self, screen: Screen[Any]) -> None:
        first = not self._bindings_ready
        super().bindings_changed(screen)
        if first and not screen.app.app_focus and self.is_attached and screen is self.screen:
            self.call_after_refresh(self.recompose)
