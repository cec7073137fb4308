"""The serving host's SGLang: its model folders, the ``sglang`` it has installed (the simulator,
judged by real SGLang), the ``sglang.service`` unit that runs it, and its ``systemctl``."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

from specconsole.lab import sglang_judge
from specconsole.lab.lab_state import SERVE_GPUS, LabError, LabOptions, Say, write_file
from specconsole.lab.sglang_versions import BASE_VERSION, VERSION_ENV

TARGET_MODEL = "Qwen3-8B"
#: z-lab's DFlash draft for Qwen3-8B, as a download of ``z-lab/Qwen3-8B-DFlash-b16`` names its folder.
DRAFT_MODEL = "Qwen3-8B-DFlash-b16"
#: The same draft, retrained badly: its simulated acceptance profile is 0.6 (a rollout's gate catches it).
WEAK_DRAFT_MODEL = "Qwen3-8B-DFlash-b16-weak"
#: An EAGLE-3 draft head and a small model of the same family (STANDALONE's draft), for the
#: algorithms besides DFLASH that need a draft model of their own.
EAGLE_DRAFT_MODEL = "eagle3-qwen3-8b"
SMALL_MODEL = "Qwen3-0.6B"
#: The Hugging Face model ids the lab's hub cache holds (:func:`write_hub_cache`).
HUB_MODELS = ("Qwen/Qwen3-8B",)


def write_target_model(path: Path, **config: object) -> Path:
    """A target model folder as SGLang reads it before loading weights: Qwen3-8B's ``config.json``
    (``config`` overrides keys: a smaller model of the family)."""
    write_file(path / "config.json", json.dumps({
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
        "num_hidden_layers": 36, "vocab_size": 151936, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 12288, "max_position_embeddings": 40960,
        "torch_dtype": "bfloat16", **config,
    }, indent=2) + "\n")
    return path


def write_hub_cache(hf_home: Path) -> Path:
    """A Hugging Face cache (``HF_HOME``) holding :data:`HUB_MODELS`' ``config.json``, as a download
    leaves it: with ``HF_HUB_OFFLINE=1`` real SGLang resolves ``--model-path Qwen/Qwen3-8B`` from it
    (this machine reaches no hub)."""
    revision = "0" * 40
    for model_id in HUB_MODELS:
        repo = hf_home / "hub" / f"models--{model_id.replace('/', '--')}"
        write_target_model(repo / "snapshots" / revision)
        write_file(repo / "refs" / "main", revision)
    return hf_home


def write_draft_model(path: Path, block_size: int = 16, acceptance: float | None = None) -> Path:
    """A DFlash draft model folder shaped like z-lab's published drafts (``z-lab/Qwen3-8B-DFlash-b16``):
    its ``config.json`` only, with what SGLang's DFLASH reads from it (``parse_dflash_draft_config``):
    ``architectures: ["DFlashDraftModel"]``, ``block_size`` at the top level, ``dflash_config`` with the
    mask token id and the target layers the draft reads, ``num_target_layers``, and the Qwen3 layer shape.
    ``acceptance``: the simulator's acceptance profile for this draft (``specconsole_lab_acceptance``)."""
    layers = 5
    profile = {} if acceptance is None else {"specconsole_lab_acceptance": acceptance}
    write_file(path / "config.json", json.dumps({
        "architectures": ["DFlashDraftModel"], "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
        "model_type": "qwen3", "block_size": block_size,
        "dflash_config": {"mask_token_id": 151669, "target_layer_ids": [1, 9, 17, 25, 33]},
        "num_target_layers": 36, "num_hidden_layers": layers, "hidden_size": 4096, "intermediate_size": 12288,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "hidden_act": "silu",
        "layer_types": ["full_attention"] * layers, "max_position_embeddings": 40960, "max_window_layers": layers,
        "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
        "use_sliding_window": False, "attention_bias": False, "attention_dropout": 0.0, "tie_word_embeddings": False,
        "bos_token_id": 151643, "eos_token_id": 151645, "vocab_size": 151936, "dtype": "bfloat16",
        "use_cache": True, **profile,
    }, indent=2) + "\n")
    return path


def write_models(models: Path) -> None:
    """The serving host's ``models/``: the target, its DFlash and EAGLE-3 drafts, a small model."""
    write_target_model(models / TARGET_MODEL)
    write_draft_model(models / DRAFT_MODEL)
    write_draft_model(models / WEAK_DRAFT_MODEL, acceptance=0.6)
    write_file(models / EAGLE_DRAFT_MODEL / "config.json", json.dumps({
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 4096,
        "num_hidden_layers": 1, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 12288,
        "vocab_size": 151936, "draft_vocab_size": 32000, "max_position_embeddings": 40960,
    }, indent=2) + "\n")
    write_target_model(models / SMALL_MODEL, hidden_size=1024, num_hidden_layers=28,
                       num_attention_heads=16, intermediate_size=3072)


def sglang_args(target_model_dir: Path, port: int) -> list[str]:
    """The deployment the lab starts with: NEXTN with 4 draft tokens, as in the seed workflow."""
    return [
        "serve", "--model-path", str(target_model_dir),
        "--host", "127.0.0.1", "--port", str(port),
        "--tp-size", str(SERVE_GPUS),
        "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
        "--enable-metrics",
    ]


def write_unit(unit_path: Path, serve_bin: Path, args: list[str], o: LabOptions) -> None:
    """``sglang.service``: ``serve_bin``'s ``sglang`` with ``args``, the simulator's settings from ``o``."""
    exec_start = " \\\n    ".join(
        [shlex.quote(str(serve_bin / "sglang"))]
        + [" ".join(shlex.quote(a) for a in pair) for pair in _pairs(args)]
    )
    write_file(unit_path, "\n".join([
        "[Unit]",
        "Description=SGLang server (specconsole lab: SGLang-protocol simulator)",
        "After=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        f"Environment=SGLANG_SIM_STARTUP_S={o.sglang_startup_s:g}",
        f"Environment=SGLANG_SIM_LOAD={o.sglang_load_rps:g}",
        f"Environment=SGLANG_SIM_STEP_MS={o.sglang_step_ms:g}",
        *([f"Environment=SGLANG_SIM_STOP_S={o.sglang_stop_s:g}"] if o.sglang_stop_s else []),
        f"Environment=PATH={serve_bin}:/usr/local/bin:/usr/bin:/bin",
        f"ExecStart={exec_start}",
        f"Restart={o.sglang_restart}",
        "TimeoutStopSec=20",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ]))


def _pairs(args: list[str]) -> list[list[str]]:
    """Group ``serve --flag value --switch`` into lines for a readable ExecStart."""
    out: list[list[str]] = []
    for a in args:
        if a.startswith("--") or not out:
            out.append([a])
        else:
            out[-1].append(a)
    return out


def systemctl(serve_root: Path, env: dict[str, str], say: Say, *args: str, check: bool = True,
              timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """The serving host's ``systemctl ARGS`` (its ``bin/systemctl``), reported through ``say`` under
    the host's name (its folder's: ``serve``, ``serve2``, ...)."""
    cmd = [str(serve_root / "bin" / "systemctl"), *args]
    host = serve_root.name
    say(f"{host}: $ systemctl {' '.join(args)}")
    t0 = time.monotonic()
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if check and res.returncode != 0:
        raise LabError(f"lab: {host}: `systemctl {' '.join(args)}` failed ({res.returncode}): "
                       f"{res.stderr.strip()[-300:]}")
    say(f"{host}:   exit {res.returncode} in {time.monotonic() - t0:.1f}s")
    return res


def write_sglang_install(root: Path, version: str, judge_socket: str, venv_python: Path) -> None:
    """A host's installed SGLang: ``bin/sglang`` (:func:`sglang_launcher`) and the SGLang virtualenv's
    ``opt/sglang/bin/python`` (``venv_python``, the serving host's, is the one the launcher runs)."""
    write_file(root / "bin" / "sglang", sglang_launcher(version, judge_socket, venv_python), 0o755)
    write_file(root / "opt" / "sglang" / "bin" / "python",
               f"#!{sys.executable}\n# The serving host's SGLang Python: .venv-sglang's, with a warm start for\n"
               f"# `python - ARGS` (see specconsole.lab.sglang_judge.python_main)\nimport os\nimport sys\n\n"
               f"from specconsole.lab.sglang_judge import SOCKET_ENV, python_main\n\n"
               f"os.environ.setdefault(SOCKET_ENV, {judge_socket!r})\n"
               f"sys.exit(python_main({(sglang_judge.sglang_python() or 'python3')!r}))\n", 0o755)


def sglang_launcher(version: str, judge_socket: str, venv_python: Path) -> str:
    """The serving host's ``sglang``: the simulator, judged by real SGLang (:mod:`.sglang_judge`).

    For SGLang 0.5.23 it is a Python script run by ``.venv-sglang``'s Python, as a pip-installed
    ``sglang`` console script is: the deploy's host check finds real SGLang through its ``#!``
    line. The DDTree build is in no release, so real SGLang cannot be it: its launcher is a shell
    script, and the host check says it cannot run there (the built-in rules decide)."""
    py, sglang_py = sys.executable, sglang_judge.sglang_python() or "python3"
    env = {VERSION_ENV: version, sglang_judge.SOCKET_ENV: judge_socket, sglang_judge.PYTHON_ENV: sglang_py}
    if version == BASE_VERSION:
        return (f"#!{venv_python}\n"
                f"# SGLang-protocol simulator (SGLang's CUDA engine cannot run here); this interpreter is real\n"
                f"# SGLang 0.5.23, which judges its command line (specconsole.lab.sglang_judge)\n"
                f"import os\nimport sys\n\n"
                f"os.environ.update({env!r})\n"
                f"os.execv({py!r}, [{py!r}, '-m', 'specconsole.lab.sglang_sim', *sys.argv[1:]])\n")
    assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return (f"#!/bin/sh\n# SGLang-protocol simulator of a DDTree build (sgl-project/sglang PR #29907, in no "
            f"release)\n{assigns} exec {shlex.quote(py)} -m specconsole.lab.sglang_sim \"$@\"\n")
