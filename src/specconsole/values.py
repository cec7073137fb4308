"""Lenient readers of values that arrive as text or JSON (unit-file flags, ``/server_info``)."""

from __future__ import annotations


def as_int(value: object) -> int | None:
    """An int from an int, an integral float or a decimal string (``"16"``, ``"+16"``, ``" -1 "``);
    ``None`` for anything else (``True``, ``"16.5"``, ``"auto"``, ``None``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in "+-":
            text = text[1:]
        if text.isdigit():
            return int(value)
    return None


def quoted_line(text: str, width: int = 80) -> str:
    """``text`` as it may go into a one-line message: control characters escaped (``\\x1b``,
    ``\\x00``, ``\\r``: binary junk cannot move the cursor or break the line), cut to ``width``
    characters with ``…``, and quoted as Python quotes it (``'…'``). A cut line says how long it was."""
    quoted = repr(text[: width + 1])  # repr escapes control characters, keeps printable ones
    quote, shown = quoted[0], quoted[1:-1]
    if len(shown) > width:
        shown = shown[: width - 1] + "…"
    more = f" ({len(text):,} characters)" if len(text) > width else ""
    return f"{quote}{shown}{quote}{more}"
