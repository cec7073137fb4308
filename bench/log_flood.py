"""A training log flooded with ~1 GB of well-formed lines: what it costs `status --watch --json`.

Starts the lab's training host (sshd on loopback; no trainer, no SGLang), runs
``specconsole status --watch --json`` on a config with that host only, and once it shows the
log's first step appends SIZE bytes of well-formed JSON step lines to the log as fast as this
machine writes them. Prints, from the watcher's own JSON lines and /proc:

- write_s: how long the flood took to write;
- lag_shown_s: flood start -> the first snapshot saying the tail is behind (``behind_bytes`` > 0)
  or skipped ahead (``skips`` grew); target <= 2 s;
- caught_up_s: flood end -> the first snapshot showing the flood's last step with 0 behind;
  target <= 10 s (and the same from the flood's start);
- skips, skipped MiB, lines parsed (of those written);
- the watcher's CPU seconds over the flood and until caught up, and its peak RSS (VmHWM).

Usage: .venv/bin/python bench/log_flood.py [--mib 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _tools import cpu_s  # bench/_tools.py (scripts run from bench/)

from specconsole.lab.parts.environment import Lab, LabOptions

T0 = 1_783_000_000.0
PAD = "x" * 160  # ~250-byte lines, a trainer's JSON record with a few more fields


def line(step: int) -> str:
    return (f'{{"time": {T0 + step:.1f}, "step": {step}, "epoch": {step / 33000:.5f}, "loss": 2.5, '
            f'"lr": 0.0006, "tokens_per_s": 19500, "pad": "{PAD}"}}\n')


def peak_rss_mib(pid: int) -> float:
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith("VmHWM:"):
            return int(row.split()[1]) / 1024
    return float("nan")


class Watch:
    """The watcher's JSON lines, read on a thread: (monotonic time, training value) each."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.seen: list[tuple[float, dict[str, Any]]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                hosts = json.loads(raw)["hosts"]
            except (ValueError, KeyError):
                continue
            for host in hosts:
                training = host.get("training") or {}
                if host.get("name") == "train" and training.get("value"):
                    self.seen.append((time.monotonic(), training["value"]))

    def first(self, pred: Any, since: float, timeout: float) -> tuple[float, dict[str, Any]] | None:
        deadline = time.monotonic() + timeout
        i = 0
        while time.monotonic() < deadline:
            while i < len(self.seen):
                at, value = self.seen[i]
                i += 1
                if at >= since and pred(value):
                    return at, value
            time.sleep(0.02)
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=1024, help="how much to write (MiB)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="specconsole-flood-"))
    lab = Lab(tmp / "lab", LabOptions(trainer=False, sglang=False))
    lab.up()
    watcher: subprocess.Popen[str] | None = None
    try:
        text = lab.config_path.read_text()
        config = tmp / "train-only.toml"
        config.write_text(text.split('[[hosts]]\nname = "serve"', 1)[0])
        log = lab.train_log
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(line(1))
        exe = Path(sys.executable).parent / "specconsole"
        watcher = subprocess.Popen([str(exe), "status", "--watch", "--json", "--interval", "0.25",
                                    "--config", str(config)], stdout=subprocess.PIPE, text=True)
        watch = Watch(watcher)
        if watch.first(lambda v: v.get("step") == 1, 0.0, 60) is None:
            print("the watcher never showed step 1", file=sys.stderr)
            return 1
        time.sleep(2)
        cpu0 = cpu_s(watcher.pid)
        per_chunk = max(1, (8 << 20) // len(line(2)))
        target, written, step = args.mib << 20, 0, 1
        started = time.monotonic()
        with log.open("a") as f:
            while written < target:
                chunk = "".join(line(s) for s in range(step + 1, step + 1 + per_chunk))
                f.write(chunk)
                written += len(chunk)
                step += per_chunk
        ended = time.monotonic()
        last, lines = step, step - 1
        cpu_flood = cpu_s(watcher.pid) - cpu0
        lag = watch.first(lambda v: (v.get("behind_bytes") or 0) > 0 or v.get("skips", 0) > 0, started, 60)
        caught = watch.first(lambda v: v.get("step") == last and v.get("behind_bytes") == 0, started, 120)
        cpu_total = cpu_s(watcher.pid) - cpu0
        rss = peak_rss_mib(watcher.pid)
        final = watch.seen[-1][1] if watch.seen else {}
        print(f"flood: {written / (1 << 20):.0f} MiB, {lines:,} lines, written in {ended - started:.1f} s")
        print(f"lag_shown_s (from the flood's start): {lag[0] - started:.2f}" if lag else "lag never shown")
        if caught:
            print(f"caught_up_s: {caught[0] - ended:.2f} after the flood's end, "
                  f"{caught[0] - started:.2f} after its start")
        else:
            print("never caught up within 120 s")
        print(f"skips: {final.get('skips')}, skipped: {(final.get('skipped_bytes') or 0) / (1 << 20):.0f} MiB, "
              f"lines parsed: {final.get('lines_seen'):,} of {lines + 1:,}")
        print(f"watcher CPU: {cpu_flood:.1f} s during the flood, {cpu_total:.1f} s until caught up; "
              f"peak RSS {rss:.0f} MiB")
        return 0 if lag and caught else 1
    finally:
        if watcher is not None:
            watcher.terminate()
            watcher.wait(10)
        lab.down()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
