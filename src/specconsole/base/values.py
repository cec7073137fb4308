"""Lenient readers of values that arrive as text or JSON (unit-file flags, ``/server_info``)."""

from __future__ import annotations

import re

#: The largest draft window, block size or tree budget a deploy accepts: 2**20 tokens. SGLang
#: keeps them as C ints (a larger number overflows, or sizes a tensor no GPU holds); no drafter
#: comes near a million draft tokens, so anything above is a typo. ``deploy --draft-window``
#: and the deploy preflight both refuse more.
SPEC_INT_MAX = 1_048_576


#: C0 and C1 control characters (ESC, NUL, newline...) and the bidirectional-text controls
#: (U+202E RIGHT-TO-LEFT OVERRIDE and its kin): what makes a string print as something else.
UNSAFE_CHARS = r"\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[{UNSAFE_CHARS}]")
_UNSAFE_BUT_NEWLINE = re.compile(f"(?!\n)[{UNSAFE_CHARS}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_char(ch: str) -> str:
    """``\x1b``, ``\n``, ``\u202e``: a character as a visible escape."""
    return _NAMED.get(ch) or (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")


def printable(text: str, *, newlines: bool = False) -> str:
    """``text`` with its control and bidi characters as visible escapes (``gpu\x1b[31m`` shows as
    ``gpu\\x1b[31m``): THE helper for every host-provided or config-provided string that is
    shown on screen or printed. ``newlines``: keep line breaks (a multi-line body)."""
    unsafe = _UNSAFE_BUT_NEWLINE if newlines else _UNSAFE
    return unsafe.sub(lambda m: escape_char(m.group()), text) if unsafe.search(text) else text


def output_line(text: str, limit: int = 200) -> str:
    """What a failed command said, in one line for an error message: the exception line of a
    Python traceback (``KeyError: 'x'``, not ``Traceback (most recent call last):``), else its
    first non-empty line; control characters escaped, cut at ``limit``."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return ""
    pick = lines[0]
    if any(ln.startswith("Traceback (most recent call last)") for ln in lines):
        pick = next((ln for ln in reversed(lines) if not ln.startswith(("File ", "^", "~"))), lines[-1])
    pick = printable(pick)
    return pick if len(pick) <= limit else pick[: limit - 1] + "…"


def unsafe_char(text: str) -> str | None:
    """The first control or bidi character in ``text``, or ``None``."""
    m = _UNSAFE.search(text)
    return m.group() if m else None


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
