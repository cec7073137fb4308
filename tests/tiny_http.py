"""A loopback HTTP server answering fixed routes, for tests of HTTP clients (no lab)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Route = Callable[[], tuple[int, str, bytes]]


class TinyServer:
    """A loopback HTTP server answering from ``routes`` (path -> (status, type, body))."""

    def __init__(self, routes: dict[str, Route], default: Route | None = None) -> None:
        outer = self
        self.routes = routes
        self.default = default or (lambda: (404, "application/json", b'{"detail":"Not Found"}'))
        self.hits: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                outer.hits.append(self.path)
                status, ctype, body = outer.routes.get(self.path, outer.default)()
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
