"""A real local HTTP receiver for alert webhooks (stdlib ``http.server`` on loopback, in a thread).

``with Receiver() as r``: ``r.url`` takes POSTs; each JSON body lands in ``r.received`` with its
arrival time. ``Receiver(hang=True)`` reads nothing and answers nothing until it is closed (a
webhook that hangs); ``Receiver(fail_first=N)`` answers 500 to the first N posts;
``Receiver(delay_s=S)`` reads each post at once and answers it S seconds later (a slow webhook).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


class Receiver:
    def __init__(self, *, hang: bool = False, fail_first: int = 0, delay_s: float = 0.0) -> None:
        self.hang, self.fail_first, self.delay_s = hang, fail_first, delay_s
        self.received: list[tuple[float, dict[str, Any]]] = []
        self.posts = 0  # every POST that arrived (a hanging one too)
        self.release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                receiver.posts += 1
                if receiver.hang:
                    receiver.release.wait(60)
                    return
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if receiver.delay_s:
                    receiver.release.wait(receiver.delay_s)
                if receiver.posts <= receiver.fail_first:
                    self.send_response(500)
                else:
                    receiver.received.append((time.time(), json.loads(body)))
                    self.send_response(204)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alerts"
        self.thread = threading.Thread(target=self.server.serve_forever, name="alert-receiver", daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    def states(self, alert: str) -> list[str]:
        return [body["state"] for _, body in self.received if body.get("alert") == alert]
