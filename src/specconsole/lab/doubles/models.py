"""What the lab's doubles pretend the hosts have: the GPUs (as the CUDA double tells SGLang's
resolution) and the model folders (a ``config.json`` each, what SGLang reads before it loads
weights), the Hugging Face cache, and so the environment the SGLang judge runs in.

Below the lab's parts and the SGLang judge both: the judge's one-shot fallback
(:func:`specconsole.lab.doubles.sglang_judge.ask`) runs in the environment a lab's warm judge has.
"""

from __future__ import annotations

import json
from pathlib import Path

from specconsole.lab.files import write_file

TRAIN_GPUS = 8
SERVE_GPUS = 2
#: What the lab's CUDA double (``scripts/sglang_venv/specconsole_lab_cuda.py``) tells SGLang's
#: resolution about each host's GPUs: the same H200s the nvidia-smi double shows.
LAB_CUDA_ENV = "SPECCONSOLE_LAB_CUDA"


def lab_cuda(gpus: int) -> str:
    return f"{gpus}:NVIDIA H200:143771:9.0"


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


def judge_env(hf_home: Path) -> dict[str, str]:
    """The environment of a lab's SGLang judge: the serving host's GPUs (the CUDA double), no hub."""
    return {LAB_CUDA_ENV: lab_cuda(SERVE_GPUS), "HF_HUB_OFFLINE": "1", "HF_HOME": str(write_hub_cache(hf_home))}
