"""Importing z-lab's benchmark output: ``python -m dflash.benchmark --backend sglang`` prints, per
dataset, a block such as::

    ==================================================
    Backend:          sglang
    Dataset:          gsm8k
    Num prompts:      1024
    Concurrency:      1
    Latency:          812.4s
    Output tokens:    312345
    Throughput:       384.48 tok/s
    Accept length:    6.350
    Spec verify ct:   49187
    ==================================================

(``Accept length`` and ``Spec verify ct`` only when the server speculates.) ``specconsole eval
import`` recognises such files by their ``Dataset:`` and ``Throughput: ... tok/s`` lines; every
block of the files given in one command (one file per dataset, or blocks concatenated, with the
benchmark's other output around them) becomes one task of one run, named after its dataset.

Values: ``acceptance_length`` is the block's ``Accept length`` (the benchmark's mean of the
requests' ``spec_accept_length``, the number z-lab publishes); without it, ``Output tokens /
Spec verify ct``. ``tokens_per_s`` is ``Throughput``; ``completion_tokens`` is ``Output
tokens``; the rest is kept in the task's ``meta_info``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from specconsole.eval.store import SCHEMA, EvalRun, ResultFileError, ResultStore, run_from_json, utc_now_iso
from specconsole.formats.training_log import strip_ansi

TOOL = "dflash.benchmark"

_KEY_LINE = re.compile(
    r"^\s*(?P<key>Backend|Dataset|Num prompts|Concurrency|Latency|Output tokens|Throughput|Accept length"
    r"|Spec verify ct)\s*:\s*(?P<value>.*?)\s*$"
)
_FIELDS = {
    "Backend": "backend", "Dataset": "dataset", "Num prompts": "num_prompts", "Concurrency": "concurrency",
    "Latency": "latency_s", "Output tokens": "output_tokens", "Throughput": "tokens_per_s",
    "Accept length": "accept_length", "Spec verify ct": "spec_verify_ct",
}
_INTS = ("num_prompts", "concurrency", "output_tokens", "spec_verify_ct")
_UNITS = {"latency_s": "s", "tokens_per_s": "tok/s"}
_DETECT_DATASET = re.compile(r"^\s*Dataset:\s*\S", re.MULTILINE)
_DETECT_THROUGHPUT = re.compile(r"^\s*Throughput:\s*[\d,.]+\s*tok/s", re.MULTILINE)


@dataclass
class BenchmarkBlock:
    """One dataset's summary block; ``line`` is where it starts in its file (1-based)."""

    path: str
    line: int
    values: dict[str, Any] = field(default_factory=dict)

    @property
    def dataset(self) -> str:
        return str(self.values.get("dataset") or "")

    def acceptance_length(self) -> float | None:
        accept = self.values.get("accept_length")
        if accept is not None:
            return float(accept)
        out, verify = self.values.get("output_tokens"), self.values.get("spec_verify_ct")
        return out / verify if out is not None and verify else None


def looks_like_benchmark(text: str) -> bool:
    """Whether ``text`` holds a dflash.benchmark summary block (and is not a JSON results file)."""
    if text.lstrip().startswith("{"):
        return False
    return bool(_DETECT_DATASET.search(text) and _DETECT_THROUGHPUT.search(text))


def is_benchmark_file(path: str | os.PathLike[str]) -> bool:
    """True for a readable file of benchmark output; anything else is left to the JSON import."""
    try:
        with open(Path(path).expanduser(), encoding="utf-8", errors="replace") as f:
            return looks_like_benchmark(f.read(4 << 20))
    except OSError:
        return False


def _value(key: str, raw: str, path: str, lineno: int) -> Any:
    name = _FIELDS[key]
    if name in ("backend", "dataset"):
        if not raw:
            raise ResultFileError(path, f"line {lineno}: {key}: is empty", "rerun the benchmark or fix the line")
        return raw
    text = raw.replace(",", "")
    unit = _UNITS.get(name)
    if unit and text.endswith(unit):
        text = text[: -len(unit)].strip()
    try:
        number = int(text) if name in _INTS else float(text)
    except ValueError:
        raise ResultFileError(path, f"line {lineno}: {key}: {raw!r} is not a number",
                              "fix the line (as the benchmark prints it) or rerun the benchmark") from None
    if number < 0 or number != number:
        raise ResultFileError(path, f"line {lineno}: {key}: {raw!r} is not a count or rate",
                              "fix the line or rerun the benchmark")
    return number


def parse_blocks(text: str, path: str) -> list[BenchmarkBlock]:
    """Every summary block in ``text`` (a key seen again starts the next block)."""
    blocks: list[BenchmarkBlock] = []
    current: BenchmarkBlock | None = None
    for lineno, raw in enumerate(text.split("\n"), start=1):  # \r is tqdm's, not a line break
        line = strip_ansi(raw.split("\r")[-1])
        m = _KEY_LINE.match(line)
        if m is None:
            continue
        name = _FIELDS[m.group("key")]
        if current is None or name in current.values:
            current = BenchmarkBlock(path, lineno)
            blocks.append(current)
        current.values[name] = _value(m.group("key"), m.group("value"), path, lineno)
    for block in blocks:
        if not block.dataset:
            raise ResultFileError(path, f"the block at line {block.line} has no Dataset: line",
                                  "keep each block whole, as dflash.benchmark prints it")
        if "tokens_per_s" not in block.values and block.acceptance_length() is None:
            raise ResultFileError(path, f"the {block.dataset} block at line {block.line} has neither "
                                        f"Throughput: nor Accept length:", "keep the block whole")
    return blocks


def _task(block: BenchmarkBlock) -> dict[str, Any]:
    v = block.values
    meta: dict[str, Any] = {k: v[k] for k in ("backend", "num_prompts", "concurrency", "latency_s", "output_tokens",
                              "spec_verify_ct", "accept_length") if k in v}
    meta["from"] = f"{block.path}:{block.line}"
    return {"task": block.dataset, "acceptance_length": block.acceptance_length(),
            "tokens_per_s": v.get("tokens_per_s"), "completion_tokens": v.get("output_tokens"), "meta_info": meta}


def run_json(blocks: Sequence[BenchmarkBlock], label: str, created_at: str) -> dict[str, Any]:
    """A ``specconsole.eval/1`` object holding ``blocks`` (one task each)."""
    seen: dict[str, BenchmarkBlock] = {}
    for block in blocks:
        first = seen.get(block.dataset)
        if first is not None:
            raise ResultFileError(block.path, f"dataset {block.dataset!r} again at line {block.line} "
                                              f"(first at {first.path}:{first.line})",
                                  "import each measurement of a dataset in its own command")
        seen[block.dataset] = block
    concurrency = {b.values.get("concurrency") for b in blocks}
    backends = {b.values.get("backend") for b in blocks} - {None}
    return {
        "schema": SCHEMA,
        "label": label,
        "created_at": created_at,
        "source": {"kind": "imported", "tool": TOOL, "imported_from": sorted({b.path for b in blocks}),
                   "imported_at": utc_now_iso(),
                   "notes": "acceptance_length: the benchmark's Accept length (mean over requests)"},
        "suite": {"name": TOOL, "tasks": [b.dataset for b in blocks],
                  **({"concurrency": concurrency.pop()} if len(concurrency) == 1 and None not in concurrency else {}),
                  **({"backend": backends.pop()} if len(backends) == 1 else {})},
        "tasks": [_task(b) for b in blocks],
    }


def import_benchmark(store: ResultStore, paths: Sequence[str], *, label: str | None = None,
                     overwrite: bool = False) -> EvalRun:
    """Read the benchmark output in ``paths`` into one run and store it."""
    blocks: list[BenchmarkBlock] = []
    newest = 0.0
    for path in paths:
        p = Path(path).expanduser()
        try:
            text = p.read_bytes().decode("utf-8", errors="replace")
            newest = max(newest, p.stat().st_mtime)
        except OSError as err:
            raise ResultFileError(path, f"cannot read: {err.strerror}", "check the path and its permissions") from None
        found = parse_blocks(text, path)
        if not found:
            raise ResultFileError(path, "no dflash.benchmark summary block (Dataset: ... Throughput: ... tok/s)",
                                  "pass the benchmark's printed output")
        blocks.extend(found)
    if label is None:
        stem = Path(paths[0]).stem if len(paths) == 1 else "z-lab benchmark"
        label = f"{stem} ({', '.join(b.dataset for b in blocks)})"
    created = datetime.fromtimestamp(newest or datetime.now(UTC).timestamp(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    run = run_from_json(run_json(blocks, label, created), ", ".join(paths))
    if not overwrite and store.path_for(run.id).exists():
        raise ResultFileError(paths[0], f"a run with id {run.id!r} is already stored in {store.root}",
                              "pass --force to replace it, or --label to import it as another run")
    return store.save(run, overwrite=overwrite)
