"""Lenient readers of values that arrive as text or JSON (unit-file flags, ``/server_info``)."""

from __future__ import annotations

#: The largest draft window, block size or tree budget a deploy accepts: 2**20 tokens. SGLang
#: keeps them as C ints (a larger number overflows, or sizes a tensor no GPU holds); no drafter
#: comes near a million draft tokens, so anything above is a typo. ``deploy --draft-window``
#: and the deploy preflight both refuse more.
SPEC_INT_MAX = 1_048_576


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
