"""The lab hosts' ``systemctl``: docker-systemctl-replacement, with systemd's own ``cat`` output.

docker-systemctl-replacement (``systemctl3``) runs real unit files, drop-ins included, without
systemd; the lab roots it at the host's folder with ``--root``. Two read-only verbs print less
than real systemd does, so this shim answers them in systemd's format and hands every other
verb to systemctl3 unchanged:

- ``systemctl cat UNIT``: each file that makes up the unit, the unit file first, then its
  drop-ins in order, each preceded by ``# /path/of/file`` and separated by a blank line;
- ``systemctl show -p FragmentPath|DropInPaths UNIT`` (and ``--value``).

Usage (written into each lab host's ``bin/systemctl``):
``python -m specconsole.lab.systemctl_shim ROOT SYSTEMCTL3 ARGS...``
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def unit_files(root: Path, unit: str) -> list[Path]:
    if "." not in unit:
        unit += ".service"
    base = root / "etc" / "systemd" / "system"
    main = base / unit
    if not main.exists():
        return []
    drop_dir = base / f"{unit}.d"
    drop_ins = sorted(drop_dir.glob("*.conf")) if drop_dir.is_dir() else []
    return [main, *drop_ins]


def cat(root: Path, units: list[str]) -> int:
    chunks = []
    for unit in units:
        files = unit_files(root, unit)
        if not files:
            print(f"No files found for {unit}.", file=sys.stderr)
            return 1
        for f in files:
            chunks.append(f"# {f}\n{f.read_text()}")
    print("\n".join(c.rstrip("\n") + "\n" for c in chunks), end="")
    return 0


def show(root: Path, args: list[str]) -> int | None:
    """Answer ``show -p FragmentPath,DropInPaths``; None means "not ours, pass it on"."""
    props: list[str] = []
    value_only = "--value" in args
    rest = [a for a in args if a != "--value"]
    units = []
    i = 0
    while i < len(rest):
        a = rest[i]
        if a in ("-p", "--property"):
            props += rest[i + 1].split(",")
            i += 2
            continue
        if a.startswith("--property="):
            props += a.split("=", 1)[1].split(",")
        elif not a.startswith("-"):
            units.append(a)
        i += 1
    if not props or not set(props) <= {"FragmentPath", "DropInPaths"} or len(units) != 1:
        return None
    files = unit_files(root, units[0])
    values = {"FragmentPath": str(files[0]) if files else "",
              "DropInPaths": " ".join(str(f) for f in files[1:])}
    for p in props:
        print(values[p] if value_only else f"{p}={values[p]}")
    return 0


def main(argv: list[str]) -> int:
    root, systemctl3, args = Path(argv[0]), argv[1], argv[2:]
    verb = next((a for a in args if not a.startswith("-")), "")
    if verb == "cat":
        return cat(root, [a for a in args[args.index("cat") + 1:] if not a.startswith("-")])
    if verb == "show":
        answered = show(root, args[args.index("show") + 1:])
        if answered is not None:
            return answered
    os.execv(systemctl3, [systemctl3, f"--root={root}", *args])
    return 127  # pragma: no cover - execv does not return


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
