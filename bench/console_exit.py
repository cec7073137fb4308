"""How long the console takes to leave: ``q``, SIGTERM, SIGINT and its terminal going away.

Starts the lab's two sshds, writes a synthetic fleet config (N SSH hosts all served by those two
sshds, each with a ``tail -F`` training stream and an ``nvidia-smi -lms`` stream of the GPU
double, plus one local host whose streams are child processes of the console), runs the real
``specconsole`` in a tmux pane on a private tmux server, waits for its first full frame (or
``--settle`` seconds), then ends it and measures:

- exit: from sending the key / signal (or ``kill-session``) until the console's pid is gone;
- remote: the lab sshds' session processes before, and how long from the key / signal until none;
- children: processes carrying this run's marker in their environment still alive after that;
- (deadline): the orderly exit did not finish in time and the exit deadline ended the process.

Usage: .venv/bin/python bench/console_exit.py [--hosts 2,50,200] [--how q,SIGTERM,SIGINT,SIGHUP]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from _tools import missing  # bench/_tools.py (scripts run from bench/)

from specconsole.base.pids import alive
from specconsole.lab.parts.environment import Lab, LabOptions
from specconsole.lab.procs import sessions, with_environ
from specconsole.lab.testing.synthetic_fleet import write_fleet_config, write_training_log

EXE = Path(sys.executable).parent / "specconsole"
TMUX = ["tmux", "-L", f"specconsole-exit-bench-{os.getpid()}", "-f", "/dev/null"]


def tmux(*args: str, check: bool = True) -> str:
    res = subprocess.run([*TMUX, *args], capture_output=True, text=True, check=False)
    if check and res.returncode != 0:
        raise RuntimeError(f"tmux {' '.join(args[:3])}: {res.stderr.strip()}")
    return res.stdout


def marked(mark: str) -> list[int]:
    """Live processes whose environment carries ``mark``."""
    return with_environ(f"SPECCONSOLE_EXIT_MARK={mark}".encode())


def one(lab: Lab, tmp: Path, hosts: int, how: str, settle: float, gpu_every: int) -> dict[str, object]:
    run = tmp / f"{hosts}-{how}"
    run.mkdir()
    config = write_fleet_config(lab, run / "fleet.toml", hosts, log_path=tmp / "train.jsonl",
                                audit_log=run / "audit.log", state_dir=run / "state", local=True,
                                gpu_every=gpu_every)
    mark = uuid.uuid4().hex
    frame = run / "first-frame"
    path = f"{lab.root('train') / 'bin'}:{os.environ.get('PATH', '')}"
    session = f"c{hosts}{how}"
    t_start = time.monotonic()
    tmux("new-session", "-d", "-s", session, "-x", "160", "-y", "48",
         "-e", f"SPECCONSOLE_EXIT_MARK={mark}", "-e", f"SPECCONSOLE_FIRST_FRAME_FILE={frame}",
         "-e", f"PATH={path}", f"exec {EXE} --config {config}")
    pid = int(tmux("display-message", "-p", "-t", session, "#{pane_pid}").strip())
    deadline = time.monotonic() + settle
    while not frame.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    full = frame.exists()
    first_frame = time.monotonic() - t_start if full else float("nan")
    time.sleep(2)  # every stream running
    remote_before = len(sessions(lab))
    t0 = time.monotonic()
    if how == "q":
        tmux("send-keys", "-t", session, "q")
    elif how == "SIGHUP":
        tmux("kill-session", "-t", session)
    else:
        os.kill(pid, getattr(signal, how))
    while alive(pid) and time.monotonic() - t0 < 60:
        time.sleep(0.005)
    took = time.monotonic() - t0
    still = alive(pid)
    if still:
        os.kill(pid, signal.SIGKILL)
    while sessions(lab) and time.monotonic() - t0 < 30:
        time.sleep(0.05)
    remote_gone = time.monotonic() - t0
    children = marked(mark)
    for c in children:
        os.kill(c, signal.SIGKILL)
    tmux("kill-session", "-t", session, check=False)
    audit = (run / "audit.log").read_text() if (run / "audit.log").exists() else ""
    return {"forced": "leaving now" in audit, "hosts": hosts, "how": how, "exit_s": took, "killed": still,
            "full_frame": full, "first_frame_s": first_frame, "children_left": len(children),
            "remote_before": remote_before, "remote_gone_s": remote_gone, "remote_left": len(sessions(lab))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="2,50,200")
    ap.add_argument("--how", default="q,SIGTERM,SIGINT,SIGHUP")
    ap.add_argument("--settle", type=float, default=90.0, help="max seconds to wait for the first full frame")
    ap.add_argument("--gpu-every", type=int, default=1, help="an nvidia-smi stream on every Nth SSH host (0: none)")
    args = ap.parse_args()
    if missing("tmux"):
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="specconsole-exit-"))
    lab = Lab(tmp / "lab", LabOptions(trainer=False, sglang=False), say=lambda _m: None)
    lab.up()
    write_training_log(tmp / "train.jsonl")
    rows = []
    try:
        tmux("new-session", "-d", "-s", "keep", "sleep 86400")
        for n in (int(x) for x in args.hosts.split(",")):
            for how in args.how.split(","):
                row = one(lab, tmp, n, how, args.settle, args.gpu_every)
                rows.append(row)
                print(f"{row['hosts']:>5} hosts {row['how']:>7}: exit {row['exit_s']:6.2f} s"
                      f"{' (SIGKILLed after 60 s)' if row['killed'] else ''}"
                      f"{' (deadline)' if row['forced'] else ''}, first frame "
                      f"{row['first_frame_s']:5.1f} s, children left {row['children_left']}, remote sessions "
                      f"{row['remote_before']} -> 0 {row['remote_gone_s']:.1f} s after "
                      f"(left {row['remote_left']})", flush=True)
    finally:
        subprocess.run([*TMUX, "kill-server"], capture_output=True, check=False)
        lab.down()
        shutil.rmtree(tmp, ignore_errors=True)
    worst = max((r["exit_s"] for r in rows), default=float("nan"))
    print(f"\nworst exit: {worst:.2f} s over {len(rows)} runs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
