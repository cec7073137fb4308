"""A real non-root operator for the lab: a system user, and a sudoers drop-in for it.

Only tests (and the lab) use this; it needs root (``useradd``, ``/etc/sudoers.d``). The lab's
sshd reads one ``AuthorizedKeysFile`` for every user, so the lab's key logs this user in too;
sshd reads that file as the user, so the lab folder must be traversable by others
(:func:`reach_for_others`).

:func:`ensure_user` is idempotent: it creates the user once (``useradd --system``, a home, a
``*`` password field: no password, but not "locked", which sshd without PAM refuses) and
reuses it afterwards. :func:`write_sudoers` writes ``/etc/sudoers.d/NAME`` only after
``visudo -cf`` accepted it; :func:`remove_sudoers` removes it (always call it: the rule makes
the user root-equivalent).

Lab-only lines in the drop-in: sudo runs commands with ``secure_path`` as PATH, so
``Defaults:USER secure_path=HOST/bin:...`` makes the sudo'd agent find the same ``systemctl``
(docker-systemctl-replacement, rooted at the lab host's folder) and ``journalctl`` as the
user's SSH session, and ``env_keep`` keeps the lab's marker variables (``lab down`` finds
what the agent started by them). A real host needs only the rule line.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from specconsole.lab.parts.state import LAB_ROOT_ENV, LabError

LAB_USER = "specconsole-lab"
SUDOERS_DIR = Path("/etc/sudoers.d")


def unavailable() -> str | None:
    """Why a real user and a real sudo cannot be set up here (None: they can)."""
    if os.geteuid() != 0:
        return "needs root (useradd, /etc/sudoers.d); CI runs as root"
    for tool in ("useradd", "visudo", "sudo"):
        if not shutil.which(tool) and not Path(f"/usr/sbin/{tool}").exists():
            return f"`{tool}` is not installed (apt-get install sudo passwd; scripts/setup.sh installs sudo)"
    if not SUDOERS_DIR.is_dir():
        return f"{SUDOERS_DIR} does not exist (is sudo installed?)"
    return None


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        why = (res.stderr or res.stdout).strip()[-300:]
        raise LabError(f"lab: `{' '.join(argv)}` failed ({res.returncode}): {why}")
    return res


def ensure_user(name: str = LAB_USER) -> pwd.struct_passwd:
    """The system user ``name`` with a home and a login shell, created if missing."""
    try:
        pwd.getpwnam(name)
    except KeyError:
        _run(["useradd", "--system", "--create-home", "--shell", "/bin/sh", "--password", "*", name])
    else:
        _run(["usermod", "--password", "*", "--shell", "/bin/sh", name])   # unlocked, as created
    entry = pwd.getpwnam(name)
    home = Path(entry.pw_dir)
    if not home.is_dir():
        home.mkdir(parents=True)
        os.chown(home, entry.pw_uid, entry.pw_gid)
    return entry


def reach_for_others(*paths: Path) -> list[tuple[Path, int]]:
    """Let other users traverse to ``paths`` (the lab folder, this Python, this checkout: the
    lab's tools run as the non-root user). Adds only search (x) permission on the folders that
    lack it, e.g. ``/root`` when the venv's Python lives under it; returns ``(folder, old
    mode)`` for :func:`restore_modes`."""
    changed: list[tuple[Path, int]] = []
    for path in paths:
        for folder in (path, *path.parents) if path.is_dir() else path.parents:
            mode = folder.stat().st_mode & 0o7777
            if not mode & 0o001 and folder not in {c[0] for c in changed}:
                folder.chmod(mode | 0o011)
                changed.append((folder, mode))
    return changed


def restore_modes(changed: list[tuple[Path, int]]) -> None:
    for folder, mode in reversed(changed):
        with contextlib.suppress(OSError):
            folder.chmod(mode)


def sudoers_text(user: str, rule: str | None, lab_root: Path | None) -> str:
    """The drop-in: the lab-only Defaults (secure_path with the lab host's bin, env_keep), and
    the rule line (``None``: no rule, as for a user sudo does not know)."""
    lines = ["# written by specconsole's lab tests; removed when they end"]
    if lab_root is not None:
        venv_bin = Path(sys.executable).parent
        path = f"{lab_root / 'bin'}:{venv_bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        lines += [f'Defaults:{user} secure_path="{path}"',
                  f'Defaults:{user} env_keep += "{LAB_ROOT_ENV} SPECCONSOLE_LAB_HOST"']
    if rule:
        lines.append(rule)
    return "\n".join(lines) + "\n"


def sudoers_path(user: str = LAB_USER) -> Path:
    return SUDOERS_DIR / user.replace(".", "-")   # sudo skips names with a dot


def write_sudoers(text: str, user: str = LAB_USER) -> Path:
    """Install ``text`` as the user's drop-in after ``visudo -cf`` accepted it (0440, atomic)."""
    dest = sudoers_path(user)
    fd, tmp = tempfile.mkstemp(prefix=".specconsole-", dir=SUDOERS_DIR)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o440)
        check = subprocess.run(["visudo", "-cf", tmp], capture_output=True, text=True, timeout=30)
        if check.returncode != 0:
            raise LabError(f"lab: visudo refused the sudoers drop-in: {(check.stderr or check.stdout).strip()}")
        os.replace(tmp, dest)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return dest


def remove_sudoers(user: str = LAB_USER) -> None:
    sudoers_path(user).unlink(missing_ok=True)
