"""Read the SGLang unit and its program's command line: the one step the deploy form's algorithm
discovery and the deploy preflight share.

1. :func:`read_unit`: ``systemctl cat UNIT`` and the unit's ``EnvironmentFile``\\ s, parsed as
   systemd runs it (and, when the console's drop-in is there, the unit without it);
2. :func:`read_cli`: the program of ``ExecStart`` (the words before SGLang's flags) and the flags
   its own ``--help`` lists.

:func:`read_unit_cli` does both. Each command is said through ``steps``; the callers begin the
steps (their names are theirs: "discover algorithms", "read the unit", "SGLang flags"). A unit or
a program the console cannot read is refused (:class:`DeployRefused`), naming what to fix.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from specconsole.actions.deploy.algorithms import DeployRefused
from specconsole.base.values import output_line
from specconsole.config import HostConfig
from specconsole.hosts import Host
from specconsole.sglang.flags import Argv, SglangCli, help_command
from specconsole.sglang.unit import SPECIFIER, ServiceUnit, parse_unit, show_word
from specconsole.steps import Steps


@dataclass(frozen=True)
class UnitRead:
    """The unit as systemd runs it, and ``base``: the same without the console's drop-in (the unit
    itself when there is none or it is the only file)."""

    unit: ServiceUnit
    base: ServiceUnit


@dataclass(frozen=True)
class CliRead:
    """The program of ``ExecStart`` and the flags its ``--help`` lists."""

    prefix: list[str]
    cli: SglangCli


@dataclass(frozen=True)
class UnitCli:
    """What :func:`read_unit_cli` read: the unit, the program of its ``ExecStart``, its flags."""

    unit: ServiceUnit
    base: ServiceUnit
    prefix: list[str]
    cli: SglangCli


async def read_unit(host: Host, cfg_name: str, unit_name: str, steps: Steps) -> UnitRead:
    """``systemctl cat`` the unit and read its environment files."""
    cat = await steps.run(host, ["systemctl", "cat", "--", unit_name])
    if not cat.ok:
        raise DeployRefused(f"{cfg_name}: `systemctl cat {unit_name}` failed: "
                            f"{output_line(cat.stderr or cat.stdout)}; check sglang.unit in the config")
    first = parse_unit(unit_name, cat.stdout)
    env_texts: dict[str, str] = {}
    for env_file in first.environment_files:
        res = await steps.run(host, ["cat", "--", env_file.lstrip("-")])
        if not res.ok and not env_file.startswith("-"):
            raise DeployRefused(f"{cfg_name}: EnvironmentFile {env_file} of {unit_name} cannot be read")
        env_texts[env_file.lstrip("-")] = res.stdout if res.ok else ""
    unit = parse_unit(unit_name, cat.stdout, env_texts) if env_texts else first
    base = (parse_unit(unit_name, cat.stdout, env_texts, exclude=(unit.deploy_dropin,))
            if unit.file_text(unit.deploy_dropin) is not None and len(unit.files) > 1 else unit)
    return UnitRead(unit, base)


async def read_cli(host: Host, cfg_name: str, unit_name: str, exec_start: list[str], steps: Steps) -> CliRead:
    """Run the ``--help`` of the program of ``exec_start`` (the unit's ``ExecStart``) and parse its flags."""
    prefix = Argv.parse(exec_start, SglangCli()).prefix
    if any(SPECIFIER in w for w in prefix):
        raise DeployRefused(f"{cfg_name}: the program in {unit_name}'s ExecStart "
                            f"({show_word(' '.join(prefix))}) uses a systemd % specifier; "
                            f"write the path out in the unit so the console can run its --help")
    res = await steps.run(host, help_command(prefix), timeout=180,
                          summary=lambda r: f"{r.stdout.count(chr(10))} lines of --help")
    cli = SglangCli.from_help(res.stdout + "\n" + res.stderr)
    if not cli.flags:
        raise DeployRefused(f"{cfg_name}: `{shlex.join(help_command(prefix))}` printed no options "
                            f"(exit {res.exit_status}); is ExecStart's program SGLang?")
    return CliRead(prefix, cli)


async def read_unit_cli(host: Host, cfg: HostConfig, steps: Steps) -> UnitCli:
    """The unit of ``cfg.sglang`` and the flags of its program (the unit as it runs now)."""
    if cfg.sglang is None:
        raise DeployRefused(f"{cfg.name}: no [hosts.sglang] configured; nothing to deploy")
    read = await read_unit(host, cfg.name, cfg.sglang.unit, steps)
    got = await read_cli(host, cfg.name, cfg.sglang.unit, read.unit.exec_start, steps)
    return UnitCli(read.unit, read.base, got.prefix, got.cli)
