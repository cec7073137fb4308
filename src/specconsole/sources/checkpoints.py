"""A training run's checkpoints: one remote command lists them, a pure parser reads its output.

Layouts understood (``/work/shared/reference/formats.md``):

* SpecForge's newer ``specforge train``: ``{run_id}-step{N}/`` folders, ``{run_id}-latest`` and
  ``{run_id}-best`` symlinks (relative, to the folder's name) and ``{run_id}.best_meta.json``
  (``{"run_id", "step", "score", "metric", ...}``) beside them;
* SpecForge's older scripts: ``epoch_{E}_step_{S}/``;
* Hugging Face Trainer (ModelOpt): ``checkpoint-{N}/``.

Where no ``-latest`` link says otherwise, the highest step of a run is its latest.

The folder: ``[hosts.training] checkpoint_dir`` when set; otherwise the folder of the last
checkpoint the log says it saved (``Saved checkpoint to DIR/epoch_0_step_150``); otherwise the
log file's own folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import posixpath
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from specconsole.base.errors import HostError

if TYPE_CHECKING:
    from specconsole.config import TrainingConfig
    from specconsole.hosts.base import Host

#: Checkpoint folder names, each with a named ``step`` (and ``run`` / ``epoch`` where there is one).
_NAMES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("specforge", re.compile(r"^(?P<run>.+)-step(?P<step>\d+)$")),
    ("epoch_step", re.compile(r"^epoch_(?P<epoch>\d+)_step_(?P<step>\d+)$")),
    ("hf", re.compile(r"^checkpoint-(?P<step>\d+)$")),
)
_LINK = re.compile(r"^(?:(?P<run>.+)-)?(?P<kind>latest|best)$")
_META = re.compile(r"^(?P<run>.+)\.best_meta\.json$")

# One shell program: entries (type, mtime, link target, name), which hold a config.json, the
# best-meta files' text and each checkpoint folder's size. GNU find/du (any Linux host).
_GLOBS = r"\( -name '*-step[0-9]*' -o -name 'epoch_*_step_*' -o -name 'checkpoint-[0-9]*' \)"
LIST_SCRIPT = (
    'cd -- "$1" || exit 3; '
    "find . -mindepth 1 -maxdepth 1 \\( " + _GLOBS + " -o -name '*latest' -o -name '*best' "
    "-o -name '*.best_meta.json' \\) -printf 'E\\t%y\\t%T@\\t%l\\t%f\\n'; "
    "for c in ./*/config.json; do [ -f \"$c\" ] && d=${c%/config.json} && printf 'C\\t%s\\n' \"${d#./}\"; done; "
    "for m in ./*.best_meta.json; do [ -f \"$m\" ] && printf 'M\\t%s\\t%s\\n' \"${m#./}\" "
    "\"$(tr -d '\\n\\r\\t' < \"$m\")\"; done; "
    "find . -mindepth 1 -maxdepth 1 -type d " + _GLOBS + " -exec du -sk -- {} + 2>/dev/null "
    "| sed 's/^/S\\t/'; exit 0"
)


def list_command(directory: str) -> list[str]:
    """The argv run on the host to list ``directory``."""
    return ["sh", "-c", LIST_SCRIPT, "specconsole-checkpoints", directory]


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint folder."""

    name: str
    path: str
    step: int
    layout: str  # "specforge", "epoch_step" or "hf"
    mtime: float
    run_id: str | None = None
    epoch: int | None = None
    size_bytes: int | None = None
    has_config: bool = False  # an HF config.json: a folder SGLang can load as a draft model
    is_latest: bool = False
    is_best: bool = False

    def age(self, now: float) -> float:
        return max(0.0, now - self.mtime)


@dataclass(frozen=True)
class CheckpointListing:
    """What one listing found; ``checkpoints`` newest first."""

    directory: str
    checkpoints: tuple[Checkpoint, ...] = ()
    listed_at: float = 0.0
    error: str | None = None
    #: from ``{run_id}.best_meta.json``: the metric that chose the best checkpoint and its score
    best_metric: str | None = None
    best_score: float | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def latest(self) -> Checkpoint | None:
        return next((c for c in self.checkpoints if c.is_latest), None)

    @property
    def best(self) -> Checkpoint | None:
        return next((c for c in self.checkpoints if c.is_best), None)


def parse_listing(directory: str, stdout: str, listed_at: float | None = None) -> CheckpointListing:
    """Read :data:`LIST_SCRIPT`'s output (pure)."""
    entries: dict[str, tuple[str, float, str]] = {}
    configs: set[str] = set()
    sizes: dict[str, int] = {}
    metas: dict[str, str] = {}
    for line in stdout.splitlines():
        tag, _, rest = line.partition("\t")
        parts = rest.split("\t")
        if tag == "E" and len(parts) >= 4:
            with contextlib.suppress(ValueError):
                entries["\t".join(parts[3:])] = (parts[0], float(parts[1]), parts[2])
        elif tag == "C" and parts[0]:
            configs.add(parts[0])
        elif tag == "S" and len(parts) >= 2:
            with contextlib.suppress(ValueError):
                sizes[posixpath.basename(parts[1].rstrip("/"))] = int(parts[0]) * 1024
        elif tag == "M" and len(parts) >= 2:
            metas[parts[0]] = "\t".join(parts[1:])

    found: dict[str, Checkpoint] = {}
    for name, (kind, stamp, _target) in entries.items():
        if kind != "d":
            continue
        for layout, rx in _NAMES:
            m = rx.match(name)
            if m is None:
                continue
            named = m.groupdict()
            found[name] = Checkpoint(
                name=name, path=posixpath.join(directory, name), step=int(named["step"]), layout=layout,
                mtime=stamp, run_id=named.get("run"),
                epoch=int(named["epoch"]) if named.get("epoch") is not None else None,
                size_bytes=sizes.get(name), has_config=name in configs,
            )
            break

    latest_runs: set[str | None] = set()
    best_runs: set[str | None] = set()
    for name, (kind, _stamp, target) in entries.items():
        link = _LINK.match(name)
        if kind != "l" or link is None:
            continue
        pointed = posixpath.basename(target.rstrip("/"))
        if pointed not in found:
            continue
        if link.group("kind") == "latest":
            found[pointed] = replace(found[pointed], is_latest=True)
            latest_runs.add(found[pointed].run_id)
        else:
            found[pointed] = replace(found[pointed], is_best=True)
            best_runs.add(found[pointed].run_id)

    notes: list[str] = []
    best_metric: str | None = None
    best_score: float | None = None
    for meta_name, text in sorted(metas.items()):
        run = _META.match(meta_name)
        try:
            meta = json.loads(text)
        except ValueError:
            notes.append(f"{meta_name} is not valid JSON; ignored")
            continue
        if not isinstance(meta, dict) or not isinstance(meta.get("step"), int):
            notes.append(f"{meta_name} has no integer step; ignored")
            continue
        run_id = str(meta.get("run_id") or (run.group("run") if run else ""))
        best_metric = str(meta["metric"]) if meta.get("metric") is not None else best_metric
        score = meta.get("score")
        best_score = float(score) if isinstance(score, int | float) else best_score
        name = f"{run_id}-step{meta['step']}"
        if run_id not in best_runs and name in found:
            found[name] = replace(found[name], is_best=True)
            best_runs.add(run_id)

    # no -latest link for a run (older layouts, or no symlink support): its highest step is latest
    groups: dict[tuple[str, str | None], list[Checkpoint]] = {}
    for ckpt in found.values():
        groups.setdefault((ckpt.layout, ckpt.run_id), []).append(ckpt)
    for (_layout, group_run), members in groups.items():
        if group_run in latest_runs and any(c.is_latest for c in members):
            continue
        top = max(members, key=lambda c: (c.epoch or 0, c.step))
        found[top.name] = replace(top, is_latest=True)

    ordered = sorted(found.values(), key=lambda c: (c.mtime, c.step), reverse=True)
    return CheckpointListing(directory=directory, checkpoints=tuple(ordered),
                             listed_at=time.time() if listed_at is None else listed_at,
                             best_metric=best_metric, best_score=best_score, notes=tuple(notes))


async def list_checkpoints(host: Host, directory: str, *, timeout: float = 60.0) -> CheckpointListing:
    """List ``directory`` on ``host`` with one command; trouble is returned as ``error``."""
    try:
        res = await host.run(list_command(directory), timeout=timeout)
    except TimeoutError:
        return CheckpointListing(directory, listed_at=time.time(),
                                 error=f"listing {directory} on {host.name} took over {timeout:g} s")
    if res.exit_status == 3:
        why = (res.stderr.strip().splitlines() or ["cannot enter it"])[-1]
        why = why.split(": ", 2)[-1] if ": " in why else why
        return CheckpointListing(directory, listed_at=time.time(),
                                 error=f"checkpoint folder {directory} on {host.name}: {why} "
                                       f"(set [hosts.training] checkpoint_dir)")
    if not res.ok:
        last = (res.stderr.strip() or res.stdout.strip() or "no output").splitlines()[-1]
        return CheckpointListing(directory, listed_at=time.time(),
                                 error=f"listing {directory} on {host.name} failed (exit {res.exit_status}): {last}")
    return parse_listing(directory, res.stdout)


# A trainer saying where it saved: SpecForge's "Saved checkpoint to /ckpt/dflash/epoch_0_step_150",
# "saved checkpoint run-step250 to /ckpt/runs/run-step250", HF's "Saving model checkpoint to ...".
_SAVED = re.compile(r"\bsav(?:ed|ing)\b.*?\bcheckpoint\b.*?\b(?:to|at|in)\s+['\"]?(?P<path>/[^\s'\"]+)",
                    re.IGNORECASE)


def saved_checkpoint_path(line: str) -> str | None:
    """The checkpoint folder a log line says was saved, or None."""
    if "heckpoint" not in line:
        return None
    m = _SAVED.search(line)
    return m.group("path").rstrip("/") if m else None


def default_directory(cfg: TrainingConfig) -> str:
    """The folder listed when no checkpoint path has been seen: configured, or the log's folder."""
    return cfg.checkpoint_dir or posixpath.dirname(cfg.log_path) or "."


class CheckpointWatch:
    """Lists the run's checkpoints every :attr:`INTERVAL_S` and whenever the log says it saved one."""

    INTERVAL_S = 60.0

    def __init__(self, host: Host, cfg: TrainingConfig, interval_s: float | None = None) -> None:
        self.host = host
        self.cfg = cfg
        self.interval_s = self.INTERVAL_S if interval_s is None else interval_s
        self.directory = default_directory(cfg)
        self.listing: CheckpointListing | None = None
        self._poke = asyncio.Event()

    def saw_line(self, line: str) -> None:
        """A log line: a saved checkpoint means list again now (and, unconfigured, there)."""
        path = saved_checkpoint_path(line)
        if path is None:
            return
        if not self.cfg.checkpoint_dir:
            self.directory = posixpath.dirname(path) or self.directory
        self._poke.set()

    def poke(self) -> None:
        self._poke.set()

    async def run(self, changed: Callable[[], None]) -> None:
        while True:
            await self.host.wait_connected()
            self._poke.clear()
            try:
                self.listing = await list_checkpoints(self.host, self.directory)
            except (HostError, OSError) as err:
                self.listing = CheckpointListing(self.directory, listed_at=time.time(),
                                                 error=f"cannot list checkpoints: {err}")
            changed()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poke.wait(), self.interval_s)

