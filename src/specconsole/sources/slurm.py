"""A training job under Slurm (``[hosts.slurm]``): its state from squeue/scontrol/sacct, its
progress from its own log (the job's ``StdOut``), tailed by the training source as any log.

:class:`SlurmJobWatch` takes :class:`~specconsole.sources.job.JobWatch`'s place in the training
source: instead of the job's processes it polls Slurm every ``interval_s`` over the host's
connection (:func:`specconsole.slurm.query.read_job`) and puts the job
(:class:`~specconsole.formats.slurm.SlurmJob`) into the published
:class:`~specconsole.sources.training_progress.TrainingProgress` (``progress.slurm``): the
training pane, ``status`` and ``status --json`` show it from there. :class:`SlurmTrainingSource`
is the training source whose log is the job's ``StdOut`` once scontrol named it (before that,
``[hosts.training] log_path``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from specconsole.base.errors import HostError, HostUnavailable
from specconsole.config import KillConfig, SlurmConfig, TrainingConfig
from specconsole.formats.slurm import SlurmJob
from specconsole.hosts.base import CommandResult
from specconsole.slurm.query import read_job, wanted
from specconsole.sources.job import JobWatch
from specconsole.sources.training import TrainingSource

if TYPE_CHECKING:
    from specconsole.hosts.base import Host
    from specconsole.sources.training_progress import TrainingProgress


class SlurmJobWatch(JobWatch):
    """The job's state as Slurm tells it; ``job`` is the latest :class:`SlurmJob` read."""

    def __init__(self, host: Host, cfg: SlurmConfig, on_stdout: Callable[[str], None] | None = None) -> None:
        super().__init__(host, KillConfig(), cfg.interval_s)
        self.slurm = cfg
        self.job: SlurmJob | None = None
        self.on_stdout = on_stdout
        self.polls = 0

    @property
    def configured(self) -> bool:
        return True

    def apply(self, progress: TrainingProgress) -> TrainingProgress:
        return replace(super().apply(progress), slurm=self.job)

    async def _run(self, argv: list[str]) -> CommandResult:
        return await self.host.run(argv, timeout=max(10.0, self.slurm.interval_s * 2))

    async def run(self, changed: Callable[[], None]) -> None:
        while True:
            await self.host.wait_connected()
            try:
                job = await read_job(self._run, self.slurm, known=self.job)
            except HostUnavailable:
                await asyncio.sleep(self.interval_s)
                continue
            except (HostError, OSError, TimeoutError) as err:
                job = SlurmJob(job_id=str(self.slurm.job_id or ""), name=self.slurm.job_name or "", state="",
                               seen_by="", error=f"cannot read the Slurm job: {err}")
            self.polls += 1
            self._take(job, changed)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poke.wait(), self.interval_s)
            self._poke.clear()

    def _take(self, read: SlurmJob, changed: Callable[[], None]) -> None:
        job = read
        if not read.seen_by and self.job is not None and self.job.seen_by and not read.error.startswith("no Slurm"):
            # Slurm did not answer (the controller down, the command failed): keep the job as last
            # read, with the error; its read_at ages, so the pane says how old it is
            job = replace(self.job, error=read.error)
        if job != self.job:
            self.job = job
            changed()
        if job.stdout and self.on_stdout is not None:
            self.on_stdout(job.stdout)
        if read.error and not read.seen_by:
            self._set("unknown", read.error, changed)
        elif job.active:
            self._set("running", job.summary(), changed)
        elif job.ended:
            self._set("stopped", job.summary(), changed)
        else:
            self._set("unknown", f"{wanted(self.slurm)}: {job.summary()}", changed)


class SlurmTrainingSource(TrainingSource):
    """The training source for a Slurm job: its job watch is Slurm's, its log the job's StdOut."""

    def __init__(self, host: Host, cfg: TrainingConfig, slurm: SlurmConfig, *, interval_s: float = 1.0,
                 **backoff: float) -> None:
        super().__init__(host, cfg, interval_s=interval_s, **backoff)
        self.job = SlurmJobWatch(host, slurm, self.follow)
        self._closing: set[asyncio.Future[None]] = set()

    def follow(self, path: str) -> None:
        """Tail ``path`` from now on (the job's StdOut; a new job's, once it changes)."""
        if path == self.cfg.log_path:
            return
        self.cfg = replace(self.cfg, log_path=path)
        self.tracker.cfg = self.cfg
        self.tracker.set_error(None)
        proc = self._proc
        if proc is not None:  # the running tail ends; _tail_forever starts one on the new path
            self._skipping = True
            closing = asyncio.ensure_future(proc.close())
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)
        self._dirty.set()


def job_age(job: SlurmJob, now: float | None = None) -> float:
    """Seconds since ``job`` was read."""
    return max(0.0, (time.time() if now is None else now) - job.read_at) if job.read_at else 0.0
