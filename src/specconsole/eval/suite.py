"""The benchmark definition: a TOML file of tasks (prompts) and sampling settings.

``eval-coding.toml`` (package data, ``specconsole/data/``) ships the ten coding tasks. A suite file::

    [suite]
    name = "coding"
    description = "..."
    temperature = 0.0            # greedy: acceptance length is only comparable at temperature 0
    max_new_tokens = 512
    prompt_template = "{prompt}" # how a task's prompt becomes the /generate text
    # extends = "eval-coding.toml"   # optional: start from another suite (a path relative to this
    #                                  file, else a shipped suite of that name)

    [[tasks]]
    name = "fizzbuzz"
    prompt = "..."
    # max_new_tokens = 256       # optional per-task override

A file that ``extends`` another inherits its settings and tasks; a task with the same name
replaces the inherited one, new names are appended. Every error is a one-line
:class:`~specconsole.errors.ConfigError` naming the file, the key and the fix.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from specconsole import paths
from specconsole.errors import ConfigError

SUITE_ENV = "SPECCONSOLE_EVAL_SUITE"
DEFAULT_SUITE_NAME = "eval-coding.toml"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_SUITE_KEYS = {"name", "description", "temperature", "max_new_tokens", "prompt_template", "extends"}
_TASK_KEYS = {"name", "prompt", "max_new_tokens", "description"}


@dataclass(frozen=True)
class Task:
    name: str
    prompt: str
    max_new_tokens: int | None = None
    description: str = ""


@dataclass(frozen=True)
class Suite:
    name: str
    tasks: tuple[Task, ...]
    path: str = "<suite>"
    description: str = ""
    temperature: float = 0.0
    max_new_tokens: int = 512
    prompt_template: str = "{prompt}"

    @property
    def task_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tasks)

    def text_for(self, task: Task) -> str:
        """The ``/generate`` text of a task: its prompt put into the suite's template."""
        return self.prompt_template.replace("{prompt}", task.prompt)

    def max_tokens_for(self, task: Task, override: int | None = None) -> int:
        if override is not None:
            return override
        return task.max_new_tokens if task.max_new_tokens is not None else self.max_new_tokens

    def select(self, names: list[str] | tuple[str, ...] | None) -> Suite:
        """The suite restricted to ``names`` (in the order given); unknown names are an error."""
        if not names:
            return self
        by_name = {t.name: t for t in self.tasks}
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise ConfigError(self.path, "tasks", f"unknown task {unknown[0]!r}",
                              f"pick from {', '.join(self.task_names)}")
        seen: list[str] = []
        for n in names:
            if n not in seen:
                seen.append(n)
        return replace(self, tasks=tuple(by_name[n] for n in seen))


def default_suite_path() -> Path | None:
    """$SPECCONSOLE_EVAL_SUITE, else the shipped ``eval-coding.toml``."""
    env = os.environ.get(SUITE_ENV)
    if env:
        return Path(env).expanduser()
    shipped = paths.data_path(DEFAULT_SUITE_NAME)
    return shipped if shipped.is_file() else None


def load_suite(path: str | os.PathLike[str] | None = None) -> Suite:
    """Read a suite file (default: :func:`default_suite_path`)."""
    if path is None:
        found = default_suite_path()
        if found is None:
            raise ConfigError("<eval suite>", None, f"no benchmark definition found ({DEFAULT_SUITE_NAME})",
                              f"pass --suite FILE or set ${SUITE_ENV}")
        path = found
    return _load(Path(path).expanduser(), ())


def _read_toml(p: Path) -> dict[str, Any]:
    shown = str(p)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(shown, None, "file not found",
                          f"check the path (the shipped suite is {DEFAULT_SUITE_NAME!r})") from None
    except OSError as err:
        raise ConfigError(shown, None, f"cannot read: {err.strerror}", "check the path and its permissions") from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(shown, None, "not UTF-8 text", "save the file as UTF-8 TOML") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(shown, None, f"invalid TOML: {err}", "correct the syntax at that line") from None


def _load(p: Path, chain: tuple[Path, ...]) -> Suite:
    shown = str(p)
    resolved = p.resolve()
    if resolved in chain:
        raise ConfigError(shown, "suite.extends", "extends itself (a cycle)", "remove the extends key")
    data = _read_toml(p)
    unknown = set(data) - {"suite", "tasks"}
    if unknown:
        raise ConfigError(shown, sorted(unknown)[0], "unknown top-level key", "allowed: [suite] and [[tasks]]")
    head = data.get("suite", {})
    if not isinstance(head, dict):
        raise ConfigError(shown, "suite", "must be a table", "write [suite]")
    bad = set(head) - _SUITE_KEYS
    if bad:
        raise ConfigError(shown, f"suite.{sorted(bad)[0]}", "unknown key", f"allowed: {', '.join(sorted(_SUITE_KEYS))}")

    base: Suite | None = None
    if "extends" in head:
        ext = head["extends"]
        if not isinstance(ext, str) or not ext:
            raise ConfigError(shown, "suite.extends", "must be a file path", 'write extends = "eval-coding.toml"')
        target = p.parent / Path(ext).expanduser()
        if not target.exists() and Path(ext).name == ext and paths.data_path(ext).is_file():
            target = paths.data_path(ext)  # a shipped suite by name, e.g. extends = "eval-coding.toml"
        base = _load(target, (*chain, resolved))

    name = head.get("name", base.name if base else p.stem)
    if not isinstance(name, str) or not name:
        raise ConfigError(shown, "suite.name", "must be a non-empty string", 'write name = "coding"')
    description = head.get("description", base.description if base else "")
    if not isinstance(description, str):
        raise ConfigError(shown, "suite.description", "must be a string", 'write description = "..."')
    temperature = head.get("temperature", base.temperature if base else 0.0)
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or temperature < 0:
        raise ConfigError(shown, "suite.temperature", f"must be a number >= 0, got {temperature!r}",
                          "use 0 (greedy) for comparable acceptance lengths")
    max_new = head.get("max_new_tokens", base.max_new_tokens if base else 512)
    _check_tokens(shown, "suite.max_new_tokens", max_new)
    template = head.get("prompt_template", base.prompt_template if base else "{prompt}")
    if not isinstance(template, str) or "{prompt}" not in template:
        raise ConfigError(shown, "suite.prompt_template", "must be a string containing {prompt}",
                          'write prompt_template = "{prompt}"')

    tasks: dict[str, Task] = {t.name: t for t in base.tasks} if base else {}
    raw_tasks = data.get("tasks", [])
    if not isinstance(raw_tasks, list):
        raise ConfigError(shown, "tasks", "must be an array of tables", "write each task as [[tasks]]")
    own: set[str] = set()
    for i, t in enumerate(raw_tasks):
        key = f"tasks[{i}]"
        if not isinstance(t, dict):
            raise ConfigError(shown, key, "must be a table", "write each task as [[tasks]]")
        bad = set(t) - _TASK_KEYS
        if bad:
            raise ConfigError(shown, f"{key}.{sorted(bad)[0]}", "unknown key",
                              f"allowed: {', '.join(sorted(_TASK_KEYS))}")
        tname = t.get("name")
        if not isinstance(tname, str) or not _NAME_RE.match(tname):
            raise ConfigError(shown, f"{key}.name", f"must be a simple name, got {tname!r}",
                              'use letters, digits, _ . -, e.g. name = "fizzbuzz"')
        if tname in own:
            raise ConfigError(shown, f"{key}.name", f"duplicate task {tname!r}", "give every task a unique name")
        own.add(tname)
        prompt = t.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise ConfigError(shown, f"{key}.prompt", "must be a non-empty string", 'write prompt = """..."""')
        tmax = t.get("max_new_tokens")
        if tmax is not None:
            _check_tokens(shown, f"{key}.max_new_tokens", tmax)
        desc = t.get("description", "")
        if not isinstance(desc, str):
            raise ConfigError(shown, f"{key}.description", "must be a string", 'write description = "..."')
        tasks[tname] = Task(tname, prompt, tmax, desc)
    if not tasks:
        raise ConfigError(shown, "tasks", "no tasks defined", 'add [[tasks]] with name and prompt')
    return Suite(name=name, tasks=tuple(tasks.values()), path=shown, description=description,
                 temperature=float(temperature), max_new_tokens=max_new, prompt_template=template)


def _check_tokens(path: str, key: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(path, key, f"must be a positive integer, got {value!r}", "use e.g. 512")
