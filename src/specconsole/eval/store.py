"""The eval result schema (``specconsole.eval/1``), the results folder, and import.

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
import math
import os
import re
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from specconsole import paths
from specconsole.errors import SpecConsoleError

SCHEMA = "specconsole.eval/1"
SCHEMA_PREFIX = "specconsole.eval/"
RESULTS_ENV = "SPECCONSOLE_EVAL_RESULTS"
DOC = "docs/eval-results-schema.md"
METRICS = ("acceptance_length", "tokens_per_s", "latency_s")
#: Imported values may be rounded (published tables print 2 decimals).
_CONSISTENCY_TOL = 0.006


class ResultFileError(SpecConsoleError):
    """A results file is unreadable, of another schema/version, or invalid: names the file and the fix."""

    exit_code = 2

    def __init__(self, path: str | os.PathLike[str], problem: str, fix: str) -> None:
        self.path, self.problem, self.fix = str(path), problem, fix
        super().__init__(f"{path}: {problem} (fix: {fix})")


class RunNotFound(SpecConsoleError):
    """A RUN reference matched no stored run, or several."""

    exit_code = 2


# ------------------------------------------------------------------------------------ model


@dataclass(frozen=True)
class Deployment:
    """What a run was measured on. ``algorithm`` None means vanilla (no speculative decoding)."""

    algorithm: str | None = None
    block_size: int | None = None
    draft_window: int | None = None
    draft_model: str | None = None
    model: str | None = None
    sglang_version: str | None = None
    num_draft_tokens: int | None = None
    num_steps: int | None = None
    topk: int | None = None
    tree_budget: int | None = None
    url: str | None = None
    server_args: Mapping[str, Any] = field(default_factory=dict)
    #: True when the file did not say (no ``algorithm`` key, or ``"unknown"``): not assumed vanilla.
    unknown: bool = False

    @property
    def vanilla(self) -> bool:
        return self.algorithm is None and not self.unknown

    def short(self) -> str:
        """``DFLASH b16 w16`` / ``EAGLE 3x1/4`` / ``vanilla`` / ``unknown``."""
        if self.unknown:
            return "unknown"
        if self.algorithm is None:
            return "vanilla"
        parts = [self.algorithm]
        if self.tree_budget is not None:
            parts.append(f"budget {self.tree_budget}")
        if self.block_size is not None:
            parts.append(f"b{self.block_size}")
        elif self.num_steps is not None and self.num_draft_tokens is not None:
            parts.append(f"{self.num_steps}x{self.topk or 1}/{self.num_draft_tokens}")
        if self.draft_window is not None:
            parts.append(f"w{self.draft_window}")
        return " ".join(parts)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "algorithm": "unknown" if self.unknown else self.algorithm,
            "block_size": self.block_size, "draft_window": self.draft_window,
            "draft_model": self.draft_model, "model": self.model, "sglang_version": self.sglang_version,
            "num_draft_tokens": self.num_draft_tokens, "num_steps": self.num_steps, "topk": self.topk,
            "tree_budget": self.tree_budget, "url": self.url,
        }
        if self.server_args:
            out["server_args"] = dict(self.server_args)
        return out


@dataclass(frozen=True)
class TaskResult:
    """One task of one run. ``ok`` False: ``error`` says why (one line) and the values are None."""

    task: str
    ok: bool = True
    error: str | None = None
    acceptance_length: float | None = None
    tokens_per_s: float | None = None
    latency_s: float | None = None
    client_latency_s: float | None = None
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    verify_ct: int | None = None
    max_new_tokens: int | None = None
    meta_info: Mapping[str, Any] | None = None
    text: str | None = None

    def value(self, metric: str) -> float | None:
        if not self.ok:
            return None
        values = {"acceptance_length": self.acceptance_length, "tokens_per_s": self.tokens_per_s,
                  "latency_s": self.latency_s}
        return values[metric]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "task": self.task, "status": "ok" if self.ok else "failed", "error": self.error,
            "acceptance_length": self.acceptance_length, "tokens_per_s": self.tokens_per_s,
            "latency_s": self.latency_s, "client_latency_s": self.client_latency_s,
            "completion_tokens": self.completion_tokens, "prompt_tokens": self.prompt_tokens,
            "verify_ct": self.verify_ct, "max_new_tokens": self.max_new_tokens,
        }
        if self.meta_info is not None:
            out["meta_info"] = dict(self.meta_info)
        if self.text is not None:
            out["text"] = self.text
        return out


@dataclass(frozen=True)
class EvalRun:
    id: str
    label: str
    created_at: str  # ISO 8601, UTC, e.g. 2026-12-02T18:30:00Z
    tasks: tuple[TaskResult, ...]
    deployment: Deployment = field(default_factory=lambda: Deployment(unknown=True))
    suite: Mapping[str, Any] = field(default_factory=dict)
    source: Mapping[str, Any] = field(default_factory=dict)
    path: str | None = None  # where it was loaded from / saved to (not part of the file)

    @property
    def ok_tasks(self) -> tuple[TaskResult, ...]:
        return tuple(t for t in self.tasks if t.ok)

    @property
    def failed_tasks(self) -> tuple[TaskResult, ...]:
        return tuple(t for t in self.tasks if not t.ok)

    def task(self, name: str) -> TaskResult | None:
        for t in self.tasks:
            if t.task == name:
                return t
        return None

    def average(self, metric: str = "acceptance_length") -> float | None:
        """Arithmetic mean of ``metric`` over this run's ok tasks that report it."""
        values = [v for t in self.tasks if (v := t.value(metric)) is not None]
        return sum(values) / len(values) if values else None

    @property
    def kind(self) -> str:
        return str(self.source.get("kind") or "measured")

    def summary(self) -> dict[str, Any]:
        return {"tasks": len(self.tasks), "ok": len(self.ok_tasks), "failed": len(self.failed_tasks),
                **{f"{m}_avg": self.average(m) for m in METRICS}}

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "id": self.id,
            "label": self.label,
            "created_at": self.created_at,
            "source": dict(self.source),
            "suite": dict(self.suite),
            "deployment": self.deployment.to_json(),
            "tasks": [t.to_json() for t in self.tasks],
            "summary": self.summary(),
        }


# --------------------------------------------------------------------------------- helpers


def utc_now_iso(now: float | None = None) -> str:
    return datetime.fromtimestamp(time.time() if now is None else now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def slug(text: str, width: int = 40) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return (s[:width].rstrip("-")) or "run"


def make_run_id(label: str, created_at: str) -> str:
    """``20261202T183000Z-ours-step-4000-ddtree-8``."""
    stamp = re.sub(r"[^0-9TZ]", "", created_at)[:16] or "run"
    return f"{stamp}-{slug(label)}"


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


# ------------------------------------------------------------------------------ validation


class _Check:
    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, key: str, problem: str, fix: str | None = None) -> ResultFileError:
        return ResultFileError(self.path, f"{key}: {problem}", fix or f"see {DOC}")

    def obj(self, value: Any, key: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(key, f"must be an object, got {type(value).__name__}")
        return value

    def string(self, value: Any, key: str, *, required: bool = False) -> str | None:
        if value is None:
            if required:
                raise self.fail(key, "is missing", f'add "{key.rsplit(".", 1)[-1]}": "..." (see {DOC})')
            return None
        if not isinstance(value, str) or (required and not value.strip()):
            raise self.fail(key, f"must be a non-empty string, got {value!r}")
        return value

    def number(self, value: Any, key: str, minimum: float = 0.0) -> float | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise self.fail(key, f"must be a number, got {value!r}")
        if value < minimum:
            raise self.fail(key, f"must be >= {minimum:g}, got {value!r}")
        return float(value)

    def integer(self, value: Any, key: str, minimum: int = 0) -> int | None:
        if value is None:
            return None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"must be an integer, got {value!r}")
        if value < minimum:
            raise self.fail(key, f"must be >= {minimum}, got {value!r}")
        return value


def _check_schema(data: Any, path: str) -> None:
    if not isinstance(data, dict):
        raise ResultFileError(path, f"not a {SCHEMA} result (the top level is a JSON {type(data).__name__})",
                              f"write one run as a JSON object with \"schema\": \"{SCHEMA}\" ({DOC})")
    schema = data.get("schema")
    if schema is None:
        raise ResultFileError(path, f"not a {SCHEMA} result (no \"schema\" key)",
                              f"convert it to the schema in {DOC} (\"schema\": \"{SCHEMA}\"), "
                              "then: specconsole eval import FILE")
    if schema != SCHEMA:
        if isinstance(schema, str) and schema.startswith(SCHEMA_PREFIX):
            raise ResultFileError(path, f"schema version {schema!r} is not supported (this specconsole reads {SCHEMA})",
                                  f"re-export it as {SCHEMA}, or upgrade specconsole")
        raise ResultFileError(path, f"schema {schema!r} is not a specconsole eval result (expected {SCHEMA})",
                              f"convert it to {SCHEMA} as described in {DOC}")


def run_from_json(data: Any, path: str = "<result>") -> EvalRun:
    """Validate a decoded ``specconsole.eval/1`` object and build the run (``summary`` is ignored)."""
    _check_schema(data, path)
    c = _Check(path)
    label = c.string(data.get("label"), "label", required=True)
    assert label is not None
    created = c.string(data.get("created_at"), "created_at")
    if created is not None:
        try:
            datetime.fromisoformat(created)
        except ValueError:
            raise c.fail("created_at", f"not an ISO 8601 time: {created!r}",
                         'write e.g. "2026-12-02T18:30:00Z"') from None
    else:
        created = utc_now_iso()
    run_id = c.string(data.get("id"), "id") or make_run_id(label, created)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,119}", run_id):
        raise c.fail("id", f"must be a file-name-safe id (letters, digits, _ . -), got {run_id!r}")
    source = c.obj(data.get("source"), "source")
    suite = c.obj(data.get("suite"), "suite")
    deployment = _deployment(c, c.obj(data.get("deployment"), "deployment"))
    raw_tasks = data.get("tasks")
    if not isinstance(raw_tasks, list) or not raw_tasks:
        raise c.fail("tasks", "must be a non-empty list of task results",
                     'add "tasks": [{"task": "fizzbuzz", "acceptance_length": 6.1}, ...]')
    tasks: list[TaskResult] = []
    seen: set[str] = set()
    for i, t in enumerate(raw_tasks):
        task = _task(c, t, f"tasks[{i}]", deployment)
        if task.task in seen:
            raise c.fail(f"tasks[{i}].task", f"duplicate task {task.task!r}", "list each task once")
        seen.add(task.task)
        tasks.append(task)
    return EvalRun(id=run_id, label=label, created_at=created, tasks=tuple(tasks), deployment=deployment,
                   suite=suite, source=source, path=path)


def _deployment(c: _Check, d: dict[str, Any]) -> Deployment:
    algo = c.string(d.get("algorithm"), "deployment.algorithm")
    unknown = "algorithm" not in d or (algo is not None and algo.strip().lower() == "unknown")
    if unknown or (algo is not None and algo.strip().lower() in ("", "none", "vanilla", "off")):
        algo = None
    server_args = c.obj(d.get("server_args"), "deployment.server_args")
    return Deployment(
        algorithm=algo.upper() if algo else None,
        block_size=c.integer(d.get("block_size"), "deployment.block_size", 1),
        draft_window=c.integer(d.get("draft_window"), "deployment.draft_window", 1),
        draft_model=c.string(d.get("draft_model"), "deployment.draft_model"),
        model=c.string(d.get("model"), "deployment.model"),
        sglang_version=c.string(d.get("sglang_version"), "deployment.sglang_version"),
        num_draft_tokens=c.integer(d.get("num_draft_tokens"), "deployment.num_draft_tokens", 1),
        num_steps=c.integer(d.get("num_steps"), "deployment.num_steps", 0),
        topk=c.integer(d.get("topk"), "deployment.topk", 1),
        tree_budget=c.integer(d.get("tree_budget"), "deployment.tree_budget", 1),
        url=c.string(d.get("url"), "deployment.url"),
        server_args=server_args,
        unknown=unknown,
    )


def _task(c: _Check, t: Any, key: str, deployment: Deployment) -> TaskResult:
    t = c.obj(t, key)
    if not t:
        raise c.fail(key, "must be an object with at least \"task\"")
    name = c.string(t.get("task"), f"{key}.task", required=True)
    assert name is not None
    status = t.get("status")
    error = c.string(t.get("error"), f"{key}.error")
    if status is None:
        status = "failed" if error else "ok"
    if status not in ("ok", "failed"):
        raise c.fail(f"{key}.status", f'must be "ok" or "failed", got {status!r}')
    meta = t.get("meta_info")
    if meta is not None and not isinstance(meta, dict):
        raise c.fail(f"{key}.meta_info", "must be an object (SGLang's meta_info as returned)")
    text = t.get("text")
    if text is not None and not isinstance(text, str):
        raise c.fail(f"{key}.text", "must be a string")
    common = TaskResult(
        task=name,
        client_latency_s=c.number(t.get("client_latency_s"), f"{key}.client_latency_s"),
        max_new_tokens=c.integer(t.get("max_new_tokens"), f"{key}.max_new_tokens"),
        prompt_tokens=c.integer(t.get("prompt_tokens"), f"{key}.prompt_tokens"),
        meta_info=meta, text=text,
    )
    if status == "failed":
        return replace(common, ok=False, error=(error or "failed (no error given)").splitlines()[0])
    accept = c.number(t.get("acceptance_length"), f"{key}.acceptance_length")
    if accept is not None and accept < 1.0:
        raise c.fail(f"{key}.acceptance_length", f"must be >= 1.0 (it includes the bonus token), got {accept!r}",
                     "if your tool counts accepted draft tokens only, add 1 per verify step")
    completion = c.integer(t.get("completion_tokens"), f"{key}.completion_tokens")
    verify = c.integer(t.get("verify_ct"), f"{key}.verify_ct")
    if completion is not None and verify:
        computed = completion / verify
        if accept is None:
            accept = computed
        elif abs(accept - computed) > _CONSISTENCY_TOL:
            raise c.fail(f"{key}.acceptance_length",
                         f"{accept!r} disagrees with completion_tokens / verify_ct = {completion}/{verify} "
                         f"= {computed:.4f}", "fix one of the three values (or omit acceptance_length)")
    if accept is None and deployment.vanilla and verify is None and completion:
        accept = 1.0
    tps = c.number(t.get("tokens_per_s"), f"{key}.tokens_per_s")
    latency = c.number(t.get("latency_s"), f"{key}.latency_s")
    if accept is None and tps is None and latency is None:
        raise c.fail(key, "an ok task needs acceptance_length, tokens_per_s or latency_s",
                     'add "acceptance_length": ..., or mark it "status": "failed" with an "error"')
    return replace(common, ok=True, acceptance_length=accept, tokens_per_s=tps, latency_s=latency,
                   completion_tokens=completion, verify_ct=verify)


def load_run_file(path: str | os.PathLike[str]) -> EvalRun:
    """Read and validate one results file; :class:`ResultFileError` names the file and the fix."""
    p = Path(path).expanduser()
    shown = str(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ResultFileError(shown, "file not found",
                              "check the path (specconsole eval list shows stored runs)") from None
    except IsADirectoryError:
        raise ResultFileError(shown, "is a folder, not a results file", "pass a .json file") from None
    except OSError as err:
        raise ResultFileError(shown, f"cannot read: {err.strerror}", "check the path and its permissions") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ResultFileError(shown, "not UTF-8 text", "save it as UTF-8 JSON") from None
    except json.JSONDecodeError as err:
        raise ResultFileError(shown, f"not valid JSON ({err.msg} at line {err.lineno} column {err.colno})",
                              "correct the JSON at that position") from None
    run = run_from_json(data, shown)
    return replace(run, path=str(p))


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
