"""The scroll keys of a scrollable part, as hidden bindings."""

from __future__ import annotations

from collections.abc import Callable

from textual.binding import Binding

#: The scroll keys of a scrollable part, as (key, scroll action, description).
SCROLL_KEYS = (("up", "scroll_up", "Up"), ("down", "scroll_down", "Down"), ("pageup", "page_up", "Page up"),
               ("pagedown", "page_down", "Page down"), ("home", "scroll_home", "Top"), ("end", "scroll_end", "Bottom"))


def scroll_bindings(action: Callable[[str], str] = str) -> list[Binding]:
    """Hidden bindings of the scroll keys; ``action`` wraps each scroll action's name (e.g. to
    scroll a child: ``lambda a: f"scroll_body('{a}')"``)."""
    return [Binding(key, action(name), description, show=False) for key, name, description in SCROLL_KEYS]
