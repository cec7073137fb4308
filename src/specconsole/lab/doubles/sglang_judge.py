"""Real SGLang's verdict on a command line, for the lab's SGLang simulator.

The simulator serves SGLang's HTTP protocol, but whether it starts, and the settings it reports
on ``/server_info``, come from real SGLang 0.5.23: its parser and resolution pipeline
(:mod:`specconsole.remote.argcheck`, the same check the deploy runs on a serving host), run by
the Python of ``.venv-sglang`` (``scripts/setup.sh`` builds it).

Importing SGLang takes seconds (torch), so a lab runs one warm judge: ``PYTHON sglang_judge.py
serve SOCKET`` imports SGLang once and forks a child per question on a Unix socket (a question
is one JSON line ``{"argv": [...], "env": {...}, "cwd": "..."}``, the answer the check's JSON).
Without a judge (no socket), :func:`ask` runs the check in a fresh process: the same verdict,
slower. Standard library only: this file runs under ``.venv-sglang``'s Python, which has no
specconsole installed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

#: ``.venv-sglang``'s Python (the lab's ``bin/sglang`` launcher sets it for the simulator).
PYTHON_ENV = "SGLANG_SIM_PYTHON"
#: The warm judge's socket.
SOCKET_ENV = "SGLANG_SIM_JUDGE"
#: How long a question waits for a judge whose socket is not there yet (it imports SGLang first).
JUDGE_START_WAIT_S = 90.0
#: Where to find ``.venv-sglang``'s Python when the lab is not told.
SGLANG_PYTHON_ENV = "SPECCONSOLE_SGLANG_PYTHON"
_ARGCHECK = Path(__file__).resolve().parents[2] / "remote" / "argcheck.py"
MARK = "specconsole-argcheck "


class JudgeUnavailable(Exception):
    """No SGLang to ask (``.venv-sglang`` missing or broken)."""


def sglang_python() -> str | None:
    """``.venv-sglang``'s Python: ``$SPECCONSOLE_SGLANG_PYTHON``, else the checkout's ``.venv-sglang``."""
    env = os.environ.get(SGLANG_PYTHON_ENV)
    if env:
        return env if os.access(env, os.X_OK) else None
    for base in Path(__file__).resolve().parents[4], Path.cwd():
        candidate = base / ".venv-sglang" / "bin" / "python"
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def missing_message() -> str:
    return ("the lab's SGLang needs real SGLang 0.5.23's parser (.venv-sglang): run scripts/setup.sh, or set "
            f"{SGLANG_PYTHON_ENV} to a Python that imports sglang 0.5.23")


# ------------------------------------------------------------------------------ client side

def ask(argv: list[str], *, env: dict[str, str] | None = None, cwd: str | None = None,
        timeout_s: float = 180.0) -> dict[str, Any]:
    """Real SGLang's verdict on ``argv`` (the arguments after ``sglang serve``), with the full
    resolved settings (``"resolved"``) when it accepts them."""
    path = os.environ.get(SOCKET_ENV)
    extra: dict[str, str] = dict(env or {})
    where = cwd or os.getcwd()
    question = {"argv": list(argv), "env": extra, "cwd": where}
    if path and not os.path.exists(path):  # the lab's judge may still be importing SGLang
        deadline = time.monotonic() + JUDGE_START_WAIT_S
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.1)
    if path and os.path.exists(path):
        with contextlib.suppress(OSError, ValueError):
            return _ask_socket(path, question, timeout_s)
    python = os.environ.get(PYTHON_ENV) or sglang_python()
    if not python:
        raise JudgeUnavailable(missing_message())
    from specconsole.lab.doubles.models import judge_env  # the lab's, as its warm judge has

    lab_env = judge_env(Path(tempfile.gettempdir()) / "specconsole-hf-home")
    proc = subprocess.run([python, "-", *argv], input=_ARGCHECK.read_text("utf-8"), capture_output=True,
                          text=True, timeout=timeout_s, cwd=where,
                          env={**lab_env, **os.environ, **extra, "SPECCONSOLE_ARGCHECK_FULL": "1",
                               "HF_HUB_OFFLINE": "1"})
    return _answer(proc.stdout, proc.stderr)


def _exchange(path: str, question: dict[str, Any], timeout_s: float | None) -> str:
    """Send one question to the judge on ``path``; its whole answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        s.connect(path)
        s.sendall(json.dumps(question).encode() + b"\n")
        chunks = []
        while True:
            data = s.recv(65536)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode("utf-8", "replace")


def _ask_socket(path: str, question: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    return _answer(_exchange(path, question, timeout_s), "")


def _answer(stdout: str, stderr: str) -> dict[str, Any]:
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARK):
            payload = json.loads(line[len(MARK):])
            if isinstance(payload, dict):
                if payload.get("verdict") == "unavailable":
                    raise JudgeUnavailable(f"{payload.get('reason')}; {missing_message()}")
                return payload
    tail = [ln for ln in stderr.splitlines() if ln.strip()][-1:]
    raise JudgeUnavailable(f"SGLang's check printed no verdict ({tail[0] if tail else 'no output'}); "
                           f"{missing_message()}")


# ------------------------------------------------------------------------------ server side

def _load_argcheck() -> Any:
    spec = importlib.util.spec_from_file_location("specconsole_argcheck", _ARGCHECK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _answer_one(conn: socket.socket, argcheck: Any) -> None:
    """In a forked child: read one question, answer it, exit."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    question = json.loads(data.decode("utf-8"))
    env = {str(k): str(v) for k, v in (question.get("env") or {}).items()}
    if "script" in question:  # a whole interpreter run: ``python - ARGS`` with its environment
        os.environ.clear()
    os.environ.update(env)
    with contextlib.suppress(OSError):
        os.chdir(question.get("cwd") or "/")
    if "script" in question:
        conn.sendall(json.dumps(_run_script(str(question["script"]), list(question.get("argv") or []))).encode())
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # SGLang's logging and warnings go nowhere; the answer goes to the socket
    os.dup2(devnull, 2)
    payload = argcheck.check(list(question.get("argv") or []), full=True)
    conn.sendall((MARK + json.dumps(payload, default=str) + "\n").encode())


def _run_script(script: str, argv: list[str]) -> dict[str, Any]:
    """Run ``script`` as ``python - ARGV`` would (``__main__``, ``sys.argv``), its output captured."""
    import tempfile

    outs = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]  # noqa: SIM115 - this child exits after
    for fd, f in zip((1, 2), outs, strict=True):
        os.dup2(f.fileno(), fd)
    sys.argv = ["-", *argv]
    status: Any = 0
    try:
        exec(compile(script, "<stdin>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    except SystemExit as done:
        status = done.code
    except BaseException:
        import traceback

        traceback.print_exc()
        status = 1
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    texts = []
    for f in outs:
        f.seek(0)
        texts.append(f.read().decode("utf-8", "replace"))
    code = status if isinstance(status, int) else (0 if status is None else 1)
    return {"status": code, "stdout": texts[0], "stderr": texts[1][-20000:]}


def python_main(real_python: str) -> int:
    """The lab serving host's SGLang Python (``bin/python-sglang``): ``- ARGS`` (a script on standard
    input, as the deploy's host check runs it) is run by the warm judge, in a child forked from a
    process that imported SGLang already; anything else execs ``real_python`` (``.venv-sglang``'s).
    A stand-in for a slow interpreter start-up only: the script, its argv, environment and directory,
    and the SGLang that runs it are the real ones."""
    args = sys.argv[1:]
    path = os.environ.get(SOCKET_ENV)
    if args[:1] != ["-"] or not path or not os.path.exists(path):
        os.execv(real_python, [real_python, *args])
    question = {"script": sys.stdin.read(), "argv": args[1:], "env": dict(os.environ), "cwd": os.getcwd()}
    try:
        answer = json.loads(_exchange(path, question, None))
    except (OSError, ValueError) as err:
        sys.stderr.write(f"lab python-sglang: the warm SGLang judge on {path} did not answer ({err})\n")
        return 1
    sys.stdout.write(answer.get("stdout", ""))
    sys.stderr.write(answer.get("stderr", ""))
    return int(answer.get("status") or 0)


def _exit_with(owner: int) -> None:
    """End the judge when process ``owner`` is gone (a judge shared by a test run's workers)."""
    while True:
        time.sleep(1.0)
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            os._exit(0)
        except PermissionError:
            pass


def serve(path: str, owner: int | None = None, warm: list[list[str]] | None = None) -> int:
    """Import SGLang once, then answer each connection in a forked child (until ``owner`` exits).

    ``warm``: command lines checked once before the first question (on model folders no question
    names): SGLang's first check in a process builds caches (its dataclasses' fields, the resolution
    hooks, the config classes) that every forked child would otherwise build again, ~0.14 s of CPU
    per question; warmed, a question costs ~0.035 s."""
    if owner is not None:
        threading.Thread(target=_exit_with, args=(owner,), daemon=True, name="judge-owner").start()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    argcheck = _load_argcheck()
    argcheck.warm_up()
    for argv in warm or ():
        try:
            verdict = argcheck.check(list(argv), full=True).get("verdict")
        except BaseException as err:  # a warm-up must never keep the judge from serving
            verdict = f"{type(err).__name__}: {err}"
        sys.stdout.write(f"warm-up check: {verdict}\n")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(16)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    sys.stdout.write(f"sglang judge ready on {path} (pid {os.getpid()})\n")
    sys.stdout.flush()
    while True:
        conn, _ = srv.accept()
        pid = os.fork()
        if pid == 0:
            srv.close()
            status = 0
            try:
                _answer_one(conn, argcheck)
            except BaseException:
                status = 1
            finally:
                with contextlib.suppress(OSError):
                    conn.close()
                os._exit(status)
        conn.close()


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    options: dict[str, str] = {}
    if len(args) >= 2 and args[0] == "serve":
        rest = args[2:]
        while len(rest) >= 2 and rest[0] in ("--owner", "--warm"):
            options[rest[0]], rest = rest[1], rest[2:]
        owner = options.get("--owner", "0")
        if not rest and owner.isdigit():
            warm = json.loads(options.get("--warm", "[]"))
            return serve(args[1], int(owner) if "--owner" in options else None, warm)
    sys.stderr.write("usage: sglang_judge.py serve SOCKET [--owner PID] [--warm JSON-LIST-OF-ARGVS]\n")
    return 2


if __name__ == "__main__":
    threading.current_thread().name = "sglang-judge"
    sys.exit(main())
