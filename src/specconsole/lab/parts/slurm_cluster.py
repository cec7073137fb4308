"""``lab up --slurm``: a real Slurm cluster on this machine (Debian's slurmctld, slurmd, munge),
and the training job submitted to it with ``sbatch``.

Layout under ``LAB/slurm`` (short names: the munge socket's path must fit a unix socket's 108 bytes)::

    m/          munged's socket, key, pid and seed (755: other users' clients reach the socket)
    slurm.conf  the cluster: controller on 127.0.0.1, nodes n1 (127.0.0.1) and n2 (127.0.0.4)
    state/ spool/n1 spool/n2 run/ log/   slurmctld's state, the nodes' spools, pids, logs
    jobs/       the batch scripts (1777)
    pids.json   {daemon: pid} (their start times are in the lab's state.json, as every lab pid's)

What was found on Debian 12 (Slurm 22.05.8): two ``slurmd`` on one machine work (``-N NAME``, each
node its own ``Port=`` and ``NodeAddr=``, ``%n`` in the spool/pid/log paths), so the cluster has two
nodes and the training job is ``srun torchrun --nnodes=2 --nproc_per_node=1`` with a c10d rendezvous
across both. Every daemon runs in the foreground (``-D``/``-F``) as this process's child, in its own
session. ``slurmstepd`` (a job's step daemon) outlives slurmd and ignores SIGTERM, so :func:`stop`
cancels every job first, waits for the queue to empty, stops the daemons by pid, then SIGKILLs a
step daemon of this cluster still left.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from specconsole.base.pids import alive
from specconsole.lab.files import toml_str, write_file
from specconsole.lab.parts.state import LabError, free_port
from specconsole.lab.procs import send_signal, spawn, wait_dead

if TYPE_CHECKING:
    from specconsole.lab.parts.state import LabView

#: the training job's name in the cluster (the console's [hosts.slurm] job_name)
JOB_NAME = "drafter-train"
#: the compute nodes: name -> address (n2 on a loopback address of its own)
NODES = {"n1": "127.0.0.1", "n2": "127.0.0.4"}
PROGRAMS = ("munged", "slurmctld", "slurmd", "mungekey", "sbatch", "squeue", "scancel", "sinfo")
#: the daemons, in stopping order
DAEMONS = ("slurmd-n2", "slurmd-n1", "slurmctld", "munged")


def unavailable() -> str | None:
    """Why a Slurm cluster cannot start here (None: it can)."""
    missing = [p for p in PROGRAMS if shutil.which(p) is None and not Path(f"/usr/sbin/{p}").exists()]
    if missing:
        return (f"Slurm is not installed ({', '.join(missing)} missing): apt-get install -y --no-install-recommends "
                "slurmctld slurmd slurm-client munge (scripts/setup.sh does this)")
    if os.geteuid() != 0:
        return "the lab's Slurm cluster runs its daemons as root (SlurmUser=root); run as root"
    return None


def _exe(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def base(lab: LabView) -> Path:
    return lab.dir / "slurm"


def conf_path(lab: LabView) -> Path:
    return base(lab) / "slurm.conf"


def env(lab: LabView) -> dict[str, str]:
    """The environment of the cluster's daemons and clients (the train host's marker with it)."""
    return {**lab.env("train"), "SLURM_CONF": str(conf_path(lab))}


def write_conf(b: Path, ctld_port: int, node_ports: dict[str, int]) -> str:
    host = socket.gethostname().split(".")[0]
    nodes = "\n".join(
        f"NodeName={n} NodeHostname={host} NodeAddr={a} Port={node_ports[n]} CPUs=2 Boards=1 SocketsPerBoard=1 "
        f"CoresPerSocket=2 ThreadsPerCore=1 RealMemory=1000 State=UNKNOWN" for n, a in NODES.items())
    text = f"""# the lab's Slurm cluster (specconsole lab up --slurm)
ClusterName=speclab
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={next(iter(node_ports.values()))}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={b}/m/sock
StateSaveLocation={b}/state
SlurmdSpoolDir={b}/spool/%n
SlurmctldPidFile={b}/run/slurmctld.pid
SlurmdPidFile={b}/run/slurmd-%n.pid
SlurmctldLogFile={b}/log/slurmctld.log
SlurmdLogFile={b}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={b}/state/jobcomp.txt
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MessageTimeout=3
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
MinJobAge=300
{nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
    write_file(b / "slurm.conf", text)
    return text


def start(lab: LabView) -> None:
    """munged, slurmctld and both slurmd; ready when every node is idle."""
    why = unavailable()
    if why:
        raise LabError(f"lab: --slurm: {why}")
    t0 = time.monotonic()
    b = base(lab)
    if b.exists():
        shutil.rmtree(b)
    for d in ("m", "state", "spool/n1", "spool/n2", "run", "log", "jobs"):
        (b / d).mkdir(parents=True, exist_ok=True)
    b.chmod(0o755)
    (b / "m").chmod(0o755)
    (b / "jobs").chmod(0o1777)
    write_conf(b, free_port("127.0.0.1"), {n: free_port("127.0.0.1") for n in NODES})
    e = env(lab)
    subprocess.run([_exe("mungekey"), "--create", f"--keyfile={b}/m/key"], check=True, capture_output=True, env=e)
    (b / "m" / "key").chmod(0o400)
    pids: dict[str, int] = {}
    _spawn(lab, pids, "munged", [_exe("munged"), "-F", "-f", f"--socket={b}/m/sock", f"--key-file={b}/m/key",
                                 f"--pid-file={b}/m/pid", f"--log-file={b}/m/log", f"--seed-file={b}/m/seed"], e)
    _until(lambda: (b / "m" / "sock").exists(), 10, "munged's socket", lab)
    _spawn(lab, pids, "slurmctld", [_exe("slurmctld"), "-D", "-f", str(conf_path(lab))], e)
    for node in NODES:
        _spawn(lab, pids, f"slurmd-{node}", [_exe("slurmd"), "-D", "-f", str(conf_path(lab)), "-N", node], e)

    def idle() -> bool:
        res = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, env=e, timeout=10)
        return res.returncode == 0 and sorted(res.stdout.split()) == ["idle"] * len(NODES)

    _until(idle, 60, "both Slurm nodes to be idle", lab)
    lab.say(f"slurm: controller and {len(NODES)} nodes ({', '.join(NODES)}) up in {time.monotonic() - t0:.1f}s; "
            f"SLURM_CONF={conf_path(lab)}")


def _spawn(lab: LabView, pids: dict[str, int], name: str, argv: list[str], e: dict[str, str]) -> None:
    b = base(lab)
    out = open(b / "log" / f"{name}.stderr", "ab")  # noqa: SIM115
    proc = spawn(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=e, cwd=b)
    out.close()
    pids[name] = proc.pid
    lab.state.remember(proc.pid)
    lab.state.save()
    write_file(b / "pids.json", json.dumps(pids))
    lab.say(f"slurm: started {name} (pid {proc.pid})")


def _until(check: object, timeout: float, what: str, lab: LabView) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            if check():
                return
        time.sleep(0.2)
    logs = base(lab) / "log"
    raise LabError(f"lab: --slurm: timed out after {timeout:g}s waiting for {what}; see {logs}")


def batch_script(lab: LabView, rdzv_port: int) -> str:
    """The training job: ``srun`` one torchrun per node, a c10d rendezvous across the nodes."""
    o = lab.options
    torchrun = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={len(NODES)}", "--nproc_per_node=1",
                "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{rdzv_port}", "--rdzv-id=$SLURM_JOB_ID",
                "-m", "specconsole.lab.doubles.trainer", "--log-path", str(lab.train_log),
                "--steps", str(o.trainer_steps), "--epochs", str(o.trainer_epochs),
                "--steps-per-epoch", str(o.trainer_steps_per_epoch),
                "--step-seconds", str(o.trainer_step_seconds), "--batch-tokens", str(o.trainer_batch_tokens)]
    line = " ".join(a if a.startswith("--rdzv-id") else shlex.quote(a) for a in torchrun)
    return f"""#!/bin/bash
#SBATCH --job-name={JOB_NAME}
#SBATCH --nodes={len(NODES)}
#SBATCH --ntasks-per-node=1
#SBATCH --output={lab.train_log}
#SBATCH --open-mode=append
export OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
echo "slurm job $SLURM_JOB_ID on $SLURM_JOB_NODELIST: srun torchrun --nnodes={len(NODES)}"
exec srun --kill-on-bad-exit=1 {line}
"""


def submit_training(lab: LabView) -> str:
    """``sbatch`` the training job; its id. The job's StdOut is the training log (the trainer's
    rank 0 appends its records to the same file)."""
    b = base(lab)
    script = b / "jobs" / "train.sbatch"
    write_file(script, batch_script(lab, free_port("127.0.0.1")), 0o755)
    lab.train_log.parent.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, env=env(lab),
                         cwd=lab.root("train"), timeout=30)
    if res.returncode != 0:
        raise LabError(f"lab: sbatch failed: {res.stderr.strip() or res.stdout.strip()}")
    job_id = res.stdout.strip().split(";")[0]
    lab.say(f"slurm: sbatch {script.name}: job {job_id} ({JOB_NAME}, {len(NODES)} nodes), log {lab.train_log}")
    return job_id


def client(lab: LabView, *argv: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    """Run a Slurm client (squeue, scontrol, sbatch...) against the lab's cluster."""
    return subprocess.run(list(argv), capture_output=True, text=True, env=env(lab), timeout=timeout)


def daemon_pids(lab: LabView) -> dict[str, int]:
    path = base(lab) / "pids.json"
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {k: int(v) for k, v in raw.items()}


def stop_daemon(lab: LabView, name: str) -> None:
    """Stop one daemon by its pid (a test's "the controller goes down")."""
    pid = daemon_pids(lab).get(name)
    if pid and lab.state.ours(pid):
        send_signal(pid, signal.SIGTERM)
        if not wait_dead([pid], 10):
            send_signal(pid, signal.SIGKILL)
            wait_dead([pid], 5)
        lab.say(f"slurm: stopped {name} (pid {pid})")


def start_controller(lab: LabView) -> None:
    """Start slurmctld again (after :func:`stop_daemon`)."""
    pids = daemon_pids(lab)
    _spawn(lab, pids, "slurmctld", [_exe("slurmctld"), "-D", "-f", str(conf_path(lab))], env(lab))


def stop(lab: LabView) -> None:
    """Cancel every job, wait for the queue to empty, stop the daemons, kill a step daemon left."""
    b = base(lab)
    pids = daemon_pids(lab)
    if not pids:
        return
    ctld = pids.get("slurmctld")
    if ctld and lab.state.ours(ctld):
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            jobs = client(lab, "squeue", "-h", "-o", "%i", timeout=10).stdout.split()
            if jobs:
                client(lab, "scancel", "--full", *jobs, timeout=10)
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline and client(lab, "squeue", "-h", "-o", "%i").stdout.strip():
                    time.sleep(0.2)
    for name in DAEMONS:
        pid = pids.get(name)
        if pid and lab.state.ours(pid):
            send_signal(pid, signal.SIGTERM)
            if not wait_dead([pid], 5):
                send_signal(pid, signal.SIGKILL)
                wait_dead([pid], 5)
    for pid in _stepds(b):
        send_signal(pid, signal.SIGKILL)
    (b / "pids.json").unlink(missing_ok=True)
    lab.say("slurm: jobs cancelled, daemons stopped")


def _stepds(b: Path) -> list[int]:
    """slurmstepd processes of this cluster (their environment or open files name its folder)."""
    found = []
    mark = str(b).encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if not (d / "cmdline").read_bytes().startswith(b"slurmstepd"):
                continue
            if mark in (d / "environ").read_bytes() or any(
                    str(b) in os.readlink(f) for f in (d / "fd").iterdir()):
                found.append(int(d.name))
    return [p for p in found if alive(p)]


def config_table(lab: LabView) -> str:
    """The train host's ``[hosts.slurm]`` in ``lab.toml``."""
    return f"""
[hosts.slurm]
job_name = "{JOB_NAME}"
conf = {toml_str(conf_path(lab))}
interval_s = 1
cancel_timeout_s = 30
"""
