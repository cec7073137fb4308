"""Kill a training job that runs under Slurm: ``scancel`` it and follow it to its end state.

The same shape as :mod:`.kill` for a process tree: find the job (squeue, scontrol, sacct, each
command said), show it and ask (the console's dialog with Cancel focused, or the terminal), then
``scancel -v JOBID`` (``-v``: scancel says why it did nothing, e.g. a job already completed, which
it otherwise answers with silence and exit 0), then poll ``squeue -j JOBID -h -t all -o %T``
(and sacct once the job left squeue) until the job's state is an end state, with heartbeats. The
final line names the end state (``CANCELLED``, or ``COMPLETED``/``FAILED`` when the job ended by
itself first) and the last step of the job's log.

Each way it can go wrong is one line: the job already gone, ``scancel`` refused (not the job's
user: exit 210, ``Access/permission denied``), the controller down (``Unable to contact slurm
controller``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from specconsole.config import HostConfig, SlurmConfig
from specconsole.formats.slurm import KNOWN_STATES, SlurmJob, controller_down, slurm_error
from specconsole.hosts import Host
from specconsole.hosts.base import CommandResult
from specconsole.slurm.query import read_job, slurm_argv, wanted
from specconsole.steps import Steps

#: ``confirm(title, body, button)``: the console's dialog (Cancel focused) or the terminal's question
Confirm = Callable[[str, str, str], Awaitable[bool]]

#: How often the state is asked after scancel.
POLL_S = 0.5


@dataclass(frozen=True)
class CancelOutcome:
    ok: bool
    message: str
    state: str = ""  # the job's end state, when it was seen

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1


def describe(job: SlurmJob, host: str) -> list[str]:
    """What will be cancelled: the job, its nodes and log (the confirm dialog's body)."""
    lines = [f"{host}: Slurm {job.summary()}"]
    if job.user:
        lines.append(f"  user {job.user}")
    if job.stdout:
        lines.append(f"  log {job.stdout}")
    return lines


async def cancel_slurm_job(host: Host, cfg: HostConfig, steps: Steps, confirm: Confirm,
                           before: Callable[[], object] | None = None) -> CancelOutcome:
    """Find the configured job, confirm, ``scancel`` it and wait for its end state.

    ``before()`` runs after the operator confirmed and before ``scancel`` (the audit check)."""
    slurm = cfg.slurm
    assert slurm is not None

    async def said(argv: list[str]) -> CommandResult:
        return await steps.run(host, argv)

    steps.begin("find the Slurm job", f"looking for {wanted(slurm)} on {cfg.name}")
    job = await read_job(said, slurm)
    if not job.seen_by:
        msg = f"nothing cancelled on {cfg.name}: {job.error}"
        (steps.failed if controller_down(job.error) else steps.done)(msg)
        return CancelOutcome(not controller_down(job.error), msg)
    if job.ended:
        msg = f"nothing to cancel on {cfg.name}: Slurm job {job.job_id} ({job.name}) already ended: {job.state}"
        steps.done(msg)
        return CancelOutcome(True, msg, job.base_state)
    if job.error:
        steps.warn(job.error)
    lines = describe(job, cfg.name)
    for line in lines:
        steps.info(line)
    if not await confirm(f"Cancel Slurm job {job.job_id} on {cfg.name}?", "\n".join(lines),
                         f"scancel {job.job_id}"):
        steps.done("cancelled by the operator; nothing was changed")
        return CancelOutcome(True, "cancelled by the operator; nothing was changed")
    if before is not None:
        before()
    return await scancel(host, slurm, job, steps, cfg)


async def scancel(host: Host, slurm: SlurmConfig, job: SlurmJob, steps: Steps, cfg: HostConfig) -> CancelOutcome:
    """``scancel`` ``job``, then follow it until Slurm says it ended."""
    steps.begin("scancel", f"scancel Slurm job {job.job_id} ({job.name})")
    res = await steps.run(host, slurm_argv(slurm, "scancel", "-v", job.job_id))
    text = res.stderr + res.stdout
    if res.exit_status != 0 or "Kill job error" in text:
        if "already completing or completed" in text or "Invalid job id" in text:
            steps.info(f"scancel: the job had already ended or left ({slurm_error('scancel', text, res.exit_status)})")
        else:
            if "permission denied" in text.lower():
                owner = job.user or "another user"
                msg = (f"scancel refused on {cfg.name}: Slurm job {job.job_id} belongs to {owner}, "
                       f"not to {cfg.user or 'the login user'} (Access/permission denied); "
                       "connect as the job's user (or a Slurm operator)")
            else:
                why = slurm_error("scancel", text, res.exit_status)
                msg = f"scancel of Slurm job {job.job_id} failed on {cfg.name}: {why}"
            steps.failed(msg)
            return CancelOutcome(False, msg, job.base_state)

    steps.begin("wait for the end state", f"asking Slurm every {POLL_S:g}s until job {job.job_id} has ended")
    steps.info(f"polling `squeue -j {job.job_id} -h -t all -o %T` (then sacct once it left squeue)")
    last = job

    async def ended() -> tuple[bool, str]:
        nonlocal last
        last = await _state(host, slurm, job)
        if last.error and not last.seen_by:  # the controller down: ask again; the job left no trace: done
            return last.error.startswith("no Slurm job found"), last.error
        return last.ended, f"state {last.state or 'unknown'}"

    if not await steps.wait_for(f"Slurm job {job.job_id} to end", ended, timeout=slurm.cancel_timeout_s,
                                every=POLL_S):
        msg = (f"Slurm job {job.job_id} on {cfg.name} has not ended {slurm.cancel_timeout_s:g}s after scancel: "
               f"{last.error or 'state ' + (last.state or 'unknown')}")
        steps.failed(msg)
        return CancelOutcome(False, msg, last.base_state)
    final = await read_job(lambda argv: steps.run(host, argv), slurm, job.job_id)
    if not final.seen_by and not last.seen_by:
        msg = (f"Slurm job {job.job_id} ({job.name}) on {cfg.name} is gone after scancel: neither squeue nor "
               "sacct knows it any more (its end state was not seen)")
        steps.done(msg)
        return CancelOutcome(True, msg)
    state = final.state if final.seen_by else last.state
    steps.info(f"Slurm says job {job.job_id} is {state} ({final.summary() if final.seen_by else last.summary()})")
    step = None
    if cfg.training is not None and (job.stdout or cfg.training.log_path):
        from specconsole.actions.kill.training import final_step

        step = await final_step(host, replace(cfg.training, log_path=job.stdout or cfg.training.log_path), steps)
    at = f" at step {step} (the log's last)" if step is not None else ""
    if state.startswith("CANCELLED"):
        msg = f"training job stopped on {cfg.name}: Slurm job {job.job_id} ({job.name}) {state}{at}"
    else:
        msg = (f"Slurm job {job.job_id} ({job.name}) on {cfg.name} ended {state}{at}: it ended by itself "
               "before scancel took effect")
    base = state.split()[0] if state.split() else ""
    if base not in KNOWN_STATES:
        msg += " (a state this console does not know)"
    steps.done(msg)
    return CancelOutcome(True, msg, base)


async def _state(host: Host, slurm: SlurmConfig, job: SlurmJob) -> SlurmJob:
    """The job's state now: squeue's (quiet: the heartbeats say it), else sacct's."""
    res = await host.run(slurm_argv(slurm, "squeue", "-j", job.job_id, "-h", "-t", "all", "-o", "%T"), timeout=15)
    state = res.stdout.strip().splitlines()[0].strip() if res.exit_status == 0 and res.stdout.strip() else ""
    if state:
        return replace(job, state=state, error="")
    down = controller_down(res.stderr)
    if down:
        return replace(job, seen_by="", error=down)
    return await read_job(lambda argv: host.run(argv, timeout=15), slurm, job.job_id)
