"""The results folder: stored runs, listing, lookup and import.

One run is one JSON file ``<results>/<id>.json``, written atomically (a temp file in the same
folder, fsync, rename), so a reader never sees half a file. Results of other tools come in
through the same schema (:meth:`ResultStore.import_file`); the schema is documented in
``docs/eval-results-schema.md``. Baselines (published numbers of a reference drafter) are stored
runs like any other, with a label and ``source.kind = "published"``.

A file that is not this schema or version is refused with one line naming the file and the fix
(:class:`ResultFileError`).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from specconsole.base import paths
from specconsole.eval.result_file import load_run_file, run_from_json
from specconsole.eval.schema import (
    DOC,
    METRICS,
    RESULTS_ENV,
    SCHEMA,
    SCHEMA_PREFIX,
    Deployment,
    EvalRun,
    ResultFileError,
    RunNotFound,
    TaskResult,
    make_run_id,
    slug,
    utc_now_iso,
)

__all__ = [
    "DOC", "METRICS", "RESULTS_ENV", "SCHEMA", "SCHEMA_PREFIX", "Deployment", "EvalRun", "ResultFileError",
    "ResultStore", "RunNotFound", "TaskResult", "default_results_dir", "load_run_file", "make_run_id",
    "run_from_json", "slug", "utc_now_iso", "write_json_atomic",
]


def default_results_dir() -> Path:
    """$SPECCONSOLE_EVAL_RESULTS, else ``eval/`` in the state folder ($XDG_STATE_HOME/specconsole/eval)."""
    env = os.environ.get(RESULTS_ENV)
    if env:
        return Path(env).expanduser()
    return paths.state_dir() / "eval"


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` via a temp file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, ensure_ascii=False, allow_nan=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# ----------------------------------------------------------------------------------- store


class ResultStore:
    """A results folder: one ``<id>.json`` per run."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root).expanduser() if root else default_results_dir()
        #: (file, one-line problem) of files that could not be read by the last :meth:`runs`.
        self.problems: list[tuple[str, str]] = []

    def path_for(self, run_id: str) -> Path:
        return self.root / f"{run_id}.json"

    def unique_id(self, run_id: str) -> str:
        candidate, n = run_id, 2
        while self.path_for(candidate).exists():
            candidate = f"{run_id}-{n}"
            n += 1
        return candidate

    def save(self, run: EvalRun, *, overwrite: bool = False) -> EvalRun:
        """Write ``run`` atomically; a taken id gets a ``-2`` suffix unless ``overwrite``."""
        run_id = run.id if overwrite else self.unique_id(run.id)
        run = replace(run, id=run_id)
        path = self.path_for(run_id)
        write_json_atomic(path, run.to_json())
        return replace(run, path=str(path))

    def runs(self) -> list[EvalRun]:
        """Every readable run, oldest first; unreadable files land in :attr:`problems`."""
        self.problems = []
        out: list[EvalRun] = []
        if not self.root.is_dir():
            return out
        loaded: list[EvalRun] = []
        for p in sorted(self.root.glob("*.json")):
            try:
                loaded.append(load_run_file(p))
            except ResultFileError as err:
                self.problems.append((str(p), str(err)))
        # a file named after its id wins a duplicate id; the other is reported
        loaded.sort(key=lambda r: Path(r.path or "").stem != r.id)
        seen: dict[str, str] = {}
        for run in loaded:
            if run.id in seen:
                self.problems.append((str(run.path), f"{run.path}: id {run.id!r} is already used by {seen[run.id]} "
                                      "(fix: remove one of them, or change its \"id\")"))
                continue
            seen[run.id] = str(run.path)
            out.append(run)
        out.sort(key=lambda r: (r.created_at, r.id))
        return out

    def resolve(self, ref: str, runs: Iterable[EvalRun] | None = None) -> EvalRun:
        """A run by file path, id, unique id prefix, label, or unique label prefix (case-insensitive).

        A label shared by several runs means the newest of them."""
        p = Path(ref).expanduser()
        if p.is_file() or ref.endswith(".json"):
            return load_run_file(p)
        pool = list(runs) if runs is not None else self.runs()
        exact = [r for r in pool if r.id == ref]
        if exact:
            return exact[0]
        prefix = [r for r in pool if r.id.startswith(ref)]
        if len(prefix) == 1:
            return prefix[0]
        labelled = [r for r in pool if r.label == ref]
        if labelled:
            return labelled[-1]
        by_label = [r for r in pool if r.label.lower().startswith(ref.lower())]
        if len({r.label for r in by_label}) == 1 and not prefix:
            return by_label[-1]
        matches = prefix or by_label
        if len(matches) > 1:
            names = ", ".join(f"{r.id} ({r.label})" for r in matches[:4])
            raise RunNotFound(f"run {ref!r} is ambiguous in {self.root}: {names} (fix: give more of the id or label)")
        raise RunNotFound(f"no run {ref!r} in {self.root} (fix: see `specconsole eval list`, or pass a .json path)")

    def import_file(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> EvalRun:
        """Validate ``path`` against the schema and store it under its id (refused if taken, unless ``overwrite``)."""
        run = load_run_file(path)
        if not overwrite and self.path_for(run.id).exists():
            raise ResultFileError(path, f"a run with id {run.id!r} is already stored in {self.root}",
                                  "pass --force to replace it, or change \"id\" in the file")
        src = dict(run.source)
        src.setdefault("kind", "imported")
        src.setdefault("imported_from", str(path))
        src.setdefault("imported_at", utc_now_iso())
        return self.save(replace(run, source=src), overwrite=overwrite)
