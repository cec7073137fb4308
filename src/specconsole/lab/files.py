"""Files the lab writes (host folders, configs, model folders, launchers): one way to write them."""

from __future__ import annotations

from pathlib import Path


def write_file(path: Path, text: str, mode: int | None = None) -> None:
    """Write ``text`` to ``path`` (its folder created), with ``mode`` if given."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mode is not None:
        path.chmod(mode)
