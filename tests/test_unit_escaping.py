"""Values written into the deploy drop-in reach systemd exactly as meant.

The drop-in is read back by :class:`SystemdReader`, a parser written here from systemd's
documentation (not from specconsole's reader), so the two cannot share a mistake:

- systemd.syntax(7): lines ending in a backslash continue the next line (the backslash becomes
  a space; comment lines inside are skipped); ``#``/``;`` start comments; ``[Section]``.
- systemd.service(5) "Command lines": each word may be quoted with ``"`` or ``'`` (also within
  a word); C escapes (``\\a \\b \\f \\n \\r \\t \\v \\\\ \\" \\' \\s \\xHH \\nnn \\uHHHH
  \\UHHHHHHHH``) are recognised; a lone ``;`` separates commands, ``\\;`` is a literal one;
  ``%`` specifiers are expanded (``%%`` is a ``%``), then environment variables: ``$$`` is a
  literal ``$``, ``${FOO}`` inside a word, ``$FOO`` as a word of its own is split on whitespace.

This reader is strict: an escape or specifier systemd does not document is an error.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import SHARED
from specconsole.sglang.flags import SglangCli
from specconsole.sglang.rebase import find_drift
from specconsole.sglang.unit import DEPLOY_DROPIN, UnitError, dropin_text, parse_unit, quote_exec, split_cat

SPECIFIERS = {"h": "/root", "n": "sglang.service", "N": "sglang", "u": "root", "t": "/run", "%": "%"}
WS = " \t\n"


class SystemdParseError(Exception):
    pass


def unit_entries(text: str) -> list[tuple[str, str, str]]:
    """(section, key, value) per systemd.syntax(7)."""
    out: list[tuple[str, str, str]] = []
    section = ""
    buf: str | None = None
    for line in text.split("\n"):
        if buf is not None and line.lstrip()[:1] in ("#", ";"):
            continue  # comments inside a continuation are skipped
        whole = line if buf is None else buf + line
        trailing = len(whole) - len(whole.rstrip("\\"))
        if trailing % 2:
            buf = whole[:-1] + " "
            continue
        buf = None
        s = whole.strip()
        if not s or s[0] in "#;":
            continue
        if s.startswith("["):
            if not s.endswith("]"):
                raise SystemdParseError(f"bad section line {s!r}")
            section = s[1:-1]
            continue
        if "=" not in s:
            raise SystemdParseError(f"line without '=': {s!r}")
        key, _, value = s.partition("=")
        out.append((section, key.strip(), value.strip()))
    return out


SIMPLE = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\",
          '"': '"', "'": "'", "s": " "}


def c_escape(text: str, pos: int) -> tuple[str, int]:
    """The escape whose backslash is at ``pos``: (character, position after it)."""
    if pos + 1 >= len(text):
        raise SystemdParseError("backslash at the end of the command line")
    c = text[pos + 1]
    if c in SIMPLE:
        return SIMPLE[c], pos + 2
    for lead, width in (("x", 2), ("u", 4), ("U", 8)):
        if c == lead:
            digits = text[pos + 2:pos + 2 + width]
            if not re.fullmatch(f"[0-9a-fA-F]{{{width}}}", digits):
                raise SystemdParseError(f"bad \\{lead} escape")
            return chr(int(digits, 16)), pos + 2 + width
    digits = text[pos + 1:pos + 4]
    if re.fullmatch("[0-7]{3}", digits):
        return chr(int(digits, 8)), pos + 4
    raise SystemdParseError(f"undocumented escape \\{c}")


def command_words(value: str) -> list[str]:
    """Split one ExecStart value into unquoted, unescaped words (one command only)."""
    words: list[str] = []
    pos = 0
    while True:
        while pos < len(value) and value[pos] in WS:
            pos += 1
        if pos == len(value):
            return words
        if value[pos] == ";" and (pos + 1 == len(value) or value[pos + 1] in WS):
            raise SystemdParseError("a second command (lone ';') in ExecStart")
        if value.startswith("\\;", pos) and (pos + 2 == len(value) or value[pos + 2] in WS):
            words.append(";")
            pos += 2
            continue
        word = ""
        in_quote: str | None = None
        while pos < len(value):
            c = value[pos]
            if c == "\\":
                ch, pos = c_escape(value, pos)
                word += ch
            elif in_quote is not None:
                if c == in_quote:
                    in_quote = None
                else:
                    word += c
                pos += 1
            elif c in "'\"":
                in_quote = c
                pos += 1
            elif c in WS:
                break
            else:
                word += c
                pos += 1
        if in_quote is not None:
            raise SystemdParseError("unterminated quote")
        words.append(word)


def resolve_specifiers(word: str) -> str:
    out, pos = "", 0
    while pos < len(word):
        if word[pos] != "%":
            out += word[pos]
            pos += 1
            continue
        key = word[pos + 1:pos + 2]
        if key not in SPECIFIERS:
            raise SystemdParseError(f"unknown specifier %{key}")
        out += SPECIFIERS[key]
        pos += 2
    return out


def expand_env(words: list[str], env: dict[str, str]) -> list[str]:
    argv: list[str] = []
    for w in words:
        whole = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", w)
        if whole:
            argv += env.get(whole.group(1), "").split()
            continue
        argv.append(re.sub(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}",
                           lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), ""), w))
    return argv


def systemd_argv(dropin: str, env: dict[str, str] | None = None) -> list[str]:
    """The argv systemd would exec for the last ExecStart in [Service] of ``dropin``."""
    execs = [v for sec, k, v in unit_entries(dropin) if sec == "Service" and k == "ExecStart"]
    value = ""
    for v in execs:
        value = v  # "" resets, the last one wins
    words = command_words(value)
    words[0] = words[0].lstrip("-@+!:")
    return expand_env([resolve_specifiers(w) for w in words], env or {})


# ------------------------------------------------------------------------------------- the checks

PROG = "/opt/sglang/bin/python3"


def argv_with(path: str) -> list[str]:
    return [PROG, "-m", "sglang.launch_server", "--model-path", "/models/target",
            "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", path,
            "--speculative-draft-window-size", "16", "--port", "30000"]


def write(argv: list[str]) -> str:
    return dropin_text(argv, "deploy test: DFLASH")


def reread(text: str) -> list[str]:
    """specconsole's own reader on the written drop-in (what the next preflight sees)."""
    cat = f"# /etc/systemd/system/sglang.service\n[Service]\nExecStart=/bin/false\n\n" \
          f"# /etc/systemd/system/sglang.service.d/{DEPLOY_DROPIN}\n{text}"
    return parse_unit("sglang.service", cat).exec_start


SPECIAL = [*" '\"\\%$;#=&|<>(){}*?!~`@^,:[]", "%h", "%%", "$HOME", "${X}", "$$", "\\n", "\\x41", "\\",
           "ü", "日本", "🙂", "\u00a0", "\u200b"]
printable_char = st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp"))
paths = st.lists(st.one_of(st.sampled_from(SPECIAL), st.text(printable_char, min_size=1, max_size=4)),
                 min_size=1, max_size=12).map(lambda parts: "/" + "".join(parts))


words = st.lists(st.one_of(st.sampled_from([*SPECIAL, ";", "-", "--x=a b"]),
                          st.text(printable_char, min_size=1, max_size=6)), min_size=1, max_size=3).map("".join)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(paths, st.lists(words, max_size=4))
def test_any_printable_path_round_trips_through_the_drop_in(path: str, extra: list[str]) -> None:
    argv = argv_with(path) + extra
    text = write(argv)
    # nothing but the reset and the one command line: no injected directive
    assert [(s, k) for s, k, _ in unit_entries(text)] == [("Service", "ExecStart"), ("Service", "ExecStart")]
    assert systemd_argv(text, env={"HOME": "/wrong", "X": "wrong"}) == argv
    assert reread(text) == argv  # the next deploy reads back what this one wrote


@pytest.mark.parametrize("bad", ["\n", "\r", "\x00", "\x1b", "\x7f", "\x85", "\u2028", "\u2029", "\x0b", "\x1e"])
def test_control_and_line_break_characters_are_refused(bad: str) -> None:
    path = f"/models/draft{bad} ExecStartPre=/bin/touch /tmp/pwned"
    with pytest.raises(UnitError) as info:
        write(argv_with(path))
    msg = str(info.value)
    assert "\n" not in msg and f"U+{ord(bad):04X}" in msg and "control" in msg


def test_a_newline_cannot_inject_a_directive() -> None:
    """The probe's case: on the old code this planned an extra ExecStartPre= run as root."""
    try:
        text = write(argv_with("/models/draft\nExecStartPre=/bin/touch /tmp/pwned"))
    except UnitError:
        return
    pytest.fail("a newline reached the drop-in:\n" + text)


def test_percent_is_literal_not_a_specifier() -> None:
    """Old code wrote %h as is: systemd would pass /root."""
    argv = argv_with("/data/%h/100%/draft")
    assert systemd_argv(write(argv)) == argv


def test_backslashes_survive() -> None:
    """Old code used shell single quotes, inside which systemd still applies C escapes."""
    for path in ("/data/a\\b", "/data/a\\nb", "/data/x\\", "/data/\\\\srv\\share"):
        argv = argv_with(path)
        assert systemd_argv(write(argv)) == argv, path


def test_dollar_and_semicolon_are_literal() -> None:
    argv = argv_with("/data/$HOME/${X};x")
    text = write(argv)
    assert systemd_argv(text, env={"HOME": "/root", "X": "y"}) == argv
    argv = [*argv_with("/d"), ";", "/bin/touch", "/tmp/pwned"]
    assert systemd_argv(write(argv)) == argv  # a ';' word is an argument, not a second command
    assert reread(write(argv)) == argv
    assert reread("[Service]\nExecStart=/bin/x \\; y\n") == ["/bin/x", ";", "y"]
    with pytest.raises(UnitError, match="several commands"):
        reread("[Service]\nExecStart=/bin/x ; /bin/y\n")


def test_plain_words_stay_readable() -> None:
    assert quote_exec(["/usr/bin/x", "--port", "30000", "--path", "/a/b-c_d.e"]) == \
        "/usr/bin/x \\\n    --port 30000 \\\n    --path /a/b-c_d.e"


def test_specifiers_of_the_base_unit_are_kept_for_systemd() -> None:
    """A base unit's own %h stays a specifier (systemd resolves it), $$ stays literal."""
    cat = ("# /etc/systemd/system/sglang.service\n[Service]\nEnvironment=PORT=30001\n"
           "ExecStart=/usr/bin/sglang serve --model-path %h/models/q \\\n"
           "    --served-model-name \"a b\\x41\" --tag 'c\\sd' --note $$5 --port ${PORT}\n")
    unit = parse_unit("sglang.service", cat)
    text = write(unit.exec_start)
    assert systemd_argv(text) == ["/usr/bin/sglang", "serve", "--model-path", "/root/models/q",
                                  "--served-model-name", "a bA", "--tag", "c d", "--note", "$5", "--port", "30001"]
    assert reread(write(reread(text))) == reread(text)  # stable across deploys: no %% or $$ growth


# ---------------------------------------------------------------------- base drift (issue 10)

HELP = (SHARED / "fixtures" / "sglang" / "serve-help-0.5.23.txt").read_text()


def _cat(base_exec: str, dropin: str | None) -> str:
    out = f"# /etc/systemd/system/sglang.service\n[Service]\nExecStart={base_exec}\n"
    if dropin is not None:
        out += f"\n# /etc/systemd/system/sglang.service.d/{DEPLOY_DROPIN}\n{dropin}"
    return out


def _drift(base_exec: str, dropin: str | None):  # type: ignore[no-untyped-def]
    cat = _cat(base_exec, dropin)
    unit = parse_unit("sglang.service", cat)
    base = parse_unit("sglang.service", cat, exclude=(unit.deploy_dropin,))
    return find_drift(unit, base, SglangCli.from_help(HELP))


def test_drop_in_records_its_base_and_a_changed_base_is_found() -> None:
    old_base = "/usr/bin/sglang serve --port 30000 --speculative-algorithm NEXTN"
    base = parse_unit("sglang.service", _cat(old_base, None))
    dropin = dropin_text(["/usr/bin/sglang", "serve", "--port", "30000", "--speculative-algorithm", "DFLASH"],
                         "deploy x", base)
    assert re.search(r"^# specconsole-base: sha256=[0-9a-f]{16} /etc/systemd/system/sglang.service$", dropin, re.M)
    assert _drift(old_base, dropin) is None
    drift = _drift("/usr/bin/sglang serve --port 30001 --speculative-algorithm NEXTN", dropin)
    assert drift is not None and drift.recorded
    assert drift.shadowed == [("--port", "30001", "30000")]
    line = drift.line()
    assert "\n" not in line and "/etc/systemd/system/sglang.service " in line and DEPLOY_DROPIN in line
    assert "--port 30001 in the base vs 30000 in the drop-in" in line and "--rebase" in line
    # a base change in a setting the drop-in sets itself is still a change of the base
    drift = _drift("/usr/bin/sglang serve --port 30000 --speculative-algorithm EAGLE", dropin)
    assert drift is not None and drift.shadowed == []


def test_legacy_drop_in_without_a_record_is_judged_by_the_options_it_shadows() -> None:
    legacy = "[Service]\nExecStart=\nExecStart=/usr/bin/sglang serve --port 30000 --speculative-algorithm DFLASH\n"
    assert _drift("/usr/bin/sglang serve --port 30000 --speculative-algorithm NEXTN", legacy) is None
    drift = _drift("/usr/bin/sglang serve --port 30002 --speculative-algorithm NEXTN", legacy)
    assert drift is not None and not drift.recorded and drift.shadowed == [("--port", "30002", "30000")]


def test_split_cat_keeps_the_files_apart() -> None:
    assert [p for p, _ in split_cat(_cat("/bin/x", "[Service]\n"))] == [
        "/etc/systemd/system/sglang.service", f"/etc/systemd/system/sglang.service.d/{DEPLOY_DROPIN}"]
