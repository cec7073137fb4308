"""Who does a deploy's privileged work: the login user, or root through ``sudo -n``.

A deploy writes ``UNIT.d/zz-specconsole-deploy.conf`` under ``/etc/systemd/system``,
``daemon-reload``s, restarts the unit and follows its journal: root's work. On a host with
``sudo = true`` the operator logs in as themselves and the console:

- checks in preflight, before anything changes, that ``sudo -n PYTHON`` runs as root without
  a password (one SSH command; :func:`check`); otherwise it refuses with one line naming the
  sudoers rule to add (:func:`sudoers_rule`);
- uploads the agent and its plan to a folder the user owns
  (``~/.local/state/specconsole/deploy/UNIT/DEPLOY-ID``) and starts the agent as
  ``sudo -n PYTHON agent.py ...``, so the agent (and every ``systemctl``/``journalctl`` it
  runs) is root, exactly as on a root login. The lock stays in ``UNIT.d/.specconsole/``,
  shared with root deploys;
- re-attaches as before: the progress file the root agent writes is world-readable, and
  whether the agent (a root process the user may not signal) still runs is read with
  :data:`ALIVE_SH` (``kill -0``, else ``/proc/PID``), not ``kill -0`` alone.

The one sudoers rule needed is ``USER ALL=(root) NOPASSWD: /path/to/python3`` (the python the
agent runs with). It is root-equivalent, as is any rule that lets a user rewrite a root
service's ExecStart; the console needs no ``systemctl`` rule because the agent runs it as root.
Preflight reads (``systemctl cat``, ``--help``, the draft model's ``config.json``) run as the
user. ``kill-training`` does not use sudo.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from specconsole.base.errors import SpecConsoleError
from specconsole.hosts import Host
from specconsole.steps import Steps

#: A shell function: ``alive PID`` succeeds while PID runs, also when it is another user's
#: process (root's agent, seen by the login user: ``kill -0`` says EPERM, ``/proc/PID`` exists).
ALIVE_SH = ('alive() { case "$1" in ""|*[!0-9]*) return 1;; esac; '
            'kill -0 "$1" 2>/dev/null || [ -d "/proc/$1" ]; }; ')

#: Where a sudo deploy keeps its files, below the login user's home.
SUDO_WORK_DIR = ".local/state/specconsole/deploy"

#: Runs as the login user: who it is, which python and systemctl it finds, and what
#: ``sudo -n PYTHON`` says (as root: its euid and the systemctl on sudo's secure_path).
_CHECK_SH = r"""
py=$1
case $py in /*) [ -x "$py" ] || py="";; *) py=$(command -v -- "$py") || py="";; esac
printf 'user=%s\nuid=%s\nhome=%s\npython=%s\nsystemctl=%s\nsudo=%s\n' "$(id -un)" "$(id -u)" "$HOME" \
  "$py" "$(command -v systemctl)" "$(command -v sudo)"
[ -n "$py" ] && command -v sudo >/dev/null 2>&1 || exit 0
out=$(sudo -n "$py" -c 'import os, shutil
print("euid=%d" % os.geteuid())
print("root_systemctl=%s" % (shutil.which("systemctl") or ""))' 2>&1)
printf 'sudo_exit=%s\n' "$?"
printf '%s\n' "$out" | sed 's/^/said=/'
"""


class PrivilegeRefused(SpecConsoleError):
    """``sudo = true`` but sudo cannot do the deploy's work; nothing was changed."""

    exit_code = 2


@dataclass(frozen=True)
class Privilege:
    """How the deploy agent is started on a host (root login: no sudo)."""

    sudo: bool = False
    user: str = ""
    home: str = ""
    #: the python the agent runs with (absolute under sudo: the sudoers rule names it)
    python: str = ""

    def agent_argv(self, python: str) -> list[str]:
        """The words that start ``agent.py`` (``python`` is used without sudo)."""
        return ["sudo", "-n", self.python] if self.sudo else [python]

    def work_parent(self, unit: str) -> str | None:
        """The folder a sudo deploy's work folders go in; None: ``UNIT.d/.specconsole``."""
        return f"{self.home.rstrip('/')}/{SUDO_WORK_DIR}/{unit}" if self.sudo else None


def agent_python(argv: list[str]) -> str:
    """The unit's own python when ExecStart runs one, else ``python3`` (the agent is stdlib-only)."""
    prog = argv[0] if argv else ""
    return prog if re.search(r"(^|/)python[0-9.]*$", prog) else "python3"


def sudoers_rule(user: str, python: str) -> str:
    """The one sudoers line a sudo deploy needs."""
    return f"{user or 'USER'} ALL=(root) NOPASSWD: {python}"


def alive_argv(pid: int | str) -> list[str]:
    """A command that exits 0 while ``pid`` runs, whoever owns it."""
    return ["sh", "-c", ALIVE_SH + 'alive "$1"', "sh", str(pid)]


async def check(host: Host, host_name: str, python: str, unit: str, steps: Steps) -> Privilege:
    """Preflight for ``sudo = true``: refuse (:class:`PrivilegeRefused`) unless ``sudo -n``
    runs the agent's python as root without a password and finds ``systemctl``."""
    steps.begin("sudo", f"checking that `sudo -n {python}` runs as root without a password")
    res = await steps.run(host, ["sh", "-c", _CHECK_SH, "sh", python],
                          summary=lambda r: next(iter(_said(r.stdout)), "sudo not tried"))
    if res.exit_status is None:
        raise PrivilegeRefused(f"{host_name}: the sudo check got no exit status (connection lost); "
                               f"nothing was changed; try again")
    got = dict(ln.split("=", 1) for ln in res.stdout.splitlines() if "=" in ln and not ln.startswith("said="))
    said = _said(res.stdout)
    facts = dict(ln.split("=", 1) for ln in said if re.match(r"^(euid|root_systemctl)=", ln))
    user, py = got.get("user", ""), got.get("python", "")
    fix = (f"add the sudoers rule `{sudoers_rule(user, py)}` (e.g. in /etc/sudoers.d/specconsole, "
           f"checked with `visudo -cf`) or set sudo = false")
    if not got.get("sudo"):
        raise PrivilegeRefused(f"{host_name}: sudo = true but `sudo` is not installed there for "
                               f"{user or 'the login user'}; install it (apt-get install sudo) or set sudo = false; "
                               f"nothing was changed")
    if not py:
        raise PrivilegeRefused(f"{host_name}: no {python} for {user} (the deploy agent needs Python 3); "
                               f"install python3 or put it on PATH; nothing was changed")
    if got.get("sudo_exit") != "0" or facts.get("euid") != "0":
        why = next((ln for ln in said if ln.startswith("sudo:") and "unable to resolve host" not in ln),
                   said[0] if said else f"exit {got.get('sudo_exit')}")
        if got.get("sudo_exit") == "0":
            why = f"it ran as uid {facts.get('euid', '?')}, not root"
        raise PrivilegeRefused(f"{host_name}: `sudo -n {py}` is refused for {user} ({why.strip()}); "
                               f"{fix}; nothing was changed")
    root_ctl, user_ctl = facts.get("root_systemctl", ""), got.get("systemctl", "")
    if not root_ctl:
        raise PrivilegeRefused(f"{host_name}: under sudo there is no systemctl on secure_path; add its folder "
                               f"to `Defaults secure_path` in sudoers; nothing was changed")
    if user_ctl and root_ctl != user_ctl:
        steps.warn(f"under sudo, systemctl is {root_ctl}; {user} runs {user_ctl}: the agent uses {root_ctl}")
    priv = Privilege(sudo=True, user=user, home=got.get("home", ""), python=py)
    if not priv.home.startswith("/"):
        raise PrivilegeRefused(f"{host_name}: {user} has no home folder (HOME={priv.home!r}); the sudo deploy "
                               f"keeps its files in ~/{SUDO_WORK_DIR}; nothing was changed")
    steps.info(f"`sudo -n {py}` runs as root for {user}; systemctl under sudo: {root_ctl}; "
               f"the agent's files go in {priv.work_parent(unit)}")
    return priv


def _said(stdout: str) -> list[str]:
    return [ln.removeprefix("said=") for ln in stdout.splitlines() if ln.startswith("said=")]


def launch_words(priv: Privilege, python: str) -> str:
    """The agent's start words, quoted for a shell."""
    return shlex.join(priv.agent_argv(python))
