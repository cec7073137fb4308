"""The server process's state, shared by the HTTP handler threads, and the endpoints' bodies."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from typing import Any

from specconsole.lab.doubles import sglang_versions
from specconsole.lab.doubles.sglang_sim.acceptance import count_tokens, plan_request
from specconsole.lab.doubles.sglang_sim.engine import Engine
from specconsole.lab.doubles.sglang_sim.errors import BadRequest
from specconsole.lab.doubles.sglang_sim.flags import VERSION
from specconsole.lab.doubles.sglang_sim.resolve import Resolved


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return max(0.0, float(raw))
    except ValueError:
        return default


class Server:
    """Process state shared by the HTTP handler threads."""

    def __init__(self, resolved: Resolved, launch_command: str, startup_time: float) -> None:
        self.resolved = resolved
        self.args = resolved.args
        self.launch_command = launch_command
        self.startup_time = startup_time
        self.ready = False
        #: Set by the signal handler (a plain flag: a handler must not take locks).
        self.stopping = False
        #: The scheduler hangs (SIGUSR1, SGLANG_SIM_HANG_AFTER_S) until cleared (SIGUSR2); a
        #: plain flag like ``stopping``, polled by the requests it holds.
        self.hung = False
        #: Set by the main thread once stopping; the worker threads wait on it.
        self.stop = threading.Event()
        step_ms = _env_float("SGLANG_SIM_STEP_MS", 8.0)
        self.engine = Engine(resolved, step_ms, bool(self.args.get("enable_metrics")))
        cfg = resolved.target_config or {}
        self.architectures = cfg.get("architectures") or ["Qwen3ForCausalLM"]
        self.model_type = cfg.get("model_type") or "qwen3"
        self.context_len = int(self.args.get("context_length")
                               or cfg.get("max_position_embeddings") or 40960)
        self.exclude_prefixes = tuple(self.args.get("uvicorn_access_log_exclude_prefixes") or ())

    def pause(self, seconds: float) -> bool:
        """Sleep in the main thread; False (and ``stop`` set) once a signal asked to stop.

        Short sleeps, so signal handlers run promptly whichever thread the kernel picked.
        """
        end = time.monotonic() + seconds
        while True:
            if self.stopping:
                self.stop.set()
                return False
            left = end - time.monotonic()
            if left <= 0:
                return True
            time.sleep(min(0.05, left))

    def wait_scheduler(self, limit_s: float | None = None) -> bool:
        """Hold a request that needs the scheduler while it hangs: True once it runs again,
        False when ``limit_s`` passed or the server is stopping first."""
        end = None if limit_s is None else time.monotonic() + limit_s
        while self.hung:
            if self.stopping or self.stop.is_set() or (end is not None and time.monotonic() > end):
                return False
            time.sleep(0.05)
        return True

    # -- endpoint bodies ----------------------------------------------------------------
    def server_info(self) -> dict[str, Any]:
        info = {k: v for k, v in self.args.items() if k != "help"}
        info.update({
            "launch_command": self.launch_command,
            "startup_time": self.startup_time,
            "version": VERSION,
            "max_total_num_tokens": self.engine.max_total_tokens,
            "max_req_input_len": self.context_len - 5,
            "internal_states": self.engine.internal_states(),
        })
        if sglang_versions.has_ddtree(VERSION):  # renamed settings, reported under both names
            info["speculative_dflash_draft_window_size"] = info.get("speculative_draft_window_size")
            info["speculative_dflash_block_size"] = (info.get("speculative_num_draft_tokens")
                                                     if info.get("speculative_algorithm") in ("DFLASH", "DDTREE")
                                                     else None)
            info.setdefault("speculative_ddtree_budget", None)
        return info

    def model_info(self) -> dict[str, Any]:
        return {
            "model_path": self.args["model_path"],
            "tokenizer_path": self.args["tokenizer_path"],
            "is_generation": True,
            "preferred_sampling_params": self.args.get("preferred_sampling_params"),
            "weight_version": self.args.get("weight_version") or "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": self.model_type,
            "architectures": self.architectures,
        }

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{
            "id": self.args["served_model_name"], "object": "model",
            "created": int(self.startup_time), "owned_by": "sglang",
            "root": self.args["model_path"], "parent": None, "max_model_len": self.context_len,
        }]}

    def generate(self, body: Any) -> Any:
        if not isinstance(body, dict):
            raise BadRequest("The request body must be a JSON object.")
        text, ids = body.get("text"), body.get("input_ids")
        if (text is None) == (ids is None):
            if body.get("input_embeds") is not None:
                raise BadRequest("input_embeds is not supported by this server.")
            raise BadRequest("Either text, input_ids or input_embeds should be provided.")
        if body.get("stream"):
            raise BadRequest("stream=true is not supported by the simulator; send stream=false.")
        prompts: list[tuple[str, int]] = []
        batched = False
        if text is not None:
            if isinstance(text, str):
                prompts.append((text, count_tokens(text)))
            elif isinstance(text, list) and text and all(isinstance(t, str) for t in text):
                batched = True
                prompts.extend((t, count_tokens(t)) for t in text)
            else:
                raise BadRequest("text must be a string or a non-empty list of strings.")
        else:
            if isinstance(ids, list) and ids and all(_is_int(i) for i in ids):
                prompts.append((json.dumps(ids), len(ids)))
            elif isinstance(ids, list) and ids and all(
                isinstance(x, list) and x and all(_is_int(i) for i in x) for x in ids
            ):
                batched = True
                prompts.extend((json.dumps(x), len(x)) for x in ids)
            else:
                raise BadRequest(
                    "input_ids must be a non-empty list of ints or a list of such lists.")
        sp = body.get("sampling_params") or {}
        if not isinstance(sp, dict):
            raise BadRequest("sampling_params must be a JSON object.")
        max_new = sp.get("max_new_tokens", 128)
        if not _is_int(max_new):
            raise BadRequest(f"max_new_tokens must be an integer, got {max_new!r}.")
        if max_new < 0:
            raise BadRequest(f"max_new_tokens must be at least 0, got {max_new}.")
        temperature = sp.get("temperature", 1.0)
        if isinstance(temperature, bool) or not isinstance(temperature, int | float):
            raise BadRequest(f"temperature must be a number, got {temperature!r}.")
        if temperature < 0:
            raise BadRequest(f"temperature must be non-negative, got {temperature}.")
        for _, n in prompts:
            if n >= self.context_len:
                raise BadRequest(
                    f"The input ({n} tokens) is longer than the model's context length "
                    f"({self.context_len} tokens).")
        rid = body.get("rid")
        rids = rid if isinstance(rid, list) else None
        results: list[dict[str, Any] | None] = [None] * len(prompts)

        def one(i: int) -> None:
            key, n = prompts[i]
            this_rid = (rids[i] if rids and i < len(rids) else
                        rid if isinstance(rid, str) and not batched else uuid.uuid4().hex)
            results[i] = self._run_one(str(this_rid), key, n, max_new, float(temperature))

        if len(prompts) == 1:
            one(0)
        else:
            threads = [threading.Thread(target=one, args=(i,), daemon=True)
                       for i in range(len(prompts))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        return results if batched else results[0]

    def _run_one(self, rid: str, key: str, prompt_tokens: int, max_new: int,
                 temperature: float) -> dict[str, Any]:
        eng = self.engine
        plan = plan_request(eng.spec, key, prompt_tokens, max_new, temperature, eng.step_ms,
                            nonce=rid)
        e2e = eng.run(plan, rid, self.stop)
        meta: dict[str, Any] = {
            "id": rid,
            "finish_reason": plan.finish_reason,
            "prompt_tokens": plan.prompt_tokens,
            "weight_version": self.args.get("weight_version") or "default",
            "completion_tokens": plan.completion_tokens,
            "cached_tokens": 0,
            "e2e_latency": e2e,
        }
        if eng.spec.algorithm is not None:
            verify = plan.verify_ct
            proposed = verify * max(0, eng.spec.num_draft_tokens - 1)
            correct = plan.completion_tokens - verify
            meta.update({
                "spec_verify_ct": verify,
                "spec_accept_length": plan.completion_tokens / verify if verify else 0.0,
                "spec_accept_rate": correct / proposed if proposed else 0.0,
                "spec_num_correct_drafts": correct,
                "spec_num_proposed_drafts": proposed,
            })
            if verify:  # SGLang 0.5.23 sets it only when the list is not empty
                meta["spec_correct_drafts_histogram"] = plan.correct_drafts_histogram()
        return {"text": plan.text, "output_ids": None, "meta_info": meta}


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)
