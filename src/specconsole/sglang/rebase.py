"""Whether the base unit changed under specconsole's drop-in, and what the drop-in shadows.

The deploy drop-in restates the whole ExecStart, so an edit to the base unit made after a
deploy (a new ``--port``, another model) is silently shadowed by it. The drop-in records a
fingerprint of the base ExecStart it was built on (:func:`~specconsole.sglang.unit.dropin_text`);
:func:`find_drift` compares it with the base unit as it is now. For drop-ins written before the
fingerprint existed, a difference in any option the console does not manage counts as drift.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specconsole.sglang.flags import CONCEPTS, Argv, SglangCli
from specconsole.sglang.unit import ServiceUnit, dropin_base, exec_digest, show_word


@dataclass
class BaseDrift:
    """The base unit's ExecStart changed since the deploy drop-in was written."""

    unit: str
    base_file: str        # the file that defines the base unit's ExecStart
    dropin: str           # specconsole's drop-in that shadows it
    recorded: bool        # the drop-in recorded the base's fingerprint (else inferred from the options)
    shadowed: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    # (option, value in the base unit now, value in the drop-in); None: absent, "": a switch

    def summary(self) -> str:
        if not self.shadowed:
            return "its ExecStart changed only in settings the drop-in sets itself"
        parts = [f"{opt} {_val(base)} in the base vs {_val(dropin)} in the drop-in"
                 for opt, base, dropin in self.shadowed[:4]]
        more = len(self.shadowed) - 4
        return "; ".join(parts) + (f"; {more} more" if more > 0 else "")

    def finding(self) -> str:
        """What happened, naming both files and what differs."""
        return (f"{self.unit}: the base unit {self.base_file} changed since specconsole's drop-in {self.dropin} "
                f"was written, and the drop-in shadows it ({self.summary()})")

    def line(self) -> str:
        """The finding and the fix, in one line."""
        return (f"{self.finding()}; run `specconsole deploy --rebase` to build the new ExecStart from the "
                f"current base unit (or delete the drop-in and daemon-reload)")


def _val(value: str | None) -> str:
    if value is None:
        return "absent"
    return "on" if value == "" else show_word(value)


def managed_names(cli: SglangCli) -> set[str]:
    """Every spelling of every option the deploy drop-in sets itself."""
    names: set[str] = set()
    for candidates in CONCEPTS.values():
        for c in candidates:
            names.update(cli.aliases(c))
    return names


def shadowed_options(base: list[str], dropin: list[str], cli: SglangCli) -> list[tuple[str, str | None, str | None]]:
    """Options outside the console's own settings whose value differs between the two argvs."""
    managed = managed_names(cli)

    def options(argv: list[str]) -> dict[str, str | None]:
        parsed = Argv.parse(argv, cli)
        out: dict[str, str | None] = {"(program)": " ".join(parsed.prefix)}
        for k, v in parsed.options:
            if k not in managed:
                out[cli.aliases(k)[0]] = "" if v is None else v
        return out

    b, d = options(base), options(dropin)
    keys = list(b) + [k for k in d if k not in b]
    return [(k, b.get(k), d.get(k)) for k in keys if b.get(k) != d.get(k)]


def find_drift(unit: ServiceUnit, base: ServiceUnit, cli: SglangCli) -> BaseDrift | None:
    """The drift of ``base`` (the unit without the deploy drop-in) under ``unit``'s drop-in, if any."""
    if unit.exec_start_file != unit.deploy_dropin:
        return None  # the drop-in does not define the effective ExecStart: nothing is shadowed
    recorded = dropin_base(unit.file_text(unit.deploy_dropin))
    shadowed = shadowed_options(base.exec_start, unit.exec_start, cli)
    changed = recorded.digest != exec_digest(base.exec_start) if recorded else bool(shadowed)
    if not changed:
        return None
    return BaseDrift(unit.name, base.exec_start_file, unit.deploy_dropin, recorded is not None, shadowed)
