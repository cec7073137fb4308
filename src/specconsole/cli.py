"""The ``specconsole`` command: the console itself and its headless subcommands.

Heavy modules (Textual, asyncssh, torch) are imported inside the subcommand that needs them.
Every failure the operator can fix is one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

from specconsole import __version__
from specconsole.base import gc_tuning, paths
from specconsole.base.errors import ConfigError, HostUnavailable, SpecConsoleError
from specconsole.base.events import EventLog
from specconsole.base.validation import num, option_type
from specconsole.base.values import SPEC_INT_MAX, printable
from specconsole.config import GraceSeconds

if TYPE_CHECKING:
    from specconsole.config import Config, HostConfig
    from specconsole.hosts import Host
    from specconsole.monitor import Fleet
    from specconsole.steps import StepEvent

from specconsole.steps import Steps, require_audit


def resolve_config_path(given: str | None) -> str:
    """--config, else $SPECCONSOLE_CONFIG, else <config dir>/config.toml; else one line saying how to get one.

    A running lab is never picked silently: the console shows real hosts only when told to
    (``specconsole demo`` opens the console on its own lab; ``--config`` names any other)."""
    from specconsole.config import default_config_path

    if given:
        return given
    found = default_config_path()
    if found:
        return found
    raise ConfigError("<no config>", None, f"no config file given and none at {paths.default_config_file()}",
                      "pass --config FILE (see configs/example.toml), or try the demo lab: specconsole demo")


# ------------------------------------------------------------------------------- status

async def _status(args: argparse.Namespace) -> int:
    """``status [--watch]``: SIGINT, SIGTERM and SIGHUP end it within the exit deadline at any
    host count (the snapshot loop is cancelled, the fleet's stop is bounded, then a hard exit)."""
    from specconsole.base.shutdown import ExitGuard, signal_name
    from specconsole.config import load_config
    from specconsole.monitor import Fleet

    config = load_config(resolve_config_path(args.config))
    fleet = Fleet(config)
    recorder = None
    if args.record:
        from specconsole.recorder.recorder import start_recording

        recorder = start_recording(config, fleet, args.record, on_error=lambda m: _stderr(f"specconsole: {m}"))
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
        if recorder is not None:
            recorder.stop()
        guard.finished()


async def _status_snapshots(fleet: Fleet, args: argparse.Namespace) -> int:
    from specconsole.status_watch import print_status

    rc = await print_status(fleet, as_json=args.json, watch=args.watch, interval=args.interval,
                            timeout=args.timeout, alerts=args.alerts)
    if not args.json and not args.watch:
        _unfinished_rollouts(fleet.config.console.state_dir)
    return rc


def _unfinished_rollouts(state_dir: str) -> None:
    """What each replica of an unfinished rollout (its console died) was left in, and how to go on."""
    from specconsole.actions.rollout.journal import unfinished

    for j in unfinished(state_dir):
        for line in j.lines():
            _say(line)
        _say(f"  finish it: specconsole deploy --resume {j.id}   undo it: specconsole deploy --resume {j.id} --undo")


def _stderr(line: str) -> None:
    """One line on stderr without Python's buffers (safe from any thread, at any moment)."""
    with contextlib.suppress(OSError):
        os.write(2, (printable(line) + "\n").encode())


def _say(line: str) -> None:
    """One line on stdout; what hosts said in it (process names, errors) is shown, never obeyed
    (an ESC or a U+202E from a host prints as ``\\x1b``, ``\\u202e``)."""
    print(printable(line), flush=True)


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


def _audit_log(config: Config, command: str, allow_unaudited: bool) -> EventLog:
    """The audit log a destructive command writes; refused (exit 3) before any connection when it
    cannot be written, unless ``--no-audit`` (then it says that it acts without a record)."""
    events = EventLog(config.console.audit_log)
    problem = require_audit(events, command, allow_unaudited=allow_unaudited)
    if problem is not None:
        _stderr(f"specconsole: {command}: {problem}; going on without a record (--no-audit)")
    return events


def _print_step(event: StepEvent) -> None:
    """A step event's line; one with acceptance detail (the smoke test's, the gate's, an eval
    run's) gets its plot below it (80 columns)."""
    _say(event.line())
    if event.acceptance:
        from specconsole.ui.style.acceptance_plot import acceptance_plot

        for line in acceptance_plot(event.acceptance, width=80):
            _say(line)


def _step_printer(events: EventLog) -> Callable[[StepEvent], None]:
    """Print each step event as it happens (:func:`_print_step`) and append it to the audit log."""
    from specconsole.steps import audit

    return audit(events, also=_print_step)


async def _connected_host(config: Config, name: str | None, role: str, steps: Steps) -> tuple[HostConfig, Host]:
    from specconsole.hosts import make_host

    candidates = config.train_hosts if role == "train" else config.serve_hosts
    if name:
        candidates = tuple(h for h in candidates if h.name == name)
    if not candidates:
        which = f"host {name!r} with " if name else "host with "
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


def _confirm(question: str, assume_yes: bool, steps: Steps) -> bool:
    """Ask on the terminal; the time the question waits for the operator counts in no step (a
    "waited N s for your confirmation" line follows the answer)."""
    if assume_yes:
        return True
    if not sys.stdin.isatty():
        raise SpecConsoleError(f"{question.rstrip('?')}: refusing without a terminal to confirm; pass --yes")
    steps.hand_over("your confirmation")
    answer = input(f"{question} [y/N] ").strip().lower()
    return answer in ("y", "yes")


async def _kill_training(args: argparse.Namespace) -> int:
    from specconsole.actions.kill.training import find_job, kill_job
    from specconsole.config import load_config

    config = load_config(resolve_config_path(args.config))
    _refuse_if_read_only(args, config, "kill_training", "kill-training")
    events = _audit_log(config, "kill-training", args.no_audit)
    steps = Steps("kill-training", _step_printer(events))
    cfg, host = await _connected_host(config, args.host, "train", steps)
    try:
        if cfg.slurm is not None:  # a Slurm job: scancel (issue 32)
            from specconsole.actions.kill.slurm import cancel_slurm_job

            async def ask(question: str, body: str, _button: str) -> bool:
                for line in body.splitlines():
                    _say(line)
                return _confirm(question, args.yes, steps)

            return (await cancel_slurm_job(host, cfg, steps, ask, lambda: require_audit(
                events, "kill-training", allow_unaudited=args.no_audit))).exit_code
        plan = await find_job(host, cfg, steps)
        for line in plan.describe():
            _say(line)
        if plan.empty:
            (steps.failed if plan.refused else steps.done)(plan.describe()[0])
            return 1 if plan.refused else 0
        if not _confirm(f"Kill these {len(plan.pids)} process(es) on {cfg.name}?", args.yes, steps):
            steps.done("cancelled by the operator; nothing was changed")
            return 0
        assert cfg.training is not None
        require_audit(events, "kill-training", allow_unaudited=args.no_audit)  # its writes failed meanwhile?
        grace = args.grace if args.grace is not None else cfg.training.kill.grace_s
        outcome = await kill_job(host, plan, steps, grace_s=grace)
        return outcome.exit_code
    finally:
        await host.close()


async def _deploy(args: argparse.Namespace) -> int:
    from specconsole.actions.deploy.preflight import DeployRequest, execute, preflight
    from specconsole.config import load_config

    config = load_config(resolve_config_path(args.config))
    if not args.dry_run:  # a dry run changes nothing, so read-only allows it (and needs no audit record)
        _refuse_if_read_only(args, config, "deploy", "deploy")
    events = EventLog(config.console.audit_log) if args.dry_run else _audit_log(config, "deploy", args.no_audit)
    steps = Steps("deploy", _step_printer(events))
    request = DeployRequest(algorithm=args.algorithm, draft_window=args.draft_window, block_size=args.block_size,
                            draft_model=args.draft_model, tree_budget=args.tree_budget,
                            attention_backend=args.attention_backend, health_timeout_s=args.health_timeout,
                            num_steps=args.num_steps, eagle_topk=args.topk, draft_tokens=args.draft_tokens,
                            host_check=not args.no_host_check, rebase=args.rebase)
    if args.resume is not None:
        return await _rollout(args, config, events, request, resume=args.resume)
    if args.hosts:
        return await _rollout(args, config, events, request)
    cfg, host = await _connected_host(config, args.host, "serve", steps)
    try:
        plan = await preflight(host, cfg, request, steps)
        for line in plan.describe():
            _say(line)
        if not plan.changes:
            steps.done("the unit already has these settings; nothing to deploy")
            return 0
        if args.dry_run:
            steps.done("dry run: nothing on the host was changed")
            return 0
        if not _confirm(f"Deploy to {cfg.name} and restart {plan.unit.name}?", args.yes, steps):
            steps.done("cancelled by the operator; nothing was changed")
            return 0
        require_audit(events, "deploy", allow_unaudited=args.no_audit)  # its writes failed meanwhile?
        outcome = await execute(host, plan, steps, operator=_operator())
        return outcome.exit_code
    finally:
        await host.close()


async def _rollout(args: argparse.Namespace, config: Config, events: EventLog, request: Any,
                   resume: str | None = None) -> int:
    """``deploy --hosts PATTERN``: the rollout (actions/rollout/run.py); SIGINT aborts it (what changed
    is rolled back), a second SIGINT is ignored while the roll-back runs. Its journal is kept in
    ``<state_dir>/rollouts``; ``deploy --resume [ID] [--undo]`` finishes or undoes one whose console died
    (actions/rollout/resume.py)."""
    import signal

    from specconsole.actions.rollout import journal as journals
    from specconsole.actions.rollout import run as rollout
    from specconsole.eval.suite import gate_prompts
    from specconsole.hosts import make_host
    from specconsole.steps import audit

    if args.dry_run:
        raise SpecConsoleError("deploy --hosts: --dry-run is for one host; run it with --host NAME first")
    state_dir = config.console.state_dir
    if resume is not None:
        journal = journals.find(state_dir, resume or None)
        if journal.running:
            raise SpecConsoleError(f"deploy --resume: rollout {journal.id} still runs (console pid {journal.pid}); "
                                   "abort it there, or wait for it")
        if journal.ended is not None:
            raise SpecConsoleError(f"deploy --resume: rollout {journal.id} ended already: {journal.ended['message']}")
        request = journal.deploy_request()
        known = {h.name: h for h in config.serve_hosts}
        missing = [left.name for left in journal.replicas if left.name not in known]
        if missing:
            raise SpecConsoleError(f"deploy --resume: the config has no serving host {', '.join(missing)} "
                                   f"(named by the journal {journal.path})")
        chosen = [known[left.name] for left in journal.replicas]
    else:
        journal = None
        chosen = rollout.select(config, args.hosts)
    gate = args.gate if journal is None else (args.gate or journal.gate or None)
    opts = rollout.options(config, request, gate=gate, canary_wait_s=args.canary_wait,
                           drain_timeout_s=args.drain_timeout, operator=_operator(), gate_prompts=gate_prompts)
    if args.json:
        emit = audit(events, also=lambda e: print(json.dumps({**dataclasses.asdict(e)}), flush=True))
    else:
        emit = _step_printer(events)
    names = ", ".join(h.name for h in chosen)
    if journal is not None:
        for line in journal.lines():
            _say(line)
        question = f"{'Undo' if args.undo else 'Finish'} rollout {journal.id} on {names}?"
    else:
        question = f"Roll out to {names} (canary {chosen[0].name}) behind {opts.router.url}?"
    if not _confirm(question, args.yes, Steps("rollout", emit)):
        return 0
    hosts = [make_host(h) for h in chosen]
    abort = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_sigint() -> None:
        if not abort.is_set():
            _stderr("specconsole: abort: the rollout stops and rolls back what it changed (wait for it)")
        abort.set()

    loop.add_signal_handler(signal.SIGINT, on_sigint)
    try:
        await asyncio.gather(*(h.start() for h in hosts))
        for h, cfg in zip(hosts, chosen, strict=True):
            if not await h.wait_connected(cfg.ssh.connect_timeout_s + 2):
                raise HostUnavailable(h.status.last_error or f"{cfg.name}: not reachable")
        replicas = [rollout.Replica(cfg, h) for cfg, h in zip(chosen, hosts, strict=True)]
        if journal is not None:
            from specconsole.actions.rollout.resume import resume as resume_rollout

            outcome = await resume_rollout(journal, replicas, opts, emit, abort, undo=args.undo)
        else:
            opts.journal = journals.Journal.begin(state_dir, request, opts.router.url, [h.name for h in chosen],
                                                  ",".join(t.text() for t in opts.gate), opts.operator)
            outcome = await rollout.rollout(replicas, opts, emit, abort)
        return outcome.exit_code
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        await asyncio.gather(*(h.close() for h in hosts), return_exceptions=True)


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
    from specconsole.ui.console.start import run_console

    config = load_config(resolve_config_path(args.config))
    return run_console(config, read_only=args.read_only, theme=args.theme, no_audit=args.no_audit,
                       leave_process=True, web_session=args.web_session)


def _web(args: argparse.Namespace) -> int:
    """``web``: the console in a browser (textual-serve, imported only here), behind a launch token."""
    from specconsole.config import load_config
    from specconsole.web.access import Gate, is_loopback, new_token

    path = resolve_config_path(args.config)
    config = load_config(path)
    if not is_loopback(args.bind) and not args.allow_remote:
        raise SpecConsoleError(f"web: --bind {args.bind} listens beyond this machine; the console would be one "
                               f"token away from anyone who can reach it (fix: keep 127.0.0.1 and use "
                               f"`ssh -N -L {args.port}:127.0.0.1:{args.port} HOST`, or add --allow-remote)")
    from specconsole.web.server import ConsoleServer, console_command, serve

    def say(line: str) -> None:
        print(f"specconsole web: {printable(line)}", flush=True)

    if not is_loopback(args.bind):
        say(f"warning: listening on {args.bind}:{args.port}, beyond this machine (--allow-remote): anyone who "
            f"reaches it and has the token opens a console; the traffic is not encrypted")
    read_only = not args.allow_actions or config.console.read_only
    gate = Gate(new_token(), args.port, args.bind, args.public_url, args.max_sessions)
    server = ConsoleServer(gate, console_command(path, allow_actions=not read_only),
                           EventLog(config.console.audit_log), say, read_only=read_only)
    try:
        serve(server)
    except OSError as err:  # the port is taken, the address is not this machine's
        raise SpecConsoleError(f"web: cannot listen on {args.bind}:{args.port}: {err.strerror or err} "
                               f"(fix: pick another --port)") from None
    return 0


def _replay(args: argparse.Namespace) -> int:
    """``replay FILE``: the console on a recording; ``--at T --json`` / ``--diff T1 T2``: JSON."""
    import json

    from specconsole.recorder.recording import Recording, diff, parse_time
    from specconsole.report import status_json

    try:
        recording = Recording(args.file)
    except FileNotFoundError as err:
        raise SpecConsoleError(str(err)) from None
    if recording.empty:
        raise SpecConsoleError(f"{args.file}: nothing recorded (no whole keyframe)")
    try:
        if args.at is not None or args.diff is not None:
            if args.at is not None:
                at = parse_time(args.at, recording)
                out = status_json(recording.state_at(at).statuses(), at)
            else:
                t1, t2 = (parse_time(t, recording) for t in args.diff)
                out = diff(recording, t1, t2, args.threshold)
            print(json.dumps(out, indent=2), flush=True)
            if recording.problem:  # the damage met on the way: the state is the one before it
                _stderr(f"specconsole: {recording.problem}")
            return 0
        start = parse_time(args.start, recording) if args.start else recording.start
    except ValueError as err:
        raise SpecConsoleError(f"replay: {err}") from None
    from specconsole.ui.console.replay import run_replay

    return run_replay(recording, start=start, speed=args.speed, theme=args.theme)


def _eval(args: argparse.Namespace) -> int:
    from specconsole.config import load_config
    from specconsole.eval.cli import eval_needs_config, run_eval_command

    config = load_config(resolve_config_path(args.config)) if eval_needs_config(args) else None
    from specconsole.ui.style.acceptance_plot import acceptance_plot

    emit = _step_printer(EventLog(config.console.audit_log)) if config else _print_step
    return run_eval_command(args, config, emit=emit, plot=acceptance_plot)


# --------------------------------------------------------------------------------- main

# Every number on the command line is declared like a config key and checked by the same code
# (validation.option_type): finite, in range, whole where it must be, one line naming the option.
#: SGLang's speculative ints (draft window, block size, tree budget): 1 .. 2**20 (values.SPEC_INT_MAX)
SpecInt = Annotated[int, num(ge=1, le=SPEC_INT_MAX, why="SGLang takes a positive C int; no drafter drafts "
                             "a million tokens", example=16)]
#: at most a day: a server that takes longer to load is not coming up
HealthTimeout = Annotated[float, num(gt=0, le=86400, why="seconds the restarted server has to answer /health "
                                     "before the rollback", example=600)]
ReplaySpeed = Annotated[float, num(ge=0.25, le=16, why="the timeline plays from a quarter to 16 times real time",
                                   example=4)]
DiffThreshold = Annotated[float, num(ge=0, why="a relative change (0.1: 10 %)", example=0.1)]
CanarySeconds = Annotated[float, num(ge=0, le=86400, why="seconds to hold after the canary", example=30)]
DrainSeconds = Annotated[float, num(gt=0, le=86400, why="seconds a removed replica has to finish its requests",
                                    example=60)]
StatusInterval = Annotated[float, num(gt=0, why="it is the time between two snapshots", example=1)]
StatusTimeout = Annotated[float, num(ge=0, why="seconds to wait for the first snapshot; 0: print at once",
                                     example=15)]


WebPort = Annotated[int, num(ge=1, le=65535, why="it is a TCP port", example=8000)]
WebSessions = Annotated[int, num(ge=1, le=64, why="each session is a whole console process", example=4)]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specconsole", description=__doc__.splitlines()[0])
    p.add_argument("--version", action="version", version=f"specconsole {__version__}")
    p.add_argument("--config", help="console config (TOML); default: $SPECCONSOLE_CONFIG, "
                   f"else {paths.default_config_file()}")
    p.add_argument("--read-only", action="store_true", help="console: remove every destructive binding")
    p.add_argument("--theme", help="console: theme name (shipped, or from <config dir>/themes/; t cycles them)")
    p.add_argument("--no-audit", action="store_true",
                   help="console: allow kill and deploy when the audit log cannot be written (default: refused)")
    # a session of `specconsole web` (its server adds it): a browser, not a tty, is the terminal
    p.add_argument("--web-session", action="store_true", help=argparse.SUPPRESS)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    st = sub.add_parser("status", help="print one snapshot of every host and exit (1 if a host is unreachable)")
    st.add_argument("--config", default=argparse.SUPPRESS, help="console config (TOML)")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.add_argument("--watch", action="store_true", help="keep printing snapshots")
    st.add_argument("--alerts", action="store_true",
                    help="with --watch: print alert lines (firing, resolved) instead of snapshots, and deliver "
                         "them as the console does ([alerting]: webhook, tmux)")
    st.add_argument("--interval", type=option_type(StatusInterval, "--interval"), default=1.0,
                    help="seconds between --watch snapshots")
    st.add_argument("--timeout", type=option_type(StatusTimeout, "--timeout"), default=15.0,
                    help="seconds to wait for the first complete snapshot (default 15)")
    st.add_argument("--record", metavar="FILE", help="record every sample, state change and event into FILE "
                    "(replay it with `specconsole replay FILE`)")
    st.add_argument("--tmux", action="store_true", help="print one short line for tmux's status-right from the "
                    "recorder's state file (no SSH, milliseconds)")
    st.add_argument("--state", metavar="FILE", help="--tmux: the recorder's state file (default: recorder.state_file)")

    rp = sub.add_parser("replay", help="open the console on a recording, read-only (or print the fleet at a time, "
                                       "or what changed between two)")
    rp.add_argument("file", metavar="FILE", help="a recording: a file (status --record) or the console's folder "
                    "(recorder.path)")
    rp.add_argument("--from", dest="start", metavar="T", help="start at T: +SECONDS[s|m|h] from the start, "
                    "HH:MM[:SS], an ISO date-time or epoch seconds")
    rp.add_argument("--speed", type=option_type(ReplaySpeed, "--speed"), default=1.0,
                    help="playback speed, 0.25 to 16 (default 1)")
    rp.add_argument("--at", metavar="T", help="print the fleet's state at T (as status --json) and exit")
    rp.add_argument("--json", action="store_true", help="with --at: JSON (the only output --at has)")
    rp.add_argument("--diff", nargs=2, metavar=("T1", "T2"), help="print what changed from T1 to T2 as JSON")
    rp.add_argument("--threshold", type=option_type(DiffThreshold, "--threshold"), default=0.1,
                    help="--diff: a figure counts as changed past this relative change (default 0.1)")

    kt = sub.add_parser("kill-training", help="stop the training job: SIGTERM, wait, SIGKILL, verify GPUs released")
    kt.add_argument("--config", default=argparse.SUPPRESS, help="console config (TOML)")
    kt.add_argument("--host", help="training host name (default: the only one)")
    kt.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    kt.add_argument("--grace", type=option_type(GraceSeconds, "--grace"),
                    help="seconds between SIGTERM and SIGKILL (default: config, 30)")
    kt.add_argument("--no-audit", action="store_true", default=argparse.SUPPRESS,
                    help="act even when the audit log cannot be written (default: refuse, exit 3)")
    kt.add_argument("--read-only", action="store_true", default=argparse.SUPPRESS,
                    help="refuse (exit 3): read-only mode changes no host")

    wb = sub.add_parser("web", help="serve the console to a browser (textual-serve) on 127.0.0.1, behind a "
                                    "per-launch token; sessions are read-only unless --allow-actions")
    wb.add_argument("--config", default=argparse.SUPPRESS, help="console config (TOML)")
    wb.add_argument("--port", type=option_type(WebPort, "--port"), default=8000, help="TCP port (default 8000)")
    wb.add_argument("--bind", default="127.0.0.1", help="address to listen on (default 127.0.0.1; reach it "
                    "through `ssh -N -L PORT:127.0.0.1:PORT HOST`)")
    wb.add_argument("--allow-remote", action="store_true",
                    help="allow --bind to a non-loopback address (prints a warning)")
    wb.add_argument("--allow-actions", action="store_true",
                    help="sessions may kill and deploy (default: read-only, as --read-only)")
    wb.add_argument("--max-sessions", type=option_type(WebSessions, "--max-sessions"), default=4,
                    help="most browser sessions at once, each a console process (default 4)")
    wb.add_argument("--public-url", help="the URL browsers use when it is not http://127.0.0.1:PORT (a reverse "
                    "proxy's); its host is accepted as Host and Origin")

    dp = sub.add_parser("deploy", help="change SGLang's speculative algorithm and its settings (DFLASH window, "
                                       "DDTREE block size and tree budget), restart, verify, roll back")
    dp.add_argument("--config", default=argparse.SUPPRESS, help="console config (TOML)")
    dp.add_argument("--host", help="serving host name (default: the only one)")
    dp.add_argument("--hosts", metavar="PATTERN",
                    help="roll the change out across the serving replicas matching PATTERN (e.g. 'serve*') behind "
                         "[router]: canary first, each taken out of the router, deployed, gated, put back")
    dp.add_argument("--gate", metavar="TEXT", help="with --hosts: the quality gate (default: [router] gate, "
                                                   "\"accept_len>=0.95*baseline,tok_s>=0.9*baseline\")")
    dp.add_argument("--canary-wait", metavar="S", type=option_type(CanarySeconds, "--canary-wait"),
                    help="with --hosts: seconds to hold after the canary (default: [router] canary_wait_s, 0)")
    dp.add_argument("--drain-timeout", metavar="S", type=option_type(DrainSeconds, "--drain-timeout"),
                    help="with --hosts: the longest wait for a removed replica's requests (default: [router], 60)")
    dp.add_argument("--json", action="store_true", help="with --hosts: print each event as a JSON line")
    dp.add_argument("--resume", nargs="?", const="", metavar="ID",
                    help="finish a rollout whose console died (default: the newest unfinished one; `status` names "
                         "them): each replica's state from its journal and its host agent, then on from there")
    dp.add_argument("--undo", action="store_true", help="with --resume: roll back every replica the rollout "
                                                        "changed instead of finishing it")
    dp.add_argument("--algorithm", help="speculative algorithm the host's SGLang offers, e.g. DFLASH, DDTREE or "
                                        "NEXTN (default: keep)")
    dp.add_argument("--draft-window", metavar="N", type=option_type(SpecInt, "--draft-window"),
                    help=f"DFLASH/DDTREE draft window (>= block size, <= {SPEC_INT_MAX})")
    dp.add_argument("--block-size", metavar="N", type=option_type(SpecInt, "--block-size"),
                    help="DFLASH/DDTREE block size = draft tokens per step "
                         "(--speculative-num-draft-tokens; default: the draft model's)")
    dp.add_argument("--tree-budget", metavar="N", type=option_type(SpecInt, "--tree-budget"),
                    help="DDTREE tree budget (--speculative-ddtree-budget, >= 1; "
                         "default block size - 1: a chain; larger: a tree)")
    dp.add_argument("--num-steps", metavar="N", type=option_type(SpecInt, "--num-steps"),
                    help="EAGLE/EAGLE3/NEXTN/STANDALONE draft steps (--speculative-num-steps; with --topk and "
                         "--draft-tokens; all three unset: SGLang chooses them)")
    dp.add_argument("--topk", metavar="N", type=option_type(SpecInt, "--topk"),
                    help="EAGLE family: branches per step (--speculative-eagle-topk; needs --num-steps)")
    dp.add_argument("--draft-tokens", metavar="N", type=option_type(SpecInt, "--draft-tokens"),
                    help="EAGLE family (needs --num-steps) and NGRAM: --speculative-num-draft-tokens")
    dp.add_argument("--attention-backend", metavar="NAME", help="SGLang's --attention-backend (DDTREE with a "
                                                                "budget > block size - 1 needs triton; default: keep)")
    dp.add_argument("--no-host-check", action="store_true",
                    help="skip asking the host's own SGLang to parse and resolve the planned unit (built-in rules "
                         "only)")
    dp.add_argument("--draft-model", metavar="PATH", help="draft model path on the host (default: config)")
    dp.add_argument("--health-timeout", type=option_type(HealthTimeout, "--health-timeout"), default=600.0,
                    help="seconds to wait for /health (600, at most a day)")
    dp.add_argument("--dry-run", action="store_true", help="preflight and plan only; change nothing")
    dp.add_argument("--rebase", action="store_true",
                    help="build ExecStart from the current base unit (after it changed under the drop-in)")
    dp.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    dp.add_argument("--no-audit", action="store_true", default=argparse.SUPPRESS,
                    help="act even when the audit log cannot be written (default: refuse, exit 3)")
    dp.add_argument("--read-only", action="store_true", default=argparse.SUPPRESS,
                    help="refuse (exit 3) unless --dry-run: read-only mode changes no host")

    from specconsole.eval.cli import add_eval_parser

    add_eval_parser(sub)

    from specconsole.lab.commands import add_lab_parsers  # the only import of the lab outside it

    add_lab_parsers(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SpecConsoleError as err:  # a number the command cannot use (validation.option_type)
        _stderr(f"specconsole: {err}")
        return err.exit_code
    gc_tuning.tune()
    if not hasattr(args, "config"):
        args.config = None
    try:
        if args.command == "status" and args.tmux:
            from specconsole.recorder.tmux import status_tmux

            code, line = status_tmux(args.state)
            print(line)
            return code
        if args.command == "status":
            return asyncio.run(_status(args))
        if args.command == "replay":
            return _replay(args)
        if args.command in ("lab", "demo"):
            from specconsole.lab.commands import run_lab_command

            return run_lab_command(args)
        if args.command == "eval":
            return _eval(args)
        if args.command == "kill-training":
            return asyncio.run(_kill_training(args))
        if args.command == "deploy":
            return asyncio.run(_deploy(args))
        if args.command == "web":
            return _web(args)
        return _console(args)
    except SpecConsoleError as err:
        _stderr(f"specconsole: {err}")
        return err.exit_code
    except TimeoutError as err:  # a remote command that did not finish: its message names it
        _stderr(f"specconsole: {err}")
        return 1
    except KeyboardInterrupt:
        print("specconsole: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
