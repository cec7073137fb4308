"""Is the training job running? Its processes, found as ``kill-training`` finds them.

A log alone cannot tell a stopped job from a slow one (the last tokens/s stays on screen until
the stall warning, minutes later). :class:`JobWatch` checks the processes instead, cheaply: once
the launcher is located (pid file, unit or pattern, as configured), one long-lived command on
the host runs ``ps -o pid=,stat= -p PIDS`` every interval and prints the live pids only when they
change (:data:`WATCH_PIDS`): a steady job costs the console no command and no packet a second.
While nothing runs it locates again every few seconds, or at once when new log lines arrive
(a restarted job).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Literal

from specconsole.base.errors import HostError, SpecConsoleError
from specconsole.steps import Steps

if TYPE_CHECKING:
    from specconsole.config import KillConfig
    from specconsole.hosts.base import Host
    from specconsole.sources.training_progress import TrainingProgress

JobState = Literal["running", "stopped", "unknown"]

#: ``sh -c WATCH_PIDS watch-pids INTERVAL PID...``: ``alive: PIDS`` (zombies count as gone) at
#: start and whenever the set changes; exits once none is left.
WATCH_PIDS = r"""interval=$1; shift; pids=$(echo "$@" | tr ' ' ,); last=x
while :; do
  now=$(ps -o pid=,stat= -p "$pids" 2>/dev/null | awk '$2 !~ /^Z/ {printf "%s ", $1}')
  if [ "$now" != "$last" ]; then echo "alive: $now"; last=$now; fi
  [ -z "$now" ] && exit 0
  sleep "$interval"
done"""


class JobWatch:
    """Tracks whether the job's processes exist; ``state`` is None until the first check."""

    #: While nothing runs, look for a (re)started job this often (and whenever poked).
    RELOCATE_S = 5.0

    def __init__(self, host: Host, kill: KillConfig, interval_s: float = 1.0) -> None:
        self.host = host
        self.kill = kill
        self.interval_s = interval_s
        self.state: JobState | None = None
        self.detail = ""
        self.pids: list[int] = []
        self._poke = asyncio.Event()

    @property
    def configured(self) -> bool:
        return bool(self.kill.pid_file or self.kill.systemd_unit or self.kill.pattern)

    def poke(self) -> None:
        """Check now (new log lines, or a kill just ended)."""
        self._poke.set()

    def apply(self, progress: TrainingProgress) -> TrainingProgress:
        """``progress`` with the job's state; a stopped job has no rate, ETA or stall."""
        if self.state != "stopped":
            return replace(progress, state=self.state)
        at = f" at step {progress.step}" if progress.step is not None else ""
        return replace(progress, state="stopped", tokens_per_s=None, steps_per_s=None, eta_s=None,
                       eta_text=f"stopped{at}", stalled=False)

    async def run(self, changed: Callable[[], None]) -> None:
        """Check until cancelled; ``changed()`` after every check that changed the state."""
        if not self.configured:
            self._set("unknown", "no way to find the job: set training.kill.pid_file, systemd_unit or pattern",
                      changed)
            await asyncio.Event().wait()  # nothing to watch; the source's other tasks go on
        steps = Steps("training-watch", lambda _e: None, host=self.host.name)
        since_locate = self.RELOCATE_S
        while True:
            await self.host.wait_connected()
            try:
                if self.pids:
                    if await self._follow(self.pids, changed):
                        self._set("stopped", f"no process of the job is left (pid(s) "
                                             f"{', '.join(map(str, self.pids))} ended)", changed)
                        self.pids = []
                        since_locate = 0.0
                elif since_locate >= self.RELOCATE_S or self._poke.is_set() or self.state is None:
                    self._poke.clear()
                    since_locate = 0.0
                    self.pids = await self._locate(steps)
                    if self.pids:
                        self._set("running", f"pid(s) {', '.join(map(str, self.pids))}", changed)
                    elif self.state != "stopped":
                        self._set("stopped", self.detail or "no process of the job is running", changed)
            except (HostError, OSError, TimeoutError) as err:
                self._set("unknown", f"cannot check the job's processes: {err}", changed)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poke.wait(), self.interval_s)
            since_locate += self.interval_s

    async def _locate(self, steps: Steps) -> list[int]:
        from specconsole.process_tree import descendants, locate

        try:
            procs, launchers, _found_by, note, refused = await locate(self.host, self.kill, steps, together=True)
        except SpecConsoleError as err:
            self.detail = str(err)
            return []
        self.detail = refused or note
        workers = [p.pid for p in descendants(procs, launchers) if not p.zombie]
        return [*launchers, *workers]

    async def _follow(self, pids: list[int], changed: Callable[[], None]) -> bool:
        """Follow ``pids`` through :data:`WATCH_PIDS` until none is left (True) or the watch
        ends early, e.g. the connection dropped (False: the caller's loop checks again)."""
        argv = ["sh", "-c", WATCH_PIDS, "specconsole-watch-pids", f"{self.interval_s:g}", *map(str, pids)]
        async with self.host.stream(argv) as proc:
            async for line in proc.lines():
                if not line.startswith("alive:"):
                    continue
                left = [int(p) for p in line.removeprefix("alive:").split() if p.isdigit()]
                if not left:
                    return True
                self._set("running", f"pid(s) {', '.join(map(str, left))}", changed)
        return False

    def _set(self, state: JobState, detail: str, changed: Callable[[], None]) -> None:
        if (state, detail) != (self.state, self.detail):
            self.state, self.detail = state, detail
            changed()
