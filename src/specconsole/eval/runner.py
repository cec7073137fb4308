"""The eval runner: every task of a suite through SGLang's ``/generate``, measured from ``meta_info``.

Per task it records, from the answer's ``meta_info``:

* acceptance length = ``completion_tokens / spec_verify_ct`` (tokens per verify step, bonus
  token included); a vanilla deployment (no ``spec_*`` fields) is 1.0 per step by definition;
* tokens/s = ``completion_tokens / e2e_latency`` (the server's own latency; the client's wall
  time when the server sends none) and the latency itself;
* the raw ``meta_info`` and text, so every number can be recomputed from the stored file.

A task that fails (HTTP error, timeout, malformed answer) is recorded as failed with its
one-line error; the others complete. Before the tasks, ``/server_info`` says what is being
measured (algorithm, block size, draft window, draft model, SGLang version), stored with the run.
Progress: one line per task through :class:`~specconsole.steps.Steps`, and between them a
heartbeat at least every second naming the tasks in flight and how long they have been generating.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import Callable
from typing import Any

from specconsole.base.values import as_int
from specconsole.eval.compare import run_acceptance
from specconsole.eval.store import Deployment, EvalRun, ResultStore, TaskResult, make_run_id, utc_now_iso
from specconsole.eval.suite import Suite, Task
from specconsole.sglang import ServerInfo, SglangClient, SglangError
from specconsole.sglang.acceptance import NO_DETAIL
from specconsole.steps import Steps

#: Called after each task: (result, tasks finished so far, total tasks).
OnResult = Callable[[TaskResult, int, int], None]

DEFAULT_TIMEOUT_S = 300.0
#: Between task results, a status line (what is being generated, for how long) at least this often.
STATUS_EVERY_S = 0.8
#: The resolved server args stored with a run (besides the launch command, which has them all).
_SPEC_ARGS = frozenset({
    "speculative_algorithm", "speculative_draft_model_path", "speculative_draft_model_revision",
    "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
    "speculative_dflash_block_size", "speculative_draft_window_size", "speculative_draft_sink_size",
    "speculative_draft_attention_backend", "speculative_attention_mode", "speculative_accept_threshold_single",
    "speculative_accept_threshold_acc", "speculative_adaptive", "speculative_draft_kv_cache_dtype",
})


def deployment_from(info: ServerInfo, url: str | None = None) -> Deployment:
    raw = info.raw
    algo = info.algorithm

    server_args: dict[str, Any] = {}
    if algo:
        server_args = {k: v for k, v in sorted(raw.items()) if v is not None and (
            k in _SPEC_ARGS or "ddtree" in k or (algo == "DSPARK" and "dspark" in k)
            or (algo == "NGRAM" and "ngram" in k))}
    for key in ("model_path", "served_model_name", "tp_size", "dp_size", "launch_command"):
        if raw.get(key) is not None:
            server_args[key] = raw[key]
    block = info.block_size
    if block is None and algo in ("DSPARK", "DDTREE"):
        block = info.num_draft_tokens
    return Deployment(
        algorithm=algo,
        block_size=block if algo else None,
        draft_window=info.draft_window if algo else None,
        draft_model=info.draft_model_path if algo else None,
        model=info.model_path,
        sglang_version=info.version,
        num_draft_tokens=info.num_draft_tokens if algo else None,
        num_steps=as_int(raw.get("speculative_num_steps")) if algo else None,
        topk=as_int(raw.get("speculative_eagle_topk")) if algo else None,
        tree_budget=as_int(raw.get("speculative_ddtree_budget")) if algo else None,
        url=url,
        server_args=server_args,
    )


def default_label(dep: Deployment) -> str:
    """``DFLASH b16 w16 (dflash-b16)`` / ``vanilla (Qwen3-8B)``."""
    if dep.vanilla:
        model = os.path.basename((dep.model or "").rstrip("/"))
        return f"vanilla ({model})" if model else "vanilla"
    draft = os.path.basename((dep.draft_model or "").rstrip("/"))
    return f"{dep.short()} ({draft})" if draft else dep.short()


def measure(task: Task, response: dict[str, Any], dep: Deployment, *, max_new_tokens: int,
            client_latency_s: float, keep_text: bool = True) -> TaskResult:
    """One task's numbers from its ``/generate`` answer (pure; the arithmetic lives here)."""
    meta = response.get("meta_info")
    if not isinstance(meta, dict):
        return TaskResult(task.name, ok=False, error="answer has no meta_info", max_new_tokens=max_new_tokens,
                          client_latency_s=client_latency_s)
    text = response.get("text") if keep_text and isinstance(response.get("text"), str) else None
    base: dict[str, Any] = {"max_new_tokens": max_new_tokens, "client_latency_s": client_latency_s,
                            "meta_info": meta, "text": text, "prompt_tokens": as_int(meta.get("prompt_tokens"))}
    completion = as_int(meta.get("completion_tokens"))
    if completion is None or completion < 0:
        return TaskResult(task.name, ok=False, error=f"meta_info.completion_tokens is missing or invalid: "
                          f"{meta.get('completion_tokens')!r}", **base)
    verify_raw = meta.get("spec_verify_ct")
    verify = as_int(verify_raw)
    if verify_raw is not None and (verify is None or verify < 0):
        return TaskResult(task.name, ok=False, error=f"meta_info.spec_verify_ct is invalid: {verify_raw!r}", **base)
    if verify is not None:
        accept = completion / verify if verify > 0 else None
    else:
        # no spec_* fields: vanilla decoding commits exactly one token per step
        accept = 1.0 if dep.vanilla and completion > 0 else None
    e2e = meta.get("e2e_latency")
    latency = float(e2e) if isinstance(e2e, int | float) and not isinstance(e2e, bool) and math.isfinite(e2e) \
        and e2e > 0 else client_latency_s
    tps = completion / latency if latency > 0 else None
    return TaskResult(task.name, ok=True, acceptance_length=accept, tokens_per_s=tps, latency_s=latency,
                      completion_tokens=completion, verify_ct=verify, **base)


def _progress_line(r: TaskResult, done: int, total: int) -> str:
    head = f"[{done}/{total}] {r.task}"
    if not r.ok:
        return f"{head}: failed: {r.error}"
    parts = []
    if r.acceptance_length is not None:
        steps = f" / {r.verify_ct} steps" if r.verify_ct is not None else ""
        parts.append(f"acceptance {r.acceptance_length:.2f} ({r.completion_tokens} tokens{steps})")
    else:
        parts.append(f"{r.completion_tokens} tokens (no acceptance length)")
    if r.tokens_per_s is not None:
        parts.append(f"{r.tokens_per_s:.0f} tok/s")
    if r.latency_s is not None:
        parts.append(f"{r.latency_s:.2f} s")
    return f"{head}: {', '.join(parts)}"


async def run_eval(client: SglangClient, suite: Suite, *, label: str | None = None, concurrency: int = 1,
                   max_new_tokens: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                   steps: Steps | None = None, on_result: OnResult | None = None,
                   keep_text: bool = True, source: dict[str, Any] | None = None) -> EvalRun:
    """Run every task of ``suite`` against ``client`` (``concurrency`` at a time); the run is not saved.

    Raises :class:`~specconsole.sglang.SglangError` only when ``/server_info`` fails
    (nothing measured yet); task failures are recorded in the run.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    created = utc_now_iso()
    if steps is not None:
        steps.begin("deployment", f"reading {client.display_url}/server_info")
    info = await client.server_info()
    dep = deployment_from(info, client.display_url)
    run_label = label or default_label(dep)
    total = len(suite.tasks)
    if steps is not None:
        steps.info(f"measuring {dep.short()} (draft {dep.draft_model or '-'}, model {dep.model or '-'}, "
                   f"SGLang {dep.sglang_version or '?'})")
        steps.begin("tasks", f"{total} tasks of suite {suite.name!r} at concurrency {concurrency}, "
                    f"temperature {suite.temperature:g}")
    gate = asyncio.Semaphore(concurrency)
    results: dict[str, TaskResult] = {}
    done = 0
    active: dict[str, float] = {}  # task -> when its /generate started (monotonic)
    last_status = time.monotonic()

    async def one(task: Task) -> None:
        nonlocal done, last_status
        limit = suite.max_tokens_for(task, max_new_tokens)
        async with gate:
            t0 = active[task.name] = time.monotonic()
            try:
                resp = await client.generate(suite.text_for(task), limit, suite.temperature, timeout_s=timeout_s)
            except SglangError as exc:
                result = TaskResult(task.name, ok=False, error=str(exc).splitlines()[0] if str(exc) else exc.kind,
                                    max_new_tokens=limit, client_latency_s=time.monotonic() - t0)
            else:
                result = measure(task, resp, dep, max_new_tokens=limit, client_latency_s=time.monotonic() - t0,
                                 keep_text=keep_text)
        active.pop(task.name, None)
        results[task.name] = result
        done += 1
        if steps is not None:
            last_status = time.monotonic()
            line = _progress_line(result, done, total)
            if not result.ok:
                steps.error(line)
            elif result.acceptance_length is None and not dep.vanilla:
                steps.warn(f"{line}: {dep.algorithm} is on but the answer has no spec_verify_ct")
            else:
                steps.info(line)
        if on_result is not None:
            on_result(result, done, total)

    async def status() -> None:
        nonlocal last_status
        assert steps is not None
        while True:
            await asyncio.sleep(STATUS_EVERY_S / 4)
            now = time.monotonic()
            if now - last_status < STATUS_EVERY_S:
                continue
            last_status = now
            running = ", ".join(f"{name} {now - t0:.1f}s" for name, t0 in sorted(active.items(), key=lambda a: a[1]))
            steps.emit("heartbeat", f"waiting for /generate: {running or 'next task'}; {done}/{total} done")

    ticker = asyncio.ensure_future(status()) if steps is not None else None
    try:
        await asyncio.gather(*(one(t) for t in suite.tasks))
    finally:
        if ticker is not None:
            ticker.cancel()
    src: dict[str, Any] = {"kind": "measured", "tool": _tool(), "url": client.display_url}
    if source:
        src.update(source)
    suite_meta = {"name": suite.name, "path": suite.path, "temperature": suite.temperature,
                  "max_new_tokens": max_new_tokens if max_new_tokens is not None else suite.max_new_tokens,
                  "concurrency": concurrency, "tasks": list(suite.task_names),
                  "prompt_template": suite.prompt_template}
    return EvalRun(id=make_run_id(run_label, created), label=run_label, created_at=created,
                   tasks=tuple(results[t.name] for t in suite.tasks), deployment=dep, suite=suite_meta, source=src)


def _tool() -> str:
    from specconsole import __version__

    return f"specconsole {__version__}"


def _say_acceptance(run: EvalRun, steps: Steps) -> None:
    """The run's histogram of accepted drafts (a line the console and the CLI plot), or, once,
    that the server gave none."""
    tally = run_acceptance(run)
    detail = tally.detail()
    if detail is None and not tally.speculative_without_detail:
        return  # vanilla, or no ok task: nothing to show or say
    steps.begin("acceptance", "accepted drafts per verify step over the run's tasks (meta_info)")
    if detail is not None:
        steps.emit("info", detail.summary(), acceptance=((run.label, detail),))
    else:
        steps.info(NO_DETAIL)


def summary_line(run: EvalRun) -> str:
    avg = run.average("acceptance_length")
    tps = run.average("tokens_per_s")
    failed = len(run.failed_tasks)
    parts = [f"{len(run.ok_tasks)}/{len(run.tasks)} tasks ok"]
    if avg is not None:
        parts.append(f"average acceptance length {avg:.2f}")
    if tps is not None:
        parts.append(f"{tps:.0f} tok/s")
    if failed:
        parts.append(f"{failed} failed: {', '.join(t.task for t in run.failed_tasks)}")
    return "; ".join(parts)


async def run_and_save(url: str, suite: Suite, store: ResultStore, *, steps: Steps, label: str | None = None,
                       concurrency: int = 1, max_new_tokens: int | None = None,
                       timeout_s: float = DEFAULT_TIMEOUT_S, api_key: str | None = None,
                       on_result: OnResult | None = None, source: dict[str, Any] | None = None,
                       display_url: str | None = None) -> EvalRun:
    """Open a client on ``url``, run the suite, save the run in ``store``; ``steps`` ends done/failed.

    ``display_url``: the address messages and the stored run name (the configured URL behind a tunnel)."""
    client = SglangClient(url, timeout_s=min(30.0, timeout_s), api_key=api_key, display_url=display_url)
    try:
        try:
            run = await run_eval(client, suite, label=label, concurrency=concurrency, max_new_tokens=max_new_tokens,
                                 timeout_s=timeout_s, steps=steps, on_result=on_result, source=source)
        except SglangError as exc:
            steps.failed(f"cannot read the deployment: {exc}")
            raise
        _say_acceptance(run, steps)
        steps.begin("save", f"saving to {store.root}")
        saved = store.save(run)
        if saved.failed_tasks:
            steps.warn(f"{len(saved.failed_tasks)} of {len(saved.tasks)} tasks failed; they are recorded as failed")
        steps.done(f"run {saved.id} saved to {saved.path}: {summary_line(saved)}")
        return saved
    finally:
        await client.aclose()
