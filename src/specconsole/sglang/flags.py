"""SGLang's command line as the installed version spells it.

Flag names change between SGLang versions, so the deploy wizard never assumes them: it runs
the service's own ``--help`` on the host, reads which options exist (with their aliases and
whether they take a value) and maps the console's concepts onto them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: Console concept -> candidate flag names, preferred first (newest spelling first).
CONCEPTS: dict[str, tuple[str, ...]] = {
    "algorithm": ("--speculative-algorithm", "--speculative-algo"),
    "draft_model": ("--speculative-draft-model-path", "--speculative-draft-model"),
    "block_size": ("--speculative-dflash-block-size", "--speculative-block-size"),
    "num_draft_tokens": ("--speculative-num-draft-tokens",),
    "draft_window": ("--speculative-draft-window-size", "--speculative-dflash-draft-window-size"),
    "num_steps": ("--speculative-num-steps",),
    "eagle_topk": ("--speculative-eagle-topk",),
}

#: /server_info keys (argparse dests) that report each concept.
SERVER_INFO_KEYS: dict[str, str] = {
    "algorithm": "speculative_algorithm",
    "draft_model": "speculative_draft_model_path",
    "num_draft_tokens": "speculative_num_draft_tokens",
    "draft_window": "speculative_draft_window_size",
}

_OPTION_LINE = re.compile(r"^ {2}(-{1,2}\S.*?)(?: {2,}|$)")


@dataclass(frozen=True)
class Flag:
    names: tuple[str, ...]
    takes_value: bool


@dataclass
class SglangCli:
    """The options one SGLang installation accepts, read from its ``--help``."""

    flags: dict[str, Flag] = field(default_factory=dict)  # every name and alias -> its Flag

    @classmethod
    def from_help(cls, text: str) -> SglangCli:
        cli = cls()
        for line in text.splitlines():
            m = _OPTION_LINE.match(line)
            if not m:
                continue
            spec = m.group(1)
            parts = [p.strip() for p in re.split(r",\s+|\s+\|\s+", spec)]
            names = tuple(p.split()[0] for p in parts if p.startswith("-"))
            if not names:
                continue
            takes_value = any(len(p.split()) > 1 for p in parts)
            flag = Flag(names, takes_value)
            for n in names:
                cli.flags.setdefault(n, flag)
        return cli

    def __contains__(self, name: str) -> bool:
        return name in self.flags

    def name_for(self, concept: str) -> str | None:
        """This version's flag for a concept (None when it has none)."""
        return next((c for c in CONCEPTS[concept] if c in self.flags), None)

    def aliases(self, name: str) -> tuple[str, ...]:
        flag = self.flags.get(name)
        return flag.names if flag else (name,)

    def takes_value(self, name: str) -> bool:
        flag = self.flags.get(name)
        return True if flag is None else flag.takes_value


@dataclass
class Argv:
    """An SGLang command line: the launcher prefix and the options, order kept."""

    prefix: list[str]
    options: list[tuple[str, str | None]]  # (flag, value or None for a switch)

    @classmethod
    def parse(cls, argv: list[str], cli: SglangCli) -> Argv:
        i = 0
        while i < len(argv) and not argv[i].startswith("--"):
            i += 1
        prefix, rest = argv[:i], argv[i:]
        options: list[tuple[str, str | None]] = []
        j = 0
        while j < len(rest):
            word = rest[j]
            if word.startswith("--") and "=" in word:
                k, v = word.split("=", 1)
                options.append((k, v))
                j += 1
            elif word.startswith("--"):
                nxt = rest[j + 1] if j + 1 < len(rest) else None
                if cli.takes_value(word) and nxt is not None and not nxt.startswith("--"):
                    options.append((word, nxt))
                    j += 2
                else:
                    options.append((word, None))
                    j += 1
            else:  # a stray positional: keep it attached to the previous option's position
                options.append((word, None))
                j += 1
        return cls(prefix, options)

    def get(self, names: tuple[str, ...]) -> str | None:
        for k, v in reversed(self.options):
            if k in names:
                return v if v is not None else ""
        return None

    def set(self, name: str, value: str, names: tuple[str, ...]) -> None:
        """Replace the option (any alias) in place, or append it."""
        for i, (k, _) in enumerate(self.options):
            if k in names:
                self.options[i] = (name, value)
                self.options = [o for j, o in enumerate(self.options) if j <= i or o[0] not in names]
                return
        self.options.append((name, value))

    def remove(self, names: tuple[str, ...]) -> None:
        self.options = [o for o in self.options if o[0] not in names]

    def argv(self) -> list[str]:
        out = list(self.prefix)
        for k, v in self.options:
            out.append(k)
            if v is not None:
                out.append(v)
        return out


def help_command(prefix: list[str]) -> list[str]:
    """The command that prints this launcher's options: ``PREFIX --help``."""
    return [*prefix, "--help"]
