"""What the eval runner costs per request, against a plain httpx loop sending the same requests.

Starts the lab's SGLang simulator (DFLASH b16, window 16) on a free loopback port, then, in this
one process, alternates rounds of:

- **plain**: ``httpx.AsyncClient.post("/generate", json=body)`` + ``resp.json()`` per request,
  sequentially: the least any client can do;
- **runner**: :func:`specconsole.eval.runner.run_eval` over a suite of the same prompts at
  concurrency 1 (SglangClient, meta_info arithmetic, a progress event per task, the run object)
  and, once per round, saving the run (atomic JSON write) like ``specconsole eval`` does.

Both send identical bodies (``max_new_tokens`` small and a short simulated step, so the server's
own time is small and the client overhead shows). Printed per request: wall ms and this
process's CPU ms for each, the difference and the ratio (median of the rounds).

Usage: .venv/bin/python bench/eval_overhead.py [--requests 100] [--rounds 5] [--max-new-tokens 16] [--step-ms 0.2]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import tempfile
import time

import httpx

from specconsole.eval.runner import run_eval
from specconsole.eval.store import ResultStore
from specconsole.eval.suite import Suite, Task, load_suite
from specconsole.lab.testing.sim_server import SimServer, dflash_draft_dir
from specconsole.sglang import SglangClient
from specconsole.steps import StepEvent, Steps


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def make_suite(n: int, max_new_tokens: int) -> Suite:
    base = load_suite()
    tasks = tuple(Task(f"{t.name}_{i:03d}", f"{t.prompt} (variant {i})", max_new_tokens)
                  for i in range(n) for t in [base.tasks[i % len(base.tasks)]])
    return Suite("bench", tasks, temperature=0.0, max_new_tokens=max_new_tokens, prompt_template=base.prompt_template)


async def plain(url: str, suite: Suite) -> tuple[float, float]:
    bodies = [{"text": suite.text_for(t), "sampling_params": {"max_new_tokens": suite.max_tokens_for(t),
                                                               "temperature": suite.temperature}}
              for t in suite.tasks]
    async with httpx.AsyncClient(base_url=url, timeout=60, trust_env=False) as http:
        await http.get("/server_info")  # the runner reads it too
        w0, c0 = time.perf_counter(), cpu()
        for body in bodies:
            resp = await http.post("/generate", json=body)
            resp.raise_for_status()
            resp.json()
        return time.perf_counter() - w0, cpu() - c0


async def runner(url: str, suite: Suite, store: ResultStore) -> tuple[float, float]:
    events: list[StepEvent] = []
    client = SglangClient(url, timeout_s=60)
    try:
        w0, c0 = time.perf_counter(), cpu()
        run = await run_eval(client, suite, concurrency=1, steps=Steps("eval", events.append))
        store.save(run)
        wall, used = time.perf_counter() - w0, cpu() - c0
    finally:
        await client.aclose()
    assert len(run.ok_tasks) == len(suite.tasks), [t.error for t in run.failed_tasks][:3]
    assert sum(1 for e in events if e.step == "tasks" and e.kind == "info") == len(suite.tasks)
    return wall, used


async def main_async(args: argparse.Namespace) -> None:
    suite = make_suite(args.requests, args.max_new_tokens)
    with tempfile.TemporaryDirectory() as tmp:
        draft = dflash_draft_dir(tmp, 16)
        store = ResultStore(f"{tmp}/results")
        with SimServer(["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", draft,
                        "--speculative-draft-window-size", "16"], step_ms=args.step_ms) as sim:
            await plain(sim.url, make_suite(10, args.max_new_tokens))  # warm-up both paths
            await runner(sim.url, make_suite(10, args.max_new_tokens), store)
            p_wall, p_cpu, r_wall, r_cpu = [], [], [], []
            for k in range(args.rounds):
                order = (plain, runner) if k % 2 == 0 else (runner, plain)
                for fn in order:
                    if fn is plain:
                        w, c = await plain(sim.url, suite)
                        p_wall.append(w)
                        p_cpu.append(c)
                    else:
                        w, c = await runner(sim.url, suite, store)
                        r_wall.append(w)
                        r_cpu.append(c)
    n = args.requests
    pw, pc = statistics.median(p_wall) / n * 1e3, statistics.median(p_cpu) / n * 1e3
    rw, rc = statistics.median(r_wall) / n * 1e3, statistics.median(r_cpu) / n * 1e3
    print(f"eval runner overhead: {n} requests x {args.rounds} rounds, max_new_tokens={args.max_new_tokens}, "
          f"simulated step {args.step_ms} ms (DFLASH b16 w16), concurrency 1, medians")
    print(f"  plain httpx loop : {pw:7.3f} ms/request wall  {pc:7.3f} ms/request CPU (this process)")
    print(f"  eval runner      : {rw:7.3f} ms/request wall  {rc:7.3f} ms/request CPU (incl. one save per round)")
    print(f"  overhead         : {rw - pw:+7.3f} ms/request wall  {rc - pc:+7.3f} ms/request CPU")
    print(f"  ratio runner/plain: wall {rw / pw:.3f}x  CPU {rc / pc:.3f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--step-ms", type=float, default=0.2)
    asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    main()
