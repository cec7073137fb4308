"""The SGLang protocol simulator: real processes, real HTTP on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from conftest import shared_sglang_judge, wait_for
from specconsole.lab.doubles import sglang_sim
from specconsole.lab.parts.state import free_port
from specconsole.sglang import SglangClient, SglangError
from specconsole.sglang.acceptance import tally

pytestmark = pytest.mark.xdist_group("sglang-sim")  # its module simulators: one set per run, not one per worker

PROMPTS = [
    "What is 17 * 23? Show your work.",
    "Write a haiku about GPUs.",
    "Explain the Pythagorean theorem.",
    "def fib(n): complete this function",
    "List three uses of a hash map.",
    "Translate 'good morning' into Spanish.",
]


# -- helpers ------------------------------------------------------------------------------
@dataclass
class Sim:
    proc: subprocess.Popen[bytes]
    url: str
    port: int
    stdout: Path
    stderr: Path

    def log(self) -> str:
        return self.stderr.read_text()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def sim_env(**extra: str) -> dict[str, str]:
    shared_sglang_judge()
    env = dict(os.environ)
    env.update({"SGLANG_SIM_STARTUP_S": "0.6", "SGLANG_SIM_STEP_MS": "1"})
    env.update(extra)
    return env


def start_sim(args: list[str], workdir: Path, *, wait: str | None = "ready",
              **env: str) -> Sim:
    """Start ``python -m specconsole.lab.doubles.sglang_sim serve ARGS`` on a free loopback port.

    ``wait``: "ready" (until /health is 200), "listening" (first HTTP answer) or None.
    """
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    out, err = workdir / f"sim-{port}.out", workdir / f"sim-{port}.err"
    cmd = [sys.executable, "-m", "specconsole.lab.doubles.sglang_sim", "serve", *args,
           "--host", "127.0.0.1", "--port", str(port)]
    with out.open("wb") as fo, err.open("wb") as fe:
        proc = subprocess.Popen(cmd, stdout=fo, stderr=fe, env=sim_env(**env))
    sim = Sim(proc, f"http://127.0.0.1:{port}", port, out, err)
    if wait is not None:
        wait_sim(sim, ready=wait == "ready")
    return sim


def wait_sim(sim: Sim, *, ready: bool, timeout: float = 30.0) -> None:
    """Until the simulator answers /health (``ready``: with 200); its log if it exits first."""
    def answers() -> bool:
        if sim.proc.poll() is not None:
            raise AssertionError(f"simulator exited {sim.proc.returncode}: {sim.log()[-2000:]}")
        try:
            code = httpx.get(f"{sim.url}/health", timeout=2).status_code
        except httpx.TransportError:
            return False
        return not ready or code == 200

    assert wait_for(answers, timeout, what=f"the simulator at {sim.url} {'ready' if ready else 'listening'}",
                    step=0.03)


def run_sim(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specconsole.lab.doubles.sglang_sim", "serve", *args],
                          capture_output=True, text=True, timeout=30, env=sim_env(**env))


def make_draft(path: Path, **config: object) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    cfg = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "block_size": 16,
           "target_layer_ids": [1, 9, 17, 25, 33], "mask_token_id": 151669,
           "num_hidden_layers": 5}
    cfg.update(config)
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def generate(url: str, text: str, max_new_tokens: int = 96, **extra: object) -> dict:
    body = {"text": text, "sampling_params": {"max_new_tokens": max_new_tokens,
                                              "temperature": 0}}
    body.update(extra)
    resp = httpx.post(f"{url}/generate", json=body, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.json()


# -- fixtures: three deployments, started together ----------------------------------------
NEXTN_ARGS = ["--model-path", "Qwen/Qwen3-8B", "--speculative-algorithm", "NEXTN",
              "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
              "--speculative-num-draft-tokens", "4", "--enable-metrics"]


@pytest.fixture(scope="module")
def sims(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("sims")
    draft = make_draft(base / "dflash-b16")
    started = {
        "nextn": start_sim(NEXTN_ARGS, base, wait=None),
        "dflash": start_sim(["--model-path", "Qwen/Qwen3-8B", "--speculative-algorithm",
                             "DFLASH", "--speculative-draft-model-path", str(draft),
                             "--speculative-draft-window-size", "16", "--enable-metrics"],
                            base, wait=None),
        "vanilla": start_sim(["--model", "Qwen/Qwen3-8B", "--api-key", "sekret"], base,
                             wait=None),
    }
    try:
        for sim in started.values():
            wait_sim(sim, ready=True)
        yield started
    finally:
        for sim in started.values():
            sim.stop()


# -- the parser, in process ---------------------------------------------------------------
def test_parser_built_from_flags_json() -> None:
    parser = sglang_sim.build_parser()
    ns = parser.parse_args(["--model", "m", "--speculative-draft-model", "/d",
                            "--no-dllm-fdfo", "--tensor-parallel-size", "2", "--context-length", "32k",
                            "--cuda-graph-bs-decode", "1", "2", "4", "--trust-remote-code"])
    assert ns.model_path == "m" and ns.speculative_draft_model_path == "/d"
    assert ns.dllm_fdfo is False and ns.tp_size == 2 and ns.context_length == 32000
    assert ns.cuda_graph_bs_decode == [1, 2, 4] and ns.trust_remote_code is True
    assert ns.port == 30000 and ns.host == "127.0.0.1" and ns.load_format == "auto"
    dests = {f["dest"] for f in sglang_sim.load_flags()} - {"help"}
    assert dests <= set(vars(ns))


def test_parser_refuses_like_argparse(capsys: pytest.CaptureFixture[str]) -> None:
    parser = sglang_sim.build_parser()
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["--model-path", "m", "--dtype", "int3"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: sglang serve [-h] --model-path MODEL_PATH")
    assert "sglang serve: error: argument --dtype: invalid choice: 'int3'" in err


def test_dflash_block_size_inferred_from_draft_config(tmp_path: Path) -> None:
    draft = make_draft(tmp_path / "d", block_size=8)
    argv = ["--model-path", "Qwen/Qwen3-8B", "--speculative-algorithm", "dflash",
            "--speculative-draft-model-path", str(draft), "--speculative-num-steps", "4"]
    ns = sglang_sim.build_parser().parse_args(argv)
    shared_sglang_judge()  # real SGLang 0.5.23 resolves it
    resolved = sglang_sim.resolve_args(ns, argv)
    assert resolved.args["speculative_algorithm"] == "DFLASH"
    assert resolved.args["speculative_num_draft_tokens"] == 8
    assert resolved.args["speculative_num_steps"] == 1
    assert resolved.args["speculative_eagle_topk"] == 1
    assert resolved.draft_config is not None and resolved.draft_config["block_size"] == 8


def test_acceptance_model_monotone_and_bounded() -> None:
    def accept(spec: sglang_sim.SpecModel) -> float:
        plans = [sglang_sim.plan_request(spec, p, 10, 256, 0.0, 8.0) for p in PROMPTS]
        return sum(x.completion_tokens for x in plans) / sum(x.verify_ct for x in plans)

    def dflash(block: int, window: int | None) -> sglang_sim.SpecModel:
        return sglang_sim.SpecModel("DFLASH", 1, 1, block, window)

    vanilla = sglang_sim.SpecModel(None, 0, 1, 1, None)
    nextn4 = sglang_sim.SpecModel("EAGLE", 3, 1, 4, None)
    assert accept(vanilla) == 1.0
    assert 2.0 < accept(nextn4) < 3.3
    w16, w64, w256, full = (accept(dflash(16, w)) for w in (16, 64, 256, None))
    assert w16 > accept(nextn4) + 2 and w16 < w64 < w256 <= full < 16
    assert full - w16 < 0.25 * w16  # windows help, slightly
    assert accept(dflash(4, None)) < accept(dflash(8, None)) < full
    for p in PROMPTS:  # per prompt too, and the same plan twice
        a = sglang_sim.plan_request(dflash(16, 16), p, 10, 200, 0.0, 8.0)
        b = sglang_sim.plan_request(dflash(16, 64), p, 10, 200, 0.0, 8.0)
        assert a.verify_ct >= b.verify_ct and max(a.steps) <= 16
        assert a == sglang_sim.plan_request(dflash(16, 16), p, 10, 200, 0.0, 8.0)


# -- refusals, as processes ---------------------------------------------------------------
def test_unknown_flag_exits_2() -> None:
    res = run_sim(["--model-path", "m", "--speculative-block-size", "16"])
    assert res.returncode == 2
    assert res.stderr.startswith("usage: sglang serve")
    assert res.stderr.rstrip().endswith(
        "sglang serve: error: unrecognized arguments: --speculative-block-size 16")


def test_help_prints_real_help() -> None:
    res = run_sim(["--help"])
    assert res.returncode == 0
    assert res.stdout.startswith("usage: sglang serve [-h] --model-path MODEL_PATH")
    assert "--speculative-dflash-block-size SPECULATIVE_DFLASH_BLOCK_SIZE" in res.stdout


@pytest.mark.parametrize(("extra", "needle"), [
    (["--speculative-draft-window-size", "8"],
     "ValueError: --speculative-draft-window-size must be >= --speculative-num-draft-tokens "
     "(block_size). window_size=8, block_size=16."),
    (["--speculative-draft-window-size", "0"],
     "ValueError: --speculative-draft-window-size must be positive, got 0."),
    (["--speculative-dflash-block-size", "16", "--speculative-num-draft-tokens", "8"],
     "For DFLASH they must match. speculative_num_draft_tokens=8, "
     "speculative_dflash_block_size=16."),
    (["--speculative-dflash-block-size", "0"],
     "DFLASH requires --speculative-dflash-block-size to be positive, got 0."),
])
def test_dflash_refusals(tmp_path: Path, extra: list[str], needle: str) -> None:
    draft = make_draft(tmp_path / "d")
    res = run_sim(["--model-path", "Qwen/Qwen3-8B", "--speculative-algorithm", "DFLASH",
                   "--speculative-draft-model-path", str(draft), *extra])
    assert res.returncode == 1
    assert needle in res.stderr


def test_dflash_draft_model_required_and_must_exist(tmp_path: Path) -> None:
    res = run_sim(["--model-path", "Qwen/Qwen3-8B", "--speculative-algorithm", "DFLASH"])
    assert res.returncode == 1
    assert ("ValueError: DFLASH speculative decoding requires setting "
            "--speculative-draft-model-path.") in res.stderr
    missing = tmp_path / "nope"
    res = run_sim(["--model-path", "Qwen/Qwen3-8B", "--speculative-algorithm", "DFLASH",
                   "--speculative-draft-model-path", str(missing)])
    assert res.returncode == 1
    # real SGLang (huggingface_hub) refuses a draft path that is neither a folder nor a repo id
    assert f"OSError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': '{missing}'" in res.stderr
    (tmp_path / "empty").mkdir()
    res = run_sim(["--model-path", "Qwen/Qwen3-8B", "--speculative-algorithm", "DFLASH",
                   "--speculative-draft-model-path", str(tmp_path / "empty")])
    assert res.returncode == 1  # real SGLang (transformers) reading a folder without a model config
    assert f"ValueError: Unrecognized model in {tmp_path / 'empty'}." in res.stderr


def test_startup_crash(tmp_path: Path) -> None:
    res = run_sim(["--model-path", "Qwen/Qwen3-8B", "--port", str(free_port())], SGLANG_SIM_FAIL="oom",
                  SGLANG_SIM_STARTUP_S="0.3")
    assert res.returncode == 1
    assert "torch.OutOfMemoryError: CUDA out of memory." in res.stderr
    assert "Load weight end." in res.stderr
    assert "ready to roll" not in res.stderr


# -- a live start-up ----------------------------------------------------------------------
def test_startup_503_then_ready_then_sigterm(tmp_path: Path) -> None:
    sim = start_sim(["--model-path", "Qwen/Qwen3-8B", "--enable-metrics"], tmp_path,
                    wait="listening", SGLANG_SIM_STARTUP_S="1.2", SGLANG_SIM_LOAD="30")
    try:
        assert httpx.get(f"{sim.url}/health", timeout=5).status_code == 503
        assert httpx.get(f"{sim.url}/health_generate", timeout=5).status_code == 503
        wait_sim(sim, ready=True)
        log = sim.log()
        for line in ("Load weight begin", "Load weight end", "Capture cuda graph begin",
                     "Capture cuda graph 3/12", "The server is fired up and ready to roll!"):
            assert line in log
        assert "] The server is fired up" in log and log.startswith("[20")
        # simulated internal traffic moves the counters
        no_requests = 'sglang:num_requests_total{model_name="Qwen/Qwen3-8B"} 0.0'
        assert wait_for(lambda: no_requests not in httpx.get(f"{sim.url}/metrics", timeout=5).text, 10,
                        what="SGLANG_SIM_LOAD to produce requests")
    finally:
        rc = sim.stop()
    assert rc == 0
    assert "Shutting down" in sim.log() and "Finished server process" in sim.log()
    assert '"GET /health HTTP/1.1" 503 Service Unavailable' in sim.stdout.read_text()


# -- endpoints of the running deployments -------------------------------------------------
def test_server_info_dflash(sims: dict[str, Sim]) -> None:
    sim = sims["dflash"]
    info = httpx.get(f"{sim.url}/server_info", timeout=5).json()
    assert info["speculative_algorithm"] == "DFLASH"
    assert info["speculative_draft_model_path"].endswith("dflash-b16")
    assert info["speculative_num_draft_tokens"] == 16  # inferred from the draft's config
    assert info["speculative_dflash_block_size"] is None
    assert info["speculative_draft_window_size"] == 16
    assert info["speculative_num_steps"] == 1 and info["speculative_eagle_topk"] == 1
    assert info["model_path"] == "Qwen/Qwen3-8B" and info["port"] == sim.port
    assert info["version"] == "0.5.23" and isinstance(info["startup_time"], float)
    assert info["launch_command"].startswith("sglang serve --model-path Qwen/Qwen3-8B")
    states = info["internal_states"]
    assert isinstance(states, list) and len(states) == 1
    assert isinstance(states[0]["avg_spec_accept_length"], float)
    legacy = httpx.get(f"{sim.url}/get_server_info", timeout=5).json()
    assert legacy["speculative_algorithm"] == "DFLASH"
    model = httpx.get(f"{sim.url}/model_info", timeout=5).json()
    assert model["model_path"] == "Qwen/Qwen3-8B" and model["is_generation"] is True


def test_server_info_nextn(sims: dict[str, Sim]) -> None:
    info = httpx.get(f"{sims['nextn'].url}/server_info", timeout=5).json()
    assert info["speculative_algorithm"] == "EAGLE"  # SGLang resolves NEXTN to EAGLE
    assert info["speculative_num_draft_tokens"] == 4
    assert info["speculative_num_steps"] == 3 and info["speculative_eagle_topk"] == 1
    # real SGLang 0.5.23 leaves NEXTN's draft path unset in its resolved settings (the MTP layers
    # are loaded from the target); the simulator used to report the target's path here
    assert info["speculative_draft_model_path"] is None
    assert info["max_running_requests"] == 48


def test_generate_meta_info_arithmetic(sims: dict[str, Sim]) -> None:
    url = sims["dflash"].url
    out = generate(url, PROMPTS[0], 80)
    meta = out["meta_info"]
    assert isinstance(out["text"], str) and out["text"]
    assert isinstance(meta["id"], str)
    for key in ("prompt_tokens", "completion_tokens", "spec_verify_ct",
                "spec_num_correct_drafts", "spec_num_proposed_drafts"):
        assert type(meta[key]) is int, key
    for key in ("e2e_latency", "spec_accept_length", "spec_accept_rate"):
        assert type(meta[key]) is float, key
    assert 1 <= meta["completion_tokens"] <= 80
    assert meta["spec_accept_length"] == pytest.approx(
        meta["completion_tokens"] / meta["spec_verify_ct"])
    assert meta["spec_num_proposed_drafts"] == meta["spec_verify_ct"] * 15
    assert meta["spec_num_correct_drafts"] == meta["completion_tokens"] - meta["spec_verify_ct"]
    assert meta["spec_accept_rate"] == pytest.approx(
        meta["spec_num_correct_drafts"] / meta["spec_num_proposed_drafts"])
    assert 1.0 < meta["spec_accept_length"] <= 16
    assert meta["finish_reason"]["type"] in ("length", "stop")
    # SGLang 0.5.23's per-request histogram (tokenizer_manager.py: spec_correct_drafts_histogram):
    # index = drafts accepted in a verify step (no bonus), value = steps; grown to the most accepted
    hist = meta["spec_correct_drafts_histogram"]
    assert isinstance(hist, list) and all(type(n) is int and n >= 0 for n in hist) and hist[-1] > 0
    assert sum(hist) == meta["spec_verify_ct"]
    assert sum(n * c for n, c in enumerate(hist)) == meta["spec_num_correct_drafts"]
    assert len(hist) <= 16  # block 16: at most 15 drafts accepted in a step
    assert "spec_accept_histogram" not in meta  # the earlier releases' name, not 0.5.23's
    again = generate(url, PROMPTS[0], 80)["meta_info"]
    for key in ("completion_tokens", "spec_verify_ct", "spec_accept_length", "spec_correct_drafts_histogram"):
        assert again[key] == meta[key]  # temperature 0: same prompt, same numbers


def test_dflash_window16_beats_nextn4(sims: dict[str, Sim]) -> None:
    def mean_accept(url: str) -> float:
        metas = [generate(url, p, 128)["meta_info"] for p in PROMPTS]
        # the summed histograms give the same mean (bonus token included) as the counts
        detail = tally(metas).detail()
        assert detail is not None and detail.requests == len(PROMPTS)
        mean = sum(m["completion_tokens"] for m in metas) / sum(m["spec_verify_ct"] for m in metas)
        assert detail.accept_length == pytest.approx(mean)
        return mean

    nextn, dflash = mean_accept(sims["nextn"].url), mean_accept(sims["dflash"].url)
    assert 1.8 < nextn < 3.6
    assert dflash > nextn + 1.5 and dflash <= 16


def test_vanilla_has_no_spec_fields_and_needs_api_key(sims: dict[str, Sim]) -> None:
    url = sims["vanilla"].url
    assert httpx.get(f"{url}/health", timeout=5).status_code == 200  # exempt
    assert httpx.get(f"{url}/server_info", timeout=5).status_code == 401
    headers = {"Authorization": "Bearer sekret"}
    info = httpx.get(f"{url}/server_info", headers=headers, timeout=5).json()
    assert info["speculative_algorithm"] is None
    assert "avg_spec_accept_length" not in info["internal_states"][0]
    resp = httpx.post(f"{url}/generate", headers=headers, timeout=30, json={
        "text": PROMPTS[1], "sampling_params": {"max_new_tokens": 32, "temperature": 0}})
    meta = resp.json()["meta_info"]
    assert not any(k.startswith("spec_") for k in meta)
    assert tally([meta]).detail() is None and not tally([meta]).speculative_without_detail  # nothing to say
    assert httpx.get(f"{url}/metrics", timeout=5).status_code == 404  # no --enable-metrics


def test_generate_rejects_malformed_bodies(sims: dict[str, Sim]) -> None:
    url = sims["nextn"].url
    bad = httpx.post(f"{url}/generate", content=b"{not json", timeout=5)
    assert bad.status_code == 400 and "message" in bad.json()["error"]
    none = httpx.post(f"{url}/generate", json={"sampling_params": {}}, timeout=5)
    assert none.status_code == 400
    assert none.json()["error"]["message"] == (
        "Either text, input_ids or input_embeds should be provided.")
    neg = httpx.post(f"{url}/generate", json={"text": "x", "sampling_params": {
        "max_new_tokens": -1}}, timeout=5)
    assert neg.status_code == 400
    batch = httpx.post(f"{url}/generate", json={"input_ids": [[1, 2, 3], [4, 5]],
                       "sampling_params": {"max_new_tokens": 8, "temperature": 0}}, timeout=30)
    assert batch.status_code == 200
    items = batch.json()
    assert isinstance(items, list) and [i["meta_info"]["prompt_tokens"] for i in items] == [3, 2]


async def test_metrics_parsed_by_client(sims: dict[str, Sim]) -> None:
    sim = sims["dflash"]
    async with SglangClient(sim.url, timeout_s=5) as client:
        out = await client.generate(PROMPTS[2], 64)
        assert out["meta_info"]["spec_verify_ct"] > 0
        m = await client.metrics()
        assert m.generation_tokens_total is not None and m.generation_tokens_total >= 1
        assert m.spec_verify_calls_total is not None and m.spec_verify_calls_total >= 1
        assert m.running_reqs == 0 and m.queued_reqs == 0
        assert m.spec_accept_length is not None and m.spec_accept_length > 1
        assert m.gen_throughput is not None and m.gen_throughput > 0
        assert m.tokens_per_s == m.gen_throughput
        assert m.token_usage is not None and 0 <= m.token_usage <= 1
        info = await client.server_info()
        assert info.algorithm == "DFLASH" and info.block_size == 16
        assert info.draft_window == 16 and info.version == "0.5.23"
        assert info.avg_accept_length is not None and info.avg_accept_length > 1
    async with SglangClient(sims["vanilla"].url, timeout_s=5, api_key="sekret") as client:
        with pytest.raises(SglangError) as exc:
            await client.metrics()
        assert exc.value.kind == "metrics_disabled"
        assert "metrics disabled: launch with --enable-metrics" in str(exc.value)
        info = await client.server_info()
        assert info.algorithm is None and info.avg_accept_length is None


def test_ddtree_build_refuses_a_full_tree_without_triton_decode(tmp_path: Path) -> None:
    # the DDTree build: real SGLang 0.5.23 judges it as DFLASH, then the simulated PR #29907 rules
    draft = make_draft(tmp_path / "d")
    args = ["--model-path", "Qwen/Qwen3-8B", "--speculative-algorithm", "DDTREE",
            "--speculative-draft-model-path", str(draft), "--speculative-ddtree-budget", "32",
            "--attention-backend", "triton"]
    res = run_sim([*args, "--decode-attention-backend", "fa3"], SGLANG_SIM_VERSION="0.5.24+ddtree")
    assert res.returncode == 1
    assert ("requires the triton attention backend for prefill and decode, got prefill_attention_backend=triton, "
            "decode_attention_backend=fa3.") in res.stderr
    res = run_sim([*args, "--speculative-dflash-draft-window-size", "8"], SGLANG_SIM_VERSION="0.5.24+ddtree")
    assert res.returncode == 1  # the renamed window flag reaches real SGLang's DFLASH rule under its 0.5.23 name
    assert "--speculative-draft-window-size must be >= --speculative-num-draft-tokens" in res.stderr
