"""The server process: start-up, simulated internal traffic, a hung scheduler, shutdown (:func:`main`).

Start-up
    Logs SGLang-like lines (``[YYYY-mm-dd HH:MM:SS TP0] Load weight begin. ...``,
    ``Capture cuda graph 3/12 ...``, ``The server is fired up and ready to roll!``) to
    stderr, as Python logging does; uvicorn's access lines (``INFO:     127.0.0.1:PORT -
    "GET /health HTTP/1.1" 200 OK``) go to stdout. The HTTP server listens from the first
    moment; ``/health`` answers 503 until ready. SIGTERM/SIGINT: logs uvicorn's shutdown
    lines and exits 0.

A hung scheduler
    SIGUSR1 (or ``SGLANG_SIM_HANG_AFTER_S``) makes the simulated scheduler hang, as a real one
    stuck in a collective or a CUDA call does: ``/health`` still answers 200 (what SGLang does
    with ``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0``), ``/server_info``, ``/model_info`` and
    ``/metrics`` still answer (the tokenizer process serves them), but ``/health_generate``
    blocks (and answers 503 after 20 s, SGLang's ``HEALTH_CHECK_TIMEOUT``) and ``/generate``
    blocks until the hang ends. SIGUSR2 ends it; the requests that were blocked then go through.

Environment
    ``SGLANG_SIM_STARTUP_S``  start-up duration in seconds (default 3).
    ``SGLANG_SIM_FAIL``       crash during start-up: ``oom`` (KV cache allocation,
                              ``torch.OutOfMemoryError``; also any other non-empty value
                              except 0/false/no), ``weights`` (a truncated safetensors
                              shard), ``cuda_graph`` (illegal memory access during capture).
                              Exit status 1.
    A draft model directory holding a ``*.safetensors`` file shorter than 8 bytes (a truncated
    copy) crashes start-up the same way as ``weights``.
    ``SGLANG_SIM_STEP_MS``    latency of one decode/verify step in ms (default 8).
    ``SGLANG_SIM_STOP_S``     shutting down after SIGTERM takes this long (default 0), as a
                              server finishing its requests and freeing GPU memory does.
    ``SGLANG_SIM_HANG_AFTER_S`` the scheduler hangs this many seconds after the server is
                              ready (see "A hung scheduler"; unset: never by itself).
    ``SGLANG_SIM_LOAD``       requests/s of *simulated internal traffic* (default 0): a
                              Poisson stream of fake requests that runs through the same
                              engine model and moves ``gen_throughput``, running/queued
                              requests and the token counters. It is not real traffic and
                              exists for demos only; with 0 an idle server reports 0
                              throughput, as a real one does.
"""

from __future__ import annotations

import os
import random
import shlex
import signal
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from typing import Any

from specconsole.lab.doubles.sglang_sim.acceptance import _seed, count_tokens, plan_request
from specconsole.lab.doubles.sglang_sim.errors import LaunchError, UsageError
from specconsole.lab.doubles.sglang_sim.flags import _split_help, build_parser
from specconsole.lab.doubles.sglang_sim.log import log
from specconsole.lab.doubles.sglang_sim.resolve import resolve_args
from specconsole.lab.doubles.sglang_sim.routes import make_handler
from specconsole.lab.doubles.sglang_sim.server import Server, _env_float


def _fail_mode() -> str | None:
    raw = os.environ.get("SGLANG_SIM_FAIL", "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return None
    return raw if raw in ("oom", "weights", "cuda_graph") else "oom"


def _truncated_weights(model_dir: str | None) -> bool:
    """A draft checkpoint whose ``*.safetensors`` is shorter than its 8-byte header length
    (a copy that was cut short): real SGLang dies loading it, and so does the simulator."""
    if not model_dir or not os.path.isdir(model_dir):
        return False
    return any(name.endswith(".safetensors") and os.path.getsize(os.path.join(model_dir, name)) < 8
               for name in os.listdir(model_dir))


def _server_args_repr(args: dict[str, Any]) -> str:
    return "ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in args.items() if k != "help") + ")"


def _crash(kind: str, message: str, rank: str) -> None:
    log("Scheduler hit an exception: Traceback (most recent call last):", rank=rank)
    sys.stderr.write(f"{kind}: {message}\n\n")
    sys.stderr.flush()
    log("Received sigquit from a child process. It usually means the child failed.")


def startup(server: Server, total_s: float, fail: str | None) -> bool:
    """The start-up log over ``total_s`` seconds; False if it crashed or was stopped."""
    a = server.args
    rank = "TP0" if int(a.get("dp_size") or 1) == 1 else "DP0 TP0"
    spec = server.engine.spec

    def wait(frac: float) -> bool:
        return server.pause(total_s * frac)

    log("Init torch distributed begin.", rank=rank)
    if not wait(0.04):
        return False
    log("Init torch distributed ends. mem usage=0.00 GB", rank=rank)
    log("Load weight begin. avail mem=138.41 GB", rank=rank)
    for i in range(1, 5):
        if not wait(0.06):
            return False
        if fail == "weights" and i == 3:
            _crash("safetensors_rust.SafetensorError",
                   "Error while deserializing header: MetadataIncompleteBuffer", rank)
            return False
        pct = i * 25
        log(f"Loading safetensors checkpoint shards: {pct:3d}% Completed | {i}/4", rank=rank)
    log(f"Load weight end. type={server.architectures[0]}, dtype=torch.bfloat16, "
        "avail mem=122.03 GB, mem usage=16.38 GB.", rank=rank)
    if spec.algorithm is not None:
        draft_cfg = server.resolved.draft_config or {}
        draft_arch = (draft_cfg.get("architectures") or [server.architectures[0]])[0]
        log("Load weight begin. avail mem=121.90 GB", rank=rank)
        if not wait(0.06):
            return False
        if _truncated_weights(a.get("speculative_draft_model_path")):
            _crash("safetensors_rust.SafetensorError",
                   "Error while deserializing header: MetadataIncompleteBuffer", rank)
            return False
        log(f"Load weight end. type={draft_arch}, dtype=torch.bfloat16, avail mem=120.85 GB, "
            "mem usage=1.05 GB.", rank=rank)
        if spec.algorithm == "DDTREE":
            log(f"Initialized DDTree worker. block_size={spec.num_draft_tokens}, tree_budget={spec.budget}",
                rank=rank)
    if not wait(0.05):
        return False
    if fail == "oom":
        _crash("torch.OutOfMemoryError",
               "CUDA out of memory. Tried to allocate 54.94 GiB. GPU 0 has a total capacity of "
               "139.81 GiB of which 3.12 GiB is free. Including non-PyTorch memory, this "
               "process has 136.69 GiB memory in use. Of the allocated memory 133.20 GiB is "
               "allocated by PyTorch, and 1.98 GiB is reserved by PyTorch but unallocated.",
               rank)
        return False
    tokens = server.engine.max_total_tokens
    log(f"KV Cache is allocated. #tokens: {tokens}, K size: 27.47 GB, V size: 27.47 GB",
        rank=rank)
    log("Memory pool end. avail mem=65.91 GB", rank=rank)
    if a.get("disable_cuda_graph"):
        if not wait(0.3):
            return False
    else:
        log("Capture cuda graph begin. This can take up to several minutes. "
            "avail mem=65.40 GB", rank=rank)
        t0 = time.monotonic()
        batch_sizes = [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64]
        for i, bs in enumerate(reversed(batch_sizes), start=1):
            if not wait(0.4 / len(batch_sizes)):
                return False
            if fail == "cuda_graph" and i == 7:
                _crash("RuntimeError",
                       "CUDA error: an illegal memory access was encountered", rank)
                return False
            log(f"Capture cuda graph {i}/{len(batch_sizes)} (bs={bs}, avail_mem=64.2 GB)",
                rank=rank)
        log(f"Capture cuda graph end. Time elapsed: {time.monotonic() - t0:.2f} s. "
            "mem usage=1.20 GB. avail mem=64.20 GB.", rank=rank)
    log(f"max_total_num_tokens={tokens}, chunked_prefill_size={a.get('chunked_prefill_size')}, "
        f"max_prefill_tokens={a.get('max_prefill_tokens')}, "
        f"max_running_requests={server.engine.max_running}, context_len={server.context_len}, "
        "available_gpu_mem=64.20 GB", rank=rank)
    log(f"INFO:     Started server process [{os.getpid()}]")
    log("INFO:     Waiting for application startup.")
    log("INFO:     Application startup complete.")
    log(f"INFO:     Uvicorn running on http://{a['host']}:{a['port']} (Press CTRL+C to quit)")
    if not wait(0.1):
        return False
    log("Prefill batch. #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0.00, "
        "#running-req: 0, #queue-req: 0,", rank=rank)
    server.ready = True
    log("The server is fired up and ready to roll!")
    return True


def decode_logger(server: Server) -> None:
    """SGLang's periodic ``Decode batch.`` line while there is traffic."""
    eng = server.engine
    interval = max(1.0, 40 * eng.step_ms / 1000.0)
    while not server.stop.wait(interval):
        snap = eng.snapshot()
        for rank, s in enumerate(snap):
            if s["running"] <= 0:
                continue
            prefix = "TP0" if eng.dp_size == 1 else f"DP{rank} TP0"
            spec = ""
            if eng.spec.algorithm is not None:
                spec = (f"accept len: {s['accept_length']:.2f}, "
                        f"accept rate: {s['accept_rate']:.2f}, ")
            log(f"Decode batch. #running-req: {int(s['running'])}, "
                f"#token: {int(s['num_used_tokens'])}, token usage: {s['token_usage']:.2f}, "
                f"{spec}cuda graph: True, gen throughput (token/s): {s['gen_throughput']:.2f}, "
                f"#queue-req: {int(s['queued'])},", rank=prefix)


_LOAD_PROMPTS = (
    "Solve: a train travels 120 km in 1.5 hours. What is its average speed?",
    "Write a Python function that returns the n-th Fibonacci number.",
    "Summarise the causes of the French Revolution in three sentences.",
    "Explain speculative decoding to a new engineer.",
    "Translate 'the weather is nice today' into German and French.",
    "What is the derivative of x^3 * sin(x)?",
    "List five prime numbers greater than 100.",
    "Refactor this loop into a list comprehension: for x in xs: ys.append(x*x)",
)


def background_load(server: Server, rate: float) -> None:
    """Simulated internal traffic: a Poisson stream of fake requests at ``rate`` req/s."""
    rng = random.Random(_seed("load", server.engine.spec.key))
    eng = server.engine
    counter = 0
    while not server.stop.wait(rng.expovariate(rate)):
        if not server.ready:
            continue
        counter += 1
        prompt = rng.choice(_LOAD_PROMPTS) + f" (#{counter % 97})"
        max_new = rng.choice((128, 256, 256, 512))
        plan = plan_request(eng.spec, prompt, count_tokens(prompt), max_new, 0.0, eng.step_ms)
        threading.Thread(target=eng.run, args=(plan, f"sim-load-{counter}", server.stop),
                         daemon=True).start()


def hang_later(server: Server, after_s: float) -> None:
    """``SGLANG_SIM_HANG_AFTER_S``: the scheduler hangs ``after_s`` seconds after start-up."""
    if server.stop.wait(after_s):
        return
    server.hung = True
    log(f"SGLANG_SIM_HANG_AFTER_S={after_s:g}: the simulated scheduler hangs now (SIGUSR2 ends it); "
        "/health still answers 200, /health_generate and /generate block.")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    started = time.time()
    via_serve = bool(argv) and argv[0] == "serve"
    if via_serve:
        argv = argv[1:]
    else:
        warning, _, _ = _split_help()
        sys.stderr.write(warning.replace(
            "/tmp/sg/venv/lib/python3.11/site-packages/sglang/launch_server.py", __file__))
        sys.stderr.flush()
    parser = build_parser()
    ns = parser.parse_args(argv)
    launch = shlex.join(["sglang", "serve", *argv] if via_serve
                        else ["python", "-m", "sglang.launch_server", *argv])
    try:
        resolved = resolve_args(ns, argv)
    except UsageError as exc:  # real SGLang's argparse refused what the simulator's parser took
        sys.stderr.write(parser.format_usage() + f"{exc}\n")
        return 2
    except LaunchError as exc:
        sys.stderr.write(f"{exc.kind}: {exc.message}\n")
        return 1
    for w in resolved.warnings:
        log(w)
    log(f"server_args={_server_args_repr(resolved.args)}")
    server = Server(resolved, launch, started)

    def on_signal(signum: int, _frame: Any) -> None:
        server.stopping = True

    def on_hang(signum: int, _frame: Any) -> None:
        server.hung = signum == signal.SIGUSR1

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGUSR1, on_hang)
    signal.signal(signal.SIGUSR2, on_hang)
    host, port = resolved.args["host"], resolved.args["port"]
    try:
        httpd = ThreadingHTTPServer((host, port), make_handler(server))
    except OSError as exc:
        log(f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
            f"({host!r}, {port}): {exc.strerror.lower() if exc.strerror else exc}")
        return 1
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1},
                     daemon=True).start()
    ok = startup(server, _env_float("SGLANG_SIM_STARTUP_S", 3.0), _fail_mode())
    if not ok and not server.stopping:
        httpd.shutdown()
        return 1
    if ok:
        threading.Thread(target=decode_logger, args=(server,), daemon=True).start()
        rate = _env_float("SGLANG_SIM_LOAD", 0.0)
        if rate > 0:
            log(f"SGLANG_SIM_LOAD={rate:g}: generating simulated internal traffic "
                f"({rate:g} requests/s); the numbers it moves are not real requests.")
            threading.Thread(target=background_load, args=(server, rate), daemon=True).start()
        hang_after = os.environ.get("SGLANG_SIM_HANG_AFTER_S", "").strip()
        if hang_after:
            threading.Thread(target=hang_later, args=(server, _env_float("SGLANG_SIM_HANG_AFTER_S", 0.0)),
                             daemon=True).start()
    while server.pause(3600.0):
        pass
    server.ready = False
    log("INFO:     Shutting down")
    stop_s = _env_float("SGLANG_SIM_STOP_S", 0.0)
    if stop_s > 0:
        log(f"INFO:     Waiting for requests in flight and freeing GPU memory ({stop_s:g}s)")
        time.sleep(stop_s)
    httpd.shutdown()
    httpd.server_close()
    log("INFO:     Waiting for application shutdown.")
    log("INFO:     Application shutdown complete.")
    log(f"INFO:     Finished server process [{os.getpid()}]")
    return 0
