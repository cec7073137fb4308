"""What a browser session of ``specconsole web`` costs: CPU-s per minute and RSS, for 1 and 3 sessions.

Each browser session is a whole console process (textual-serve runs one per websocket), so the
figures are the web server plus its sessions' processes, read from ``/proc`` (utime+stime of every
live process in the server's tree; VmRSS). A session here is a websocket client that does what the
page's script does (``resize`` to 160x48, then reads everything the console sends), so the
browser's own cost is not counted. Baseline, in the same run on the same lab: the console in tmux
at 160x48 (``specconsole --config lab.toml``), the way an operator runs it.

Usage: .venv/bin/python bench/web_sessions.py [--seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _tools import TICK, cpu_s, missing  # bench/_tools.py (scripts run from bench/)

from specconsole.lab.parts.environment import Lab, LabOptions
from specconsole.lab.parts.state import free_port

TMUX = ["tmux", "-L", f"specconsole-bench-{os.getpid()}", "-f", "/dev/null"]


def tree(root: int) -> list[int]:
    """``root`` and every live process below it."""
    parents: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                parents[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, todo = [root], [root]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        found += kids
        todo += kids
    return found


def tree_cpu_s(root: int) -> float:
    total = 0.0
    for pid in tree(root):
        try:
            f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(f[11]) + int(f[12])) / TICK
        except (OSError, IndexError, ValueError):
            continue
    return total


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def consoles(root: int) -> list[int]:
    """The session consoles below the web server (python ... -m specconsole --web-session)."""
    out = []
    for pid in tree(root)[1:]:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--web-session" in cmd and not cmd[0].endswith(b"sh"):
            out.append(pid)
    return out


async def session(url: str, origin: str, stop: asyncio.Event, got: list[int]) -> None:
    """One browser session as the page's script makes it."""
    import aiohttp

    async with aiohttp.ClientSession() as http, http.ws_connect(url + "?width=160&height=48",
                                                                 headers={"Origin": origin}) as ws:
        await ws.send_json(["resize", {"width": 160, "height": 48}])
        while not stop.is_set():
            try:
                msg = await asyncio.wait_for(ws.receive(), 0.5)
            except TimeoutError:
                continue
            if msg.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                return
            got[0] += len(msg.data) if isinstance(msg.data, bytes | str) else 0


async def measure_web(server: subprocess.Popen[str], ws_url: str, origin: str, n: int,
                      seconds: float) -> tuple[float, float, float, int]:
    """(CPU-s/min of the server's tree, server RSS MiB, mean RSS MiB of a session console, bytes/s sent)."""
    stop, got = asyncio.Event(), [0]
    tasks = [asyncio.create_task(session(ws_url, origin, stop, got)) for _ in range(n)]
    t0 = time.monotonic()
    while len(consoles(server.pid)) < n and time.monotonic() - t0 < 60:
        await asyncio.sleep(0.2)
    await asyncio.sleep(10)  # the consoles connect to the lab and draw their first frames
    c0, b0, w0 = tree_cpu_s(server.pid), got[0], time.monotonic()
    await asyncio.sleep(seconds)
    took = time.monotonic() - w0
    cpu = (tree_cpu_s(server.pid) - c0) / (took / 60)
    sent = (got[0] - b0) / took
    sessions = consoles(server.pid)
    rss = sum(rss_mib(p) for p in sessions) / max(1, len(sessions))
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.sleep(3)  # the consoles quit
    return cpu, rss_mib(server.pid), rss, int(sent)


def tmux_console(lab: Lab, seconds: float) -> tuple[float, float]:
    """The baseline: the console in tmux at 160x48. (CPU-s/min, RSS MiB)."""
    exe = Path(sys.executable).parent / "specconsole"
    subprocess.run([*TMUX, "new-session", "-d", "-s", "keep", "sleep 86400"], check=True)
    subprocess.run([*TMUX, "new-session", "-d", "-s", "c", "-x", "160", "-y", "48",
                    f"exec {exe} --config {lab.config_path} --read-only"], check=True)
    pid = int(subprocess.run([*TMUX, "display-message", "-p", "-t", "c", "#{pane_pid}"], capture_output=True,
                             text=True, check=True).stdout)
    time.sleep(10)
    c0, w0 = cpu_s(pid), time.monotonic()
    time.sleep(seconds)
    cpu = (cpu_s(pid) - c0) / ((time.monotonic() - w0) / 60)
    rss = rss_mib(pid)
    subprocess.run([*TMUX, "kill-server"], capture_output=True, check=False)
    return cpu, rss


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    args = ap.parse_args()
    if missing("tmux"):
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="specconsole-bench-"))
    lab = Lab(tmp / "lab" / "state", LabOptions(sglang_startup_s=1.0, gpu_interval_s=1.0, sglang_interval_s=1.0))
    lab.up()
    port = free_port()
    server: subprocess.Popen[str] | None = None
    try:
        time.sleep(8)  # the trainer's first steps, SGLang loaded
        tmux_cpu, tmux_rss = tmux_console(lab, args.seconds)
        server = subprocess.Popen([sys.executable, "-m", "specconsole", "web", "--config", str(lab.config_path),
                                   "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert server.stdout is not None
        token = ""
        for line in server.stdout:
            if m := re.search(r"token=(\S+)", line):
                token = m.group(1)
                break
        os.set_blocking(server.stdout.fileno(), False)
        ws_url, origin = f"ws://127.0.0.1:{port}/ws/{token}", f"http://127.0.0.1:{port}"
        results = {n: asyncio.run(measure_web(server, ws_url, origin, n, args.seconds)) for n in (1, 3)}
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
        lab.down()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'figure (demo lab, 160x48, ' + str(int(args.seconds)) + ' s)':52} {'CPU-s/min':>10} {'RSS MiB':>9} "
          f"{'vs tmux':>8}")
    print(f"{'console in tmux (baseline)':52} {tmux_cpu:10.2f} {tmux_rss:9.0f} {'1.0x':>8}")
    for n, (cpu, server_rss, session_rss, sent) in results.items():
        label = f"web, {n} session{'s' if n > 1 else ''} (server + consoles; {sent / 1024:.1f} KiB/s sent)"
        print(f"{label:52} {cpu:10.2f} {server_rss + n * session_rss:9.0f} "
              f"{cpu / tmux_cpu if tmux_cpu else float('inf'):7.1f}x")
        print(f"{'  per session: CPU-s/min, console RSS':52} {cpu / n:10.2f} {session_rss:9.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
