"""The console's view of the sglang-router (``[router] url``): which workers it lists.

sglang-router 0.3.x's worker API: ``GET /workers`` (``{"workers": [{"id", "url", "is_healthy",
...}]}``), ``POST /workers`` with ``{"url": ...}`` and ``DELETE /workers/{id}`` (both queued,
``202``). The console only reads it (before a rollout and for the final lines); taking a replica
out and putting it back is the host agent's job (:mod:`specconsole.remote.deploy_agent_router`),
so a console that goes away leaves no replica out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from specconsole.base.errors import SpecConsoleError


class RouterError(SpecConsoleError):
    """The router cannot be read; the message names it and the fix."""

    exit_code = 2


@dataclass(frozen=True)
class Worker:
    id: str
    url: str
    healthy: bool


def same_url(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


async def list_workers(url: str, timeout_s: float = 5.0) -> list[Worker]:
    """``GET {url}/workers``; a one-line :class:`RouterError` when it does not answer as a router."""
    where = f"{url.rstrip('/')}/workers"
    fix = "check [router] url in the config and that sglang-router runs there"
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            resp = await client.get(where)
    except httpx.HTTPError as err:
        raise RouterError(f"the router at {url} is unreachable (GET {where}: {type(err).__name__}"
                          f"{': ' + str(err).splitlines()[0] if str(err) else ''}); {fix}") from None
    if resp.status_code != 200:
        raise RouterError(f"the router at {url} answered GET /workers with HTTP {resp.status_code} "
                          f"({resp.text[:120].strip()!r}); {fix}")
    try:
        data: Any = resp.json()
        workers = data["workers"]
        return [Worker(str(w.get("id", "")), str(w.get("url", "")), bool(w.get("is_healthy", True)))
                for w in workers if isinstance(w, dict)]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise RouterError(f"{where} did not answer with a worker list (is {url} an sglang-router 0.3+?); "
                          f"{fix}") from None
