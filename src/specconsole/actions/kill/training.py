"""Kill the training job: find the whole torchrun tree, SIGTERM, wait, SIGKILL, verify.

The order follows how torchrun behaves (see shared reference "torchrun process tree"): the
launcher forwards SIGTERM to each worker's process group and waits, so we SIGTERM the launcher
only, wait ``grace_s`` while reporting how many processes are left, then SIGKILL each surviving
worker's process group and the launcher, and finally check that no process of the job remains
and that the GPU memory the job held was released (per GPU, before and after).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specconsole.config import HostConfig, KillConfig, TrainingConfig
from specconsole.formats.nvidia_smi import GpuProcess, GpuReading, parse_app_lines, parse_gpu_lines
from specconsole.hosts import Host
from specconsole.process_tree import KillError, Proc, descendants, locate
from specconsole.steps import Steps, shorten

GPU_MEM_FIELDS = ("index", "uuid", "memory.used")
GPU_MEM_ARGV = ["nvidia-smi", f"--query-gpu={','.join(GPU_MEM_FIELDS)}", "--format=csv,noheader,nounits"]
GPU_APPS_ARGV = ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory,gpu_uuid",
                 "--format=csv,noheader,nounits"]


@dataclass
class JobPlan:
    """What will be killed: shown in the confirm dialog and by ``kill-training``."""

    host: str
    found_by: str
    launchers: list[Proc] = field(default_factory=list)
    workers: list[Proc] = field(default_factory=list)
    gpu_procs: dict[int, list[GpuProcess]] = field(default_factory=dict)
    gpus_before: list[GpuReading] = field(default_factory=list)
    step: int | None = None
    note: str = ""
    #: why a process named by the pid file was not taken for the job (a reused pid), if so
    refused: str = ""
    training: TrainingConfig | None = None  # where the log is, to read the final step

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in (*self.launchers, *self.workers)]

    @property
    def empty(self) -> bool:
        return not self.launchers

    def describe(self) -> list[str]:
        """Human lines: pids, commands, GPUs and memory they hold, the current step."""
        if self.empty and self.refused:
            return [f"refusing to kill on {self.host}: {self.refused}"]
        if self.empty:
            return [f"nothing to kill on {self.host}: {self.note or 'no process of the job is running'}"]
        lines = [f"{self.host}: training job found by {self.found_by}"
                 + (f", at step {self.step}" if self.step is not None else "")]
        for role, procs in (("launcher", self.launchers), ("worker", self.workers)):
            for p in procs:
                gpus = self.gpu_procs.get(p.pid, [])
                held = ", ".join(f"GPU {g.gpu_index if g.gpu_index is not None else '?'}: "
                                 f"{g.used_memory_mib:.0f} MiB" if g.used_memory_mib is not None else "n/a"
                                 for g in gpus)
                lines.append(f"  {role:8} pid {p.pid} (pgid {p.pgid})  {shorten(p.args, 70)}"
                             + (f"  [{held}]" if held else ""))
        total = sum(g.used_memory_mib or 0 for gs in self.gpu_procs.values() for g in gs)
        if total:
            lines.append(f"  GPU memory held by the job: {total:.0f} MiB on "
                         f"{len({g.gpu_index for gs in self.gpu_procs.values() for g in gs})} GPU(s)")
        return lines


@dataclass
class KillOutcome:
    ok: bool
    message: str
    survivors: list[int] = field(default_factory=list)
    memory: list[tuple[int, float | None, float | None]] = field(default_factory=list)  # gpu, before, after
    stopped: bool = False  # the job's processes are gone (the console shows training as stopped)
    step: int | None = None  # the last step in the training log after the processes ended

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1



async def gpu_state(host: Host, steps: Steps) -> tuple[list[GpuReading], list[GpuProcess]]:
    """GPU memory per GPU and the compute processes (empty lists when there is no nvidia-smi)."""
    mem = await steps.run(host, GPU_MEM_ARGV, summary=lambda r: f"{len(r.stdout.splitlines())} GPU(s)")
    if not mem.ok:
        steps.warn("cannot read GPU memory (nvidia-smi failed); GPU release will not be verified")
        return [], []
    gpus, _ = parse_gpu_lines(mem.stdout.splitlines(), GPU_MEM_FIELDS)
    apps = await steps.run(host, GPU_APPS_ARGV, summary=lambda r: f"{len(r.stdout.splitlines())} compute process(es)")
    procs, _ = parse_app_lines(apps.stdout.splitlines(), uuid_to_index={g.uuid: g.index for g in gpus if g.uuid})
    return gpus, procs


async def find_job(host: Host, cfg: HostConfig, steps: Steps, current_step: int | None = None) -> JobPlan:
    """Locate the launcher(s) and every worker; read what they hold on the GPUs."""
    if cfg.training is None:
        raise KillError(f"{cfg.name}: no [hosts.training] configured; nothing to kill here")
    kill: KillConfig = cfg.training.kill
    steps.begin("find the job")
    procs, launchers, found_by, note, refused = await locate(host, kill, steps)
    first, key = _first_method(kill)
    if launchers and found_by != first:
        # the first method set is THE method of a kill: a later one finding processes is a
        # reason to stop and say so, never to kill what the configured method did not name
        found_key = "systemd_unit" if found_by.startswith("systemd unit") else "pattern"
        refused = (f"{note}, but {found_by} matches pid(s) {', '.join(map(str, launchers))}; not killing them: "
                   f"{key} comes first in training.kill (fix: correct training.kill.{key}, or remove it to kill "
                   f"by {found_key})")
        launchers = []
    plan = JobPlan(host=host.name, found_by=found_by, step=current_step, note=note, refused=refused,
                   training=cfg.training)
    plan.launchers = [procs[p] for p in launchers if p in procs and not procs[p].zombie]
    plan.workers = [p for p in descendants(procs, [x.pid for x in plan.launchers]) if not p.zombie]
    if plan.empty:
        (steps.warn if plan.refused else steps.info)(plan.describe()[0])
        return plan
    plan.gpus_before, gpu_procs = await gpu_state(host, steps)
    job = set(plan.pids)
    for g in gpu_procs:
        if g.pid in job:
            plan.gpu_procs.setdefault(g.pid, []).append(g)
    steps.info(f"{len(plan.launchers)} launcher(s), {len(plan.workers)} worker process(es), "
               f"{sum(len(v) for v in plan.gpu_procs.values())} on GPUs")
    return plan


def _first_method(kill: KillConfig) -> tuple[str, str]:
    """The kill's method, as :func:`locate` names what it found by, and its config key."""
    if kill.pid_file:
        return f"pid file {kill.pid_file}", "pid_file"
    if kill.systemd_unit:
        return f"systemd unit {kill.systemd_unit}", "systemd_unit"
    return f"pattern {kill.pattern!r}", "pattern"



async def kill_job(host: Host, plan: JobPlan, steps: Steps, grace_s: float = 30.0) -> KillOutcome:
    """SIGTERM the launcher, wait, SIGKILL survivors' groups, verify processes and GPU memory."""
    if plan.empty:
        if plan.refused:
            steps.failed(plan.describe()[0])
            return KillOutcome(False, plan.describe()[0])
        steps.done(plan.describe()[0])
        return KillOutcome(True, plan.describe()[0])
    job = plan.pids

    steps.begin("SIGTERM the launcher", f"SIGTERM launcher pid(s) {', '.join(str(p.pid) for p in plan.launchers)}")
    res = await steps.run(host, ["kill", "-TERM", *[str(p.pid) for p in plan.launchers]])
    if not res.ok and "not permitted" in (res.stderr + res.stdout).lower():
        msg = (f"permission denied sending SIGTERM to pid(s) {', '.join(map(str, job))} on {host.name}; "
               f"connect as the job's user (or root)")
        steps.failed(msg)
        return KillOutcome(False, msg, survivors=job)

    steps.begin("wait for the job to exit", f"waiting up to {grace_s:g}s for {len(job)} process(es) to exit")
    left = list(job)

    async def gone() -> tuple[bool, str]:
        nonlocal left
        left = await alive_pids(host, job)
        return not left, f"{len(left)} of {len(job)} left: {', '.join(map(str, left[:8]))}"

    if await steps.wait_for("the job to exit after SIGTERM", gone, timeout=grace_s):
        steps.info(f"all {len(job)} process(es) exited after SIGTERM in {steps.step_took():.1f}s")
    else:
        steps.begin("SIGKILL survivors", f"{len(left)} process(es) survived SIGTERM for {grace_s:g}s: "
                    f"{', '.join(map(str, left))}; escalating to SIGKILL")
        by_pid = {p.pid: p for p in (*plan.workers, *plan.launchers)}
        # workers run in their own process groups; the launcher's group may hold its shell
        launcher_groups = {lp.pgid for lp in plan.launchers}
        groups = sorted({by_pid[p].pgid for p in left if p in by_pid} - launcher_groups)
        worker_groups = [f"-{g}" for g in groups if g > 1]
        if worker_groups:
            await steps.run(host, ["kill", "-KILL", "--", *worker_groups])
        await steps.run(host, ["kill", "-KILL", *map(str, left)])
        await steps.wait_for("the job to exit after SIGKILL", gone, timeout=10)

    steps.begin("verify")
    survivors = await alive_pids(host, job, steps)
    if survivors:
        pids = ", ".join(map(str, survivors))
        msg = f"{len(survivors)} process(es) of the job survived SIGKILL on {host.name}: pids {pids}"
        steps.failed(msg)
        return KillOutcome(False, msg, survivors=survivors)
    steps.info(f"no process of the job remains ({len(job)} stopped)")
    memory: list[tuple[int, float | None, float | None]] = []
    if plan.gpus_before:
        async def released() -> tuple[bool, str]:
            _, procs = await gpu_state(host, _quiet(steps))
            still = sorted({g.pid for g in procs} & set(job))
            return not still, f"GPU processes of the job still listed: {still}"

        if not await steps.wait_for("the GPUs to release the job's memory", released, timeout=15):
            steps.warn("nvidia-smi still lists processes of the job after they exited")
        after, _ = await gpu_state(host, steps)
        after_by = {g.index: g.memory_used_mib for g in after}
        for g in plan.gpus_before:
            memory.append((g.index, g.memory_used_mib, after_by.get(g.index)))
            held = sum(p.used_memory_mib or 0 for ps in plan.gpu_procs.values() for p in ps if p.gpu_index == g.index)
            if held:
                steps.info(f"GPU {g.index}: {_mib(g.memory_used_mib)} -> {_mib(after_by.get(g.index))} "
                           f"(the job held {held:.0f} MiB)")
    step = await final_step(host, plan.training, steps) if plan.training else None
    msg = f"training job stopped on {host.name}: {len(job)} process(es) ended"
    if step is not None:
        msg += f" at step {step} (the log's last)"
    elif plan.step is not None:
        msg += f" at step {plan.step} or later (the log could not be read)"
    steps.done(msg)
    return KillOutcome(True, msg, memory=memory, stopped=True, step=step)


#: Lines read back from the end of the training log for its final step.
FINAL_LINES = 200


async def final_step(host: Host, training: TrainingConfig, steps: Steps) -> int | None:
    """The last step the training log records, read after the processes ended (the trainer's
    own ``Received SIGTERM at step N`` line, or its last record)."""
    from specconsole.formats.training_log import LineParser

    steps.begin("read the final step", f"reading the last step from {training.log_path}")
    res = await steps.run(host, ["tail", "-n", str(FINAL_LINES), "--", training.log_path],
                          summary=lambda r: f"{len(r.stdout.splitlines())} line(s)")
    if not res.ok:
        steps.warn(f"cannot read {training.log_path}; the final step is unknown")
        return None
    parser = LineParser(training.format, training.patterns)
    for line in reversed(res.stdout.splitlines()):
        record = parser.parse(line).record
        if record is not None and record.step is not None:
            steps.info(f"the log ends at step {record.step}: {shorten(line.strip(), 80)}")
            return record.step
    steps.warn(f"no step in the last {FINAL_LINES} lines of {training.log_path}")
    return None


async def alive_pids(host: Host, pids: list[int], steps: Steps | None = None) -> list[int]:
    """Which of ``pids`` still exist (zombies count as gone)."""
    argv = ["ps", "-o", "pid=,stat=", "-p", ",".join(map(str, pids))]
    res = await (steps.run(host, argv, summary=lambda r: f"{len(r.stdout.splitlines())} left")
                 if steps else host.run(argv))
    alive = []
    for line in res.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].isdigit() and not parts[1].startswith("Z"):
            alive.append(int(parts[0]))
    return alive


def _quiet(steps: Steps) -> Steps:
    """A reporter that records nothing (for repeated polls inside a heartbeat wait)."""
    return Steps(steps.action, lambda _e: None, steps.host)


def _mib(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f} MiB"
