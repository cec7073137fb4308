"""Reading a systemd service the way systemd does: files, drop-ins, ExecStart, environment.

Input is the output of ``systemctl cat UNIT`` (each file preceded by ``# /path``). The
effective ``ExecStart`` follows systemd's rules: later files override earlier ones, an empty
``ExecStart=`` resets the list, lines ending in an odd number of backslashes continue, words
are split and unquoted as systemd's ``extract_first_word`` does (single and double quotes, C escapes inside and outside
quotes), ``%%`` is a literal ``%`` and other ``%`` specifiers are kept (see :data:`SPECIFIER`),
``$$`` is a literal ``$`` and ``$VAR``/``${VAR}`` expand from ``Environment=`` and
``EnvironmentFile=`` (systemd.service(5) "Command lines", systemd.syntax(7)).

Writing goes the other way: :func:`sd_quote` escapes a word so that systemd reads back
exactly that word, and :func:`check_unit_value` refuses characters no unit file can carry.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass, field

from specconsole.base.errors import SpecConsoleError

#: The drop-in the deploy wizard writes; "zz-" sorts it after every other drop-in.
DEPLOY_DROPIN = "zz-specconsole-deploy.conf"


#: Marks a ``%`` specifier read from the unit (``%h`` is kept as ``SPECIFIER + "h"``): systemd
#: resolves it, not the console, so a rewrite must write it back as a specifier. NUL cannot occur
#: in a path or argument, so the mark never collides with a real value.
SPECIFIER = "\0"

#: Unicode categories no unit-file value may hold: controls (C0, DEL, C1: systemd ends a line at
#: LF, CR and NUL, and Python's splitlines also at VT, FF, FS, GS, RS, NEL), line and paragraph
#: separators, and lone surrogates (not UTF-8).
_REFUSED_CATEGORIES = ("Cc", "Zl", "Zp", "Cs")


class UnitError(SpecConsoleError):
    """The unit cannot be read or understood; names the unit and what is wrong."""


def unsafe_char(value: str) -> tuple[int, str] | None:
    """The first character of ``value`` that no unit file can carry, with its position."""
    for i, ch in enumerate(value):
        if unicodedata.category(ch) in _REFUSED_CATEGORIES:
            return i, ch
    return None


def check_unit_value(value: str, what: str, *, specifiers: bool = False) -> None:
    """Raise a one-line UnitError when ``value`` holds a control or line-break character
    (``specifiers``: allow the :data:`SPECIFIER` marks of words read from a unit)."""
    bad = unsafe_char(re.sub(f"{SPECIFIER}[A-Za-z]", "", value) if specifiers else value)
    if bad:
        i, ch = bad
        raise UnitError(f"{what} {value!r} holds the control character U+{ord(ch):04X} at position {i}; "
                        f"a systemd unit file cannot carry it safely (it could end the line): "
                        f"use a value without control or line-break characters")


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


def _lines(text: str) -> list[str]:
    """Lines as systemd reads them: a line ends at LF, CR, CR LF or NUL (not at VT, FF, NEL or
    U+2028, where Python's ``splitlines`` would also split)."""
    lines = re.split(r"\r\n|[\r\n\0]", text)
    return lines[:-1] if lines and lines[-1] == "" else lines


def split_cat(output: str) -> list[tuple[str, str]]:
    """``systemctl cat`` output -> [(path, text)]."""
    files: list[tuple[str, list[str]]] = []
    for line in _lines(output):
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
    for raw in _lines(text):
        line = raw.rstrip()
        if pending:
            if line.lstrip().startswith(("#", ";")):
                continue  # systemd ignores comments inside continuations
            line = pending + " " + line.strip()
            pending = ""
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", ";")):
            continue
        if _continues(stripped):
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


def _continues(line: str) -> bool:
    """systemd continues a line that ends in an odd number of backslashes."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def parse_env_assignments(value: str) -> dict[str, str]:
    """``Environment=A=1 "B=two words"`` -> {A: 1, B: two words}."""
    out = {}
    for word in (_specifiers(w, "Environment") for w in split_words(value, "Environment")):
        if "=" in word:
            k, v = word.split("=", 1)
            out[k] = v
    return out


def parse_env_file(text: str) -> dict[str, str]:
    out = {}
    for line in _lines(text):
        line = line.strip()
        if not line or line.startswith(("#", ";")) or "=" not in line:
            continue
        k, v = line.split("=", 1)
        v = v.strip()
        if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
            v = v[1:-1]
        out[k.strip().removeprefix("export ").strip()] = v
    return out


_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
            "\\": "\\", '"': '"', "'": "'", "s": " "}
_NUMERIC = {"x": (16, 2), "u": (16, 4), "U": (16, 8)}


def _unescape(text: str, i: int) -> tuple[str, int]:
    """One C escape starting after the backslash at ``text[i-1]``: (character, next index).

    An escape systemd does not know is kept as written (systemd corrects it and warns).
    """
    c = text[i] if i < len(text) else ""
    if c in _ESCAPES:
        return _ESCAPES[c], i + 1
    base, width = _NUMERIC.get(c, (8, 3)) if c else (0, 0)
    digits = text[i + 1:i + 1 + width] if c in _NUMERIC else text[i:i + 3]
    ok = "01234567" if base == 8 else "0123456789abcdefABCDEF"
    if width and len(digits) == width and all(d in ok for d in digits):
        code = int(digits, base)
        if 0 < code <= 0x10FFFF:
            return chr(code), i + (1 if c in _NUMERIC else 0) + width
    return "\\" + c, i + (1 if c else 0)


def split_words(value: str, name: str) -> list[str]:
    """systemd's word splitting (``extract_first_word`` with UNQUOTE|CUNESCAPE): whitespace
    separates words, ``"..."`` and ``'...'`` quote (also in the middle of a word), backslash
    escapes work inside and outside quotes."""
    words: list[str] = []
    i, n = 0, len(value)
    while True:
        while i < n and value[i] in " \t\n\r":
            i += 1
        if i >= n:
            return words
        end = i + (2 if value.startswith("\\;", i) else 1)
        if value[i] in ";\\" and value[i:end] in (";", "\\;") and (end == n or value[end] in " \t\n\r"):
            if value[i] == ";":  # systemd's command separator (unquoted, a word of its own)
                raise UnitError(f"{name} holds several commands (a lone ';'); specconsole needs one")
            words.append(";")  # "\;": a literal semicolon
            i = end
            continue
        word: list[str] = []
        quote = ""
        while i < n:
            c = value[i]
            if c == "\\":
                ch, i = _unescape(value, i + 1)
                word.append(ch)
                continue
            if quote:
                if c == quote:
                    quote = ""
                else:
                    word.append(c)
            elif c in "\"'":
                quote = c
            elif c in " \t\n\r":
                break
            else:
                word.append(c)
            i += 1
        if quote:
            raise UnitError(f"{name}: unbalanced {quote} quote in {value[:80]!r}")
        words.append("".join(word))


def _specifiers(word: str, name: str) -> str:
    """``%%`` -> ``%``; any other ``%x`` is kept for systemd as ``SPECIFIER + x``."""
    def one(m: re.Match[str]) -> str:
        if not m.group(1):
            raise UnitError(f"{name}: a lone % at the end of {word!r}; systemd needs %% for a literal %")
        return "%" if m.group(1) == "%" else SPECIFIER + m.group(1)
    return re.sub(r"%(.?)", one, word, flags=re.DOTALL)


_VAR = re.compile(r"\$\$|\$\{(\w+)\}")


def expand_exec(value: str, env: dict[str, str], name: str) -> tuple[list[str], list[str]]:
    """systemd's ExecStart reading: words, specifiers, then ``$$``, ``${X}`` (one word) and
    ``$X`` as a word of its own (split on whitespace)."""
    used: list[str] = []
    while value[:1] in ("-", "@", "+", "!", ":"):
        value = value[1:]
    words = split_words(value, f"{name}: ExecStart")
    argv: list[str] = []
    for raw in words:
        word = _specifiers(raw, name)
        m = re.fullmatch(r"\$(\w+)", word)
        if m:
            used.append(m.group(1))
            argv.extend(env.get(m.group(1), "").split())
            continue

        def one(mt: re.Match[str]) -> str:
            if mt.group(0) == "$$":
                return "$"
            used.append(mt.group(1))
            return env.get(mt.group(1), "")

        argv.append(_VAR.sub(one, word))
    return argv, used


def parse_unit(name: str, cat_output: str, env_file_texts: dict[str, str] | None = None,
               exclude: tuple[str, ...] = ()) -> ServiceUnit:
    """The effective service from ``systemctl cat`` output (and the env files' contents),
    leaving out the files in ``exclude`` (e.g. the deploy drop-in, to read the base unit)."""
    pairs = [(p, t) for p, t in split_cat(cat_output) if p not in exclude]
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
    return " \\\n    ".join(" ".join(sd_quote(w) for w in line) for line in lines)


_PLAIN = re.compile(r"[A-Za-z0-9_@+=:,./-]+")


def sd_quote(word: str) -> str:
    """``word`` as one ExecStart argument that systemd reads back unchanged.

    Plain words stay as they are; anything else is double-quoted with ``\\`` and ``"``
    backslash-escaped (systemd applies C escapes inside quotes, so a shell's single quotes are
    not enough). ``%`` becomes ``%%`` (specifiers are expanded inside quotes too) and ``$``
    becomes ``$$``; a specifier read from the unit (:data:`SPECIFIER`) is written back as one.
    Control and line-break characters are refused (:func:`check_unit_value`).
    """
    check_unit_value(word, "ExecStart argument", specifiers=True)
    if _PLAIN.fullmatch(word):
        return word
    text = (word.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
            .replace(SPECIFIER, "%"))
    return f'"{text}"'


def show_word(word: str) -> str:
    """A word for the operator: specifiers read from the unit shown as systemd writes them."""
    return word.replace(SPECIFIER, "%")


#: The drop-in's header line that records which base unit it was built on.
_BASE_HEADER = re.compile(r"^# specconsole-base: sha256=(?P<digest>[0-9a-f]{16,64}) (?P<file>\S.*)$", re.M)


def exec_digest(argv: list[str]) -> str:
    """A short fingerprint of an ExecStart (its words after reading), for the drop-in header."""
    return hashlib.sha256(json.dumps(argv).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class DropinBase:
    """What a deploy drop-in records about the base unit it shadows."""

    digest: str
    file: str


def dropin_base(text: str | None) -> DropinBase | None:
    """The base recorded in a deploy drop-in (None for drop-ins written before it was recorded)."""
    m = _BASE_HEADER.search(text or "")
    return DropinBase(m.group("digest"), m.group("file").strip()) if m else None


def dropin_text(argv: list[str], note: str, base: ServiceUnit | None = None) -> str:
    """The deploy drop-in: resets ExecStart and restates it; records the base unit's fingerprint."""
    check_unit_value(note, "drop-in note")
    header = (f"# specconsole-base: sha256={exec_digest(base.exec_start)} {base.exec_start_file}\n"
              if base is not None else "")
    return (f"# {note}\n# Written by specconsole deploy; delete this file and run "
            f"`systemctl daemon-reload` to return to the unit's own ExecStart.\n{header}"
            f"[Service]\nExecStart=\nExecStart={quote_exec(argv)}\n")
