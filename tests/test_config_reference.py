"""The README's config reference names exactly the keys config.py declares."""

from __future__ import annotations

import re
from pathlib import Path

from specconsole.base.validation import reference
from specconsole.config import ConfigFile

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_rows() -> dict[str, list[str]]:
    text = README.read_text(encoding="utf-8")
    section = text.split("### Config reference", 1)[1].split("\n#", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\|\s*`([^`]+)`\s*\|(.*)\|\s*$", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    return rows


def test_readme_config_reference_matches_the_declarations() -> None:
    declared = {key: (kind, allowed) for key, kind, _default, allowed in reference(ConfigFile)}
    documented = readme_rows()
    missing = sorted(set(declared) - set(documented))
    unknown = sorted(set(documented) - set(declared))
    fix = "run .venv/bin/python scripts/config_reference.py and paste its table into README.md"
    assert not missing, f"declared in config.py but not in the README's config reference: {missing} ({fix})"
    assert not unknown, f"in the README's config reference but not declared: {unknown} ({fix})"
    for key, (kind, allowed) in declared.items():
        cells = documented[key]
        assert cells[0] == kind and cells[-1] == allowed, \
            f"README row for {key} says {cells}; declared: {kind}, {allowed} ({fix})"


def test_reference_covers_nested_tables_and_constraints() -> None:
    rows = {key: (kind, default, allowed) for key, kind, default, allowed in reference(ConfigFile)}
    assert rows["hosts.training.kill.grace_s"] == ("float", "30.0", ">= 0")
    assert rows["hosts.port"] == ("int", "", ">= 1 and <= 65535")
    assert rows["hosts.role"][1] == "(required)"
    assert set(rows["hosts.role"][2].split(", ")) == {"train", "serve", "both"}
    assert "hosts.training" not in rows and "keys.<name>" in rows
