"""Ask the serving host's own SGLang whether it would start with a command line.

The deploy's preflight runs :mod:`specconsole.remote.argcheck` (sent on standard input:
``env -C DIR K=V... PYTHON - ARGS``) under the unit's interpreter, with the unit's environment and
working directory: SGLang parses and resolves the arguments exactly as ``sglang serve`` does
before loading a model, and says whether it accepts them (with the values it resolved) or refuses
them (with its own exception and message). The interpreter is ExecStart's program when that is a
Python, else the Python its ``#!`` line names (``sglang`` and other console scripts).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal

from specconsole.base.values import output_line
from specconsole.hosts import CommandResult, Host
from specconsole.sglang.unit import ServiceUnit
from specconsole.steps import Steps

#: The marker :mod:`specconsole.remote.argcheck` prints before its JSON verdict.
MARK = "specconsole-argcheck "
_PYTHON = re.compile(r"(^|/)python[0-9.]*$")

Verdict = Literal["accepted", "refused", "unavailable"]


@dataclass(frozen=True)
class HostVerdict:
    """What the host's SGLang said of a command line."""

    verdict: Verdict
    #: one line: SGLang's refusal, or why the check could not run
    message: str = ""
    version: str | None = None
    resolved: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    #: the exact command that was run (empty when none was)
    command: str = ""
    #: the Python that ran it
    python: str = ""

    @property
    def accepted(self) -> bool:
        return self.verdict == "accepted"

    @property
    def who(self) -> str:
        """``SGLang 0.5.23`` (or ``SGLang`` when the check did not learn the version)."""
        return f"SGLang {self.version}" if self.version else "SGLang"


def script_text() -> str:
    return resources.files("specconsole.remote").joinpath("argcheck.py").read_text(encoding="utf-8")


def _working_directory(unit: ServiceUnit) -> str:
    """The unit's ``WorkingDirectory`` (the last one set; ``-`` prefix dropped), else systemd's ``/``."""
    value = "/"
    for f in unit.files:
        for section, key, val in f.entries:
            if section == "Service" and key == "WorkingDirectory" and val.strip():
                value = val.strip().lstrip("-")
    return value


def parse_shebang(head: str) -> list[str] | None:
    """The interpreter words of a ``#!`` line (``/usr/bin/env python3`` -> ``["python3"]``)."""
    first = head.split("\n", 1)[0]
    if not first.startswith("#!"):
        return None
    words = first[2:].split()
    if not words:
        return None
    if words[0].endswith("/env"):
        words = words[1:]
        while words and words[0].startswith("-"):  # env's own options (-S)
            words = words[1:]
    return words or None


async def _interpreter(host: Host, steps: Steps, program: str, path_env: str | None) -> tuple[str | None, str]:
    """The Python that runs ``program`` (None and the reason when it is not a Python)."""
    if _PYTHON.search(program):
        return program, ""
    where = program
    if "/" not in program:
        res = await steps.run(host, ["sh", "-c", 'PATH="$1"; command -v -- "$2"', "sh",
                                     path_env or "/usr/local/bin:/usr/bin:/bin", program])
        where = res.stdout.strip().splitlines()[0] if res.ok and res.stdout.strip() else ""
        if not where:
            return None, f"ExecStart's program {program} is not on the unit's PATH"
    res = await steps.run(host, ["head", "-c", "512", "--", where])
    if not res.ok:
        said = output_line(res.stderr or res.stdout, 120) or f"exit {res.exit_status}"
        return None, f"cannot read {where} ({said})"
    words = parse_shebang(res.stdout)
    if not words or not _PYTHON.search(words[0]):
        said = res.stdout.split("\n", 1)[0][:80] if res.stdout.startswith("#!") else "no #! line"
        return None, f"ExecStart's program {where} is not a Python script ({said})"
    return words[0], ""


def check_command(python: str, unit: ServiceUnit, args: list[str]) -> list[str]:
    """``env -C DIR K=V... PYTHON - ARGS``: the check under the unit's environment and directory."""
    env = [f"{k}={v}" for k, v in unit.environment.items()]
    return ["env", "-C", _working_directory(unit), *env, python, "-", *args]


async def check(host: Host, steps: Steps, unit: ServiceUnit, prefix: list[str], args: list[str],
                *, timeout_s: float = 180.0) -> HostVerdict:
    """SGLang's verdict on ``prefix + args`` (ExecStart's launcher and its options) on ``host``."""
    if not prefix:
        return HostVerdict("unavailable", "ExecStart has no program")
    python, why = await _interpreter(host, steps, prefix[0], unit.environment.get("PATH"))
    if python is None:
        return HostVerdict("unavailable", why)
    cmd = check_command(python, unit, args)
    res = await steps.run(host, cmd, timeout=timeout_s, input=script_text(), summary=_summary)
    return dataclasses.replace(verdict_of(res, shlex.join(cmd)), python=python)


def verdict_of(res: CommandResult, command: str) -> HostVerdict:
    """Read the check's output."""
    payload: dict[str, Any] | None = None
    for line in reversed(res.stdout.splitlines()):
        if line.startswith(MARK):
            try:
                payload = json.loads(line[len(MARK):])
            except ValueError:
                payload = None
            break
    if not isinstance(payload, dict):
        said = output_line(res.stderr or res.stdout) or "no output"
        status = "unknown" if res.exit_status is None else str(res.exit_status)
        return HostVerdict("unavailable", f"the check printed no verdict (exit {status}: {said})", command=command)
    version = str(payload.get("version") or "") or None
    verdict = payload.get("verdict")
    if verdict == "accepted":
        resolved = payload.get("resolved")
        warnings = payload.get("warnings")
        return HostVerdict("accepted", "", version, resolved if isinstance(resolved, dict) else {},
                           tuple(str(w) for w in warnings) if isinstance(warnings, list) else (), command)
    if verdict == "refused":
        return HostVerdict("refused", refusal_line(payload), version, command=command)
    return HostVerdict("unavailable", str(payload.get("reason") or "the check could not run")[:300], version,
                       command=command)


def refusal_line(payload: dict[str, Any]) -> str:
    """SGLang's refusal in one line: ``ValueError: ...`` or ``AssertionError at f.py:12: assert ...``."""
    kind, message = str(payload.get("kind") or "error"), str(payload.get("message") or "")
    where, source = str(payload.get("where") or ""), str(payload.get("source") or "")
    if kind == "usage":
        return message
    if message:
        return f"{kind}: {message}"
    return f"{kind} at {where}: {source}" if source else f"{kind} at {where}"


def _summary(res: CommandResult) -> str:
    v = verdict_of(res, "")
    if v.verdict == "accepted":
        return f"SGLang {v.version or '?'} accepts the command line"
    if v.verdict == "refused":
        return f"SGLang {v.version or '?'} refuses: {v.message}"
    return f"no verdict: {v.message}"
