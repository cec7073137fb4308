"""The HTTP handler: SGLang's paths, the API key, uvicorn's access lines.

Endpoints
    ``GET /health``, ``/health_generate`` (200 ready, 503 loading/shutting down),
    ``GET /server_info`` (+ deprecated ``/get_server_info``): the resolved server args as a
    flat object keyed by argparse dest, plus ``launch_command``, ``startup_time`` (UNIX time
    the process started), ``version``, ``max_total_num_tokens``, ``internal_states`` (one
    item per DP rank with ``last_gen_throughput``, ``memory_usage`` and, when speculation
    is on, ``avg_spec_accept_length`` = cumulative accepted tokens / verify steps, 0.0
    before any traffic). ``GET /model_info`` (+ ``/get_model_info``), ``GET /v1/models``,
    ``GET /metrics`` (Prometheus text from prometheus_client, only with
    ``--enable-metrics``), ``POST /generate``. With ``--api-key`` every path except
    ``/health*`` and ``/metrics`` needs ``Authorization: Bearer KEY`` (else 401). Errors
    are ``{"error": {"message": ...}}`` with 400, as SGLang's ``_create_error_response``.
"""

from __future__ import annotations

import json
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any

from specconsole.lab.doubles.sglang_sim.errors import BadRequest
from specconsole.lab.doubles.sglang_sim.log import access_log
from specconsole.lab.doubles.sglang_sim.server import Server

#: How long SGLang's /health_generate waits for its generation before answering 503.
HEALTH_CHECK_TIMEOUT_S = 20.0


def make_handler(server: Server) -> type[BaseHTTPRequestHandler]:
    api_key = server.args.get("api_key")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "uvicorn"
        sys_version = ""
        # TCP_NODELAY, as uvicorn sets: headers and body go out in two writes, and without
        # it a keep-alive client waits for its delayed ACK (~40 ms) on every answer.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            pass  # our own access log below

        def _send(self, status: int, body: bytes = b"",
                  content_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            path = self.path.split("?", 1)[0]
            if not (server.exclude_prefixes and path.startswith(server.exclude_prefixes)):
                phrase = HTTPStatus(status).phrase
                access_log(f'{self.client_address[0]}:{self.client_address[1]} - '
                           f'"{self.command} {self.path} HTTP/1.1" {status} {phrase}')

        def _json(self, status: int, obj: Any) -> None:
            self._send(status, json.dumps(obj).encode("utf-8"))

        def _error(self, status: int, message: str) -> None:
            self._json(status, {"error": {"message": message}})

        def _authorized(self, path: str) -> bool:
            if not api_key or path.startswith(("/health", "/metrics")):
                return True
            if self.headers.get("Authorization") == f"Bearer {api_key}":
                return True
            self._json(401, {"error": "Unauthorized"})
            return False

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if not self._authorized(path):
                return
            if path in ("/health", "/health_generate"):
                if server.ready and not (server.stopping or server.stop.is_set()):
                    if path == "/health_generate":
                        if not server.wait_scheduler(HEALTH_CHECK_TIMEOUT_S):
                            self._send(503)
                            return
                        time.sleep(server.engine.step_ms / 1000.0)
                    self._send(200)
                else:
                    self._send(503)
            elif path in ("/server_info", "/get_server_info"):
                self._json(200, server.server_info())
            elif path in ("/model_info", "/get_model_info"):
                self._json(200, server.model_info())
            elif path == "/v1/models":
                self._json(200, server.models())
            elif path == "/metrics" and server.engine.prom is not None:
                self._send(200, server.engine.prom.render(),
                           "text/plain; version=0.0.4; charset=utf-8")
            elif path in ("/generate",):
                self._json(405, {"detail": "Method Not Allowed"})
            else:
                self._json(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length > 0 else b""
            if not self._authorized(path):
                return
            if path != "/generate":
                if path in ("/health", "/server_info", "/model_info", "/metrics"):
                    self._json(405, {"detail": "Method Not Allowed"})
                else:
                    self._json(404, {"detail": "Not Found"})
                return
            if not server.ready:
                self._error(503, "The server is not ready yet; retry when /health answers 200.")
                return
            try:
                body = json.loads(raw.decode("utf-8")) if raw else None
            except (UnicodeDecodeError, ValueError) as exc:
                self._error(400, f"Invalid JSON body: {exc}")
                return
            if not server.wait_scheduler():
                self._error(503, "The server is shutting down.")
                return
            try:
                result = server.generate(body)
            except BadRequest as exc:
                self._error(400, str(exc))
                return
            self._json(200, result)

    return Handler
