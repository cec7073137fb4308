"""Eval: acceptance length per coding task, measured against SGLang and compared across runs.

* :mod:`~specconsole.eval.suite` loads a benchmark definition (the shipped ``eval-coding.toml``).
* :mod:`~specconsole.eval.runner` sends each task to SGLang's ``/generate`` and records
  acceptance length (completion_tokens / spec_verify_ct), tokens/s and latency per task, plus
  the deployment it measured (from ``/server_info``).
* :mod:`~specconsole.eval.store` is the versioned result schema (``specconsole.eval/1``), the
  results folder and import of results from other tools (``docs/eval-results-schema.md``).
* :mod:`~specconsole.eval.compare` builds the side-by-side table (averages, ratio to a baseline,
  best/worst task, speedup over a vanilla run) and renders it as text, markdown or JSON.
* :mod:`~specconsole.eval.cli` is ``specconsole eval ...``.

Nothing here imports Textual; the pane lives in :mod:`specconsole.ui.panes.eval_pane`.
"""

from __future__ import annotations

from specconsole.eval.store import SCHEMA, EvalRun, ResultFileError, ResultStore, TaskResult
from specconsole.eval.suite import Suite, Task, load_suite

__all__ = ["SCHEMA", "EvalRun", "ResultFileError", "ResultStore", "Suite", "Task", "TaskResult", "load_suite"]
