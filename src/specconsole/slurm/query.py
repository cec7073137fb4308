"""Reading one Slurm job over a host's connection: squeue, then scontrol (or sacct once it ended).

Shared by the source (:mod:`specconsole.sources.slurm`) and the kill (:mod:`specconsole.actions.kill.slurm`); the
parsing is :mod:`specconsole.formats.slurm`. Every failure becomes the job's ``error`` line (the
controller down, a refused or odd answer), never an exception, except the connection's own
(:class:`~specconsole.base.errors.HostError`), which the callers handle as for every command.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

from specconsole.config import SlurmConfig
from specconsole.formats.slurm import (
    SACCT_FIELDS,
    SQUEUE_FORMAT,
    SlurmJob,
    apply_scontrol,
    controller_down,
    parse_sacct,
    parse_scontrol,
    parse_squeue,
    slurm_error,
)
from specconsole.hosts.base import CommandResult

#: runs one argv on the host: ``host.run`` (quiet) or ``steps.run`` (said)
Runner = Callable[[list[str]], Awaitable[CommandResult]]

#: sacct's answer where the cluster keeps no accounting database (then ``sacct -c`` reads the
#: job completion log, jobcomp/filetxt)
ACCOUNTING_OFF = "accounting storage is disabled"


def slurm_argv(cfg: SlurmConfig, *argv: str) -> list[str]:
    """``argv`` for the host, with ``SLURM_CONF`` when the config names one."""
    return ["env", f"SLURM_CONF={cfg.conf}", *argv] if cfg.conf else list(argv)


def squeue_argv(cfg: SlurmConfig, job_id: str | None = None) -> list[str]:
    """squeue for the configured job (by id, else by name and user), finished ones too."""
    argv = ["squeue", "-h", "-t", "all", "-O", SQUEUE_FORMAT]
    if job_id is not None:
        argv += ["-j", job_id]
    elif cfg.job_id is not None:
        argv += ["-j", str(cfg.job_id)]
    else:
        argv += ["-n", cfg.job_name or ""]
        if cfg.user:
            argv += ["-u", cfg.user]
    return slurm_argv(cfg, *argv)


def sacct_argv(cfg: SlurmConfig, job_id: str | None, completion_log: bool = False) -> list[str]:
    argv = ["sacct", "-P", "-n", "-X", "-o", ",".join(SACCT_FIELDS)]
    if completion_log:
        argv = ["sacct", "-c", "-P", "-n", "-o", ",".join(SACCT_FIELDS)]
    if job_id is not None:
        argv += ["-j", job_id]
    elif cfg.job_id is not None:
        argv += ["-j", str(cfg.job_id)]
    else:
        argv += ["--name", cfg.job_name or ""]
    argv += ["-u", cfg.user] if cfg.user else ["-a"]
    return slurm_argv(cfg, *argv)


def wanted(cfg: SlurmConfig) -> str:
    """``job 1234`` / ``the job named "drafter-train" of user bob``"""
    if cfg.job_id is not None:
        return f"job {cfg.job_id}"
    who = f" of user {cfg.user}" if cfg.user else ""
    return f'the job named "{cfg.job_name}"{who}'


def _missing(cfg: SlurmConfig, error: str) -> SlurmJob:
    return SlurmJob(job_id=str(cfg.job_id or ""), name=cfg.job_name or "", state="", error=error, seen_by="",
                    read_at=time.time())


def pick(jobs: list[SlurmJob]) -> SlurmJob | None:
    """The job to show among several of one name: the newest active one, else the newest."""
    def newest(js: list[SlurmJob]) -> SlurmJob | None:
        return max(js, key=lambda j: int(j.job_id.split("_")[0].split("+")[0])) if js else None

    return newest([j for j in jobs if j.active]) or newest(jobs)


async def read_job(run: Runner, cfg: SlurmConfig, job_id: str | None = None, known: SlurmJob | None = None) -> SlurmJob:
    """The configured job (or ``job_id``) as squeue, scontrol and sacct tell it. A job not found
    or not readable comes back with ``seen_by == ""`` and an ``error`` line saying why.

    ``known``: the job as read last time; while it is the same job in the same state, its StdOut
    path is kept and scontrol not asked again (a poll is then one squeue)."""
    res = await run(squeue_argv(cfg, job_id))
    problems: list[str] = []
    job: SlurmJob | None = None
    if res.exit_status == 0:
        jobs, problems = parse_squeue(res.stdout)
        job = pick(jobs)
    elif "Invalid job id" not in res.stderr:  # squeue -j of a job it no longer knows says that
        down = controller_down(res.stderr)
        return _missing(cfg, down or slurm_error("squeue", res.stderr, res.exit_status))
    if job is not None and job.active and known is not None and known.stdout and (
            known.job_id, known.state) == (job.job_id, job.state):
        job = replace(job, stdout=known.stdout)
    elif job is not None and job.active:
        sc = await run(slurm_argv(cfg, "scontrol", "show", "job", "-o", job.job_id))
        if sc.exit_status == 0:
            job = apply_scontrol(job, parse_scontrol(sc.stdout.strip().splitlines()[0] if sc.stdout.strip() else ""))
        else:
            problems.append(slurm_error("scontrol", sc.stderr, sc.exit_status))
    if job is None:  # gone from squeue (MinJobAge passed): the accounting knows how it ended
        job, more = await from_sacct(run, cfg, job_id)
        problems += more
    if job is None:
        what = wanted(cfg) if job_id is None else f"job {job_id}"
        return _missing(cfg, "; ".join(problems) or f"no Slurm job found: {what} is neither in squeue nor in sacct")
    return replace(job, error="; ".join(problems), read_at=time.time())


async def from_sacct(run: Runner, cfg: SlurmConfig, job_id: str | None) -> tuple[SlurmJob | None, list[str]]:
    """The job as sacct has it (``sacct -P``; ``sacct -c``, the completion log, where the cluster keeps no
    accounting database), and the lines it could not read."""
    res = await run(sacct_argv(cfg, job_id))
    if res.exit_status != 0 and ACCOUNTING_OFF in (res.stderr + res.stdout):
        res = await run(sacct_argv(cfg, job_id, completion_log=True))
    if res.exit_status != 0:
        return None, [slurm_error("sacct", res.stderr or res.stdout, res.exit_status)]
    jobs, problems = parse_sacct(res.stdout)
    return pick(jobs), problems
