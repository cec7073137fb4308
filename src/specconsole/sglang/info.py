"""What SGLang's ``/server_info`` says about a deployment, read whichever names the version uses."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from specconsole.base.values import as_int


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return None if math.isnan(value) else value



def _firstas_int(data: dict[str, Any], *keys: str) -> int | None:
    return next((v for v in (as_int(data.get(k)) for k in keys) if v is not None), None)


#: Algorithms whose verify block is ``speculative_num_draft_tokens`` (DDTREE runs DFLASH's drafter).
BLOCK_ALGORITHMS = ("DFLASH", "DDTREE")


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What ``/server_info`` says about the deployment.

    ``algorithm`` is as the server resolved it (SGLang reports NEXTN as ``EAGLE``).
    ``block_size`` is the DFLASH/DDTREE block (``speculative_dflash_block_size``, or the resolved
    ``speculative_num_draft_tokens`` for DFLASH and DDTREE). Renamed settings are read under
    either name: the draft window as ``speculative_draft_window_size`` or the older
    ``speculative_dflash_draft_window_size``. ``tree_budget`` is DDTREE's
    ``speculative_ddtree_budget``. ``avg_accept_length`` averages
    ``internal_states[*].avg_spec_accept_length`` (None when absent or 0: no traffic yet).
    """

    version: str | None
    algorithm: str | None
    draft_model_path: str | None
    block_size: int | None
    num_draft_tokens: int | None
    draft_window: int | None
    model_path: str | None
    avg_accept_length: float | None
    tree_budget: int | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ServerInfo:
        algo = data.get("speculative_algorithm")
        algo = algo.upper() if isinstance(algo, str) and algo else None
        ndt = as_int(data.get("speculative_num_draft_tokens"))
        block = as_int(data.get("speculative_dflash_block_size"))
        if block is None and algo in BLOCK_ALGORITHMS:
            block = ndt
        lengths = []
        states = data.get("internal_states")
        if isinstance(states, list):
            for item in states:
                if isinstance(item, dict):
                    v = _float(item.get("avg_spec_accept_length"))
                    if v is not None and v > 0:
                        lengths.append(v)
        draft = data.get("speculative_draft_model_path")
        model = data.get("model_path")
        version = data.get("version")
        return cls(
            version=str(version) if version is not None else None,
            algorithm=algo,
            draft_model_path=draft if isinstance(draft, str) else None,
            block_size=block,
            num_draft_tokens=ndt,
            draft_window=_firstas_int(data, "speculative_draft_window_size", "speculative_dflash_draft_window_size"),
            model_path=model if isinstance(model, str) else None,
            avg_accept_length=sum(lengths) / len(lengths) if lengths else None,
            tree_budget=as_int(data.get("speculative_ddtree_budget")) if algo == "DDTREE" else None,
            raw=data,
        )


