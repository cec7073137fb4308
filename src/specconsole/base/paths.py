"""Where specconsole keeps things: the files it ships, and the user's config and state folders.

Shipped files (themes, the coding eval suite) live in ``specconsole/data/`` inside the package
and are found with :mod:`importlib.resources`, so they work from a wheel as from a checkout.
User folders come from platformdirs, which honours ``$XDG_CONFIG_HOME`` and ``$XDG_STATE_HOME``
(on Linux: ``~/.config/specconsole`` and ``~/.local/state/specconsole`` by default).
"""

from __future__ import annotations

import atexit
import contextlib
from pathlib import Path

import platformdirs

APP = "specconsole"

_extracted = contextlib.ExitStack()
atexit.register(_extracted.close)


def data_path(*parts: str) -> Path:
    """A file or folder shipped in ``specconsole/data/``, as a real path."""
    from importlib.resources import as_file, files  # here: ``status --tmux`` reads paths in milliseconds

    res = files("specconsole").joinpath("data", *parts)
    if isinstance(res, Path):
        return res
    return _extracted.enter_context(as_file(res))  # a zipped install: extracted once, removed at exit


def config_dir() -> Path:
    """The user's config folder: ``config.toml``, ``themes/``."""
    return Path(platformdirs.user_config_dir(APP, appauthor=False))


def state_dir() -> Path:
    """The user's state folder: the remembered theme, the audit log, eval results, lab and demo folders."""
    return Path(platformdirs.user_state_dir(APP, appauthor=False))


def default_config_file() -> Path:
    return config_dir() / "config.toml"
