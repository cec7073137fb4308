"""``q`` leaves within the exit deadline even when the event loop is saturated.

Textual's input thread reads the keys and posts them to the app's message queue; when the loop is
busy (hundreds of hosts' samples, a long redraw) a key can wait there for seconds before the app
even sees it. The console's driver is therefore wrapped so that the input thread itself, on the
quit key, arms the :class:`~specconsole.base.shutdown.ExitGuard` deadline: the orderly exit still runs
on the loop as soon as it gets there, and if it has not finished by the deadline the guard ends
the process. Not while text is being typed (the filter, a form field, the palette): there ``q``
is a letter.
"""

from __future__ import annotations

import contextlib
from typing import Any

from textual import events
from textual.driver import Driver
from textual.message import Message
from textual.widgets import Input, TextArea


def typing_text(app: Any) -> bool:
    """Whether keys go to a text field now (read from any thread; True when unsure)."""
    try:
        return isinstance(app.focused, Input | TextArea)
    except Exception:  # the screen stack changing under us: do nothing rather than quit
        return True


def with_quit_deadline(base: type[Driver]) -> type[Driver]:
    """``base`` whose input thread tells the app about each key before queueing it."""

    class QuitDeadlineDriver(base):  # type: ignore[valid-type,misc]
        def process_message(self, message: Message) -> None:
            if isinstance(message, events.Key):
                hook = getattr(self._app, "quit_key_pressed", None)
                if hook is not None:
                    with contextlib.suppress(Exception):
                        hook(message.key)
            super().process_message(message)

    QuitDeadlineDriver.__name__ = QuitDeadlineDriver.__qualname__ = f"QuitDeadline{base.__name__}"
    return QuitDeadlineDriver
