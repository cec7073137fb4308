"""Every SGLang request has a total deadline: a server that drips bytes cannot hold the console.

httpx's timeout applies to each read, so a server sending one byte every 0.2 s never trips a
1 s timeout. A real loopback HTTP server here does exactly that, in the headers or in the body.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest

from specconsole.sglang import SglangClient, SglangError

DRIP_S = 0.2        # well under the client's 1 s per-read timeout
TEST_BOUND_S = 15.0  # the test fails (instead of hanging) when nothing ends the request


async def _drip(writer: asyncio.StreamWriter, data: bytes) -> None:
    for i in range(len(data)):
        writer.write(data[i:i + 1])
        await writer.drain()
        await asyncio.sleep(DRIP_S)


def _dripping_handler(where: str, writers: list[asyncio.StreamWriter]
                     ) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Coroutine[Any, Any, None]]:
    body = b'{"version": "0.5.23"' + b" " * 100_000 + b"}"  # valid JSON, forever in coming
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n")

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            await reader.readuntil(b"\r\n\r\n")
            if where == "headers":
                await _drip(writer, head + body)
            else:
                writer.write(head + body[:10])
                await writer.drain()
                await _drip(writer, body[10:])
        writer.close()

    return handle


@pytest.fixture(params=["headers", "body"])
async def dripping_url(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    writers: list[asyncio.StreamWriter] = []
    server = await asyncio.start_server(_dripping_handler(request.param, writers), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        for w in writers:  # end the drips: their connections are the client's to drop, not to finish
            w.transport.abort()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 5)


@pytest.mark.parametrize("call", ["health", "server_info", "metrics", "generate"])
async def test_a_dripping_server_times_out_with_one_clear_line(dripping_url: str, call: str) -> None:
    async with SglangClient(dripping_url, timeout_s=1.0, unit="sglang.service") as client:
        method = getattr(client, call)
        args = ("def f():", 4) if call == "generate" else ()
        kwargs = {"timeout_s": 1.0} if call == "generate" else {}
        try:
            with pytest.raises(SglangError) as info:
                await asyncio.wait_for(method(*args, **kwargs), TEST_BOUND_S)
        except TimeoutError:
            pytest.fail(f"{call} against a dripping server did not end within {TEST_BOUND_S:g}s: "
                        f"no total deadline on the request")
    err = info.value
    assert err.kind == "timeout"
    msg = str(err)
    assert "\n" not in msg
    assert msg.startswith(f"SGLang at {dripping_url}/")
    assert "did not answer within 1 s" in msg and "journalctl -u sglang.service" in msg
