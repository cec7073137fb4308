"""Files the lab writes (host folders, configs, model folders, launchers): one way to write them."""

from __future__ import annotations

import json
from pathlib import Path


def write_file(path: Path, text: str, mode: int | None = None) -> None:
    """Write ``text`` to ``path`` (its folder created), with ``mode`` if given."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mode is not None:
        path.chmod(mode)


def toml_str(value: object) -> str:
    """``value`` as a TOML basic string (a YAML one too): JSON's escaping is TOML's."""
    return json.dumps(str(value))
