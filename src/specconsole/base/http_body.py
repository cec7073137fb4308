"""Reading an HTTP answer's body with a size cap: what SGLang's and Prometheus's clients share.

A server (or a proxy in front of it) answering 200 MB must not make the console hold 200 MB:
:func:`read_capped` streams the body and stops at ``limit`` bytes, closing the connection
instead of reading the rest. A ``Content-Length`` above the limit stops it before the first
byte. The cap counts decoded bytes (after ``Content-Encoding``), so a compressed body that
inflates past it is stopped as well. The total deadline is the caller's (``asyncio.timeout``
around the whole request): httpx's own timeout bounds each read, not the answer.
"""

from __future__ import annotations

import httpx

MIB = 1024 * 1024


class BodyTooLarge(Exception):
    """The body passed ``limit`` bytes (``declared``: its Content-Length, when that said so)."""

    def __init__(self, limit: int, declared: int | None = None) -> None:
        super().__init__(f"more than {mib_text(limit)}")
        self.limit = limit
        self.declared = declared


def mib_text(n: float) -> str:
    """``8 MiB``, ``0.5 MiB``: a byte count as the config's ``*_mib`` keys write it."""
    return f"{n / MIB:g} MiB"


async def read_capped(resp: httpx.Response, limit: int) -> bytes:
    """The body of a streamed ``resp`` (``client.stream(...)``), at most ``limit`` bytes;
    raises :class:`BodyTooLarge` as soon as it is known to be larger."""
    declared = resp.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(limit, int(declared))
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)
