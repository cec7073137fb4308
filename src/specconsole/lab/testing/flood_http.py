"""A loopback HTTP server whose answers can be huge: an SGLang (or exporter, or Prometheus) front
that answers one path with ``size`` bytes, generated lazily, and counts what it managed to send.

What a client that reads whole bodies into memory meets when a ``/metrics`` grows to 200 MB (a
label explosion, a proxy answering with a file): the tests and ``bench/metrics_flood.py`` check
that the console stops reading at its cap instead.

``FloodServer(flood={"/metrics": 200 * MIB})`` serves on ``127.0.0.1`` from a thread:

* a flooded path answers 200 with ``size`` bytes of Prometheus text (the same valid line again
  and again, the last one cut at ``size``; written 64 KiB at a time, never held whole); with ``declare_length=True`` a
  ``Content-Length`` says the size up front, otherwise the body ends when the connection closes;
* ``/health`` and ``/health_generate`` answer 200, ``/server_info`` a small SGLang-like object,
  anything else 404;
* :meth:`FloodServer.sent` is how many body bytes of a path went into the socket (what the
  kernel took before the client hung up counts as sent), :meth:`FloodServer.finished` how many
  answers were written to the end, :meth:`FloodServer.hung_up` how many ended because the
  client closed the connection first.

Run: ``python -m specconsole.lab.testing.flood_http --port 30000 --metrics-mib 200`` (prints
``listening on http://127.0.0.1:PORT``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MIB = 1024 * 1024
LINE = b'sglang:num_running_reqs{model_name="Qwen/Qwen3-8B",tp_rank="0"} 0.0\n'
CHUNK = LINE * (64 * 1024 // len(LINE))
SERVER_INFO: dict[str, object] = {"version": "0.5.23", "model_path": "Qwen/Qwen3-8B", "speculative_algorithm": None,
                                 "internal_states": [{}]}


class FloodServer:
    """See the module docstring. ``url`` is ``http://127.0.0.1:PORT``; :meth:`close` stops it."""

    def __init__(self, flood: dict[str, int], *, declare_length: bool = False, port: int = 0) -> None:
        self.flood = dict(flood)
        self.declare_length = declare_length
        self._sent: Counter[str] = Counter()
        self._finished: Counter[str] = Counter()
        self._hung_up: Counter[str] = Counter()
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path in outer.flood:
                    outer._answer_flood(self, path, outer.flood[path])
                elif path in ("/health", "/health_generate"):
                    self._small(200, b"", "text/plain")
                elif path in ("/server_info", "/get_server_info"):
                    self._small(200, json.dumps(SERVER_INFO).encode(), "application/json")
                else:
                    self._small(404, b'{"detail":"Not Found"}', "application/json")

            def _small(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def _answer_flood(self, handler: BaseHTTPRequestHandler, path: str, size: int) -> None:
        handler.send_response(200)
        handler.send_header("content-type", "text/plain; version=0.0.4; charset=utf-8")
        if self.declare_length:
            handler.send_header("content-length", str(size))
        else:
            handler.send_header("connection", "close")
            handler.close_connection = True
        handler.end_headers()
        left = size
        try:
            while left > 0:
                piece = CHUNK if left >= len(CHUNK) else CHUNK[:left]
                handler.wfile.write(piece)
                left -= len(piece)
                with self._lock:
                    self._sent[path] += len(piece)
        except OSError:  # the client hung up: what it did not read is never generated
            handler.close_connection = True
            with self._lock:
                self._hung_up[path] += 1
            return
        with self._lock:
            self._finished[path] += 1

    def sent(self, path: str) -> int:
        with self._lock:
            return self._sent[path]

    def finished(self, path: str) -> int:
        with self._lock:
            return self._finished[path]

    def hung_up(self, path: str) -> int:
        with self._lock:
            return self._hung_up[path]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="flood_http", description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--metrics-mib", type=float, default=200.0, help="size of the /metrics answer")
    p.add_argument("--declare-length", action="store_true", help="send Content-Length up front")
    a = p.parse_args(argv)
    try:
        server = FloodServer({"/metrics": round(a.metrics_mib * MIB)}, declare_length=a.declare_length,
                             port=a.port)
    except OSError as err:
        print(f"flood_http: cannot listen on 127.0.0.1:{a.port}: {err.strerror}", file=sys.stderr)
        return 1
    print(f"listening on {server.url}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        threading.Event().wait()
    server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
