"""The console in a browser: textual-serve's server behind :class:`~specconsole.web.access.Gate`.

Each browser session is a console process of its own (``python -m specconsole --config F
[--read-only]``) that textual-serve runs and streams to xterm.js in the page. The page and its
websocket are let in by the gate; every session opened, refused and closed is one line on this
command's output and one event in the audit log (``source="web"``: who, from where, when, how long).
"""

from __future__ import annotations

import asyncio
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp_jinja2
import jinja2
from aiohttp import web
from textual_serve.server import Server, to_int

from specconsole.base.events import EventLog
from specconsole.web.access import Gate, Refusal

Say = Callable[[str], None]


def console_command(config: str | Path, *, allow_actions: bool) -> list[str]:
    """The console one session runs: read-only unless ``allow_actions``."""
    return [sys.executable, "-m", "specconsole", "--web-session", "--config", str(config),
            *([] if allow_actions else ["--read-only"])]


class ConsoleServer(Server):
    """textual-serve's :class:`Server` with the gate on the page and the websocket, URLs built from
    the name the browser used (an SSH tunnel's ``127.0.0.1:PORT`` or ``localhost:PORT``), and the
    sessions in the audit log."""

    def __init__(self, gate: Gate, command: list[str], events: EventLog, say: Say, *, read_only: bool) -> None:
        super().__init__(shlex.join(command), host=gate.bind, port=gate.port, title="specconsole",
                         public_url=gate.public_url)
        self.gate = gate
        self.events = events
        self.say = say
        self.read_only = read_only
        self._count = 0

    def initialize_logging(self) -> None:
        """textual-serve's own log (a session's failure) as plain lines, no banner."""
        import logging

        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("specconsole web: %(message)s"))
        log = logging.getLogger("textual-serve")
        log.handlers[:] = [handler]
        log.setLevel(logging.WARNING)
        log.propagate = False

    async def _make_app(self) -> web.Application:
        app = web.Application()
        aiohttp_jinja2.setup(app, loader=jinja2.FileSystemLoader(self.templates_path))
        app.add_routes([
            web.get("/", self.handle_index, name="index"),
            web.get("/ws/{token}", self.handle_websocket, name="websocket"),
            web.static("/static", self.statics_path, name="static"),
        ])
        app.on_startup.append(self.on_startup)
        return app

    async def on_startup(self, app: web.Application) -> None:
        mode = "read-only (kill and deploy refused; --allow-actions allows them)" if self.read_only else \
            "actions allowed (--allow-actions)"
        self.say(f"serving the console on {self.gate.scheme()}://127.0.0.1:{self.gate.port}/?token={self.gate.token}")
        self.say(f"sessions: {mode}; at most {self.gate.max_sessions} at once; each logged in "
                 f"{self.events.audit_path or 'no audit log'}")
        self.say(f"from a laptop: ssh -N -L {self.gate.port}:127.0.0.1:{self.gate.port} THIS_HOST, then open the "
                 f"URL above there; ctrl+c stops serving")

    def _refuse(self, request: web.Request, refusal: Refusal, what: str) -> web.Response:
        peer = request.remote or "?"
        self.say(f"refused {what} from {peer}: {refusal.reason}")
        self.events.emit(f"web: refused {what} from {peer}: {refusal.reason}", "web", "warning",
                         peer=peer, status=refusal.status, user_agent=request.headers.get("User-Agent", ""))
        return web.Response(status=refusal.status, text=refusal.reason + "\n")

    async def handle_index(self, request: web.Request) -> web.StreamResponse:
        refusal = self.gate.check_page(request.host, request.query.get("token"))
        if refusal is not None:
            return self._refuse(request, refusal, "the page")
        base = f"{self.gate.scheme()}://{request.host}"
        ws = ("wss" if self.gate.scheme() == "https" else "ws") + f"://{request.host}/ws/{self.gate.token}"
        context: dict[str, Any] = {
            "font_size": max(8, min(32, to_int(request.query.get("fontsize", "16"), 16))),
            "app_websocket_url": ws,
            "config": {"static": {"url": f"{base}/static/"}},
            "application": {"name": self.title},
        }
        response = aiohttp_jinja2.render_template("app_index.html", request, context)
        response.headers["Referrer-Policy"] = "no-referrer"  # the token is in the page's URL
        response.headers["Cache-Control"] = "no-store"
        return response

    async def handle_websocket(self, request: web.Request) -> web.StreamResponse:  # type: ignore[override]
        refusal = self.gate.check_websocket(request.host, request.headers.get("Origin"),
                                            request.match_info.get("token"))
        if refusal is not None:
            return self._refuse(request, refusal, "a session")
        self._count += 1
        session = f"web-{self._count}"
        peer, agent = request.remote or "?", request.headers.get("User-Agent", "")
        self.gate.open_sessions.add(session)
        started = time.monotonic()
        self.say(f"{session} opened from {peer} ({len(self.gate.open_sessions)} open)")
        self.events.emit(f"web: {session} opened from {peer}", "web", peer=peer, user_agent=agent, session=session,
                         read_only=self.read_only)
        try:
            return await super().handle_websocket(request)
        finally:
            self.gate.open_sessions.discard(session)
            took = time.monotonic() - started
            self.say(f"{session} closed after {took:.0f}s ({len(self.gate.open_sessions)} open)")
            self.events.emit(f"web: {session} closed after {took:.0f}s", "web", peer=peer, session=session,
                             duration_s=round(took, 1))


def serve(server: ConsoleServer) -> None:
    """Serve until ctrl+c or SIGTERM (textual-serve closes the sessions' consoles)."""
    asyncio.set_event_loop(asyncio.new_event_loop())
    server.serve()
