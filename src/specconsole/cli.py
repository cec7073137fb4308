"""The ``specconsole`` command: the console itself and its headless subcommands.

Heavy modules (Textual, asyncssh, torch) are imported inside the subcommand that needs them.
Every failure the operator can fix is one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from specconsole import __version__, paths
from specconsole.errors import ConfigError, HostUnavailable, SpecConsoleError
from specconsole.events import EventLog

if TYPE_CHECKING:
    from specconsole.actions.steps import StepEvent
    from specconsole.config import Config, HostConfig
    from specconsole.hosts import Host
    from specconsole.monitor import Fleet

from specconsole.actions.steps import Steps


def _say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def resolve_config_path(given: str | None) -> str:
    """--config, else $SPECCONSOLE_CONFIG / <config dir>/config.toml, else a running lab's."""
    from specconsole.config import default_config_path

    if given:
        return given
    found = default_config_path()
    if found:
        return found
    from specconsole.lab.environment import running_lab

    lab = running_lab()
    if lab is not None and lab.config_path.exists():
        return str(lab.config_path)
    raise ConfigError("<no config>", None, "no config file given and no lab running",
                      "pass --config FILE (see configs/example.toml), or start the lab: specconsole lab up")


# ------------------------------------------------------------------------------- status

async def _status(args: argparse.Namespace) -> int:
    """``status [--watch]``: SIGINT, SIGTERM and SIGHUP end it within the exit deadline at any
    host count (the snapshot loop is cancelled, the fleet's stop is bounded, then a hard exit)."""
    from specconsole.config import load_config
    from specconsole.monitor import Fleet
    from specconsole.shutdown import ExitGuard, signal_name

    config = load_config(resolve_config_path(args.config))
    fleet = Fleet(config)
    loop = asyncio.get_running_loop()
    body = asyncio.ensure_future(_status_snapshots(fleet, args))
    guard = ExitGuard(note=lambda m: _stderr(f"specconsole: {m}"))
    guard.install(lambda _sig: loop.call_soon_threadsafe(body.cancel))
    try:
        return await body
    except asyncio.CancelledError:
        if guard.signal is None:
            raise
        _stderr(f"specconsole: {signal_name(guard.signal)} received; stopped")
        return 128 + guard.signal
    finally:
        await fleet.stop()
        guard.finished()


async def _status_snapshots(fleet: Fleet, args: argparse.Namespace) -> int:
    from specconsole.status_watch import print_status

    return await print_status(fleet, as_json=args.json, watch=args.watch, interval=args.interval,
                              timeout=args.timeout)


def _stderr(line: str) -> None:
    """One line on stderr without Python's buffers (safe from any thread, at any moment)."""
    with contextlib.suppress(OSError):
        os.write(2, (line + "\n").encode())


# ------------------------------------------------------------------------------ actions

class ReadOnlyRefused(SpecConsoleError):
    """A destructive command in read-only mode: refused before any connection."""

    exit_code = 3


def _refuse_if_read_only(args: argparse.Namespace, config: Config, action_id: str, command: str) -> None:
    """Read-only gates the headless commands as it gates the console: the registry's destructive
    actions (kill_training, deploy) are not run at all."""
    from specconsole.ui.registry import BY_ID

    if not BY_ID[action_id].destructive or not (args.read_only or config.console.read_only):
        return
    why = "--read-only" if args.read_only else f"read_only = true in {config.path}"
    raise ReadOnlyRefused(f"{command}: refused in read-only mode ({why}); nothing on any host was touched "
                          f"(drop --read-only / set read_only = false to change hosts)")


def _step_printer(events: EventLog) -> Callable[[StepEvent], None]:
    """Print each step event as it happens and append it to the audit log."""
    from specconsole.actions.steps import audit

    return audit(events, also=lambda event: print(event.line(), flush=True))


async def _connected_host(config: Config, name: str | None, role: str, steps: Steps) -> tuple[HostConfig, Host]:
    from specconsole.hosts import make_host

    candidates = config.train_hosts if role == "train" else config.serve_hosts
    if name:
        candidates = tuple(h for h in candidates if h.name == name)
    if not candidates:
        which = f"host {name!r} with " if name else "a host with "
        raise ConfigError(config.path, "hosts", f"no {which}role {role!r} configured",
                          f"add role = \"{role}\" to a [[hosts]] table, or pass --host NAME")
    if len(candidates) > 1 and not name:
        names = ", ".join(h.name for h in candidates)
        raise ConfigError(config.path, "hosts", f"several {role} hosts ({names})", "pick one with --host NAME")
    cfg = candidates[0]
    host = make_host(cfg)
    steps.begin("connect", f"connecting to {cfg.name}")
    await host.start()
    ok = await steps.watch(host.wait_connected(cfg.ssh.connect_timeout_s + 2), f"connecting to {cfg.name}")
    if not ok:
        await host.close()
        raise HostUnavailable(host.status.last_error or f"{cfg.name}: not reachable")
    steps.info(f"connected to {cfg.name}")
    return cfg, host


def _confirm(question: str, assume_yes: bool) -> bool:
    if assume_yes:
        return True
    if not sys.stdin.isatty():
        raise SpecConsoleError(f"{question.rstrip('?')}: refusing without a terminal to confirm; pass --yes")
    answer = input(f"{question} [y/N] ").strip().lower()
    return answer in ("y", "yes")


async def _kill_training(args: argparse.Namespace) -> int:
    from specconsole.actions.kill import find_job, kill_job
    from specconsole.config import load_config

    config = load_config(resolve_config_path(args.config))
    _refuse_if_read_only(args, config, "kill_training", "kill-training")
    events = EventLog(config.console.audit_log)
    steps = Steps("kill-training", _step_printer(events))
    cfg, host = await _connected_host(config, args.host, "train", steps)
    try:
        plan = await find_job(host, cfg, steps)
        for line in plan.describe():
            print(line, flush=True)
        if plan.empty:
            (steps.failed if plan.refused else steps.done)(plan.describe()[0])
            return 1 if plan.refused else 0
        if not _confirm(f"Kill these {len(plan.pids)} process(es) on {cfg.name}?", args.yes):
            steps.done("cancelled by the operator; nothing was changed")
            return 0
        assert cfg.training is not None
        grace = args.grace if args.grace is not None else cfg.training.kill.grace_s
        outcome = await kill_job(host, plan, steps, grace_s=grace)
        return outcome.exit_code
    finally:
        await host.close()


async def _deploy(args: argparse.Namespace) -> int:
    from specconsole.actions.deploy import DeployRequest, execute, preflight
    from specconsole.config import load_config

    config = load_config(resolve_config_path(args.config))
    if not args.dry_run:  # a dry run changes nothing, so read-only allows it
        _refuse_if_read_only(args, config, "deploy", "deploy")
    events = EventLog(config.console.audit_log)
    steps = Steps("deploy", _step_printer(events))
    request = DeployRequest(algorithm=args.algorithm, draft_window=args.draft_window, block_size=args.block_size,
                            draft_model=args.draft_model, tree_budget=args.tree_budget,
                            attention_backend=args.attention_backend, health_timeout_s=args.health_timeout,
                            rebase=args.rebase)
    cfg, host = await _connected_host(config, args.host, "serve", steps)
    try:
        plan = await preflight(host, cfg, request, steps)
        for line in plan.describe():
            print(line, flush=True)
        if not plan.changes:
            steps.done("the unit already has these settings; nothing to deploy")
            return 0
        if args.dry_run:
            steps.done("dry run: nothing on the host was changed")
            return 0
        if not _confirm(f"Deploy to {cfg.name} and restart {plan.unit.name}?", args.yes):
            steps.done("cancelled by the operator; nothing was changed")
            return 0
        outcome = await execute(host, plan, steps, operator=_operator())
        return outcome.exit_code
    finally:
        await host.close()


def _operator() -> str:
    import getpass
    import socket

    try:
        return f"{getpass.getuser()}@{socket.gethostname()}"
    except Exception:
        return "unknown"


# ------------------------------------------------------------------------------ console

def _console(args: argparse.Namespace) -> int:
    """The Textual console (imported only here: the headless commands never load Textual)."""
    from specconsole.config import load_config
    from specconsole.ui.app import run_console

    config = load_config(resolve_config_path(args.config))
    return run_console(config, read_only=args.read_only, theme=args.theme, leave_process=True)


def _eval(args: argparse.Namespace) -> int:
    from specconsole.config import load_config
    from specconsole.eval.cli import eval_needs_config, run_eval_command

    config = load_config(resolve_config_path(args.config)) if eval_needs_config(args) else None
    emit = _step_printer(EventLog(config.console.audit_log)) if config else None
    return run_eval_command(args, config, emit=emit)


# --------------------------------------------------------------------------------- demo



def _demo(args: argparse.Namespace) -> int:
    """Start the lab, open the console on it, and stop everything on the way out."""
    import os
    import signal

    from specconsole.lab.environment import Lab, LabOptions, default_demo_dir, owner_alive

    lab_dir = Path(args.dir).expanduser() if args.dir else default_demo_dir()
    lab = Lab(lab_dir, LabOptions(sglang_startup_s=args.sglang_startup), say=_say)
    if lab.state.hosts:
        owner = lab.state.owner_pid
        if owner_alive(owner) and owner != os.getpid():
            raise SpecConsoleError(
                f"a demo is already running (pid {owner}, lab in {lab.dir}); attach to it with "
                f"`specconsole --config {lab.config_path}` or stop it with `specconsole lab down --dir {lab.dir}`")
        if lab.is_running():
            _say(f"demo: a previous demo (pid {owner}) did not stop; stopping what it left running")
        lab.down()

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    _say(f"demo: starting the lab in {lab.dir} (two SSH hosts, a torchrun job, SGLang under systemctl)")
    try:
        lab.up(owner_pid=os.getpid())
        if args.no_console:
            _say(f"demo: lab running; console config {lab.config_path}; Ctrl-C stops it")
            while True:
                time.sleep(3600)
        from specconsole.config import load_config
        from specconsole.ui.app import run_console

        _say("demo: opening the console (q quits and stops the demo)")
        return run_console(load_config(lab.config_path), read_only=args.read_only, theme=args.theme,
                           cleanup=lab.down)  # a forced exit still stops the lab
    except KeyboardInterrupt:
        return 130
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        _say("demo: stopping everything the demo started")
        lab.down()


# ---------------------------------------------------------------------------------- lab

def _lab(args: argparse.Namespace) -> int:
    from specconsole.lab.environment import Lab, LabOptions

    lab_dir = Path(args.dir).expanduser() if args.dir else None
    if args.lab_command == "up":
        options = LabOptions(sglang_startup_s=args.sglang_startup, trainer=not args.no_trainer,
                             sglang_version=args.sglang_version)
        lab = Lab(lab_dir, options, say=_say)
        try:
            lab.up()
        except BaseException:
            _say("lab: start-up failed; stopping what was started")
            lab.down()
            raise
        print(f"config: {lab.config_path}")
        print(f"try:    specconsole status --config {lab.config_path}")
        print(f"stop:   specconsole lab down{' --dir ' + str(lab.dir) if args.dir else ''}")
        return 0
    lab = Lab(lab_dir, say=_say)
    if args.lab_command == "down":
        if not lab.state.hosts:
            _say(f"lab: nothing to stop in {lab.dir}")
            return 0
        lab.down()
        return 0
    # status: without --dir, the default lab or else the demo's
    if not args.dir:
        from specconsole.lab.environment import running_lab

        lab = running_lab() or lab
    running = lab.is_running()
    print(json.dumps({"dir": str(lab.dir), "running": running,
                      "config": str(lab.config_path) if running else None}, indent=2))
    return 0 if running else 1


# --------------------------------------------------------------------------------- main

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specconsole", description=__doc__.splitlines()[0])
    p.add_argument("--version", action="version", version=f"specconsole {__version__}")
    p.add_argument("--config", help="console config (TOML); default: $SPECCONSOLE_CONFIG, "
                   f"{paths.default_config_file()}, or the running lab's")
    p.add_argument("--read-only", action="store_true", help="console: remove every destructive binding")
    p.add_argument("--theme", help="console: theme name (shipped, or from <config dir>/themes/; t cycles them)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    st = sub.add_parser("status", help="print one snapshot of every host and exit (1 if a host is unreachable)")
    st.add_argument("--config", default=argparse.SUPPRESS, help="console config (TOML)")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.add_argument("--watch", action="store_true", help="keep printing snapshots")
    st.add_argument("--interval", type=float, default=1.0, help="seconds between --watch snapshots")
    st.add_argument("--timeout", type=float, default=15.0,
                    help="seconds to wait for the first complete snapshot (default 15)")

    kt = sub.add_parser("kill-training", help="stop the training job: SIGTERM, wait, SIGKILL, verify GPUs released")
    kt.add_argument("--config", default=argparse.SUPPRESS, help="console config (TOML)")
    kt.add_argument("--host", help="training host name (default: the only one)")
    kt.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    kt.add_argument("--grace", type=float, help="seconds between SIGTERM and SIGKILL (default: config, 30)")
    kt.add_argument("--read-only", action="store_true", default=argparse.SUPPRESS,
                    help="refuse (exit 3): read-only mode changes no host")

    dp = sub.add_parser("deploy", help="change SGLang's speculative algorithm and its settings (DFLASH window, "
                                       "DDTREE block size and tree budget), restart, verify, roll back")
    dp.add_argument("--config", default=argparse.SUPPRESS, help="console config (TOML)")
    dp.add_argument("--host", help="serving host name (default: the only one)")
    dp.add_argument("--algorithm", help="speculative algorithm the host's SGLang offers, e.g. DFLASH, DDTREE or "
                                        "NEXTN (default: keep)")
    dp.add_argument("--draft-window", metavar="N", help="DFLASH/DDTREE draft window (>= block size)")
    dp.add_argument("--block-size", metavar="N", help="DFLASH/DDTREE block size = draft tokens per step "
                                                      "(--speculative-num-draft-tokens; default: the draft model's)")
    dp.add_argument("--tree-budget", metavar="N", help="DDTREE tree budget (--speculative-ddtree-budget, >= 1; "
                                                       "default block size - 1: a chain; larger: a tree)")
    dp.add_argument("--attention-backend", metavar="NAME", help="SGLang's --attention-backend (DDTREE with a "
                                                                "budget > block size - 1 needs triton; default: keep)")
    dp.add_argument("--draft-model", metavar="PATH", help="draft model path on the host (default: config)")
    dp.add_argument("--health-timeout", type=float, default=600.0, help="seconds to wait for /health (600)")
    dp.add_argument("--dry-run", action="store_true", help="preflight and plan only; change nothing")
    dp.add_argument("--rebase", action="store_true",
                    help="build ExecStart from the current base unit (after it changed under the drop-in)")
    dp.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    dp.add_argument("--read-only", action="store_true", default=argparse.SUPPRESS,
                    help="refuse (exit 3) unless --dry-run: read-only mode changes no host")

    from specconsole.eval.cli import add_eval_parser

    add_eval_parser(sub)

    de = sub.add_parser("demo", help="the whole workflow on this machine: start the lab, open the console on it")
    de.add_argument("--dir", help=f"demo lab folder (default {paths.state_dir() / 'demo'})")
    de.add_argument("--sglang-startup", type=float, default=3.0, help="simulated SGLang load time, s")
    de.add_argument("--no-console", action="store_true", help="start the lab only and wait (Ctrl-C stops it)")

    lab = sub.add_parser("lab", help="the local test lab: two SSH hosts, torchrun, SGLang under systemctl")
    lab_sub = lab.add_subparsers(dest="lab_command", metavar="ACTION", required=True)
    up = lab_sub.add_parser("up", help="start the lab and write a console config for it")
    up.add_argument("--sglang-startup", type=float, default=3.0, help="simulated SGLang load time, s")
    up.add_argument("--sglang-version", default="0.5.23",
                    help="the serving host's simulated SGLang: 0.5.23, or 0.5.24+ddtree (with DDTree)")
    up.add_argument("--no-trainer", action="store_true", help="do not start the training job")
    for action in (up, lab_sub.add_parser("down", help="stop everything the lab started"),
                   lab_sub.add_parser("status", help="is the lab running, and where is its config")):
        action.add_argument("--dir", help=f"lab folder (default {paths.state_dir() / 'lab'})")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not hasattr(args, "config"):
        args.config = None
    try:
        if args.command == "status":
            return asyncio.run(_status(args))
        if args.command == "lab":
            return _lab(args)
        if args.command == "demo":
            return _demo(args)
        if args.command == "eval":
            return _eval(args)
        if args.command == "kill-training":
            return asyncio.run(_kill_training(args))
        if args.command == "deploy":
            return asyncio.run(_deploy(args))
        return _console(args)
    except SpecConsoleError as err:
        print(f"specconsole: {err}", file=sys.stderr)
        return err.exit_code
    except TimeoutError as err:  # a remote command that did not finish: its message names it
        print(f"specconsole: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("specconsole: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
