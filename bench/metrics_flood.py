"""What a 200 MB ``/metrics`` costs the console: ``specconsole status --watch --json`` against a
loopback server (``specconsole.lab.testing.flood_http``) whose ``/metrics`` answers 200 MB, generated
lazily, and whose ``/health`` and ``/server_info`` answer normally.

Prints, for the console process: the time from its start until a snapshot's sglang ``error``
says why (the cap), its peak RSS (``VmHWM`` in ``/proc/PID/status``) over ``--seconds`` of
watching (several polls, each hung up on at the cap), and how many bytes the server managed
to send per poll. Target: peak RSS under 150 MB.

``--cap-mib 256`` raises ``max_metrics_mib`` above the body (the whole 200 MB is read, then its
cut last line fails to parse); ``--src DIR`` runs the console from another source tree (e.g. a
``git archive`` of the commit before the cap: before/after on the same machine).

Usage: .venv/bin/python bench/metrics_flood.py [--mib 200] [--cap-mib 8] [--seconds 10] [--src DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from specconsole.lab.testing.flood_http import MIB, FloodServer


def vm_hwm_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmHWM for pid {pid}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mib", type=float, default=200.0, help="size of the /metrics answer (MiB)")
    p.add_argument("--cap-mib", type=float, default=None, help="hosts.sglang.max_metrics_mib (default: the console's)")
    p.add_argument("--seconds", type=float, default=10.0, help="how long to watch after the first reason")
    p.add_argument("--src", help="run the console from this source tree (its src/ folder goes first on PYTHONPATH)")
    a = p.parse_args()
    server = FloodServer({"/metrics": round(a.mib * MIB)})
    cap = f"max_metrics_mib = {a.cap_mib:g}\n" if a.cap_mib is not None else ""
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "console.toml"
        config.write_text(f'[[hosts]]\nname = "serve"\nrole = "serve"\ngpu.source = "none"\n'
                          f'[hosts.sglang]\nbase_url = "{server.url}"\ninterval_s = 1\ntimeout_s = 30\n{cap}')
        exe = Path(sys.executable).with_name("specconsole")
        t0 = time.monotonic()
        env = dict(os.environ)
        if a.src:
            env["PYTHONPATH"] = str(Path(a.src).resolve() / "src")
        proc = subprocess.Popen([str(exe), "status", "--watch", "--json", "--interval", "0.5",
                                 "--config", str(config)], stdout=subprocess.PIPE, text=True, env=env)
        assert proc.stdout is not None
        first: float | None = None
        reason = ""
        errors: set[str] = set()
        done = threading.Event()
        hwm = [0]

        def sample_rss() -> None:  # VmHWM is the peak already; sampling only keeps the last value
            while not done.wait(0.2):
                try:
                    hwm[0] = vm_hwm_kib(proc.pid)
                except (OSError, RuntimeError):
                    return

        threading.Thread(target=sample_rss, daemon=True).start()
        try:
            for line in proc.stdout:
                host = json.loads(line)["hosts"][0]
                sg = host.get("sglang")
                err = sg["value"]["error"] if sg else None
                if err:
                    errors.add(err)
                    if first is None:
                        first, reason = time.monotonic() - t0, err
                if first is not None and time.monotonic() - t0 > first + a.seconds:
                    break
                if first is None and time.monotonic() - t0 > 120:
                    break
            hwm[0] = vm_hwm_kib(proc.pid)
        finally:
            done.set()
            proc.terminate()
            proc.wait(10)
            server.close()
    polls = server.hung_up("/metrics") + server.finished("/metrics")
    print(f"console: {a.src or 'this tree'}; /metrics answer: {a.mib:g} MiB; console cap: "
          f"{f'{a.cap_mib:g} MiB' if a.cap_mib is not None else 'default'}")
    print(f"time until the reason showed: {first:.2f} s" if first is not None else "no reason within 120 s")
    print(f"reason: {reason}")
    print(f"peak RSS (VmHWM) of the console: {hwm[0] / 1024:.1f} MiB  (target < 150 MB = {150e6 / MIB:.0f} MiB)")
    print(f"/metrics polls: {polls} ({server.hung_up('/metrics')} hung up on, "
          f"{server.finished('/metrics')} read whole); sent {server.sent('/metrics') / MIB / max(1, polls):.1f} "
          f"MiB per poll on average")
    if len(errors) > 1:
        print(f"other reasons seen: {sorted(errors - {reason})}")
    return 0 if first is not None else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
