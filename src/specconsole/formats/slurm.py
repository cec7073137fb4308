"""Slurm's text output: ``squeue -O``, ``scontrol show job -o``, ``sacct -P`` (pure parsers).

The console reads a Slurm job over the host's SSH connection with the text formats that hold
from Slurm 21.08 to 25.x (``squeue --json`` exists from 21.08 on, but 22.05's ignores ``-j`` and
``-t``, so it is not used):

* ``squeue -h -O 'JobID:|,State:|,...,Name:'``: one line per job, fields ended by ``|``; the job's
  name, the one field that may hold ``|`` or spaces, comes last and takes the rest of the line
  (:data:`SQUEUE_FIELDS`, :func:`parse_squeue`).
* ``scontrol show job -o ID``: one line of ``Key=Value`` pairs; values may hold spaces (a job name,
  a path), so a free-text value ends only before a *known* key (:func:`parse_scontrol`).
* ``sacct -P -n -o JobID,State,Elapsed,ExitCode,NodeList,JobName``: finished jobs (``-c``, the
  job completion log, where accounting storage is off), name last again (:func:`parse_sacct`).

Every problem is a one-line message for the pane (:func:`slurm_error`, :class:`SlurmParseError`),
never an exception past the caller.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from specconsole.base.values import printable

#: squeue -O fields, in order; the name (free text) is last and takes the rest of the line.
SQUEUE_FIELDS = ("JobID", "State", "TimeUsed", "TimeLimit", "NumNodes", "NodeList", "UserName", "Name")
SQUEUE_FORMAT = ",".join(f"{f}:|" for f in SQUEUE_FIELDS[:-1]) + f",{SQUEUE_FIELDS[-1]}:"
#: sacct -o fields (sacct -P separates them with ``|``); the name last, as above.
SACCT_FIELDS = ("JobID", "State", "Elapsed", "ExitCode", "NodeList", "JobName")

#: Slurm's job states (squeue's long names), and which of them mean the job has ended.
ACTIVE_STATES = frozenset({
    "PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "RESIZING", "REQUEUED",
    "REQUEUE_FED", "REQUEUE_HOLD", "SIGNALING", "STAGE_OUT", "STOPPED", "SPECIAL_EXIT", "RESV_DEL_HOLD",
})
ENDED_STATES = frozenset({
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
    "PREEMPTED", "REVOKED", "TIMEOUT",
})
KNOWN_STATES = ACTIVE_STATES | ENDED_STATES

#: ``scontrol show job -o`` keys (21.08..25.x); a free-text value ends only before one of these.
_SCONTROL_KEY_TEXT = """
JobId ArrayJobId ArrayTaskId ArrayTaskThrottle HetJobId HetJobOffset HetJobIdSet JobName UserId GroupId
MCS_label Priority Nice Account QOS JobState Reason Dependency Requeue Restarts BatchFlag Reboot ExitCode
DerivedExitCode RunTime TimeLimit TimeMin SubmitTime EligibleTime AccrueTime StartTime EndTime Deadline
PreemptEligibleTime PreemptTime SuspendTime SecsPreSuspend LastSchedEval Scheduler Partition AllocNode:Sid
ReqNodeList ExcNodeList NodeList SchedNodeList BatchHost NumNodes NumCPUs NumTasks CPUs/Task ReqB:S:C:T TRES
AllocTRES ReqTRES Socks/Node NtasksPerN:B:S:C CoreSpec MinCPUsNode MinMemoryNode MinMemoryCPU MinTmpDiskNode
Features ClusterFeatures DelayBoot OverSubscribe Contiguous Licenses LicensesAlloc Network Command WorkDir
Comment StdErr StdIn StdOut Power TresPerNode TresPerJob TresPerTask TresBind TresFreq MemPerTres CpusPerTres
NtasksPerTRES MailUser MailType Reservation AdminComment SystemComment Container ContainerID CPU_Bind Prolog
Epilog KillOInInvalidDependent ResvPorts StepMgrEnabled SegmentSize Profile JobRequeue
"""
SCONTROL_KEYS = frozenset(_SCONTROL_KEY_TEXT.split())
#: keys whose values are free text (may hold spaces and ``Key=``-looking words)
_FREE_TEXT = frozenset({"JobName", "Command", "WorkDir", "Comment", "StdErr", "StdIn", "StdOut",
                        "AdminComment", "SystemComment", "Reason", "Dependency", "MailUser", "Container"})
_KEY = re.compile(r"(?:^| )([A-Za-z][A-Za-z0-9_/:]*)=")

#: how Slurm's clients say the controller cannot be reached (squeue, scontrol, scancel, sbatch)
_CONTROLLER_DOWN = re.compile(r"Unable to contact slurm controller(?: \((?P<why>[^)]*)\))?", re.IGNORECASE)
_ERROR_LINE = re.compile(r"^(?:\S+: )?(?:error: |fatal: )?(?P<msg>.*(?:error|denied|invalid|unable|fatal).*)$",
                         re.IGNORECASE)


class SlurmParseError(ValueError):
    """A line Slurm's tool printed that is not what the format says; the message is one line."""


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """One Slurm job as the console shows it (squeue, completed by scontrol or sacct)."""

    job_id: str
    name: str
    state: str
    elapsed: str = ""
    time_limit: str = ""
    nodes: str = ""  # the node list, e.g. "node2,vm" (empty while pending)
    num_nodes: int | None = None
    user: str = ""
    stdout: str = ""  # the expanded StdOut path (scontrol), empty when not known
    #: the latest problem reading the job (controller down, an odd line); empty when none
    error: str = ""
    #: where the state came from: "squeue", "sacct" (the job has left squeue) or "" (not found)
    seen_by: str = "squeue"
    #: when it was read (time.time()); the pane marks a job read long ago as stale
    read_at: float = 0.0

    @property
    def known_state(self) -> bool:
        return self.base_state in KNOWN_STATES

    @property
    def base_state(self) -> str:
        """``CANCELLED`` for ``CANCELLED by 0`` (sacct's form)."""
        return self.state.split()[0] if self.state else ""

    @property
    def active(self) -> bool:
        return self.base_state in ACTIVE_STATES

    @property
    def ended(self) -> bool:
        return self.base_state in ENDED_STATES

    def summary(self) -> str:
        """``job 12 drafter-train RUNNING on node2,vm (2 nodes), 0:42 of 1:00:00``"""
        where = f" on {self.nodes}" if self.nodes else ""
        if self.num_nodes is not None and where:
            where += f" ({self.num_nodes} node{'s' if self.num_nodes != 1 else ''})"
        limit = f" of {self.time_limit}" if self.time_limit else ""
        took = f", {self.elapsed}{limit}" if self.elapsed else ""
        state = self.state if self.known_state else f"{self.state} (a state this console does not know)"
        return f"job {self.job_id} {printable(self.name)} {state}{where}{took}"


def parse_squeue(text: str) -> tuple[list[SlurmJob], list[str]]:
    """``squeue -h -O SQUEUE_FORMAT`` output: the jobs, and one message per line that is not one."""
    jobs: list[SlurmJob] = []
    problems: list[str] = []
    for raw in text.split("\n"):  # not splitlines: a name may hold \x0c or U+2028
        if not raw.strip():
            continue
        raw = raw.removesuffix("\r")
        try:
            jobs.append(parse_squeue_line(raw))
        except SlurmParseError as err:
            problems.append(str(err))
    return jobs, problems


def parse_squeue_line(line: str) -> SlurmJob:
    parts = line.rstrip("\n").split("|", len(SQUEUE_FIELDS) - 1)
    if len(parts) < len(SQUEUE_FIELDS):
        raise SlurmParseError(f"squeue line cut short ({len(parts)} of {len(SQUEUE_FIELDS)} fields): "
                              f"'{printable(line[:120])}'")
    job_id, state, used, limit, num, nodes, user = (p.strip() for p in parts[:-1])
    name = parts[-1].rstrip()
    if not re.fullmatch(r"\d+(?:_\d+|_\[[^\]]*\])?(?:\+\d+)?", job_id):
        raise SlurmParseError(f"squeue line without a job id: '{printable(line[:120])}'")
    return SlurmJob(job_id=job_id, name=name, state=state or "UNKNOWN", elapsed=used, time_limit=limit,
                    nodes=nodes, num_nodes=int(num) if num.isdigit() else None, user=user)


def parse_scontrol(line: str) -> dict[str, str]:
    """``scontrol show job -o`` for one job: its ``Key=Value`` pairs (values stripped)."""
    text = line.strip()
    if not text:
        return {}
    found = [(m.start(1), m.end(), m.group(1)) for m in _KEY.finditer(text)]
    cuts: list[tuple[int, int, str]] = []
    for start, value_at, key in found:
        if cuts and cuts[-1][2] in _FREE_TEXT and key not in SCONTROL_KEYS:
            continue  # a word inside a name or path that looks like a key
        cuts.append((start, value_at, key))
    fields: dict[str, str] = {}
    for i, (_start, value_at, key) in enumerate(cuts):
        end = cuts[i + 1][0] - 1 if i + 1 < len(cuts) else len(text)
        fields[key] = text[value_at:end].strip() if key not in _FREE_TEXT else text[value_at:end].rstrip(" ")
    return fields


def apply_scontrol(job: SlurmJob, fields: dict[str, str]) -> SlurmJob:
    """``job`` with what ``scontrol show job -o`` adds: the expanded StdOut path, the nodes."""
    stdout = fields.get("StdOut", "")
    nodes = fields.get("NodeList", "")
    return replace(job, stdout=stdout if stdout and stdout != "(null)" else job.stdout,
                   nodes=nodes if nodes and nodes != "(null)" else job.nodes)


def parse_sacct(text: str) -> tuple[list[SlurmJob], list[str]]:
    """``sacct -P -n -o SACCT_FIELDS``: the jobs (steps such as ``12.batch`` left out)."""
    jobs: list[SlurmJob] = []
    problems: list[str] = []
    for raw in text.split("\n"):  # not splitlines: a name may hold \x0c or U+2028
        if not raw.strip():
            continue
        parts = raw.split("|", len(SACCT_FIELDS) - 1)
        if len(parts) < len(SACCT_FIELDS):
            problems.append(f"sacct line cut short ({len(parts)} of {len(SACCT_FIELDS)} fields): "
                            f"'{printable(raw[:120])}'")
            continue
        job_id, state, elapsed, _exit, nodes, name = parts
        if "." in job_id:
            continue
        jobs.append(SlurmJob(job_id=job_id.strip(), name=name.rstrip(), state=state.strip() or "UNKNOWN",
                             elapsed=elapsed.strip(), nodes="" if nodes == "(null)" else nodes.strip(),
                             seen_by="sacct"))
    return jobs, problems


def controller_down(text: str) -> str | None:
    """The controller-down line in a client's stderr, as one message; None if it is not there."""
    m = _CONTROLLER_DOWN.search(text)
    if m is None:
        return None
    why = f" ({m.group('why')})" if m.group("why") else ""
    return f"slurmctld not reachable: Unable to contact slurm controller{why}"


def slurm_error(tool: str, stderr: str, exit_status: int | None) -> str:
    """One line for a Slurm client that failed: the controller down, else its last error line."""
    down = controller_down(stderr)
    if down is not None:
        return down
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        m = _ERROR_LINE.match(ln)
        if m:
            return f"{tool}: {printable(m.group('msg'))[:200]}"
    last = printable(lines[-1])[:200] if lines else "no output"
    return f"{tool} exited {exit_status if exit_status is not None else '(unknown)'}: {last}"


def slurm_lines(job: SlurmJob, now: float) -> list[str]:
    """Plain lines for a pane or ``status``: the job, its log, what went wrong reading it."""
    if not job.seen_by:
        return [f"slurm: {printable(job.error) or 'job not found yet'}"]
    lines = [f"slurm: {job.summary()}" + (" (from sacct: it left squeue)" if job.seen_by == "sacct" else "")]
    if job.stdout:
        lines.append(f"slurm log: {printable(job.stdout)}")
    if job.error:  # the job above is as last read: its age first (a narrow pane cuts the end)
        age = f"job as read {max(0.0, now - job.read_at):.0f}s ago; " if job.read_at else ""
        lines.append(f"slurm: {age}{printable(job.error)}")
    return lines
