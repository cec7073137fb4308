"""Reading and validating one ``specconsole.eval/1`` results file (one line per problem).

A file that is not this schema or version is refused with one line naming the file and the fix
(:class:`~specconsole.eval.schema.ResultFileError`).
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

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
