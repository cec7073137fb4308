"""Themes from files, and the console's small remembered state (the chosen theme).

Theme files are TOML, one theme each (see ``specconsole/data/themes/dark.toml`` for every key).
They are looked up in, in order (a later file with the same ``name`` replaces an earlier one):

1. the themes shipped in the package (``specconsole/data/themes/``),
2. ``themes/`` in the user's config folder (``$XDG_CONFIG_HOME/specconsole/themes/``),
3. every folder in ``$SPECCONSOLE_THEMES`` (``:``-separated).

A broken file is skipped with a one-line warning naming the file, the key and the fix; the
console still starts. The chosen theme is stored as JSON in ``<console.state_dir>/console.json``.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import msgspec
from textual.color import Color, ColorParseError
from textual.theme import Theme

from specconsole.base import paths
from specconsole.base.validation import TOO_DEEP, Invalid, Table, Text, convert, num, text

THEMES_ENV = "SPECCONSOLE_THEMES"
#: The themes shipped in the package.
BUNDLED_DIR = paths.data_path("themes")
STATE_FILE = "console.json"
DEFAULT_THEME = "dark"


Colour = Annotated[str, text(r"\S", "must be a colour", 'write e.g. "#4FA3E0"')]
Fraction = Annotated[float, num(ge=0, le=1, example=0.5)]


class ThemeFile(Table, frozen=True):
    """One theme file as written; a colour left out is derived by Textual."""

    name: Text
    primary: Colour
    secondary: Colour | None = None
    accent: Colour | None = None
    foreground: Colour | None = None
    background: Colour | None = None
    surface: Colour | None = None
    panel: Colour | None = None
    boost: Colour | None = None
    success: Colour | None = None
    warning: Colour | None = None
    error: Colour | None = None
    dark: bool | None = None
    luminosity_spread: Fraction | None = None
    text_alpha: Fraction | None = None
    variables: dict[str, str] = msgspec.field(default_factory=dict)


_COLOR_KEYS = ("primary", "secondary", "accent", "foreground", "background", "surface", "panel",
               "boost", "success", "warning", "error")


class ThemeFileError(ValueError):
    pass


@dataclass
class LoadedThemes:
    themes: dict[str, Theme] = field(default_factory=dict)  # in load order
    sources: dict[str, Path] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return list(self.themes)


def theme_dirs() -> list[Path]:
    dirs = [BUNDLED_DIR, paths.config_dir() / "themes"]
    extra = os.environ.get(THEMES_ENV, "")
    dirs.extend(Path(p).expanduser() for p in extra.split(":") if p.strip())
    return dirs


def parse_theme(data: dict[str, Any], path: Path) -> Theme:
    """A Textual :class:`Theme` from one file's TOML table; raises :class:`ThemeFileError`."""
    where = str(path)
    try:
        file = convert(data, ThemeFile, top="key")
    except Invalid as err:
        raise ThemeFileError(f"{where}: {err}") from None
    for key in _COLOR_KEYS:
        value = getattr(file, key)
        if value is not None:
            try:
                Color.parse(value)
            except (ColorParseError, ValueError):
                raise ThemeFileError(f'{where}: {key}: {value!r} is not a colour (fix: write e.g. "#4FA3E0")') from None
    given = {f: getattr(file, f) for f in file.__struct_fields__ if getattr(file, f) is not None}
    given["name"] = file.name.strip()
    given["variables"] = dict(file.variables)
    return Theme(**given)


def load_themes(dirs: Iterable[Path] | None = None) -> LoadedThemes:
    out = LoadedThemes()
    for d in theme_dirs() if dirs is None else dirs:
        if not d.is_dir():
            continue
        for path in sorted(d.glob("*.toml")):
            try:
                data = tomllib.loads(path.read_text(encoding="utf-8"))
                theme = parse_theme(data, path)
            except (OSError, UnicodeDecodeError) as err:
                out.warnings.append(f"theme file {path}: cannot read ({err}); skipped")
                continue
            except tomllib.TOMLDecodeError as err:
                out.warnings.append(f"theme file {path}: invalid TOML ({err}); skipped")
                continue
            except RecursionError:
                out.warnings.append(f"theme file {path}: {TOO_DEEP[0]}; skipped")
                continue
            except ThemeFileError as err:
                out.warnings.append(f"theme file {err}; skipped")
                continue
            out.themes.pop(theme.name, None)  # a later file replaces it (and moves to the end)
            out.themes[theme.name] = theme
            out.sources[theme.name] = path
    # A stable cycle order: dark, light, high-contrast first, then the rest by name.
    order = {"dark": 0, "light": 1, "high-contrast": 2}
    out.themes = dict(sorted(out.themes.items(), key=lambda kv: (order.get(kv[0], 9), kv[0])))
    return out


class ConsoleState:
    """A small JSON file of things the console remembers between runs (today: the theme)."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.path = Path(state_dir).expanduser() / STATE_FILE

    def read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    @property
    def theme(self) -> str | None:
        value = self.read().get("theme")
        return value if isinstance(value, str) else None

    def remember(self, **values: Any) -> str | None:
        """Merge ``values`` into the file; returns an error message instead of raising."""
        data = {**self.read(), **values}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
            tmp.replace(self.path)
        except OSError as err:
            return f"cannot remember the theme in {self.path}: {err.strerror}; set console.state_dir"
        return None


def pick_theme(available: list[str], *, cli: str | None, remembered: str | None,
               configured: str | None) -> str:
    """``--theme`` > the remembered choice > ``console.theme`` > ``dark`` > the first one loaded."""
    for name in (cli, remembered, configured, DEFAULT_THEME):
        if name and name in available:
            return name
    return available[0]
