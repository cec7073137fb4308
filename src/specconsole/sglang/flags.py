"""SGLang's command line as the installed version spells it.

Flag names change between SGLang versions, so the deploy wizard never assumes them: it runs
the service's own ``--help`` on the host, reads which options exist (with their aliases and
whether they take a value) and maps the console's concepts onto them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: Console concept -> candidate flag names, preferred first (newest spelling first). The deploy
#: drop-in sets these itself (see :func:`specconsole.sglang.rebase.managed_names`).
CONCEPTS: dict[str, tuple[str, ...]] = {
    "algorithm": ("--speculative-algorithm", "--speculative-algo"),
    "draft_model": ("--speculative-draft-model-path", "--speculative-draft-model"),
    "block_size": ("--speculative-dflash-block-size", "--speculative-block-size"),
    "num_draft_tokens": ("--speculative-num-draft-tokens",),
    "draft_window": ("--speculative-draft-window-size", "--speculative-dflash-draft-window-size"),
    "tree_budget": ("--speculative-ddtree-budget",),
    "num_steps": ("--speculative-num-steps",),
    "eagle_topk": ("--speculative-eagle-topk",),
    "attention_backend": ("--attention-backend",),
}

#: Options the deploy reads to check SGLang's rules, but never writes.
CHECKED: dict[str, tuple[str, ...]] = {
    "page_size": ("--page-size",),
    "rejection_sampling": ("--speculative-use-rejection-sampling",),
    "prefill_attention_backend": ("--prefill-attention-backend",),
    "decode_attention_backend": ("--decode-attention-backend",),
    "pp_size": ("--pp-size", "--pipeline-parallel-size"),
    "enable_dp_attention": ("--enable-dp-attention",),
    "enable_dp_lm_head": ("--enable-dp-lm-head",),
}

#: Aliases SGLang accepts but hides from ``--help`` (``help=argparse.SUPPRESS``): canonical name
#: -> hidden names. Newer SGLang keeps ``--speculative-dflash-draft-window-size`` as a hidden,
#: deprecated alias of ``--speculative-draft-window-size``.
HIDDEN_ALIASES: dict[str, tuple[str, ...]] = {
    "--speculative-draft-window-size": ("--speculative-dflash-draft-window-size",),
}

#: /server_info keys (argparse dests) that report each concept, preferred first: versions that
#: renamed a flag may report either name.
SERVER_INFO_KEYS: dict[str, str] = {
    "algorithm": "speculative_algorithm",
    "draft_model": "speculative_draft_model_path",
    "num_draft_tokens": "speculative_num_draft_tokens",
    "draft_window": "speculative_draft_window_size",
    "tree_budget": "speculative_ddtree_budget",
}

_OPTION_LINE = re.compile(r"^ {2}(-{1,2}\S.*?)(?: {2,}|$)")
_CHOICES = re.compile(r"\{([A-Za-z0-9_.,-]+)\}")
_BUILTINS = re.compile(r"(?:Builtins|choices|one of)\s*:?\s*([A-Z0-9_]+(?:\s*,\s*[A-Z0-9_]+)+)", re.IGNORECASE)


@dataclass(frozen=True)
class Flag:
    names: tuple[str, ...]
    takes_value: bool
    #: ``{a,b}`` choices of the metavar (None: free text)
    choices: tuple[str, ...] | None = None
    #: the help text, joined into one line
    help: str = ""
    #: names accepted but not listed by ``--help`` (see :data:`HIDDEN_ALIASES`)
    hidden: tuple[str, ...] = ()


@dataclass
class SglangCli:
    """The options one SGLang installation accepts, read from its ``--help``."""

    flags: dict[str, Flag] = field(default_factory=dict)  # every name and alias -> its Flag

    @classmethod
    def from_help(cls, text: str) -> SglangCli:
        cli = cls()
        entries: list[tuple[str, list[str]]] = []
        for line in text.splitlines():
            m = _OPTION_LINE.match(line)
            if m:
                entries.append((m.group(1), [line[m.end():].strip()]))
            elif entries and line.startswith("   ") and line.strip():
                entries[-1][1].append(line.strip())
            elif entries and not line.strip():
                entries[-1][1].append("\n")  # a blank line ends the help (argparse groups)
        for spec, help_lines in entries:
            parts = [p.strip() for p in re.split(r",\s+|\s+\|\s+", spec)]
            names = tuple(p.split()[0] for p in parts if p.startswith("-"))
            if not names:
                continue
            takes_value = any(len(p.split()) > 1 for p in parts)
            choices = _CHOICES.search(spec)
            joined = " ".join(help_lines).split("\n")[0]
            hidden = tuple(h for n in names for h in HIDDEN_ALIASES.get(n, ()) if h not in names)
            flag = Flag(names + hidden, takes_value,
                        tuple(choices.group(1).split(",")) if choices else None, " ".join(joined.split()), hidden)
            for n in flag.names:
                cli.flags.setdefault(n, flag)
        return cli

    def __contains__(self, name: str) -> bool:
        return name in self.flags

    def canonical(self, word: str) -> str:
        """The option a command-line word names, as argparse reads it: the name itself, or the one
        option it is an unambiguous prefix of (``--speculative-algo`` -> ``--speculative-algorithm``;
        argparse's ``allow_abbrev``). A word that names no option, or several, is returned as is."""
        if word in self.flags or not word.startswith("--"):
            return word
        found = {id(f): n for n, f in self.flags.items() if n.startswith(word) and n not in f.hidden}
        if len(found) != 1:
            return word
        (name,) = found.values()
        return name

    def name_for(self, concept: str) -> str | None:
        """This version's flag for a concept (None when it has none). A hidden alias counts only
        through the name ``--help`` lists."""
        candidates = CONCEPTS.get(concept) or CHECKED[concept]
        return next((c for c in candidates if c in self.flags and c not in self.flags[c].hidden), None)

    def aliases(self, name: str) -> tuple[str, ...]:
        flag = self.flags.get(name)
        return flag.names if flag else (name,)

    def same(self, a: str | None, b: str | None) -> bool:
        """Whether two names are spellings of one option."""
        return a is not None and b is not None and b in self.aliases(a)

    def takes_value(self, name: str) -> bool:
        flag = self.flags.get(name)
        return True if flag is None else flag.takes_value

    def algorithms(self) -> list[str]:
        """The speculative algorithms this version offers: the ``{A,B}`` choices of
        ``--speculative-algorithm``, or the ``Builtins: A, B.`` its help lists ([] when neither)."""
        name = self.name_for("algorithm")
        flag = self.flags.get(name) if name else None
        if flag is None:
            return []
        if flag.choices:
            return list(flag.choices)
        m = _BUILTINS.search(flag.help)
        out: list[str] = []
        for item in (p.strip().upper() for p in m.group(1).split(",")) if m else ():
            if item not in out:
                out.append(item)
        return out


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
                options.append((cli.canonical(k), v))
                j += 1
            elif word.startswith("--"):
                word = cli.canonical(word)
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

    def spelling(self, names: tuple[str, ...]) -> str | None:
        """How the command line spells the option (the last of its aliases given), if at all."""
        return next((k for k, _ in reversed(self.options) if k in names), None)

    def set(self, name: str, value: str, names: tuple[str, ...]) -> None:
        """Replace the option in place, keeping the alias the command line uses (a unit that
        spells it ``--speculative-dflash-draft-window-size`` keeps that name), or append it as
        ``name``; later repeats of it are dropped."""
        for i, (k, _) in enumerate(self.options):
            if k in names:
                self.options[i] = (k, value)
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
