"""Reading and validating one ``specconsole.eval/1`` results file (one line per problem).

A file that is not this schema or version is refused with one line naming the file and the fix
(:class:`~specconsole.eval.schema.ResultFileError`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from specconsole.base.validation import TOO_DEEP, Invalid, Text, convert, num, text
from specconsole.eval.schema import (
    _CONSISTENCY_TOL,
    DOC,
    SCHEMA,
    SCHEMA_PREFIX,
    Deployment,
    EvalRun,
    ResultFileError,
    TaskResult,
    make_run_id,
    utc_now_iso,
)

# ------------------------------------------------------------------------------ declarations

Count = Annotated[int, num(ge=0)]
AtLeast1 = Annotated[int, num(ge=1)]
Amount = Annotated[float, num(ge=0)]
Status = Annotated[Literal["ok", "failed"], msgspec.Meta(extra={"problem": 'must be "ok" or "failed"'})]
#: Keys other tools add (``summary``, their own) are ignored: these structs do not forbid them.


class DeploymentEntry(msgspec.Struct, frozen=True):
    """``deployment``: what the run was measured on (no ``algorithm`` key: unknown)."""

    algorithm: str | msgspec.UnsetType | None = msgspec.UNSET
    block_size: AtLeast1 | None = None
    draft_window: AtLeast1 | None = None
    draft_model: str | None = None
    model: str | None = None
    sglang_version: str | None = None
    num_draft_tokens: AtLeast1 | None = None
    num_steps: Count | None = None
    topk: AtLeast1 | None = None
    tree_budget: AtLeast1 | None = None
    url: str | None = None
    server_args: dict[str, Any] | None = None


class TaskEntry(msgspec.Struct, frozen=True):
    """One of ``tasks``."""

    task: Text
    status: Status | None = None
    error: str | None = None
    acceptance_length: Amount | None = None
    tokens_per_s: Amount | None = None
    latency_s: Amount | None = None
    client_latency_s: Amount | None = None
    completion_tokens: Count | None = None
    prompt_tokens: Count | None = None
    verify_ct: Count | None = None
    max_new_tokens: Count | None = None
    meta_info: dict[str, Any] | None = None
    text: str | None = None


class ResultFile(msgspec.Struct, frozen=True):
    """A ``specconsole.eval/1`` file as written (``schema`` is checked before)."""

    label: Text
    id: Annotated[str, text(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,119}$",
                            "must be a file-name-safe id (letters, digits, _ . -)", f"see {DOC}")] | None = None
    created_at: str | None = None
    source: dict[str, Any] | None = None
    suite: dict[str, Any] | None = None
    deployment: DeploymentEntry | None = None
    tasks: tuple[TaskEntry, ...] = ()


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
    try:
        file = convert(data, ResultFile, top="key", json=True)
    except Invalid as err:
        raise ResultFileError(path, f"{err.key}: {err.problem}", err.fix) from None

    def fail(key: str, problem: str, fix: str = f"see {DOC}") -> ResultFileError:
        return ResultFileError(path, f"{key}: {problem}", fix)

    created = file.created_at
    if created is not None:
        try:
            datetime.fromisoformat(created)
        except ValueError:
            raise fail("created_at", f"not an ISO 8601 time: {created!r}",
                       'write e.g. "2026-12-02T18:30:00Z"') from None
    else:
        created = utc_now_iso()
    run_id = file.id or make_run_id(file.label, created)
    if not file.tasks:
        raise fail("tasks", "must be a non-empty list of task results",
                   'add "tasks": [{"task": "fizzbuzz", "acceptance_length": 6.1}, ...]')
    deployment = _deployment(file.deployment or DeploymentEntry())
    tasks: list[TaskResult] = []
    seen: set[str] = set()
    for i, t in enumerate(file.tasks):
        if t.task in seen:
            raise fail(f"tasks[{i}].task", f"duplicate task {t.task!r}", "list each task once")
        seen.add(t.task)
        tasks.append(_task(t, f"tasks[{i}]", deployment, fail))
    return EvalRun(id=run_id, label=file.label, created_at=created, tasks=tuple(tasks), deployment=deployment,
                   suite=file.suite or {}, source=file.source or {}, path=path)


def _deployment(d: DeploymentEntry) -> Deployment:
    algo = d.algorithm if isinstance(d.algorithm, str) else None
    unknown = d.algorithm is msgspec.UNSET or (algo is not None and algo.strip().lower() == "unknown")
    if unknown or (algo is not None and algo.strip().lower() in ("", "none", "vanilla", "off")):
        algo = None
    return Deployment(
        algorithm=algo.upper() if algo else None, block_size=d.block_size, draft_window=d.draft_window,
        draft_model=d.draft_model, model=d.model, sglang_version=d.sglang_version,
        num_draft_tokens=d.num_draft_tokens, num_steps=d.num_steps, topk=d.topk, tree_budget=d.tree_budget,
        url=d.url, server_args=d.server_args or {}, unknown=unknown,
    )


def _task(t: TaskEntry, key: str, deployment: Deployment, fail: Callable[..., ResultFileError]) -> TaskResult:
    """What one field's declaration cannot say: the status, and how the values fit together."""
    status = t.status or ("failed" if t.error else "ok")
    common = TaskResult(task=t.task, client_latency_s=t.client_latency_s, max_new_tokens=t.max_new_tokens,
                        prompt_tokens=t.prompt_tokens, meta_info=t.meta_info, text=t.text)
    if status == "failed":
        return replace(common, ok=False, error=(t.error or "failed (no error given)").splitlines()[0])
    accept = t.acceptance_length
    if accept is not None and accept < 1.0:
        raise fail(f"{key}.acceptance_length", f"must be >= 1.0 (it includes the bonus token), got {accept!r}",
                   "if your tool counts accepted draft tokens only, add 1 per verify step")
    completion, verify = t.completion_tokens, t.verify_ct
    if completion is not None and verify:
        computed = completion / verify
        if accept is None:
            accept = computed
        elif abs(accept - computed) > _CONSISTENCY_TOL:
            raise fail(f"{key}.acceptance_length",
                       f"{accept!r} disagrees with completion_tokens / verify_ct = {completion}/{verify} "
                       f"= {computed:.4f}", "fix one of the three values (or omit acceptance_length)")
    if accept is None and deployment.vanilla and verify is None and completion:
        accept = 1.0
    if accept is None and t.tokens_per_s is None and t.latency_s is None:
        raise fail(key, "an ok task needs acceptance_length, tokens_per_s or latency_s",
                   'add "acceptance_length": ..., or mark it "status": "failed" with an "error"')
    return replace(common, ok=True, acceptance_length=accept, tokens_per_s=t.tokens_per_s, latency_s=t.latency_s,
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
    except RecursionError:
        raise ResultFileError(shown, *TOO_DEEP) from None
    run = run_from_json(data, shown)
    return replace(run, path=str(p))
