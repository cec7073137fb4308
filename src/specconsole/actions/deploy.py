"""The deploy wizard's core: preflight, plan, and a supervised execute with rollback.

1. :func:`preflight` (fast, automatic): reads the unit (``systemctl cat``, env files,
   drop-ins), discovers the installed SGLang's flags from its own ``--help``, reads the draft
   model's ``config.json``, checks SGLang's constraints and the GPU memory, and returns a
   :class:`DeployPlan` (current vs new flags, the drop-in diff, what restarts). Invalid input
   is refused here, before anything on the host changes, naming SGLang's constraint.
2. :func:`execute`: copies the agent (:mod:`specconsole.actions.deploy_agent` and its sibling
   :mod:`~specconsole.actions.deploy_agent_watch`) and the plan to the host
   and starts it detached; the agent locks, backs up, writes a drop-in atomically,
   daemon-reloads, restarts, waits for ``/health``, verifies ``/server_info``, smoke-tests and
   rolls back on failure. The console follows the agent's progress file and, if its SSH
   connection drops, reconnects and picks up where it was: the host ends on the old config or
   on the new healthy one whether or not the operator is still connected.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import json
import re
import secrets
import shlex
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specconsole.actions import privilege
from specconsole.actions.algorithms import (
    DeployRefused,
    SpecContext,
    SpecInput,
    check_offered,
    check_value,
    plan_settings,
)
from specconsole.actions.privilege import ALIVE_SH, Privilege, PrivilegeRefused, agent_python, alive_argv
from specconsole.actions.steps import HEARTBEAT_S, Steps, shorten
from specconsole.config import HostConfig
from specconsole.errors import HostUnavailable, SpecConsoleError
from specconsole.hosts import CommandResult, Host
from specconsole.hosts.commands import Command
from specconsole.sglang.flags import CHECKED, CONCEPTS, SERVER_INFO_KEYS, Argv, SglangCli, help_command
from specconsole.sglang.rebase import BaseDrift, find_drift
from specconsole.sglang.unit import SPECIFIER, ServiceUnit, dropin_text, parse_unit, quote_exec, show_word

#: The host agent's files, by the name each gets in the deploy's work folder (``agent.py``
#: imports its sibling by that name).
AGENT_FILES = {"agent.py": Path(__file__).with_name("deploy_agent.py"),
               "deploy_agent_watch.py": Path(__file__).with_name("deploy_agent_watch.py")}
SMOKE_PROMPT = "def fibonacci(n: int) -> int:\n    "
#: the agent heartbeats every 0.5 s while it waits; this long without any event, the console
#: checks whether its process is still there
AGENT_SILENT_S = 20.0


class BaseUnitChanged(DeployRefused):
    """The base unit changed under the deploy drop-in; ``drift`` says how. Rebase to go on
    (``DeployRequest(rebase=True)``, ``specconsole deploy --rebase``)."""

    def __init__(self, drift: BaseDrift) -> None:
        super().__init__(drift.line())
        self.drift = drift


@dataclass(frozen=True)
class DeployRequest:
    """What the operator asked for; ``None`` keeps the current value. Values are raw input."""

    algorithm: str | None = None
    draft_window: str | int | None = None
    block_size: str | int | None = None
    draft_model: str | None = None
    #: DDTREE's tree budget (``--speculative-ddtree-budget``; default: block size - 1)
    tree_budget: str | int | None = None
    #: SGLang's ``--attention-backend`` (DDTREE's full-tree mode needs triton; default: keep)
    attention_backend: str | None = None
    health_timeout_s: float = 600.0
    smoke_tokens: int = 64
    #: Build the new ExecStart from the current base unit (without the deploy drop-in) instead
    #: of the drop-in's; needed when the base unit changed since the drop-in was written.
    rebase: bool = False


@dataclass
class DeployPlan:
    host: str
    unit: ServiceUnit
    cli: SglangCli
    version: str | None
    old_argv: list[str]
    new_argv: list[str]
    current: dict[str, str | None]
    new: dict[str, str | None]
    flag_names: dict[str, str]
    old_dropin: str | None
    new_dropin: str
    expect: dict[str, Any]
    base_url: str
    draft_config: dict[str, Any] | None
    warnings: list[str] = field(default_factory=list)
    gpu_lines: list[str] = field(default_factory=list)
    #: what SGLang will do with these settings (DDTREE's mode, overlap scheduling)
    notes: list[str] = field(default_factory=list)
    health_timeout_s: float = 600.0
    smoke_tokens: int = 64
    #: Set when this plan rebases: how the base unit had drifted from the old drop-in.
    rebased: BaseDrift | None = None
    #: root login, or ``sudo = true``: the agent starts under ``sudo -n`` (actions/privilege.py)
    privilege: Privilege = field(default_factory=Privilege)
    id: str = field(default_factory=lambda: time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3))

    @property
    def changes(self) -> bool:
        return self.old_argv != self.new_argv

    @property
    def lock_path(self) -> str:
        return f"{self.unit.dropin_dir}/.specconsole/deploy.lock"

    @property
    def workdir(self) -> str:
        parent = self.privilege.work_parent(self.unit.name) or f"{self.unit.dropin_dir}/.specconsole"
        return f"{parent}/{self.id}"

    def diff(self) -> list[str]:
        old = (self.old_dropin or "").splitlines(keepends=True)
        new = self.new_dropin.splitlines(keepends=True)
        path = self.unit.deploy_dropin
        return [ln.rstrip("\n") for ln in difflib.unified_diff(
            old, new, fromfile=path if self.old_dropin is not None else "/dev/null", tofile=path)]

    def summary(self) -> str:
        parts = [f"{k}={v}" for k, v in self.new.items() if v is not None and self.current.get(k) != v]
        return ", ".join(parts) or "no flag changes"

    def describe(self) -> list[str]:
        """Current vs new flags, the unit diff, what restarts and the expected downtime."""
        lines = [f"deploy plan for {self.unit.name} on {self.host} (SGLang {self.version or 'version unknown'})",
                 f"  {'setting':17} {'flag':38} {'current':>12} -> new"]
        for concept, flag in self.flag_names.items():
            cur, new = self.current.get(concept), self.new.get(concept)
            if cur is None and new is None:
                continue
            mark = "" if cur == new else "   *"
            lines.append(f"  {concept:17} {flag:38} {_show(cur):>12} -> {_show(new)}{mark}")
        lines.append(f"  unit: {self.unit.main_path}; effective ExecStart from {self.unit.exec_start_file}")
        if self.rebased is not None:
            lines.append(f"  rebase: ExecStart rebuilt from {self.rebased.base_file} "
                         f"({self.rebased.summary()}); the base unit's values win")
        lines.append(f"  change: drop-in {self.unit.deploy_dropin}")
        if self.privilege.sudo:
            lines.append(f"  as: {self.privilege.user} through `sudo -n {self.privilege.python}` (the agent runs as "
                         f"root); its files in {self.workdir}")
        lines += ["    " + ln for ln in self.diff()] or ["    (no change)"]
        lines.append(f"  restarts: {self.unit.name} (every request in flight is dropped); expected downtime: "
                     f"the server's start-up time, health timeout {self.health_timeout_s:g}s, then rollback")
        lines += [f"  {g}" for g in self.gpu_lines]
        lines += [f"  note: {n}" for n in self.notes]
        lines += [f"  warning: {w}" for w in self.warnings]
        return lines


@dataclass
class DeployOutcome:
    outcome: str   # deployed | rolled_back | rollback_failed | locked | unchanged | crashed | dry_run
    message: str
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.outcome in ("deployed", "dry_run")

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else (2 if self.outcome == "locked" else 1)


# ----------------------------------------------------------------------------------- input

def _positive_int(raw: str | int | None, what: str, flag: str) -> int | None:
    if raw is None:
        return None
    text = str(raw).strip()
    if not re.fullmatch(r"[+-]?\d+", text):
        raise DeployRefused(f"{what} must be a whole number, got {raw!r} (SGLang's {flag} takes an int)")
    value = int(text)
    if value <= 0:
        raise DeployRefused(f"{what} must be positive, got {value} (SGLang refuses {flag} <= 0)")
    return value


async def _read_text(host: Host, steps: Steps, path: str) -> str | None:
    res = await steps.run(host, ["cat", "--", path])
    return res.stdout if res.ok else None


# ------------------------------------------------------------------------------- preflight

async def preflight(host: Host, cfg: HostConfig, request: DeployRequest, steps: Steps) -> DeployPlan:
    """Read the deployment, compute the new one, refuse anything SGLang would refuse."""
    if cfg.sglang is None:
        raise DeployRefused(f"{cfg.name}: no [hosts.sglang] configured; nothing to deploy")
    unit_name = cfg.sglang.unit
    window_in = _positive_int(request.draft_window, "the draft window", "--speculative-draft-window-size")
    block_in = _positive_int(request.block_size, "the block size", "--speculative-num-draft-tokens")
    budget_in = _positive_int(request.tree_budget, "the tree budget", "--speculative-ddtree-budget")
    algo_in = request.algorithm.strip().upper() if request.algorithm else None
    for what, raw in (("--draft-model", request.draft_model), ("--algorithm", request.algorithm),
                      ("--attention-backend", request.attention_backend)):
        check_value(what, raw)

    steps.begin("read the unit", f"reading {unit_name}")
    cat = await steps.run(host, ["systemctl", "cat", unit_name])
    if not cat.ok:
        raise DeployRefused(f"{cfg.name}: `systemctl cat {unit_name}` failed: "
                            f"{(cat.stderr or cat.stdout).strip()[:200]}; check sglang.unit in the config")
    first = parse_unit(unit_name, cat.stdout)
    env_texts: dict[str, str] = {}
    for env_file in first.environment_files:
        text = await _read_text(host, steps, env_file.lstrip("-"))
        if text is None and not env_file.startswith("-"):
            raise DeployRefused(f"{cfg.name}: EnvironmentFile {env_file} of {unit_name} cannot be read")
        env_texts[env_file.lstrip("-")] = text or ""
    unit = parse_unit(unit_name, cat.stdout, env_texts) if env_texts else first
    base = (parse_unit(unit_name, cat.stdout, env_texts, exclude=(unit.deploy_dropin,))
            if unit.file_text(unit.deploy_dropin) is not None and len(unit.files) > 1 else unit)
    steps.info(f"{len(unit.files)} file(s); ExecStart ({len(unit.exec_start)} words) from {unit.exec_start_file}")
    priv = Privilege()
    if cfg.sudo:  # refuse now, before anything changes, when sudo cannot do the agent's work
        try:
            priv = await privilege.check(host, cfg.name, agent_python(unit.exec_start), unit.name, steps)
        except PrivilegeRefused as err:
            raise DeployRefused(str(err)) from None
    warnings: list[str] = []
    if unit.expanded_vars:
        warnings.append(f"ExecStart uses ${', $'.join(sorted(set(unit.expanded_vars)))}; the drop-in writes "
                        f"the expanded flags explicitly")

    steps.begin("SGLang flags", "asking the installed SGLang which flags it has")
    argv0 = Argv.parse((base if request.rebase else unit).exec_start, SglangCli())
    if any(SPECIFIER in w for w in argv0.prefix):
        raise DeployRefused(f"{cfg.name}: the program in {unit_name}'s ExecStart "
                            f"({show_word(' '.join(argv0.prefix))}) uses a systemd % specifier; "
                            f"write the path out in the unit so the console can run its --help")
    help_res = await steps.run(host, help_command(argv0.prefix), timeout=180,
                               summary=lambda r: f"{r.stdout.count(chr(10))} lines of --help")
    cli = SglangCli.from_help(help_res.stdout + "\n" + help_res.stderr)
    if not cli.flags:
        raise DeployRefused(f"{cfg.name}: `{shlex.join(help_command(argv0.prefix))}` printed no options "
                            f"(exit {help_res.exit_status}); is ExecStart's program SGLang?")
    names = {c: cli.name_for(c) for c in (*CONCEPTS, *CHECKED)}
    if cli.same(names["block_size"], names["num_draft_tokens"]):
        names["block_size"] = None  # one option under two names (newer SGLang): the block is num_draft_tokens
    flag_names = {c: n for c, n in names.items() if n and c in CONCEPTS}
    steps.info("flag names: " + ", ".join(f"{c} {n}" for c, n in flag_names.items()))
    args = Argv.parse(unit.exec_start, cli)
    drift = find_drift(unit, base, cli) if base is not unit else None
    if drift is not None:
        if not request.rebase:
            raise BaseUnitChanged(drift)
        steps.warn(f"rebasing: {drift.finding()}")

    def current(concept: str) -> str | None:
        n = names.get(concept)
        return args.get(cli.aliases(n)) if n else None

    cur = {c: current(c) for c in names}
    version = await _server_version(host, cfg, steps)

    algo = algo_in or (cur["algorithm"].upper() if cur["algorithm"] else None)
    if (algo_in or window_in or block_in or budget_in or request.draft_model) and algo is None:
        raise DeployRefused("no speculative algorithm in the unit; pass --algorithm DFLASH (or NEXTN, DDTREE)")
    ctx = SpecContext(cfg.name, unit_name, version, cli, names, cur, cfg.sglang.draft_model_path, warnings)
    check_offered(ctx, algo_in)
    for concept, value_in in (("draft_window", window_in), ("algorithm", algo_in), ("tree_budget", budget_in),
                           ("attention_backend", request.attention_backend)):
        if value_in is not None and concept not in flag_names:
            raise DeployRefused(f"SGLang {version or ''} on {cfg.name} has no flag for the {concept.replace('_', ' ')} "
                                f"(looked for {', '.join(CONCEPTS[concept])} in its --help)".replace("  ", " "))
    if block_in is not None and not (flag_names.keys() & {"block_size", "num_draft_tokens"}):
        raise DeployRefused(f"SGLang {version or ''} on {cfg.name} has no flag for the block size (looked for "
                            f"{', '.join(CONCEPTS['block_size'] + CONCEPTS['num_draft_tokens'])} in its --help)"
                            .replace("  ", " "))
    given = SpecInput(algo_in, window_in, block_in, budget_in, request.draft_model, request.attention_backend)
    changes, draft_cfg = await plan_settings(host, steps, ctx, given, algo or "") if algo else ({}, None)
    new = {**cur, **changes}

    if request.rebase:  # the current base unit, plus the settings asked for (or kept)
        args = Argv.parse(base.exec_start, cli)
    for concept, value in new.items():
        n = names.get(concept)
        if not n or concept not in CONCEPTS:
            continue
        if value is None:
            args.remove(cli.aliases(n))
        elif args.get(cli.aliases(n)) != value:
            spelled = args.spelling(cli.aliases(n))
            if spelled is not None and spelled in cli.flags[n].hidden:
                ctx.notes.append(f"{unit_name} spells {n} as {spelled} (a deprecated alias --help does not "
                                 f"list); changed in place under that name")
            args.set(n, value, cli.aliases(n))
    new_argv = args.argv()

    gpu_lines = await _gpu_free(host, steps)
    steps.begin("lock", "checking no other deploy is running")
    plan = DeployPlan(
        host=cfg.name, unit=unit, cli=cli, version=version, old_argv=unit.exec_start, new_argv=new_argv,
        current=cur, new=new, flag_names=flag_names, old_dropin=unit.file_text(unit.deploy_dropin),
        new_dropin="", expect={}, base_url=cfg.sglang.base_url, draft_config=draft_cfg, warnings=warnings,
        gpu_lines=gpu_lines, health_timeout_s=request.health_timeout_s, smoke_tokens=request.smoke_tokens,
        rebased=drift, notes=ctx.notes, privilege=priv)
    holder = await _lock_holder(host, plan, steps)
    if holder:
        raise DeployRefused(f"another deploy is running on {cfg.name}: {holder}; wait for it or check "
                            f"{plan.lock_path}")
    try:
        plan.new_dropin = dropin_text(new_argv, f"deploy {plan.id}: {show_word(plan.summary())}", base)
    except SpecConsoleError as err:  # a value from the unit itself that no unit file can carry
        raise DeployRefused(f"{cfg.name}: {err}") from None
    plan.expect = {SERVER_INFO_KEYS[c]: _typed(new[c]) for c in SERVER_INFO_KEYS
                   if new.get(c) is not None and c in names and names[c]}
    if algo in ("DFLASH", "DDTREE") and new.get("block_size"):
        plan.expect["speculative_num_draft_tokens"] = int(new["block_size"] or 0)
    if plan.expect.get("speculative_algorithm") == "NEXTN":  # SGLang resolves NEXTN to EAGLE
        plan.expect["speculative_algorithm"] = ["NEXTN", "EAGLE"]
    steps.info(f"plan: {plan.summary()}")
    return plan


def _typed(value: str | None) -> Any:
    return int(value) if value is not None and value.isdigit() else value


def _show(value: str | None) -> str:
    if value is None:
        return "-"
    if value == "":
        return "on"
    value = show_word(value)
    return value if len(value) <= 28 else "…" + value[-27:]


async def _server_version(host: Host, cfg: HostConfig, steps: Steps) -> str | None:
    """The running server's version from /server_info (None when it does not answer)."""
    from specconsole.sglang import SglangClient

    assert cfg.sglang is not None
    url = cfg.sglang.base_url
    try:
        if cfg.sglang.tunnel:
            from specconsole.hosts.address import tunnel_url

            url = await tunnel_url(host, url)
        async with SglangClient(url, timeout_s=cfg.sglang.timeout_s, api_key=cfg.sglang.api_key) as client:
            info = await client.server_info()
    except Exception as err:
        steps.warn(f"SGLang version unknown: /server_info did not answer ({_one_line(err)})")
        return None
    steps.info(f"running server: SGLang {info.version}, {info.algorithm or 'no speculation'}")
    return info.version


async def _gpu_free(host: Host, steps: Steps) -> list[str]:
    res = await steps.run(host, ["nvidia-smi", "--query-gpu=index,memory.used,memory.total",
                                 "--format=csv,noheader,nounits"])
    if not res.ok:
        steps.warn("GPU memory unknown (nvidia-smi failed)")
        return ["GPU memory: unknown (nvidia-smi failed)"]
    out = []
    for line in res.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and all(p.replace(".", "").isdigit() for p in parts):
            used, total = float(parts[1]), float(parts[2])
            out.append(f"GPU {parts[0]}: {total - used:.0f} MiB free of {total:.0f} MiB "
                       f"(the restart frees what the old server holds)")
    return out


async def _lock_holder(host: Host, plan: DeployPlan, steps: Steps) -> str | None:
    res = await steps.run(host, ["cat", "--", plan.lock_path])
    if not res.ok:
        steps.info("no deploy lock is held")
        return None
    try:
        holder = json.loads(res.stdout or "{}")
    except ValueError:
        return None
    pid = holder.get("pid")
    if isinstance(pid, int) and (await steps.run(host, alive_argv(pid))).ok:
        return f"deploy {holder.get('id')} (pid {pid})"
    steps.warn(f"stale deploy lock {plan.lock_path} (pid {pid} is gone); the agent will replace it")
    return None


def _one_line(err: BaseException) -> str:
    return str(err).splitlines()[0] if str(err) else type(err).__name__


# --------------------------------------------------------------------------------- execute

def agent_plan(plan: DeployPlan, operator: str = "") -> dict[str, Any]:
    base = plan.base_url.rstrip("/")
    return {
        "id": plan.id, "unit": plan.unit.name, "dropin_path": plan.unit.deploy_dropin,
        "dropin_text": plan.new_dropin, "workdir": plan.workdir, "lock_path": plan.lock_path,
        "health_url": f"{base}/health", "server_info_url": f"{base}/server_info",
        "generate_url": f"{base}/generate", "expect": plan.expect, "health_timeout_s": plan.health_timeout_s,
        # the old config is known to start: give its restart at least 10 minutes
        "rollback_health_timeout_s": max(600.0, plan.health_timeout_s),
        "smoke": {"text": SMOKE_PROMPT, "max_new_tokens": plan.smoke_tokens}, "summary": plan.summary(),
        "operator": operator, "exec_start": quote_exec(plan.new_argv),
    }


def _agent_python(plan: DeployPlan) -> str:
    """The agent's start words: its python, under ``sudo -n`` on a sudo host."""
    return shlex.join(plan.privilege.agent_argv(agent_python(plan.old_argv)))


def _launch_command(plan: DeployPlan) -> str:
    """Start the agent unless this deploy's agent already runs or ran (safe to repeat after a
    dropped connection: the progress file and ``agent.pid`` say which). Only the agent goes to
    the background, with every fd redirected, so it outlives the SSH session; the command
    returns once the agent wrote its first event (at most 10 s), or says it exited at once.
    The agent itself also refuses to run twice for one deploy (flock)."""
    py = _agent_python(plan)
    return (f"{ALIVE_SH}cd {shlex.quote(plan.workdir)} && "
            f"if [ -s agent.pid ] && alive \"$(cat agent.pid)\"; then "
            f"echo \"agent already running as pid $(cat agent.pid)\"; "
            f"elif [ -s progress.jsonl ]; then echo 'agent already ran'; "
            f"else {{ setsid nohup {py} agent.py plan.json progress.jsonl > agent.out 2>&1 < /dev/null & "
            f"echo $! > agent.pid; i=0; while [ ! -s progress.jsonl ] && [ $i -lt 100 ] && alive $!; "
            f"do sleep 0.1; i=$((i+1)); done; "
            f"if [ -s progress.jsonl ]; then echo \"agent started as pid $(cat agent.pid)\"; "
            f"elif alive $!; then echo \"agent starting as pid $(cat agent.pid)\"; "
            f"else echo \"agent pid $(cat agent.pid) has not written an event yet (see agent.out)\"; fi; }}; fi")


async def execute(host: Host, plan: DeployPlan, steps: Steps, operator: str = "") -> DeployOutcome:
    """Start the host agent and follow it to its final event.

    Every step survives a dropped connection: the upload and the agent's start are repeated
    after reconnecting (both are idempotent; the start finds a running agent by the deploy's
    ``agent.pid`` and progress file), and following re-attaches to the progress file.
    """
    steps.begin("upload", f"copying the deploy agent and plan to {plan.workdir}")
    (await _run_reattaching(host, steps, ["mkdir", "-p", plan.workdir])).check(host.name)
    for name, text in (*((name, source.read_text()) for name, source in AGENT_FILES.items()),
                       ("plan.json", json.dumps(agent_plan(plan, operator), indent=2))):
        path = f"{plan.workdir}/{name}"
        # write a temp file and rename: a repeated upload never leaves a half-written file
        res = await _run_reattaching(host, steps, ["sh", "-c", 'cat > "$1.tmp" && mv -f "$1.tmp" "$1"', "sh", path],
                                     input=text)
        res.check(host.name)
    progress = f"{plan.workdir}/progress.jsonl"
    steps.begin("start the agent", "starting the supervised restart-verify-rollback step on the host")
    res = (await _run_reattaching(host, steps, _launch_command(plan))).check(host.name)
    steps.info(f"{res.stdout.strip() or 'agent started'} on {host.name}; following {progress}")
    return await follow(host, plan, progress, steps)


async def _run_reattaching(host: Host, steps: Steps, cmd: Command, input: str | None = None) -> CommandResult:
    """Run an idempotent command; if the connection drops before it reports its exit status,
    say so, reconnect and run it again."""
    while True:
        try:
            res = await steps.run(host, cmd, input=input)
        except HostUnavailable as err:
            why = _one_line(err)
        else:
            if res.exit_status is not None:
                return res
            why = "the connection dropped before the command reported its exit status"
        await _reconnect(host, steps, why, "repeating the step (it is safe to repeat)")


async def _reconnect(host: Host, steps: Steps, why: str, then: str) -> None:
    steps.warn(f"lost the connection to {host.name} ({why}); the deploy continues on the host; "
               f"reconnecting to follow it")
    await asyncio.sleep(0.2)   # let the host notice a half-closed connection
    started = time.monotonic()
    while not await host.wait_connected(HEARTBEAT_S):
        steps.emit("heartbeat", f"waiting to reconnect to {host.name} for "
                   f"{time.monotonic() - started:.0f}s; last seen: {host.status.last_error}")
    steps.info(f"reconnected to {host.name}; re-attaching to the deploy: {then}")


async def follow(host: Host, plan: DeployPlan, progress: str, steps: Steps) -> DeployOutcome:
    """Relay the agent's events as steps until its final event; survive dropped connections.

    While the agent is silent for more than a heartbeat interval, a heartbeat says so (with
    the last event seen); if it stays silent and its process is gone, the deploy is reported
    as crashed with the agent's own output.
    """
    seen = 0
    events: list[dict[str, Any]] = []
    last = time.monotonic()
    last_msg = "no event yet"
    while True:
        try:
            async with host.stream(["tail", "-n", "+1", "-F", progress]) as stream:
                lines: asyncio.Queue[str | None] = asyncio.Queue()
                reader = asyncio.create_task(_pump(stream.lines(), lines))
                try:
                    while True:
                        try:
                            line = await asyncio.wait_for(lines.get(), HEARTBEAT_S)
                        except TimeoutError:
                            quiet = time.monotonic() - last
                            steps.emit("heartbeat", f"waiting for the deploy agent on {host.name}: no event for "
                                       f"{quiet:.1f}s; last: {shorten(last_msg)}")
                            if quiet > AGENT_SILENT_S:
                                crashed = await _agent_gone(host, plan)
                                if crashed is not None:
                                    steps.failed(crashed)
                                    return DeployOutcome("crashed", crashed, events)
                                last = time.monotonic()
                            continue
                        if line is None:
                            break
                        try:
                            ev = json.loads(line)
                        except ValueError:
                            continue
                        if ev.get("seq", 0) <= seen:
                            continue
                        seen = ev["seq"]
                        last, last_msg = time.monotonic(), str(ev.get("message", ""))
                        events.append(ev)
                        _relay(steps, ev, host.name)
                        if ev.get("kind") == "final":
                            return DeployOutcome(ev.get("outcome", "crashed"), ev.get("message", ""), events)
                finally:
                    reader.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await reader
                if reader.done() and not reader.cancelled() and reader.exception() is not None:
                    raise reader.exception()  # type: ignore[misc]
            raise HostUnavailable(f"{host.name}: the progress stream ended")
        except HostUnavailable as err:
            await _reconnect(host, steps, _one_line(err), f"following its progress after event {seen}")
            last = time.monotonic()


async def _pump(lines: AsyncIterator[str], out: asyncio.Queue[str | None]) -> None:
    """Move a stream's lines into a queue (None at its end), so waiting on it can time out."""
    try:
        async for line in lines:
            out.put_nowait(line)
    finally:
        out.put_nowait(None)


async def _agent_gone(host: Host, plan: DeployPlan) -> str | None:
    """None while the agent runs (or the host cannot say); else why it is gone."""
    pid_file = shlex.quote(f"{plan.workdir}/agent.pid")
    try:
        res = await host.run(f"{ALIVE_SH}alive \"$(cat {pid_file} 2>/dev/null)\" && echo running || "
                             f"tail -c 600 {shlex.quote(plan.workdir + '/agent.out')}", timeout=10)
    except (HostUnavailable, TimeoutError):
        return None
    if res.exit_status is None or res.stdout.startswith("running"):
        return None
    out = res.stdout.strip().splitlines()
    return (f"the deploy agent on {host.name} stopped without a final event"
            + (f": {out[-1]}" if out else "") + f"; check {plan.workdir}/agent.out and the unit's state")


def _relay(steps: Steps, ev: dict[str, Any], host: str) -> None:
    kind = ev.get("kind", "info")
    message = ev.get("message", "")
    if kind == "step":
        steps.begin(ev.get("step") or message, message)
        return
    if ev.get("step"):
        steps.step = ev["step"]
    if kind == "final":
        outcome = ev.get("outcome")
        (steps.done if outcome == "deployed" else steps.failed)(message)
        return
    steps.emit(kind if kind in ("command", "result", "heartbeat", "info", "warning", "error") else "info",
               message, command=ev.get("command"), exit_status=ev.get("exit_status"), took_s=ev.get("took_s"),
               host=host)
