"""A rollout's journal: what each replica was left in, for the next start of the console.

Every state change of a rollout (:mod:`.run`) rewrites ``<console.state_dir>/rollouts/<id>.json``
(temp file + rename: a console killed with ``-9`` leaves the last whole journal): the request, the
router, the baseline, the console's pid, and per replica its state, the deploy's work folder on the
host (its agent's ``progress.jsonl`` there says how the agent ended, on its own, after the console
was gone), whether it runs the new config, and the verdict. A rollout that ended says so
(``ended``); one whose console's pid is gone without that is *unfinished*: ``deploy --resume``
finishes or undoes it (:mod:`.resume`), ``status`` names it.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specconsole.actions.deploy.plan import DeployRequest
from specconsole.actions.rollout.gate import Figures
from specconsole.base.errors import SpecConsoleError
from specconsole.base.pids import alive
from specconsole.sglang.acceptance import HISTOGRAM_FIELDS, AcceptanceDetail

if TYPE_CHECKING:
    from specconsole.actions.rollout.run import Replica


class JournalError(SpecConsoleError):
    """No journal to resume, or one that cannot be read; the message says which and the fix."""

    exit_code = 2


@dataclass
class Left:
    """One replica as the journal left it."""

    name: str
    state: str = "waiting"
    workdir: str = ""      # the deploy's work folder on the host (its agent's progress.jsonl)
    changed: bool = False  # on the new config (promoted, or held before the verdict)
    verdict: str = ""
    verdict_seen: str = ""


@dataclass
class Journal:
    path: Path
    id: str
    request: dict[str, Any]
    router: str
    gate: str = ""
    operator: str = ""
    pid: int = field(default_factory=os.getpid)
    started: float = field(default_factory=time.time)
    baseline: dict[str, Any] | None = None
    replicas: list[Left] = field(default_factory=list)
    ended: dict[str, Any] | None = None
    resumed_by: list[str] = field(default_factory=list)

    # -- writing ------------------------------------------------------------------------------
    @classmethod
    def begin(cls, state_dir: str | os.PathLike[str], request: DeployRequest, router: str, names: list[str],
              gate: str = "", operator: str = "") -> Journal:
        rid = time.strftime("%Y%m%d-%H%M%S-") + os.urandom(3).hex()
        path = folder(state_dir) / f"{rid}.json"
        j = cls(path, rid, asdict(request), router, gate, operator, replicas=[Left(n) for n in names])
        j.save()
        return j

    def note(self, replicas: list[Replica], baseline: Figures | None = None) -> None:
        """The replicas' current state (and the baseline once measured), written at once."""
        by_name = {r.name: r for r in replicas}
        for left in self.replicas:
            r = by_name.get(left.name)
            if r is None:
                continue
            left.state, left.changed, left.verdict, left.verdict_seen = r.state, r.changed, r.verdict, r.verdict_seen
            left.workdir = r.workdir or left.workdir
        if baseline is not None:
            self.baseline = asdict(baseline)
        self.save()

    def end(self, ok: bool, message: str) -> None:
        self.ended = {"ok": ok, "message": message, "at": time.time()}
        self.save()

    def save(self) -> None:
        """Temp file + rename: a reader (or a console killed meanwhile) sees a whole journal or the one before."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {k: v for k, v in asdict(self).items() if k != "path"}
        tmp = self.path.with_suffix(f".tmp-{os.getpid()}")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    # -- reading ------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: Path) -> Journal:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            replicas = [Left(**r) for r in data.pop("replicas")]
            return cls(path, replicas=replicas, **data)
        except (OSError, ValueError, TypeError, KeyError) as err:
            raise JournalError(f"cannot read the rollout journal {path}: {err}; remove it if it is damaged") from None

    @property
    def running(self) -> bool:
        """Its console still runs (this one included)."""
        return self.ended is None and (self.pid == os.getpid() or alive(self.pid))

    @property
    def unfinished(self) -> bool:
        return self.ended is None and not self.running

    def deploy_request(self) -> DeployRequest:
        return DeployRequest(**self.request)

    def baseline_figures(self) -> Figures | None:
        """The baseline as measured (its acceptance histogram too, rebuilt from the JSON)."""
        if not self.baseline:
            return None
        fields = dict(self.baseline)
        detail = fields.pop("acceptance", None)
        acceptance = None if detail is None else AcceptanceDetail(
            histogram=tuple(detail["histogram"]), requests=detail["requests"], drafts=detail.get("drafts", 0),
            field=detail.get("field", HISTOGRAM_FIELDS[0]))
        return Figures(**fields, acceptance=acceptance)

    def lines(self) -> list[str]:
        """What each replica was left in, one line each, after a head line."""
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        alive = ", still running" if self.running else ", gone" if self.ended is None else ""
        head = (f"rollout {self.id} (started {when} by {self.operator or 'unknown'}, console pid {self.pid}{alive}) "
                f"behind {self.router}")
        if self.ended is not None:
            head += f": ended {'ok' if self.ended.get('ok') else 'halted'}: {self.ended.get('message', '')}"
        out = [head]
        for r in self.replicas:
            where = f"; deploy folder {r.workdir}" if r.workdir else ""
            verdict = f"; {r.verdict}" if r.verdict else ""
            config = "new config" if r.changed else "old config"
            out.append(f"  {r.name}: {r.state} ({config}){verdict}{where}")
        return out


def folder(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir).expanduser() / "rollouts"


def journals(state_dir: str | os.PathLike[str]) -> list[Journal]:
    """Every readable journal under the state dir, oldest first (ids sort by time)."""
    out = []
    for p in sorted(folder(state_dir).glob("*.json")):
        with contextlib.suppress(JournalError):
            out.append(Journal.load(p))
    return out


def unfinished(state_dir: str | os.PathLike[str]) -> list[Journal]:
    return [j for j in journals(state_dir) if j.unfinished]


def find(state_dir: str | os.PathLike[str], rid: str | None) -> Journal:
    """The journal ``rid`` (an id or its prefix), else the newest unfinished one."""
    if rid:
        hits = [j for j in journals(state_dir) if j.id.startswith(rid)]
        if len(hits) != 1:
            raise JournalError(f"--resume {rid}: {'no' if not hits else len(hits)} rollout journal(s) match in "
                               f"{folder(state_dir)}; `specconsole status` names the unfinished ones")
        return hits[0]
    left = unfinished(state_dir)
    if not left:
        raise JournalError(f"no unfinished rollout in {folder(state_dir)}: nothing to resume")
    return left[-1]
