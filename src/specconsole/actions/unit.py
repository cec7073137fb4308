"""Reading a systemd service the way systemd does: files, drop-ins, ExecStart, environment.

Input is the output of ``systemctl cat UNIT`` (each file preceded by ``# /path``). The
effective ``ExecStart`` follows systemd's rules: later files override earlier ones, an empty
``ExecStart=`` resets the list, lines ending in a backslash continue, quoting works like a
shell's, and ``$VAR``/``${VAR}`` expand from ``Environment=`` and ``EnvironmentFile=``.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from specconsole.errors import SpecConsoleError

#: The drop-in the deploy wizard writes; "zz-" sorts it after every other drop-in.
DEPLOY_DROPIN = "zz-specconsole-deploy.conf"


class UnitError(SpecConsoleError):
    """The unit cannot be read or understood; names the unit and what is wrong."""


@dataclass
class UnitFile:
    path: str
    text: str
    entries: list[tuple[str, str, str]] = field(default_factory=list)  # section, key, value


@dataclass
class ServiceUnit:
    name: str
    files: list[UnitFile]
    exec_start: list[str]              # argv after environment expansion, prefixes stripped
    exec_start_raw: str                # the value as written (continuations joined)
    exec_start_file: str               # which file defines the effective ExecStart
    environment: dict[str, str]
    environment_files: list[str]
    expanded_vars: list[str] = field(default_factory=list)

    @property
    def main_path(self) -> str:
        return self.files[0].path

    @property
    def dropin_dir(self) -> str:
        return f"{self.main_path}.d"

    @property
    def deploy_dropin(self) -> str:
        return f"{self.dropin_dir}/{DEPLOY_DROPIN}"

    def file_text(self, path: str) -> str | None:
        return next((f.text for f in self.files if f.path == path), None)


def split_cat(output: str) -> list[tuple[str, str]]:
    """``systemctl cat`` output -> [(path, text)]."""
    files: list[tuple[str, list[str]]] = []
    for line in output.splitlines():
        if line.startswith("# /"):  # systemd's header before each file
            files.append((line[2:].strip(), []))
            continue
        if files:
            files[-1][1].append(line)
    out = []
    for path, lines in files:
        while lines and lines[-1] == "":
            lines.pop()
        out.append((path, "\n".join(lines) + "\n"))
    return out


def parse_entries(text: str) -> list[tuple[str, str, str]]:
    """(section, key, value) in order; continuation lines joined, comments dropped."""
    entries: list[tuple[str, str, str]] = []
    section = ""
    pending = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if pending:
            if line.lstrip().startswith(("#", ";")):
                continue  # systemd ignores comments inside continuations
            line = pending + " " + line.strip()
            pending = ""
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", ";")):
            continue
        if stripped.endswith("\\"):
            pending = stripped[:-1].rstrip()
            continue
        if stripped.startswith("[") and stripped.endswith("]"):
            section = stripped[1:-1]
            continue
        if "=" in stripped:
            key, value = stripped.split("=", 1)
            entries.append((section, key.strip(), value.strip()))
    if pending and "=" in pending:
        key, value = pending.split("=", 1)
        entries.append((section, key.strip(), value.strip()))
    return entries


def parse_env_assignments(value: str) -> dict[str, str]:
    """``Environment=A=1 "B=two words"`` -> {A: 1, B: two words}."""
    out = {}
    for word in shlex.split(value):
        if "=" in word:
            k, v = word.split("=", 1)
            out[k] = v
    return out


def parse_env_file(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")) or "=" not in line:
            continue
        k, v = line.split("=", 1)
        v = v.strip()
        if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
            v = v[1:-1]
        out[k.strip().removeprefix("export ").strip()] = v
    return out


_VAR = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def expand_exec(value: str, env: dict[str, str], name: str) -> tuple[list[str], list[str]]:
    """systemd's ExecStart splitting and expansion: ``${X}`` one word, ``$X`` split on spaces."""
    used: list[str] = []
    while value[:1] in ("-", "@", "+", "!", ":"):
        value = value[1:]
    try:
        words = shlex.split(value.replace("$$", "\0"))
    except ValueError as err:
        raise UnitError(f"{name}: ExecStart cannot be split ({err}): {value[:80]}") from None
    argv: list[str] = []
    for word in words:
        m = re.fullmatch(r"\$(\w+)", word)
        if m:
            used.append(m.group(1))
            argv.extend(env.get(m.group(1), "").split())
            continue

        def one(mt: re.Match[str]) -> str:
            var = mt.group(1) or mt.group(2)
            used.append(var)
            return env.get(var, "")

        argv.append(_VAR.sub(one, word).replace("\0", "$"))
    return argv, used


def parse_unit(name: str, cat_output: str, env_file_texts: dict[str, str] | None = None) -> ServiceUnit:
    """The effective service from ``systemctl cat`` output (and the env files' contents)."""
    pairs = split_cat(cat_output)
    if not pairs:
        raise UnitError(f"{name}: `systemctl cat {name}` printed no unit file; is the unit installed?")
    files = [UnitFile(p, t, parse_entries(t)) for p, t in pairs]
    exec_raw, exec_file = "", ""
    env: dict[str, str] = {}
    env_files: list[str] = []
    for f in files:
        for section, key, value in f.entries:
            if section != "Service":
                continue
            if key == "ExecStart":
                exec_raw, exec_file = value, f.path  # an empty value resets; the last one wins
            elif key == "Environment":
                env.update(parse_env_assignments(value))
            elif key == "EnvironmentFile":
                env_files.append(value)
    for path in env_files:
        text = (env_file_texts or {}).get(path.lstrip("-"))
        if text is not None:
            env.update(parse_env_file(text))
    if not exec_raw:
        raise UnitError(f"{name}: no ExecStart in {', '.join(f.path for f in files)}")
    argv, used = expand_exec(exec_raw, env, name)
    return ServiceUnit(name, files, argv, exec_raw, exec_file, env, env_files, used)


def quote_exec(argv: list[str]) -> str:
    """An ExecStart value for ``argv``, one flag (with its value) per continuation line."""
    lines: list[list[str]] = []
    for a in argv:
        if a.startswith("-") or not lines:
            lines.append([a])
        else:
            lines[-1].append(a)
    return " \\\n    ".join(" ".join(_sd_quote(w) for w in line) for line in lines)


def _sd_quote(word: str) -> str:
    quoted = shlex.quote(word)
    return quoted.replace("$", "$$") if "$" in word else quoted


def dropin_text(argv: list[str], note: str) -> str:
    return (f"# {note}\n# Written by specconsole deploy; delete this file and run "
            f"`systemctl daemon-reload` to return to the unit's own ExecStart.\n"
            f"[Service]\nExecStart=\nExecStart={quote_exec(argv)}\n")
