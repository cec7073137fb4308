"""Finding the console's own widgets: on its main screen (the bottom of the stack), also while a
dialog is open on top of it. Shared by the app and the objects it is made of."""

from __future__ import annotations

from typing import Any, TypeVar

from textual.app import App
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widget import Widget

W = TypeVar("W", bound=Widget)


def main_screen(app: App[Any]) -> Screen[Any] | None:
    """The console's own screen (the bottom of the stack), also while a dialog is open."""
    return app.screen_stack[0] if app.screen_stack else None


def find(app: App[Any], widget_type: type[W], selector: str | None = None) -> W | None:
    """The one ``widget_type`` (matching ``selector``) on the main screen, if there is one."""
    screen = main_screen(app)
    if screen is None:
        return None
    try:
        return screen.query_one(selector or widget_type, widget_type)  # type: ignore[arg-type]
    except NoMatches:
        return None
