"""A protocol simulator of an SGLang 0.5.23 server (SGLang's CUDA engine cannot run here).

With ``SGLANG_SIM_VERSION=0.5.24+ddtree`` it is an SGLang built with DDTree tree verification
(see :mod:`specconsole.lab.doubles.sglang_versions`): ``DDTREE`` among the algorithms,
``--speculative-ddtree-budget``, the renamed DFLASH flags as aliases, DDTREE's validation
(DFLASH's first; no rejection sampling, page size 1, budget >= 1, full-tree mode only with the
triton attention backend; overlap scheduling off), the log line ``Initialized DDTree worker.
block_size=B, tree_budget=N`` and ``/server_info`` reporting the renamed settings under both names.

Run it like the real thing::

    python -m specconsole.lab.doubles.sglang_sim serve --model-path Qwen/Qwen3-8B \\
        --speculative-algorithm DFLASH --speculative-draft-model-path /models/dflash-b16 \\
        --speculative-draft-window-size 16 --enable-metrics --port 30000

(``serve`` is optional, mirroring ``python -m sglang.launch_server ARGS``, which also prints
SGLang's "sglang serve is the recommended entrypoint" warning.)

Modules
    :mod:`.flags`       the command line: SGLang 0.5.23's parser, built from its flags JSON
    :mod:`.resolve`     real SGLang's verdict on a launch (the judge); the model configs
    :mod:`.ddtree`      the DDTree build's rules (simulated)
    :mod:`.acceptance`  the acceptance and timing model (deterministic, hash-based)
    :mod:`.engine`      the engine: slots, queue, counters, gauges
    :mod:`.metrics`     ``/metrics``, produced by prometheus_client
    :mod:`.server`      the process state and the endpoints' bodies
    :mod:`.routes`      the HTTP handler: paths, API key, access log
    :mod:`.lifecycle`   start-up, simulated load, a hung scheduler, shutdown: :func:`main`
    :mod:`.log`, :mod:`.errors`   SGLang-style log lines; the start-up and request failures
"""

from specconsole.lab.doubles.sglang_sim.acceptance import Plan, SpecModel, count_tokens, plan_request
from specconsole.lab.doubles.sglang_sim.errors import BadRequest, LaunchError, UsageError
from specconsole.lab.doubles.sglang_sim.flags import VERSION, build_parser, load_flags
from specconsole.lab.doubles.sglang_sim.lifecycle import main
from specconsole.lab.doubles.sglang_sim.resolve import Resolved, read_hf_config, resolve_args

__all__ = [
    "VERSION", "BadRequest", "LaunchError", "Plan", "Resolved", "SpecModel", "UsageError", "build_parser",
    "count_tokens", "load_flags", "main", "plan_request", "read_hf_config", "resolve_args",
]
