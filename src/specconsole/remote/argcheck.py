"""SGLang's own verdict on a command line: parse and resolve, as ``sglang serve`` would, no model load.

This file runs on the serving host under the unit's own Python (the deploy sends it on standard
input: ``PYTHON - ARGS``), so it uses the standard library only and imports nothing of
specconsole. It does what ``python -m sglang.launch_server ARGS`` does before it loads a model:
``sglang.srt.plugins.load_plugins()``, ``sglang.srt.server_args.prepare_server_args(ARGS)``
(argparse, the ``--config`` merge), then ``ServerArgs.resolve_once()`` (SGLang's resolution and
validation pipeline, where the speculative-decoding rules live). It allocates no GPU memory and
starts no server.

It prints one line, ``specconsole-argcheck {json}``, on standard output, and exits 0 whatever
SGLang decided:

* ``{"verdict": "accepted", "version": V, "resolved": {...}, "warnings": [...]}``: the resolved
  values of :data:`RESOLVED_KEYS` (those this SGLang has) and the warnings SGLang logged;
* ``{"verdict": "refused", "version": V, "kind": "ValueError", "message": ..., "where":
  "speculative_hook.py:123", "source": "assert ..."}``: SGLang's own exception (an argparse error
  is ``"kind": "usage"`` with argparse's message); ``source`` is the failing line for a bare
  ``assert``, whose message is empty;
* ``{"verdict": "unavailable", "reason": ...}``: this Python cannot run the check (no ``sglang``
  module, a build without these entry points, or SGLang's own import chain failing). Exit status 3.

Only SGLang's verdict on the arguments is a refusal: argparse's exit, or an exception SGLang's
parsing or resolution raises about them. An exception raised while a module is being imported
(SGLang imports much of itself lazily, inside ``resolve_once``) is the check failing to run, not a
verdict: ``ImportError`` and its kin, a ``SyntaxError`` in a patched build, or any other exception
raised by a module's top-level code (an ``OSError`` for a missing shared library) is
``"unavailable"``, with the import that broke (:func:`import_failure`).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
import traceback

MARK = "specconsole-argcheck "

#: The resolved settings reported back (argparse dests; a build lacking one leaves it out).
RESOLVED_KEYS = (
    "speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
    "speculative_eagle_topk", "speculative_num_draft_tokens", "speculative_dflash_block_size",
    "speculative_draft_window_size", "speculative_dflash_draft_window_size", "speculative_ddtree_budget",
    "speculative_draft_attention_backend", "speculative_ngram_max_bfs_breadth", "attention_backend",
    "prefill_attention_backend", "decode_attention_backend", "page_size", "tp_size", "pp_size", "dp_size",
    "enable_dp_attention", "disable_overlap_schedule", "max_running_requests", "device", "model_path",
    "host", "port", "enable_metrics", "mem_fraction_static",
)


def _say(payload: dict[str, object], status: int = 0) -> int:
    sys.stdout.write(MARK + json.dumps(payload, default=str) + "\n")
    sys.stdout.flush()
    return status


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            text = " ".join(record.getMessage().split())
            if text and text not in self.messages:
                self.messages.append(text[:300])


def _refusal(err: BaseException, version: str) -> dict[str, object]:
    frames = traceback.extract_tb(err.__traceback__)
    sglang_frames = [f for f in frames if "sglang" in f.filename.replace("\\", "/")] or frames
    last = sglang_frames[-1] if sglang_frames else None
    where = f"{last.filename.rsplit('/', 1)[-1]}:{last.lineno}" if last else ""
    message = " ".join(str(err).split())
    source = _statement(last.filename, last.lineno or 0) if last else ""
    return {"verdict": "refused", "version": version, "kind": type(err).__name__, "message": message[:600],
            "where": where, "source": source[:400]}


def _cannot_import(err: BaseException, version: str, what: str) -> dict[str, object] | None:
    """The ``unavailable`` answer when ``err`` is SGLang's import chain breaking (else None)."""
    why = import_failure(err)
    if why is None:
        return None
    return {"verdict": "unavailable", "version": version, "kind": "import",
            "reason": f"SGLang {version} cannot import {what}: {why}"}


def _statement(path: str, lineno: int) -> str:
    """The whole statement (a multi-line ``assert`` too) at ``path:lineno``, on one line."""
    try:
        import ast

        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        best: ast.stmt | None = None
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.stmt):
                continue
            spans = node.lineno <= lineno <= (node.end_lineno or node.lineno)
            if spans and (best is None or node.lineno >= best.lineno):
                best = node
        segment = ast.get_source_segment(text, best) if best is not None else None
    except (OSError, SyntaxError, ValueError):
        segment = None
    if segment is None:
        import linecache

        segment = linecache.getline(path, lineno)
    return " ".join(segment.split())


def import_failure(err: BaseException) -> str | None:
    """Why ``err`` is an import breaking rather than a verdict (None when it is a verdict).

    An ``ImportError`` (``ModuleNotFoundError`` included) or ``SyntaxError`` always is; any other
    exception is when it was raised by a module's top-level code (a frame named ``<module>`` below the
    caller's own frame: the module being imported), such as ``ctypes.CDLL`` failing on a shared
    library at import. A wrapper that is not SGLang's verdict (transformers' lazy modules re-raise a
    failed import as ``RuntimeError ... from err``) is one when its cause is; a ``ValueError`` or
    ``AssertionError`` raised by a function stays SGLang's verdict. The answer names the exception
    and the deepest module-level line on the way."""
    seen: BaseException | None = err
    while seen is not None:
        frames = traceback.extract_tb(seen.__traceback__)[1:]  # the first frame is the catching one
        modules = [f for f in frames if f.name == "<module>"]
        if isinstance(seen, (ImportError, SyntaxError)) or modules:
            said = f"{type(seen).__name__}: {' '.join(str(seen).split())[:300]}"
            if modules:
                at = modules[-1]
                path = at.filename.replace("\\", "/")
                where = path[path.rfind("/sglang/") + 1:] if "/sglang/" in path else path.rsplit("/", 1)[-1]
                said += f" ({where}:{at.lineno}: {' '.join((at.line or '').split())[:160]})"
            return said
        if isinstance(seen, (ValueError, AssertionError)):
            return None
        seen = seen.__cause__
    return None


def warm_up() -> None:
    """Import what a check needs (for a process that forks one child per check)."""
    from sglang.srt import server_args  # noqa: F401
    from sglang.srt.arg_groups import pipeline  # noqa: F401
    from sglang.srt.plugins import load_plugins

    load_plugins()


def check(argv: list[str], *, full: bool = False) -> dict[str, object]:
    """SGLang's verdict on ``argv`` (the arguments after ``sglang serve``); ``full``: every resolved
    setting, not only :data:`RESOLVED_KEYS`."""
    try:
        import sglang
        from sglang.srt import server_args as sa
    except Exception as err:  # ImportError, or a broken install
        return {"verdict": "unavailable", "reason": f"cannot import sglang.srt.server_args: "
                f"{import_failure(err) or type(err).__name__ + ': ' + ' '.join(str(err).split())[:300]}"}
    version = str(getattr(sglang, "__version__", "") or "")
    prepare = getattr(sa, "prepare_server_args", None)
    if prepare is None:
        return {"verdict": "unavailable", "version": version,
                "reason": f"SGLang {version} has no sglang.srt.server_args.prepare_server_args"}
    try:
        from sglang.srt.plugins import load_plugins
    except ImportError:
        load_plugins = None
    try:
        if load_plugins is not None:
            load_plugins()
    except Exception as err:  # a plugin that fails to load: the check cannot run, SGLang judged nothing
        return _cannot_import(err, version, "its plugins") or {
            "verdict": "unavailable", "version": version,
            "reason": f"SGLang {version} cannot load its plugins: {type(err).__name__}: "
                      f"{' '.join(str(err).split())[:300]}"}
    caught = _Warnings()
    logging.getLogger().addHandler(caught)
    usage = io.StringIO()
    try:
        with contextlib.redirect_stderr(usage):
            args = prepare(list(argv))
    except SystemExit as err:
        lines = [ln for ln in usage.getvalue().splitlines() if ln.strip()]
        said = next((ln for ln in reversed(lines) if " error: " in ln), lines[-1] if lines else f"exit {err.code}")
        return {"verdict": "refused", "version": version, "kind": "usage", "message": said.strip()[:600],
                "where": "argparse", "source": ""}
    except Exception as err:
        return _cannot_import(err, version, "its argument parser") or _refusal(err, version)
    finally:
        logging.getLogger().addHandler(caught)  # prepare_server_args' basicConfig(force=True) drops handlers
    resolve = getattr(args, "resolve_once", None)
    try:
        if callable(resolve):
            resolve()
        elif not hasattr(args, "speculative_algorithm"):
            return {"verdict": "unavailable", "version": version,
                    "reason": f"SGLang {version}'s ServerArgs has neither resolve_once nor speculative settings"}
    except Exception as err:
        return _cannot_import(err, version, "its resolution") or _refusal(err, version)
    finally:
        logging.getLogger().removeHandler(caught)
    values = args.resolved_dict() if hasattr(args, "resolved_dict") else vars(args)
    resolved = dict(values) if full else {k: values[k] for k in RESOLVED_KEYS if k in values}
    return {"verdict": "accepted", "version": version, "resolved": resolved, "warnings": caught.messages[:20]}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    payload = check(argv, full=os.environ.get("SPECCONSOLE_ARGCHECK_FULL") == "1")
    return _say(payload, 3 if payload["verdict"] == "unavailable" else 0)


if __name__ == "__main__":
    sys.exit(main())
