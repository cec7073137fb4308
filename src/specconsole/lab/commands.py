"""``specconsole demo`` and ``specconsole lab up|down|status``: the CLI's lab commands.

The only way into :mod:`specconsole.lab` from the product: ``cli.py`` adds these parsers and
dispatches ``lab``/``demo`` here (see the import contracts in ``.importlinter``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from pathlib import Path
from typing import Annotated, Any

from specconsole.base import paths
from specconsole.base.errors import SpecConsoleError
from specconsole.base.validation import num, option_type
from specconsole.lab.doubles.sglang_versions import BASE_VERSION, DDTREE_VERSION

#: the simulated SGLang's load time (the lab's deploy tests wait for it)
StartupSeconds = Annotated[float, num(ge=0, le=3600, why="the simulated SGLang's load time", example=3)]


#: the routers the lab can put in front of its replicas (``--router``)
ROUTERS = ("sglang-router", "smg")
#: serving replicas behind the lab's router
Replicas = Annotated[int, num(ge=1, le=16, why="serving replicas on this machine", example=3)]


def _say(message: str) -> None:
    """Print one progress line; a terminal that is gone (tmux killed: EIO) must not stop the
    demo's clean-up half way."""
    with contextlib.suppress(OSError, ValueError):
        print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def add_lab_parsers(sub: Any) -> None:
    """The ``demo`` and ``lab`` subcommands, on the main parser's subparsers."""
    de = sub.add_parser("demo", help="the whole workflow on this machine: start the lab, open the console on it")
    de.add_argument("--dir", help=f"demo lab folder (default {paths.state_dir() / 'demo'})")
    de.add_argument("--sglang-startup", type=option_type(StartupSeconds, "--sglang-startup"), default=3.0,
                    help="simulated SGLang load time, s")
    de.add_argument("--sglang-version", default=DDTREE_VERSION,
                    help=f"the serving host's simulated SGLang: {DDTREE_VERSION} (default: the DDTree build, "
                         f"which also offers DFLASH), or {BASE_VERSION}")
    de.add_argument("--no-console", action="store_true", help="start the lab only and wait (Ctrl-C stops it)")
    de.add_argument("--serve", type=option_type(Replicas, "--serve"), default=1, metavar="N",
                    help="serving replicas: N >= 2 runs serve .. serveN behind a real sglang-router (m marks them in "
                         "the fleet view, R rolls a change out)")
    de.add_argument("--router", choices=ROUTERS, default=ROUTERS[0],
                    help="with --serve N: the router in front of the replicas (default sglang-router 0.3.2; smg: "
                         "SGLang's current gateway)")

    lab = sub.add_parser("lab", help="the local test lab: two SSH hosts, torchrun, SGLang under systemctl")
    lab_sub = lab.add_subparsers(dest="lab_command", metavar="ACTION", required=True)
    up = lab_sub.add_parser("up", help="start the lab and write a console config for it")
    up.add_argument("--sglang-startup", type=option_type(StartupSeconds, "--sglang-startup"), default=3.0,
                    help="simulated SGLang load time, s")
    up.add_argument("--sglang-version", default=BASE_VERSION,
                    help=f"the serving host's simulated SGLang: {BASE_VERSION}, or {DDTREE_VERSION} (with DDTree)")
    up.add_argument("--no-trainer", action="store_true", help="do not start the training job")
    up.add_argument("--slurm", action="store_true", help="a real Slurm cluster (controller, two nodes, munge); the "
                    "training job is sbatch'ed to it: srun torchrun --nnodes=2 (needs root and Debian's slurm)")
    up.add_argument("--serve", type=option_type(Replicas, "--serve"), default=1, metavar="N",
                    help="serving replicas: N >= 2 starts serve, serve2 .. serveN (DFLASH window 16) behind a real "
                         "sglang-router on loopback (for `specconsole deploy --hosts 'serve*'`)")
    up.add_argument("--router", choices=ROUTERS, default=ROUTERS[0],
                    help="with --serve N: the router in front of the replicas (default sglang-router 0.3.2; smg: "
                         "SGLang's current gateway, PyPI smg)")
    for action in (up, lab_sub.add_parser("down", help="stop everything the lab started"),
                   lab_sub.add_parser("status", help="is the lab running, and where is its config"),
                   lab_sub.add_parser("freeze-training", help="the training job keeps running but makes no "
                                      "progress (a stalled job, for the stall alert)"),
                   lab_sub.add_parser("thaw-training", help="the frozen training job goes on")):
        action.add_argument("--dir", help=f"lab folder (default {paths.state_dir() / 'lab'})")


def run_lab_command(args: argparse.Namespace) -> int:
    return _demo(args) if args.command == "demo" else _lab(args)



def _demo(args: argparse.Namespace) -> int:
    """Start the lab, open the console on it, and stop everything on the way out."""
    import os
    import signal

    from specconsole.lab.parts.environment import Lab, LabOptions, default_demo_dir, owner_alive

    lab_dir = Path(args.dir).expanduser() if args.dir else default_demo_dir()
    # the DDTree build (sgl-project/sglang PR #29907): the operator's "z-lab DDTree, up to 16 draft
    # tokens" can be deployed; it offers DFLASH and the others as 0.5.23 does
    lab = Lab(lab_dir, LabOptions(sglang_startup_s=args.sglang_startup, sglang_version=args.sglang_version,
                                  serve=args.serve, router=args.router), say=_say)
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
    _say(f"demo: starting the lab in {lab.dir} (two SSH hosts, a torchrun job, SGLang {lab.options.sglang_version} "
         f"under systemctl)")
    try:
        lab.up(owner_pid=os.getpid())
        if args.no_console:
            _say(f"demo: lab running; console config {lab.config_path}; Ctrl-C stops it")
            while True:
                time.sleep(3600)
        _seed_eval(lab.dir / "eval")
        from specconsole.config import load_config
        from specconsole.ui.console.start import run_console

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


def _seed_eval(results: Path) -> None:
    """The demo's eval pane opens on the comparison: z-lab's baseline (imported from a file in its
    benchmark format) and our checkpoint's run, both lab data, in the lab's own results folder
    (the console reads it through $SPECCONSOLE_EVAL_RESULTS; an operator's own results stay untouched)."""
    import os

    from specconsole.eval.store import RESULTS_ENV
    from specconsole.lab.parts.eval_seed import seed

    zlab, ours = seed(results)
    os.environ[RESULTS_ENV] = str(results)
    _say(f"demo: eval results in {results} (lab data, from the simulator's acceptance model): {zlab.label} "
         f"imported from {zlab.source.get('imported_from', ['?'])[0]}, and {ours.label}")


# ---------------------------------------------------------------------------------- lab

def _lab(args: argparse.Namespace) -> int:
    from specconsole.lab.parts.environment import Lab, LabOptions

    lab_dir = Path(args.dir).expanduser() if args.dir else None
    if args.lab_command == "up":
        options = LabOptions(sglang_startup_s=args.sglang_startup, trainer=not args.no_trainer,
                             sglang_version=args.sglang_version, serve=args.serve, slurm=args.slurm,
                             router=args.router)
        lab = Lab(lab_dir, options, say=_say)
        try:
            lab.up()
        except BaseException:
            _say("lab: start-up failed; stopping what was started")
            lab.down()
            raise
        print(f"config: {lab.config_path}")
        print(f"try:    specconsole status --config {lab.config_path}")
        if lab.state.router_port:
            print(f"router: http://127.0.0.1:{lab.state.router_port} in front of {args.serve} replicas; roll out: "
                  f"specconsole deploy --config {lab.config_path} --hosts 'serve*' --draft-window 32 --yes")
        print(f"stop:   specconsole lab down{' --dir ' + str(lab.dir) if args.dir else ''}")
        return 0
    lab = Lab(lab_dir, say=_say)
    if args.lab_command in ("freeze-training", "thaw-training"):
        if not args.dir:
            from specconsole.lab.parts.environment import running_lab

            lab = running_lab() or lab
            lab.say = _say
        if not lab.is_running():
            raise SpecConsoleError(f"lab: not running in {lab.dir} (fix: specconsole lab up, or pass --dir)")
        lab.freeze_training() if args.lab_command == "freeze-training" else lab.thaw_training()
        return 0
    if args.lab_command == "down":
        if not lab.state.hosts:
            _say(f"lab: nothing to stop in {lab.dir}")
            return 0
        lab.down()
        return 0
    # status: without --dir, the default lab or else the demo's
    if not args.dir:
        from specconsole.lab.parts.environment import running_lab

        lab = running_lab() or lab
    running = lab.is_running()
    print(json.dumps({"dir": str(lab.dir), "running": running,
                      "config": str(lab.config_path) if running else None}, indent=2))
    return 0 if running else 1


