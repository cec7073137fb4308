"""The serving host's SGLang: its model folders, the ``sglang`` it has installed (the simulator,
judged by real SGLang), the ``sglang.service`` unit that runs it, and its ``systemctl``."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from pathlib import Path

from specconsole.lab.doubles import sglang_judge
from specconsole.lab.doubles.models import SERVE_GPUS
from specconsole.lab.doubles.sglang_versions import BASE_VERSION, VERSION_ENV
from specconsole.lab.files import write_file
from specconsole.lab.parts.state import LabError, LabOptions, Say


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
               f"# `python - ARGS` (see specconsole.lab.doubles.sglang_judge.python_main)\nimport os\nimport sys\n\n"
               f"from specconsole.lab.doubles.sglang_judge import SOCKET_ENV, python_main\n\n"
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
                f"# SGLang 0.5.23, which judges its command line (specconsole.lab.doubles.sglang_judge)\n"
                f"import os\nimport sys\n\n"
                f"os.environ.update({env!r})\n"
                f"os.execv({py!r}, [{py!r}, '-m', 'specconsole.lab.doubles.sglang_sim', *sys.argv[1:]])\n")
    assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return (f"#!/bin/sh\n# SGLang-protocol simulator of a DDTree build (sgl-project/sglang PR #29907, in no "
            f"release)\n{assigns} exec {shlex.quote(py)} -m specconsole.lab.doubles.sglang_sim \"$@\"\n")
