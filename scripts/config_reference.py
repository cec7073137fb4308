"""Print the README's config reference table from the declarations in specconsole.config.

    .venv/bin/python scripts/config_reference.py   # paste under "## Config reference"

tests/test_config_reference.py fails when the README and the declarations disagree.
"""

from __future__ import annotations

from specconsole.base.validation import reference
from specconsole.config import ConfigFile


def table() -> str:
    lines = ["| Key | Type | Default | Allowed |", "|---|---|---|---|"]
    for key, kind, default, allowed in reference(ConfigFile):
        shown = f"`{default}`" if default and not default.startswith("(") else default
        lines.append(f"| `{key}` | {kind} | {shown} | {allowed} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
