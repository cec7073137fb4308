"""The stack's floor (run by bench/stack_floor.py): the least that Textual, asyncssh and httpx can
do to show what the console shows, on the same hosts, with none of the console's own code.

From a console config (``--config``; the demo lab's, or a synthetic fleet's), per host: one SSH
connection (host keys checked); the console's two nvidia-smi streams (``--query-gpu`` and
``--query-compute-apps``, ``-lms 1000``), under its host-side frame filter where the config has
``gpu.frames`` (the default), each in the console's host-side stdin watchdog (so nothing outlives
the floor on a host), the GPU rows split into cells; the trainer's log followed with
``tail -F``, each line read as JSON; SGLang's ``/metrics`` through an SSH tunnel every second,
split into name -> value. Kept: the latest values only.

Shown: in the TUI, one Line-API widget; once a second ``--rows`` of its rows are built again from
the latest values and only those rows are refreshed (the fewest cells a redraw can touch).
``--headless``: every value as one JSON line a second on stdout. No panes, tables, samples,
history, alerts, recorder or audit log.

Usage: python bench/_floor_app.py --config CONFIG.toml (--rows N | --headless) --gpu-fields F,... --apps-fields F,...
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
import tomllib
import warnings
from collections.abc import Coroutine
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

warnings.filterwarnings("ignore")  # asyncssh's import under a new cryptography (the console filters them too)

import asyncssh  # noqa: E402
import httpx  # noqa: E402
from rich.segment import Segment  # noqa: E402
from rich.style import Style  # noqa: E402
from textual.app import App, ComposeResult  # noqa: E402
from textual.geometry import Region  # noqa: E402
from textual.strip import Strip  # noqa: E402
from textual.widget import Widget  # noqa: E402

LABEL = Style(bold=True)


def remote(argv: list[str] | str, frames: bool = False, *options: str) -> str:
    """The command line the console runs for ``argv`` (under its frame filter when ``frames``), in
    the console's host-side wrapper that ends it when the channel closes (else a silent stream
    such as ``--query-compute-apps`` would outlive the floor on the host)."""
    from specconsole.hosts.commands import stdin_watchdog  # shell text, run by the host
    from specconsole.sources.nvidia_smi import frames_script

    if frames and isinstance(argv, list):
        argv = ["python3", "-c", frames_script(), *options, *argv]
    return stdin_watchdog(argv)


class Feeds:
    """The data, kept as the latest raw values: no samples, no history, no checks beyond JSON."""

    def __init__(self, config: dict[str, Any], gpu_fields: str, apps_fields: str, gpu_only: bool) -> None:
        self.config = config
        self.gpu_only = gpu_only
        self.gpu_fields = gpu_fields
        self.apps_fields = apps_fields
        self.gpus: dict[str, list[list[str]]] = {}
        self.apps: dict[str, list[str]] = {}
        self.step: dict[str, dict[str, Any]] = {}
        self.metrics: dict[str, str] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        for host in self.config["hosts"]:
            self._spawn(self.watch_host(host))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def watch_host(self, host: dict[str, Any]) -> None:
        ssh = self.config["ssh"]
        conn = await asyncssh.connect(host["host"], host["port"], username=host["user"],
                                      client_keys=[host["identity_file"]], known_hosts=ssh["known_hosts"],
                                      keepalive_interval=ssh.get("keepalive_s", 5))
        name, gpu = host["name"], host.get("gpu", {})
        if gpu.get("source", "nvidia-smi") == "nvidia-smi":
            frames = gpu.get("frames", True)
            self._spawn(self.gpu_stream(conn, name, remote(
                ["nvidia-smi", f"--query-gpu={self.gpu_fields}", "--format=csv,noheader,nounits", "-lms", "1000"],
                frames)))
            self._spawn(self.apps_stream(conn, name, remote(
                ["nvidia-smi", f"--query-compute-apps={self.apps_fields}", "--format=csv,noheader,nounits",
                 "-lms", "1000"], frames, "--once-first")))
        if self.gpu_only:
            return
        if "training" in host:
            self._spawn(self.training(conn, name, host["training"]["log_path"]))
        if "sglang" in host:
            self._spawn(self.sglang(conn, host["sglang"]["base_url"]))

    async def gpu_stream(self, conn: asyncssh.SSHClientConnection, name: str, command: str) -> None:
        """Rows as cells; through the filter a row that did not change (``=``) keeps its cells and
        one that did (``~P=V;...``) takes the new ones."""
        proc = await conn.create_process(command)
        rows: list[list[str]] = []
        async for line in proc.stdout:
            line = line.rstrip("\n")
            if line == ".":
                self.gpus[name], rows = rows, []
                continue
            last = self.gpus.get(name, [])
            before = last[len(rows)] if len(rows) < len(last) else []
            if line == "=":
                rows.append(before)
            elif line.startswith("~"):
                cells = list(before)
                for change in line[1:].split(";"):
                    at, _, value = change.partition("=")
                    if int(at) < len(cells):
                        cells[int(at)] = value
                rows.append(cells)
            else:
                rows.append(line.removeprefix("\\").split(", "))

    async def apps_stream(self, conn: asyncssh.SSHClientConnection, name: str, command: str) -> None:
        proc = await conn.create_process(command)
        async for line in proc.stdout:
            self.apps.setdefault(name, []).append(line)
            del self.apps[name][:-64]

    async def training(self, conn: asyncssh.SSHClientConnection, name: str, path: str) -> None:
        proc = await conn.create_process(remote(["tail", "-n", "0", "-F", path]))
        async for line in proc.stdout:
            with contextlib.suppress(ValueError):
                self.step[name] = json.loads(line)

    async def sglang(self, conn: asyncssh.SSHClientConnection, base_url: str) -> None:
        url = urlsplit(base_url)
        listener = await conn.forward_local_port("127.0.0.1", 0, url.hostname or "127.0.0.1", url.port or 80)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{listener.get_port()}", trust_env=False) as client:
            while True:
                started = time.monotonic()
                resp = await client.get("/metrics")
                metrics = {}
                for line in resp.text.splitlines():
                    if line and not line.startswith("#"):
                        key, _, value = line.rpartition(" ")
                        metrics[key] = value
                self.metrics = metrics
                await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - started)))

    def lines(self, tick: int) -> list[tuple[str, str]]:
        """What a redraw shows: a row per GPU, then the steps and SGLang's series."""
        out = [(f"{name} gpu {cells[0]} ", " ".join(cells[3:])) for name, rows in self.gpus.items() for cells in rows]
        out += [(f"{name} step ", f"{s.get('step')} loss {s.get('loss')} tokens/s {s.get('tokens_per_sec')}")
                for name, s in self.step.items()]
        out.append(("sglang ", f"{len(self.metrics)} series at tick {tick}"))
        return out


class Rows(Widget):
    """The screen as rows of text; ``put`` replaces one row and refreshes only that row."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[int, Strip] = {}

    def render_line(self, y: int) -> Strip:
        return self.rows.get(y) or Strip.blank(self.size.width)

    def put(self, y: int, label: str, text: str) -> None:
        width = self.size.width
        body = text[: max(0, width - len(label))].ljust(max(0, width - len(label)))
        self.rows[y] = Strip([Segment(label, LABEL), Segment(body)], width)
        self.refresh(Region(0, y, width, 1))


class Floor(App[None]):
    CSS = "Rows { height: 1fr; }"
    BINDINGS = [("q", "quit", "Quit")]  # noqa: RUF012 (Textual's own idiom)

    def __init__(self, feeds: Feeds, rows: int) -> None:
        super().__init__()
        self.feeds = feeds
        self.changed = rows
        self.ticks = 0

    def compose(self) -> ComposeResult:
        self.view = Rows()
        yield self.view

    async def on_mount(self) -> None:
        self.feeds.start()
        self.set_interval(1.0, self.redraw)

    def redraw(self) -> None:
        """``changed`` rows, built again from the latest values."""
        self.ticks += 1
        lines = self.feeds.lines(self.ticks)
        for y in range(min(self.changed, self.view.size.height)):
            label, text = lines[y % len(lines)]
            self.view.put(y, label, f"{text} {'▁▂▃▄▅▆▇█'[(self.ticks + y) % 8] * 40}")


async def headless(feeds: Feeds) -> None:
    """Every second, all the latest values as one JSON line on stdout."""
    feeds.start()
    while True:
        started = time.monotonic()
        sys.stdout.write(json.dumps({"gpus": feeds.gpus, "steps": feeds.step, "metrics": len(feeds.metrics)}) + "\n")
        sys.stdout.flush()
        await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - started)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", type=Path, required=True)
    ap.add_argument("--rows", type=int, default=0, help="rows redrawn a second (the TUI)")
    ap.add_argument("--headless", action="store_true", help="no screen: a JSON line a second on stdout")
    ap.add_argument("--gpu-only", action="store_true", help="the GPU streams only (no log, no SGLang)")
    ap.add_argument("--gpu-fields", required=True)
    ap.add_argument("--apps-fields", required=True)
    args = ap.parse_args()
    feeds = Feeds(tomllib.loads(args.config.read_text()), args.gpu_fields, args.apps_fields, args.gpu_only)
    if args.headless:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(headless(feeds))
    else:
        Floor(feeds, args.rows).run()


if __name__ == "__main__":
    main()
