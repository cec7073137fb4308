"""A fault-injecting HTTP proxy in front of the lab's real router (rollout fault tests).

Everything is forwarded to the router as is, until a test sets :attr:`RouterProxy.fail_workers`:
then every request under ``/workers`` (GET, POST, DELETE) is answered with that HTTP status and a
body like the router's own errors, without reaching the router; :meth:`RouterProxy.fail_next` does
that for a number of requests rather than a time, so a test's fault does not depend on how fast
the machine runs. The console and the host agents are given the proxy's URL as the router's
(``[router] url``); the replicas and the load generator still talk to the router itself.
"""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


class RouterProxy:
    def __init__(self, upstream: str) -> None:
        u = urlsplit(upstream)
        self.upstream = (u.hostname or "127.0.0.1", u.port or 80)
        #: an HTTP status to answer every /workers request with (None: forward)
        self.fail_workers: int | None = None
        #: how many more /workers requests fail before :attr:`fail_workers` clears itself (None: until cleared)
        self.fail_left: int | None = None
        self._lock = threading.Lock()
        #: (method, path, status) of every /workers request, in order
        self.seen: list[tuple[str, str, int]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _any(self) -> None:
                size = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(size) if size else None
                status, ctype, data = outer.answer(self.command, self.path, body,
                                                   self.headers.get("content-type", "application/json"))
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PUT = _any

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def fail_next(self, status: int, count: int) -> None:
        """Answer the next ``count`` requests under ``/workers`` with ``status``, then forward again."""
        with self._lock:
            self.fail_workers, self.fail_left = status, count

    def answer(self, method: str, path: str, body: bytes | None, ctype: str) -> tuple[int, str, bytes]:
        with self._lock:
            fail = self.fail_workers if path.startswith("/workers") else None
            if fail is not None and self.fail_left is not None:
                self.fail_left -= 1
                if self.fail_left <= 0:
                    self.fail_workers = self.fail_left = None
        if fail is not None:
            self.seen.append((method, path, fail))
            return fail, "application/json", b'{"error":"injected fault: the router\'s worker registry is unavailable"}'
        conn = http.client.HTTPConnection(*self.upstream, timeout=10)
        try:
            conn.request(method, path, body=body, headers={"content-type": ctype} if body is not None else {})
            r = conn.getresponse()
            data = r.read()
            status, rtype = r.status, r.getheader("content-type", "application/json")
        except OSError as err:
            status, rtype, data = 502, "text/plain", f"proxy: router unreachable ({err})".encode()
        finally:
            conn.close()
        if path.startswith("/workers"):
            self.seen.append((method, path, status))
        return status, rtype, data

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> RouterProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
