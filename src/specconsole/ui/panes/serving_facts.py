"""The serving pane's deployment lines: the settings of the algorithm that runs, and what its
worker logged at start-up (DDTREE: ``Initialized DDTree worker. block_size=…, tree_budget=…``)."""

from __future__ import annotations

from specconsole.sglang.info import ServerInfo
from specconsole.ui.style import formatting as fmt
from specconsole.ui.style.formatting import escape


def deployment_lines(info: ServerInfo, worker: tuple[tuple[str, str], ...] = ()) -> list[str]:
    """The block/window/draft-tokens line, plus DDTREE's tree budget and mode and the worker's facts."""
    block = info.block_size
    lines = [f"block size [b]{fmt.num(block)}[/]  ·  "
             f"draft window [b]{fmt.num(info.draft_window)}[/]  ·  "
             f"draft tokens [b]{fmt.num(info.num_draft_tokens)}[/]"]
    if info.algorithm != "DDTREE":
        return lines
    budget = info.tree_budget
    mode = ""
    if isinstance(budget, int) and isinstance(block, int):
        mode = "  ·  [b]full tree[/]" if budget > block - 1 else "  ·  spine (a chain)"
    lines.append(f"tree budget [b]{fmt.num(budget)}[/]{mode}")
    if worker:
        facts = ", ".join(f"{escape(k)}={escape(v)}" for k, v in worker)
        lines.append(f"[$text-muted]DDTree worker:[/] {facts}")
    return lines
