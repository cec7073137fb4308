"""The nvidia-smi double's inputs: its scenario file, and the real processes a scenario's
``workload`` matches (:mod:`specconsole.lab.doubles.nvidia_smi` builds each iteration's GPUs from both).

Scenario file: the path in env ``NVIDIA_SMI_SCENARIO``; when unset, ``~/.nvidia-smi-scenario.json``;
when that does not exist either, a built-in idle single H200. (The lab's ``bin/nvidia-smi``
wrapper exports ``NVIDIA_SMI_SCENARIO`` for its host.) The file is re-read whenever its mtime or
size changes, so a test can change it while a ``-lms`` loop runs: write it atomically (write a
temporary file, then ``os.replace``); an unparsable file keeps the previous scenario. Format::

    {
      "driver": true,                       # false -> exit 9, driver message
      "failure": {"exit_code": 15, "message": "..."},   # optional: fail every query like that
      "garbage": {"lines": ["\\u0000junk"], "instead": false},  # optional: --query-gpu prints
                                            # these after (instead: in place of) its rows
      "silent": false,                      # true -> a running loop prints nothing (hangs)
      "gpus": [                             # remove an entry to make that GPU vanish
        {"index": 0, "name": "NVIDIA H200", "uuid": "GPU-...", "pci_bus_id": "00000000:18:00.0",
         "memory_total_mib": 143771, "memory_used_mib": 0, "power_limit_w": 700,
         "power_draw_w": 75.3, "utilization_pct": 0, "memory_util_pct": 0,
         "temperature_c": 34, "sm_clock_mhz": 345, "pstate": "P8", "fan_speed_pct": "[N/A]"}
      ],                                    # any field may be "[N/A]" / "[Not Supported]" / ...
      "processes": [                        # static compute apps (memory is NOT added to GPUs)
        {"pid": 4242, "name": "/usr/bin/python3", "used_memory_mib": 1024, "gpu_index": 0}
      ],                                    # (or "gpu_uuid"; any cell may be "[...]")
      "workload": {                         # optional: respond to REAL processes
        "cmdline_contains": "specconsole.lab.doubles.trainer",
        "require_env": ["LOCAL_RANK"],      # optional: only processes with these env vars
        "all_gpus": false,                  # optional: each process holds every GPU (TP server)
        "memory_mib_per_process": 61000, "utilization_pct": 97, "memory_util_pct": 61,
        "power_draw_w": 612.4, "temperature_c": 71, "sm_clock_mhz": 1980, "pstate": "P0",
        "jitter": true
      }
    }

Stdlib only, as the double is.
"""

from __future__ import annotations

import json
import os
from typing import Any

SCENARIO_ENV = "NVIDIA_SMI_SCENARIO"
DEFAULT_SCENARIO_PATH = "~/.nvidia-smi-scenario.json"

DEFAULT_SCENARIO: dict[str, Any] = {
    "driver": True,
    "gpus": [{"index": 0, "name": "NVIDIA H200", "memory_total_mib": 143771, "power_limit_w": 700}],
    "processes": [],
}


class Scenario:
    """The scenario file, re-read when its mtime or size changes."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._key: tuple[int, int] | None = None
        self.data: dict[str, Any] = DEFAULT_SCENARIO

    def refresh(self) -> dict[str, Any]:
        if self.path is None:
            return self.data
        try:
            st = os.stat(self.path)
        except OSError:
            return self.data
        key = (st.st_mtime_ns, st.st_size)
        if key != self._key:
            try:
                with open(self.path, encoding="utf-8") as f:
                    data = json.load(f)
            except (OSError, ValueError):
                return self.data  # half-written: keep the previous scenario, retry next time
            if isinstance(data, dict):
                self.data = data
                self._key = key
        return self.data


def scenario_path() -> str | None:
    env = os.environ.get(SCENARIO_ENV)
    if env:
        return env
    default = os.path.expanduser(DEFAULT_SCENARIO_PATH)
    return default if os.path.exists(default) else None


def _ancestors() -> set[int]:
    pids = {os.getpid()}
    pid = os.getppid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def _read_environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            env[k.decode(errors="replace")] = v.decode(errors="replace")
    return env


def _process_name(pid: int, argv: list[str]) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return argv[0] if argv else "[Insufficient Permissions]"


def scan_workload(workload: dict[str, Any]) -> list[tuple[int, str, int | None]]:
    """(pid, process name, LOCAL_RANK or None) of live processes matching the workload."""
    needle = str(workload.get("cmdline_contains") or "")
    if not needle:
        return []
    required = [str(x) for x in workload.get("require_env") or ()]
    skip = _ancestors()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in skip:
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                raw = f.read()
            with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if not raw or state in ("Z", "X"):
            continue  # kernel thread, zombie or gone: a dead process holds no GPU memory
        argv = [a.decode(errors="replace") for a in raw.rstrip(b"\0").split(b"\0")]
        if needle not in " ".join(argv):
            continue
        env = _read_environ(pid)
        if any(name not in env for name in required):
            continue
        rank: int | None
        try:
            rank = int(env["LOCAL_RANK"])
        except (KeyError, ValueError):
            rank = None
        found.append((pid, _process_name(pid, argv), rank))
    found.sort()
    return found
