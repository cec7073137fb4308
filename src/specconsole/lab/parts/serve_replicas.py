"""Several serving replicas behind a real ``sglang-router`` (``specconsole lab up --serve N``).

With ``LabOptions(serve=N)`` (N >= 2) the lab's serving host ``serve`` is replica 1 and hosts
``serve2`` .. ``serveN`` are made like it: each its own sshd on its own loopback address, its own
``sglang.service`` running the simulator on its own port; all read the models of ``serve``'s
``models/`` (one path for all, as on a fleet). All replicas start
on the same deployment, DFLASH with the lab's DFlash draft and draft window 16 (what a rollout
changes). One real router listens on loopback in front of them: PyPI ``sglang-router`` 0.3.2 (a Rust
load balancer: ``python -m sglang_router.launch_router --worker-urls ...``), or with
``LabOptions(router="smg")`` (``lab up --router smg``) SGLang's current gateway, PyPI ``smg``
(``python -m smg launch ...``, the same flags). Their worker API (``GET/POST /workers``, ``DELETE
/workers/{id}``, both queued: 202 with a ``worker_id``) is what a rollout takes a replica out of and
puts it back into. Where they differ (measured here, smg 1.13.0): smg keeps a removed worker listed
unhealthy for ~5 s before it drops it, and answers a second ``POST`` of a listed URL with 409
(sglang-router 0.3.2: 202, and the entry replaced).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from specconsole.lab.doubles.models import DRAFT_MODEL, TARGET_MODEL
from specconsole.lab.parts import serving_unit, sshd_host
from specconsole.lab.parts.state import LabError, free_port
from specconsole.lab.procs import send_signal, spawn, wait_dead

if TYPE_CHECKING:
    from specconsole.lab.parts.state import LabView

#: the draft window every replica starts with (the rollout tests change it to 32)
START_WINDOW = 16


def replica_names(n: int) -> list[str]:
    """``serve`` (replica 1), ``serve2`` .. ``serveN``."""
    return ["serve"] + [f"serve{i}" for i in range(2, n + 1)]


def replica_address(index: int, first: str) -> str:
    """Replica ``index`` (0-based)'s loopback address: ``first`` (serve's), then the next ones."""
    head, last = first.rsplit(".", 1)
    return f"{head}.{int(last) + index}" if index else first


def models_dir(lab: LabView) -> Path:
    """The replicas' models: one folder at one path for all (as a fleet's hosts have the same layout),
    so one ``--draft-model PATH`` means the same draft on every replica."""
    return lab.root("serve") / "models"


def dflash_args(lab: LabView, name: str, port: int) -> list[str]:
    """The replicas' start deployment: DFLASH with the lab's DFlash draft, window 16."""
    models = models_dir(lab)
    return ["serve", "--model-path", str(models / TARGET_MODEL), "--host", "127.0.0.1",
            "--port", str(port), "--tp-size", "2", "--speculative-algorithm", "DFLASH",
            "--speculative-draft-model-path", str(models / DRAFT_MODEL),
            "--speculative-draft-window-size", str(START_WINDOW), "--enable-metrics"]


def make_replicas(lab: LabView) -> None:
    """Folders, sshd configs, models and units of ``serve2`` .. ``serveN`` (``serve`` is the lab's own)."""
    names = replica_names(lab.options.serve)
    for i, name in enumerate(names[1:], start=1):
        root = lab.root(name)
        lab.state.hosts[name] = sshd_host.make_host(root, name, replica_address(i, lab.options.serve_address),
                                                    lab.keys, lab.scenario_path(name), lab.say)
        serving_unit.write_sglang_install(root, lab.options.sglang_version, lab.state.judge_socket,
                                          lab.sglang_venv_python())
        lab.state.replica_ports[name] = free_port("127.0.0.1")


def write_replica_units(lab: LabView) -> None:
    """Every replica's models, GPU scenario and DFLASH unit (after the lab wrote serve's scenario)."""
    for name in replica_names(lab.options.serve):
        root = lab.root(name)
        for leftover in (root / "etc" / "systemd" / "system" / "sglang.service.d", root / "var" / "log" / "journal"):
            shutil.rmtree(leftover, ignore_errors=True)  # an earlier run's drop-in and journal
        (root / "run" / "sglang.service.status").unlink(missing_ok=True)
        if name != "serve":
            shutil.copyfile(lab.scenario_path("serve"), lab.scenario_path(name))
        serving_unit.write_unit(unit_path(lab, name), root / "bin", dflash_args(lab, name, port(lab, name)),
                                lab.options)


def unit_path(lab: LabView, name: str) -> Path:
    return lab.root(name) / "etc" / "systemd" / "system" / "sglang.service"


def port(lab: LabView, name: str) -> int:
    return lab.state.sglang_port if name == "serve" else lab.state.replica_ports[name]


def worker_url(lab: LabView, name: str) -> str:
    return f"http://127.0.0.1:{port(lab, name)}"


def systemctl(lab: LabView, name: str, *args: str, check: bool = True, timeout: float = 30) -> None:
    serving_unit.systemctl(lab.root(name), lab.env(name), lab.say, *args, check=check, timeout=timeout)


def start_replicas(lab: LabView) -> None:
    """Start ``serve2`` .. ``serveN``'s units (``serve``'s is the lab's own start)."""
    for name in replica_names(lab.options.serve)[1:]:
        systemctl(lab, name, "daemon-reload")
        systemctl(lab, name, "start", "sglang.service", timeout=120)


def started_replicas(lab: LabView) -> list[str]:
    """The replicas this lab folder's state names (also for a ``lab down`` that knows no options)."""
    return ["serve", *lab.state.replica_ports]


def stop_replicas(lab: LabView) -> None:
    for name in started_replicas(lab)[1:]:
        if name in lab.state.hosts and unit_path(lab, name).exists():
            try:
                systemctl(lab, name, "stop", "sglang.service", check=False, timeout=20)
            except Exception as err:
                lab.say(f"{name}: stopping sglang.service failed: {err}")


# ---------------------------------------------------------------------------------- the router

def router_url(lab: LabView) -> str:
    return f"http://127.0.0.1:{lab.state.router_port}"


def start_router(lab: LabView, timeout: float = 120) -> int:
    """Start the real sglang-router in front of every replica and wait until it lists them all
    healthy (each replica must answer /health first: the router checks its workers at start)."""
    names = replica_names(lab.options.serve)
    urls = [worker_url(lab, n) for n in names]
    _wait_healthy(urls, timeout)
    lab.state.router_port = free_port("127.0.0.1")
    proc = _spawn_router(lab, urls)
    log = lab.dir / "logs" / "router.log"
    deadline = time.monotonic() + timeout
    listed: list[str] = []
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LabError(f"lab: sglang-router exited {proc.returncode} at start; see {log}")
        listed = router_workers(lab)
        if sorted(listed) == sorted(urls):
            lab.say(f"router: listening on {router_url(lab)} (pid {proc.pid}) with {len(urls)} workers")
            return proc.pid
        time.sleep(0.2)
    raise LabError(f"lab: sglang-router did not list its {len(urls)} workers within {timeout:g}s "
                   f"(it lists {listed}); see {log}")


def _spawn_router(lab: LabView, urls: list[str]) -> subprocess.Popen[bytes]:
    """The router on ``lab.state.router_port`` with ``urls`` on its command line (its metrics on a free
    port of their own: sglang-router's default 29000 collides between two labs on one machine)."""
    log = lab.dir / "logs" / "router.log"
    program = ["-m", "smg", "launch"] if lab.options.router == "smg" else ["-m", "sglang_router.launch_router"]
    argv = [sys.executable, *program, "--host", "127.0.0.1",
            "--port", str(lab.state.router_port), "--policy", "round_robin", "--log-level", "warn",
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port("127.0.0.1")),
            # the router's own checks: quick enough to see a replica come back, none counted as a failure
            "--health-check-interval-secs", "2", "--worker-startup-timeout-secs", "120",
            "--worker-startup-check-interval", "1", "--worker-urls", *urls]
    with open(log, "ab") as out:
        proc = spawn(argv, env=lab.env("serve"), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    lab.state.router_pid = proc.pid
    lab.state.remember(proc.pid)
    lab.state.save()
    lab.say(f"router: $ {' '.join(argv[1:])}")
    return proc


def restart_router(lab: LabView, down_s: float = 0.0) -> int:
    """Stop the router and start it again on the same port with the same command line (as a crashed
    or upgraded router comes back), ``down_s`` later; not waiting for its workers: a restarted
    router lists each worker once it answers /health (also one a rollout holds out)."""
    stop_router(lab)
    time.sleep(down_s)
    proc = _spawn_router(lab, [worker_url(lab, n) for n in replica_names(lab.options.serve)])
    return proc.pid


def router_workers(lab: LabView) -> list[str]:
    """The worker URLs the router lists (empty while it does not answer)."""
    try:
        with urllib.request.urlopen(router_url(lab) + "/workers", timeout=2) as r:
            data = json.loads(r.read())
    except (OSError, ValueError):
        return []
    return [str(w.get("url")) for w in data.get("workers", []) if isinstance(w, dict)]


def stop_router(lab: LabView) -> None:
    pid = lab.state.router_pid
    if pid and lab.state.ours(pid):
        send_signal(pid, signal.SIGTERM)
        if not wait_dead([pid], 10):
            send_signal(pid, signal.SIGKILL)
            wait_dead([pid], 5)
        lab.say(f"router: stopped (pid {pid})")
    lab.state.router_pid = None


def _wait_healthy(urls: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    waiting = list(urls)
    while waiting and time.monotonic() < deadline:
        for url in list(waiting):
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        waiting.remove(url)
            except OSError:
                pass
        if waiting:
            time.sleep(0.2)
    if waiting:
        raise LabError(f"lab: replicas {', '.join(waiting)} did not answer /health within {timeout:g}s")
