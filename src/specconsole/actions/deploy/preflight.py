"""The deploy wizard's core: preflight, plan, and a supervised execute with rollback.

1. :func:`preflight` (fast, automatic): reads the unit (``systemctl cat``, env files,
   drop-ins), discovers the installed SGLang's flags from its own ``--help``, reads the draft
   model's ``config.json``, checks SGLang's constraints and the GPU memory, and returns a
   :class:`DeployPlan` (current vs new flags, the drop-in diff, what restarts). Invalid input
   is refused here, before anything on the host changes, naming SGLang's constraint.
2. :func:`execute` (:mod:`specconsole.actions.deploy.execute`): copies the agent
   (:mod:`specconsole.remote.deploy_agent` and its sibling
   :mod:`~specconsole.remote.deploy_agent_watch`) and the plan to the host and starts it
   detached; the agent locks, backs up, writes a drop-in atomically,
   daemon-reloads, restarts, waits for ``/health``, verifies ``/server_info``, smoke-tests and
   rolls back on failure. The console follows the agent's progress file and, if its SSH
   connection drops, reconnects and picks up where it was: the host ends on the old config or
   on the new healthy one whether or not the operator is still connected.

The request, plan and outcome types live in :mod:`specconsole.actions.deploy.plan`; this module
is the one to import them (and :func:`execute`) from.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from specconsole.actions.deploy import host_check, privilege
from specconsole.actions.deploy.algorithms import (
    FORM_FIELDS,
    DeployRefused,
    SpecContext,
    SpecInput,
    check_offered,
    check_value,
    plan_settings,
)
from specconsole.actions.deploy.execute import agent_plan, execute, first_line, follow
from specconsole.actions.deploy.host_check import HostVerdict
from specconsole.actions.deploy.plan import (
    BaseUnitChanged,
    DeployOutcome,
    DeployPlan,
    DeployRequest,
    lock_path,
    resolved_summary,
)
from specconsole.actions.deploy.privilege import Privilege, PrivilegeRefused, agent_python, alive_argv
from specconsole.actions.deploy.unit_cli import read_cli, read_unit
from specconsole.base.errors import SpecConsoleError
from specconsole.base.http_body import MIB
from specconsole.base.values import SPEC_INT_MAX
from specconsole.config import HostConfig
from specconsole.hosts import Host
from specconsole.sglang.flags import CHECKED, CONCEPTS, SERVER_INFO_KEYS, Argv, SglangCli
from specconsole.sglang.rebase import find_drift
from specconsole.sglang.unit import ServiceUnit, dropin_text, show_word
from specconsole.steps import Steps

if TYPE_CHECKING:
    from specconsole.sglang import SglangClient

__all__ = ["BaseUnitChanged", "DeployOutcome", "DeployPlan", "DeployRefused", "DeployRequest", "agent_plan",
           "execute", "follow", "preflight"]


# ----------------------------------------------------------------------------------- input

def _positive_int(raw: str | int | None, what: str, flag: str, field: str) -> int | None:
    if raw is None:
        return None
    text = str(raw).strip()
    if not re.fullmatch(r"[+-]?\d+", text):
        raise DeployRefused(f"{what} must be a whole number, got {raw!r} (SGLang's {flag} takes an int)", field=field)
    value = int(text)
    if value <= 0:
        raise DeployRefused(f"{what} must be positive, got {value} (SGLang refuses {flag} <= 0)", field=field)
    if value > SPEC_INT_MAX:
        raise DeployRefused(f"{what} must be <= {SPEC_INT_MAX}, got {value} (SGLang's {flag} is a C int)", field=field)
    return value


# ------------------------------------------------------------------------------- preflight

async def preflight(host: Host, cfg: HostConfig, request: DeployRequest, steps: Steps) -> DeployPlan:
    """Read the deployment, compute the new one, refuse anything SGLang would refuse."""
    if cfg.sglang is None:
        raise DeployRefused(f"{cfg.name}: no [hosts.sglang] configured; nothing to deploy")
    unit_name = cfg.sglang.unit
    window_in = _positive_int(request.draft_window, "the draft window", "--speculative-draft-window-size",
                              "draft_window")
    block_in = _positive_int(request.block_size, "the block size", "--speculative-num-draft-tokens", "block_size")
    budget_in = _positive_int(request.tree_budget, "the tree budget", "--speculative-ddtree-budget", "tree_budget")
    steps_in = _positive_int(request.num_steps, "the number of draft steps", "--speculative-num-steps", "num_steps")
    topk_in = _positive_int(request.eagle_topk, "the topk", "--speculative-eagle-topk", "eagle_topk")
    tokens_in = _positive_int(request.draft_tokens, "the number of draft tokens", "--speculative-num-draft-tokens",
                               "draft_tokens")
    algo_in = request.algorithm.strip().upper() if request.algorithm else None
    for what, raw, key in (("--draft-model", request.draft_model, "draft_model"),
                           ("--algorithm", request.algorithm, "algorithm"),
                           ("--attention-backend", request.attention_backend, None)):
        check_value(what, raw, key)

    steps.begin("read the unit", f"reading {unit_name}")
    read = await read_unit(host, cfg.name, unit_name, steps)
    unit, base = read.unit, read.base
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
    cli = (await read_cli(host, cfg.name, unit_name, (base if request.rebase else unit).exec_start, steps)).cli
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
    if (algo_in or window_in or block_in or budget_in or request.draft_model or steps_in or topk_in
            or tokens_in) and algo is None:
        raise DeployRefused("no speculative algorithm in the unit; pass --algorithm DFLASH (or NEXTN, DDTREE)",
                            field="algorithm")
    ctx = SpecContext(cfg.name, unit_name, version, cli, names, cur, cfg.sglang.draft_model_path, warnings)
    check_offered(ctx, algo_in)
    for concept, value_in in (("draft_window", window_in), ("algorithm", algo_in), ("tree_budget", budget_in),
                           ("attention_backend", request.attention_backend)):
        if value_in is not None and concept not in flag_names:
            raise DeployRefused(f"SGLang {version or ''} on {cfg.name} has no flag for the {concept.replace('_', ' ')} "
                                f"(looked for {', '.join(CONCEPTS[concept])} in its --help)".replace("  ", " "),
                                field=concept if concept in FORM_FIELDS else None)
    if block_in is not None and not (flag_names.keys() & {"block_size", "num_draft_tokens"}):
        raise DeployRefused(f"SGLang {version or ''} on {cfg.name} has no flag for the block size (looked for "
                            f"{', '.join(CONCEPTS['block_size'] + CONCEPTS['num_draft_tokens'])} in its --help)"
                            .replace("  ", " "), field="block_size")
    _check_choices(ctx, "attention_backend", request.attention_backend)
    given = SpecInput(algo_in, window_in, block_in, budget_in, request.draft_model, request.attention_backend,
                      steps_in, topk_in, tokens_in)
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
    steps.begin("lock", "checking no other deploy is running")
    holder = await _lock_holder(host, lock_path(unit), steps)
    if holder:
        raise DeployRefused(f"another deploy is running on {cfg.name}: {holder}; wait for it or check "
                            f"{lock_path(unit)}")
    verdict = await _host_check(host, cfg, unit, cli, new_argv, steps) if request.host_check and new_argv != \
        unit.exec_start else None
    if not request.host_check:
        steps.warn("SGLang's own check skipped (--no-host-check): only the built-in rules were checked")

    gpu_lines = await _gpu_free(host, steps)
    plan = DeployPlan(
        host=cfg.name, unit=unit, cli=cli, version=version, old_argv=unit.exec_start, new_argv=new_argv,
        current=cur, new=new, flag_names=flag_names, old_dropin=unit.file_text(unit.deploy_dropin),
        new_dropin="", expect={}, base_url=cfg.sglang.base_url, draft_config=draft_cfg, warnings=warnings,
        gpu_lines=gpu_lines, health_timeout_s=request.health_timeout_s, smoke_tokens=request.smoke_tokens,
        rebased=drift, notes=ctx.notes, privilege=priv, host_verdict=verdict)
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
    if verdict is not None and verdict.accepted:  # what SGLang itself resolved is what /server_info will say
        for key in RESOLVED_EXPECT:
            if verdict.resolved.get(key) is not None:
                plan.expect[key] = verdict.resolved[key]
    steps.info(f"plan: {plan.summary()}")
    return plan


#: Resolved settings the deploy verifies on /server_info after the restart, when the host's SGLang
#: resolved them at preflight.
RESOLVED_EXPECT = ("speculative_algorithm", "speculative_num_draft_tokens", "speculative_num_steps",
                   "speculative_eagle_topk", "speculative_draft_window_size", "speculative_ddtree_budget")


def _check_choices(ctx: SpecContext, concept: str, value: str | None) -> None:
    """Refuse a value the host's ``--help`` does not list among the flag's choices."""
    name = ctx.names.get(concept)
    flag = ctx.cli.flags.get(name) if name else None
    if value is None or flag is None or not flag.choices or value in flag.choices:
        return
    import difflib

    near = difflib.get_close_matches(value, flag.choices, n=1)
    hint = f"did you mean {near[0]}? " if near else ""
    raise DeployRefused(f"{ctx.sglang()} does not accept {name} {value}: {hint}its --help lists "
                        f"{', '.join(flag.choices)}")


async def _host_check(host: Host, cfg: HostConfig, unit: ServiceUnit, cli: SglangCli, argv: list[str],
                      steps: Steps) -> HostVerdict:
    """Ask the host's own SGLang about the planned command line; refuse when it refuses."""
    steps.begin("SGLang's own check", "asking the host's SGLang to parse and resolve the planned command line "
                "(no model is loaded; its import takes seconds)")
    prefix = Argv.parse(argv, cli).prefix
    verdict = await host_check.check(host, steps, unit, prefix, argv[len(prefix):])
    if verdict.verdict == "refused":
        raise DeployRefused(f"{verdict.who} on {cfg.name} refuses the planned command line: {verdict.message} (asked "
                            f"`{verdict.python} -` with the unit's environment; the exact command is in the step "
                            f"log); nothing was changed")
    if verdict.verdict == "unavailable":
        steps.warn(f"SGLang's own check cannot run on {cfg.name}: {verdict.message}; checking with the built-in "
                   f"rules instead (--no-host-check skips the check)")
    else:
        steps.info(f"{verdict.who} accepts it: {resolved_summary(verdict.resolved)}")
        for w in verdict.warnings[:5]:
            steps.info(f"SGLang says: {w}")
    return verdict


def _typed(value: str | None) -> Any:
    return int(value) if value is not None and value.isdigit() else value



async def sglang_client(host: Host, cfg: HostConfig, steps: Steps) -> SglangClient:
    """A client of ``cfg``'s SGLang (through an SSH tunnel to ``host`` when configured, opened with
    heartbeats on ``steps``); use it as ``async with await sglang_client(host, cfg, steps) as client``."""
    from specconsole.sglang import SglangClient

    assert cfg.sglang is not None
    sglang = cfg.sglang

    async def opened() -> SglangClient:
        url = sglang.base_url
        if sglang.tunnel:
            from specconsole.hosts.address import tunnel_url

            url = await tunnel_url(host, url)
        return SglangClient(url, timeout_s=sglang.timeout_s, api_key=sglang.api_key,
                            max_body_bytes=round(sglang.max_body_mib * MIB))

    return await steps.watch(opened(), f"connecting to {cfg.name}'s SGLang")


async def _server_version(host: Host, cfg: HostConfig, steps: Steps) -> str | None:
    """The running server's version from /server_info (None when it does not answer)."""
    try:
        async with await sglang_client(host, cfg, steps) as client:
            info = await steps.watch(client.server_info(), f"GET {client.display_url}/server_info")
    except Exception as err:
        steps.warn(f"SGLang version unknown: /server_info did not answer ({first_line(err)})")
        return None
    steps.info(f"running server: SGLang {info.version}, {info.algorithm or 'no speculation'}")
    return info.version


async def _gpu_free(host: Host, steps: Steps) -> list[str]:
    steps.begin("GPU memory", "reading the GPUs' free memory")
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


async def _lock_holder(host: Host, path: str, steps: Steps) -> str | None:
    res = await steps.run(host, ["cat", "--", path])
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
    steps.warn(f"stale deploy lock {path} (pid {pid} is gone); the agent will replace it")
    return None
