"""A DCGM exporter double: NVIDIA dcgm-exporter's ``/metrics`` text for N hosts x G GPUs.

Real dcgm-exporter runs one per node and labels every series with the node's ``Hostname``; this
double serves a whole synthetic fleet from one port (what a Prometheus scraping N exporters
stores is the same set of series, apart from ``instance``). The format is dcgm-exporter's
(3.x): ``# HELP`` / ``# TYPE`` per field, then one line per GPU with the labels ``gpu``,
``UUID``, ``pci_bus_id``, ``device``, ``modelName``, ``Hostname``, ``DCGM_FI_DRIVER_VERSION``
in that order.

Values are deterministic (tests compute them with :func:`expected`): host ``h`` (0-based),
GPU ``g`` at tick ``t`` (``int(time / period_s)``, pattern ``wave`` only; ``static`` keeps t=0):

* ``DCGM_FI_DEV_GPU_UTIL`` = (h * 7 + g * 13 + t) % 101
* ``DCGM_FI_DEV_FB_USED`` = 1000 * (h % 50 + 1) + g, ``DCGM_FI_DEV_FB_RESERVED`` = 561 (the
  driver's reserved memory), ``DCGM_FI_DEV_FB_FREE`` = 81559 - reserved - used: used + free +
  reserved is the GPU's memory (``FB_TOTAL_MIB``), as on a real GPU
* ``DCGM_FI_DEV_POWER_USAGE`` = 100 + h % 400 + g / 10 (three decimals as DCGM prints)
* ``DCGM_FI_DEV_GPU_TEMP`` = 30 + (h + g) % 50

``reserved=False`` (``--no-fb-reserved``) leaves ``DCGM_FI_DEV_FB_RESERVED`` out, as exporters whose
counters file lacks it do; FREE is then 81559 - used.

With ``sglang`` (``--sglang``) every host also gets SGLang's serving series (``sglang:*``, labels
as SGLang's scheduler sets them plus ``Hostname``, which a real fleet's scrape config adds as a
target label): what Prometheus holds for a fleet of SGLang servers, for the bench. Host ``h``:
gen_throughput = 1000 + 10 * h, num_running_reqs = h % 8, num_queue_reqs = h % 3,
token_usage = (h % 10) / 10, spec_accept_length = 3 + (h % 5) / 2, generation_tokens_total =
(1000 + 10 * h) * seconds since the double started.

Run: ``python -m specconsole.lab.doubles.dcgm_exporter --hosts 200 --gpus 8 --port 9400`` (host names
``node-000`` ...; ``--prefix`` changes them). ``GET /metrics`` answers the text; anything else
404. Prints ``listening on http://127.0.0.1:PORT/metrics`` once it accepts connections.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "NVIDIA H200"
DRIVER = "550.90.07"
FB_TOTAL_MIB = 81559
FB_RESERVED_MIB = 561
RESERVED = "DCGM_FI_DEV_FB_RESERVED"
#: dcgm-exporter's default-counters.csv: field, type, help text.
FIELDS: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    (RESERVED, "gauge", "Framebuffer memory reserved (in MiB)."),
)


SGLANG_SERIES: tuple[tuple[str, str, str, Any], ...] = (
    ("sglang:num_running_reqs", "gauge", "The number of running requests.", lambda h, _t: h % 8),
    ("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.",
     lambda h, _t: h % 3),
    ("sglang:gen_throughput", "gauge", "The generation throughput (token/s).",
     lambda h, _t: 1000 + 10 * h),
    ("sglang:token_usage", "gauge", "The token usage.", lambda h, _t: (h % 10) / 10),
    ("sglang:spec_accept_length", "gauge", "Mean acceptance length of speculative decoding "
     "(accepted drafts + bonus token per forward).", lambda h, _t: 3 + (h % 5) / 2),
    ("sglang:generation_tokens_total", "counter", "Number of generation tokens processed.",
     lambda h, t: round((1000 + 10 * h) * t)),
)


def host_name(prefix: str, h: int) -> str:
    return f"{prefix}{h:03d}"


def gpu_uuid(prefix: str, h: int, g: int) -> str:
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{host_name(prefix, h)}/{g}"))


def expected(h: int, g: int, tick: int = 0, *, reserved: bool = True) -> dict[str, float]:
    """The values host ``h``'s GPU ``g`` reports at ``tick`` (``reserved``: with
    ``DCGM_FI_DEV_FB_RESERVED``)."""
    used = 1000 * (h % 50 + 1) + g
    held = FB_RESERVED_MIB if reserved else 0
    values = {
        "DCGM_FI_DEV_GPU_UTIL": (h * 7 + g * 13 + tick) % 101,
        "DCGM_FI_DEV_FB_USED": used,
        "DCGM_FI_DEV_FB_FREE": FB_TOTAL_MIB - held - used,
        "DCGM_FI_DEV_POWER_USAGE": round(100 + h % 400 + g / 10, 3),
        "DCGM_FI_DEV_GPU_TEMP": 30 + (h + g) % 50,
    }
    if reserved:
        values[RESERVED] = held
    return values


@dataclass
class Fleet:
    """What the double serves: ``hosts`` x ``gpus``, names ``prefix + %03d``."""

    hosts: int
    gpus: int
    prefix: str = "node-"
    pattern: str = "static"
    period_s: float = 1.0
    sglang: bool = False
    reserved: bool = True

    def __post_init__(self) -> None:
        self._labels = [[self._label_text(h, g) for g in range(self.gpus)] for h in range(self.hosts)]
        self._started = time.time()

    def _label_text(self, h: int, g: int) -> str:
        return (f'gpu="{g}",UUID="{gpu_uuid(self.prefix, h, g)}",'
                f'pci_bus_id="00000000:{0x18 + g * 0x10:02X}:00.0",device="nvidia{g}",'
                f'modelName="{MODEL}",Hostname="{host_name(self.prefix, h)}",'
                f'DCGM_FI_DRIVER_VERSION="{DRIVER}"')

    def tick(self) -> int:
        return int(time.time() / self.period_s) if self.pattern == "wave" else 0

    def text(self) -> str:
        tick = self.tick()
        out: list[str] = []
        values = [[expected(h, g, tick, reserved=self.reserved) for g in range(self.gpus)]
                  for h in range(self.hosts)]
        for name, kind, help_text in FIELDS:
            if name == RESERVED and not self.reserved:
                continue
            out.append(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")
            for h in range(self.hosts):
                for g in range(self.gpus):
                    v = values[h][g][name]
                    cell = f"{v:.3f}" if name == "DCGM_FI_DEV_POWER_USAGE" else f"{int(v)}"
                    out.append(f"{name}{{{self._labels[h][g]}}} {cell}\n")
        if self.sglang:
            out.extend(self._sglang_text())
        return "".join(out)

    def _sglang_text(self) -> list[str]:
        up = time.time() - self._started
        out = []
        for name, kind, help_text, value in SGLANG_SERIES:
            out.append(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")
            for h in range(self.hosts):
                labels = (f'model_name="Qwen/Qwen3-8B",engine_type="unified",tp_rank="0",'
                          f'pp_rank="0",Hostname="{host_name(self.prefix, h)}"')
                if kind == "counter":
                    labels = f'model_name="Qwen/Qwen3-8B",Hostname="{host_name(self.prefix, h)}"'
                out.append(f"{name}{{{labels}}} {float(value(h, up))!r}\n")
        return out


def make_server(fleet: Fleet, port: int, address: str = "127.0.0.1") -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(404)
                return
            body = fleet.text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((address, port), Handler)
    server.daemon_threads = True
    return server


def serve_in_thread(fleet: Fleet, port: int = 0) -> tuple[ThreadingHTTPServer, threading.Thread]:
    """Serve ``fleet`` from a thread of this process (``server.server_port`` is the port)."""
    server = make_server(fleet, port)
    thread = threading.Thread(target=server.serve_forever, name="dcgm-exporter", daemon=True)
    thread.start()
    return server, thread


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="dcgm_exporter", description=__doc__.split("\n")[0])
    p.add_argument("--hosts", type=int, default=2)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--prefix", default="node-")
    p.add_argument("--pattern", choices=("static", "wave"), default="static")
    p.add_argument("--period-s", type=float, default=1.0)
    p.add_argument("--sglang", action="store_true", help="also serve sglang:* series per host")
    p.add_argument("--no-fb-reserved", dest="reserved", action="store_false",
                   help="leave DCGM_FI_DEV_FB_RESERVED out (counters files without it)")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--address", default="127.0.0.1")
    a = p.parse_args(argv)
    fleet = Fleet(a.hosts, a.gpus, a.prefix, a.pattern, a.period_s, a.sglang, a.reserved)
    try:
        server = make_server(fleet, a.port, a.address)
    except OSError as err:
        print(f"dcgm_exporter: cannot listen on {a.address}:{a.port}: {err.strerror}", file=sys.stderr)
        return 1
    print(f"listening on http://{a.address}:{server.server_port}/metrics "
          f"({a.hosts} hosts x {a.gpus} GPUs)", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
