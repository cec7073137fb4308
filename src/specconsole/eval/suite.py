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
:class:`~specconsole.base.errors.ConfigError` naming the file, the key and the fix.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import msgspec

from specconsole.base import paths
from specconsole.base.errors import ConfigError
from specconsole.base.validation import TOO_DEEP, Invalid, Table, Text, convert, num, text

if TYPE_CHECKING:
    from specconsole.config import RouterConfig

T = TypeVar("T")

SUITE_ENV = "SPECCONSOLE_EVAL_SUITE"
DEFAULT_SUITE_NAME = "eval-coding.toml"

Tokens = Annotated[int, num(gt=0, problem="must be a positive integer", example=512)]


class SuiteHead(Table, frozen=True):
    """``[suite]``: a key left out is inherited from ``extends`` (else the default)."""

    name: Text | None = None
    description: str | None = None
    temperature: Annotated[float, num(ge=0, problem="must be a number >= 0", example=0,
                                      why="0 is greedy: acceptance lengths compare only at 0")] | None = None
    max_new_tokens: Tokens | None = None
    prompt_template: Annotated[str, text(r"\{prompt\}", "must be a string containing {prompt}",
                                         'write prompt_template = "{prompt}"')] | None = None
    extends: Text | None = None


class TaskEntry(Table, frozen=True):
    """One ``[[tasks]]``."""

    name: Annotated[str, text(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$", "must be a simple name",
                              'use letters, digits, _ . -, e.g. name = "fizzbuzz"')]
    prompt: Text
    max_new_tokens: Tokens | None = None
    description: str = ""


class SuiteFile(Table, frozen=True):
    """A suite file as written."""

    suite: SuiteHead = msgspec.field(default_factory=SuiteHead)
    tasks: tuple[TaskEntry, ...] = ()


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


def gate_prompts(router: RouterConfig) -> list[tuple[str, int]]:
    """A rollout gate's prompts (:func:`specconsole.actions.rollout.run.options`): ``[router]``'s
    ``gate_tasks`` of the default suite (all of them when none are named), each with its
    ``max_new_tokens`` capped at ``gate_max_new_tokens``."""
    suite = load_suite().select(list(router.gate_tasks) or None)
    return [(suite.text_for(t), min(suite.max_tokens_for(t), router.gate_max_new_tokens)) for t in suite.tasks]


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
    except RecursionError:
        raise ConfigError(shown, None, *TOO_DEEP) from None


def _load(p: Path, chain: tuple[Path, ...]) -> Suite:
    shown = str(p)
    resolved = p.resolve()
    if resolved in chain:
        raise ConfigError(shown, "suite.extends", "extends itself (a cycle)", "remove the extends key")
    try:
        file = convert(_read_toml(p), SuiteFile)
    except Invalid as err:
        raise ConfigError(shown, err.key, err.problem, err.fix) from None
    head = file.suite
    base: Suite | None = None
    if head.extends is not None:
        ext = head.extends
        target = p.parent / Path(ext).expanduser()
        if not target.exists() and Path(ext).name == ext and paths.data_path(ext).is_file():
            target = paths.data_path(ext)  # a shipped suite by name, e.g. extends = "eval-coding.toml"
        base = _load(target, (*chain, resolved))

    tasks: dict[str, Task] = {t.name: t for t in base.tasks} if base else {}
    own: set[str] = set()
    for i, t in enumerate(file.tasks):
        if t.name in own:
            raise ConfigError(shown, f"tasks[{i}].name", f"duplicate task {t.name!r}", "give every task a unique name")
        own.add(t.name)
        tasks[t.name] = Task(t.name, t.prompt, t.max_new_tokens, t.description)
    if not tasks:
        raise ConfigError(shown, "tasks", "no tasks defined", 'add [[tasks]] with name and prompt')
    inherited = base or Suite(name=p.stem, tasks=())
    return Suite(
        name=_given(head.name, inherited.name), tasks=tuple(tasks.values()), path=shown,
        description=_given(head.description, inherited.description),
        temperature=float(_given(head.temperature, inherited.temperature)),
        max_new_tokens=_given(head.max_new_tokens, inherited.max_new_tokens),
        prompt_template=_given(head.prompt_template, inherited.prompt_template),
    )


def _given(value: T | None, inherited: T) -> T:
    return inherited if value is None else value
