"""The one action registry: every console action, its default key, what it does, and when it is offered.

Bindings, the footer, the ``?`` help screen, the command palette and read-only gating are all
derived from :data:`REGISTRY`; nothing else defines a key. ``[keys]`` in the config remaps an
action by id (``kill_training = "ctrl+k"``). :func:`plan_keys` resolves the final key of each
action and says, as warnings for the events pane, what in ``[keys]`` could not be applied.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from textual.binding import Binding
from textual.keys import format_key

from specconsole.config import Config


class ActionContext(Protocol):
    """What availability predicates may look at (the app implements it)."""

    @property
    def config(self) -> Config: ...

    @property
    def read_only(self) -> bool: ...

    @property
    def theme_names(self) -> list[str]: ...

    @property
    def fleet_shown(self) -> bool: ...


#: ``predicate(ctx)`` -> ``None`` when the action can run now, else why not (shown in help/palette).
Availability = Callable[[ActionContext], "str | None"]


def _always(_ctx: ActionContext) -> str | None:
    return None


def _has_train_host(ctx: ActionContext) -> str | None:
    return None if ctx.config.train_hosts else "no training host configured"


def _has_serve_host(ctx: ActionContext) -> str | None:
    return None if ctx.config.serve_hosts else "no serving host configured"


def _has_train_and_serve_host(ctx: ActionContext) -> str | None:
    return _has_train_host(ctx) or _has_serve_host(ctx)


def _several_themes(ctx: ActionContext) -> str | None:
    return None if len(ctx.theme_names) > 1 else "only one theme loaded"


def _fleet_shown(ctx: ActionContext) -> str | None:
    return None if ctx.fleet_shown else "only in the fleet view (f shows it)"


def _has_router(ctx: ActionContext) -> str | None:
    return None if ctx.config.router is not None else "no [router] configured"


def _fleet_and_router(ctx: ActionContext) -> str | None:
    return _has_router(ctx) or _fleet_shown(ctx)


@dataclass(frozen=True)
class ActionSpec:
    """One console action. ``id`` is its Textual binding's id (what ``[keys]`` and a keymap name) and,
    without a ``flow``, the Textual action name (``action_<id>`` on the app); an action with a
    ``flow`` binds ``flow('<id>')`` (the app's one ``action_flow``), which runs the flow that
    ``flow`` names (``FLOWS`` in :mod:`specconsole.ui.flows.by_id`) through ``ConsoleActions.start``
    (one at a time). The registry is data: it names flows, and imports none."""

    id: str
    key: str
    description: str  # short, for the footer
    help: str  # one sentence, for the help screen and the palette
    destructive: bool = False
    available: Availability = _always
    show: bool = True  # in the footer
    flow: str | None = None
    #: the action name the flow's step events carry, when not the id
    steps_as: str = ""
    #: it reaches a host without being destructive (the eval's requests): a replay removes it too
    touches_hosts: bool = False

    @property
    def step_action(self) -> str:
        return self.steps_as or self.id

    @property
    def action(self) -> str:
        """The Textual action its binding runs: ``flow('<id>')`` for a flow, else the id."""
        return f"flow({self.id!r})" if self.flow is not None else self.id


def spec_id_of(action: str, parameters: tuple[object, ...]) -> str:
    """The registry id of a Textual action (as ``check_action`` gets it): ``flow('<id>')`` is ``<id>``
    (a ``flow`` without one id is ``flow``, which no spec has)."""
    if action == "flow":
        return parameters[0] if len(parameters) == 1 and isinstance(parameters[0], str) else action
    return action


REGISTRY: tuple[ActionSpec, ...] = (
    ActionSpec("help", "question_mark", "Help", "Show every key binding and what it does"),
    ActionSpec("command_palette", "ctrl+p", "Palette", "Open the command palette (search every action)",
               show=False),
    ActionSpec("cycle_theme", "t", "Theme", "Switch to the next theme from themes/ (remembered)",
               available=_several_themes),
    ActionSpec("refresh", "r", "Refresh", "Redraw every pane from the latest samples now", show=False),
    ActionSpec("fleet_view", "f", "Fleet", "Switch between the fleet view (one line per host, worst first) "
               "and the host panes"),
    ActionSpec("fleet_sort", "s", "Sort", "Fleet view: sort by the next column (worst first, name, GPU util, "
               "power, tok/s, training progress)", available=_fleet_shown, show=False),
    ActionSpec("fleet_filter", "slash", "Filter", "Fleet view: show only the hosts whose line has every word "
               "typed (esc clears)", available=_fleet_shown, show=False),
    ActionSpec("eval_run", "e", "Eval", "Run the coding-task eval against the current deployment (eval pane)",
               available=_has_serve_host, touches_hosts=True),
    ActionSpec("kill_training", "k", "Kill training",
               "Stop the training job (torchrun and all workers) after confirmation",
               destructive=True, available=_has_train_host,
               flow="kill_training", steps_as="kill-training"),
    ActionSpec("deploy", "d", "Deploy",
               "Deploy a draft model / speculative settings to SGLang (restarts it) after confirmation",
               destructive=True, available=_has_serve_host, flow="deploy"),
    ActionSpec("deploy_checkpoint", "D", "Deploy checkpoint",
               "Open the deploy wizard with the checkpoint selected in the training pane as the draft model",
               destructive=True, available=_has_train_and_serve_host, show=False,
               flow="deploy_checkpoint", steps_as="deploy"),
    ActionSpec("fleet_mark", "m", "Mark", "Fleet view: mark or unmark the host under the cursor (for R)",
               available=_fleet_shown, show=False),
    ActionSpec("rollout", "R", "Roll out",
               "Roll a change out across the marked replicas behind the router (canary first, gated)",
               destructive=True, available=_fleet_and_router, show=False, flow="rollout"),
    ActionSpec("abort_rollout", "X", "Abort rollout",
               "Stop the running rollout and roll back what it changed", available=_has_router,
               show=False),
    ActionSpec("quit", "q", "Quit", "Leave the console (monitors stop; nothing on the hosts changes)"),
)

BY_ID: dict[str, ActionSpec] = {spec.id: spec for spec in REGISTRY}

#: ``specconsole replay``'s timeline keys (bound only in a replay, beside the registry's own)
REPLAY_REGISTRY: tuple[ActionSpec, ...] = (
    ActionSpec("replay_pause", "p", "Pause", "Replay: pause or play the recording"),
    ActionSpec("replay_step", "full_stop", "Step", "Replay: pause and step one second forward", show=False),
    ActionSpec("replay_back", "left_square_bracket", "-1m", "Replay: seek one minute back"),
    ActionSpec("replay_forward", "right_square_bracket", "+1m", "Replay: seek one minute forward"),
    ActionSpec("replay_back_far", "left_curly_bracket", "-10m", "Replay: seek ten minutes back", show=False),
    ActionSpec("replay_forward_far", "right_curly_bracket", "+10m", "Replay: seek ten minutes forward",
               show=False),
    ActionSpec("replay_next_event", "n", "Next event", "Replay: jump to the next recorded event (alerts, "
               "action steps, connections)"),
    ActionSpec("replay_faster", "plus", "Faster", "Replay: double the speed (up to 16x)", show=False),
    ActionSpec("replay_slower", "minus", "Slower", "Replay: halve the speed (down to 0.25x)", show=False),
)

_MODIFIERS = ("ctrl", "shift", "alt", "meta", "super", "hyper")
_KEY_NAME = re.compile(r"^[a-z0-9_]+$")


def _char_key(char: str) -> str:
    """Textual's name for a one-character key (``?`` -> ``question_mark``), as its bindings name it."""
    if char == ",":  # a binding's key string is a comma-separated list
        return "comma"
    return next(iter(Binding.make_bindings([Binding(char, "")]))).key


def normalize_key(key: str) -> str | None:
    """``"?"`` -> ``"question_mark"``, ``"Ctrl+K"`` -> ``"ctrl+k"``; ``None`` if it is not a key name."""
    key = key.strip()
    if not key:
        return None
    if len(key) == 1:
        return _char_key(key)
    parts = key.split("+")
    if len(parts) > 1 and parts[-1] == "":  # "ctrl++"
        parts = [*parts[:-2], "+"]
    *mods, base = parts
    mods = [m.lower() for m in mods]
    if any(m not in _MODIFIERS for m in mods):
        return None
    if len(base) == 1:
        if not mods and base.isupper():
            return base  # Textual binds "K" as shift+k's character
        base = _char_key(base.lower())
    else:
        base = base.lower()
    if not _KEY_NAME.match(base):
        return None
    return "+".join([*mods, base])


def key_display(key: str) -> str:
    """How a key is printed (help screen, dialogs), as Textual's footer prints it: ``question_mark``
    -> ``?``, ``ctrl+k`` -> ``^k`` (:meth:`textual.app.App.get_key_display`'s rules)."""
    modifiers, base = Binding(key, "").parse_key()
    shown = format_key(base)
    if "ctrl" in modifiers:
        modifiers.remove("ctrl")
        shown = f"^{shown}"
    return "+".join([*modifiers, shown])


@dataclass(frozen=True)
class BoundAction:
    spec: ActionSpec
    key: str | None  # None: its key was taken by a remapped action (see the warnings)


@dataclass
class KeyPlan:
    """The resolved bindings: what is bound to which key, what read-only removed, what went wrong."""

    bound: list[BoundAction] = field(default_factory=list)
    removed: list[ActionSpec] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def key_of(self, action_id: str) -> str | None:
        for b in self.bound:
            if b.spec.id == action_id:
                return b.key
        return None

    def is_bound(self, action_id: str) -> bool:
        return any(b.spec.id == action_id for b in self.bound)

    @property
    def removed_ids(self) -> set[str]:
        return {s.id for s in self.removed}


def plan_keys(remap: Mapping[str, str], read_only: bool,
              registry: Iterable[ActionSpec] = REGISTRY, *, offline: bool = False) -> KeyPlan:
    """Apply ``[keys]`` to the registry's default keys and drop destructive actions when read-only
    (``offline``, a replay's: also every action that touches a host).

    A remapped key wins over another action's default key (that action is left without a key
    and a warning says so); two remaps to the same key keep the first and warn.
    """
    specs = list(registry)
    ids = {s.id for s in specs}
    plan = KeyPlan()
    wanted: dict[str, str] = {}
    for action_id, raw in remap.items():
        if action_id not in ids:
            known = ", ".join(sorted(ids))
            plan.warnings.append(f"keys.{action_id}: no such action; ignored (actions: {known})")
            continue
        key = normalize_key(raw)
        if key is None:
            plan.warnings.append(f"keys.{action_id} = {raw!r}: not a key name; keeping "
                                 f"{key_display(next(s.key for s in specs if s.id == action_id))}")
            continue
        wanted[action_id] = key
    live = []
    for spec in specs:
        if (read_only and spec.destructive) or (offline and (spec.destructive or spec.touches_hosts)):
            plan.removed.append(spec)
            if spec.id in wanted:
                plan.warnings.append(f"keys.{spec.id}: ignored, read-only mode removes this action")
        else:
            live.append(spec)
    taken: dict[str, str] = {}
    # remapped actions claim their keys first, then defaults fill what is left
    for spec in live:
        key = wanted.get(spec.id)
        if key is None:
            continue
        if key in taken:
            plan.warnings.append(f"keys.{spec.id} = {key_display(key)!r}: already used by {taken[key]}; "
                                 f"keeping {key_display(spec.key)}")
            del wanted[spec.id]
            continue
        taken[key] = spec.id
    final: dict[str, str | None] = {}
    for spec in live:
        if spec.id in wanted:
            final[spec.id] = wanted[spec.id]
            continue
        owner = taken.get(spec.key)
        if owner is not None and owner != spec.id:
            plan.warnings.append(f"{spec.id}: its key {key_display(spec.key)} is now {owner}'s "
                                 f"(keys.{owner}); give it one with keys.{spec.id} = \"...\"")
            final[spec.id] = None
            continue
        taken[spec.key] = spec.id
        final[spec.id] = spec.key
    plan.bound = [BoundAction(spec, final[spec.id]) for spec in live]
    return plan


def registry_bindings(registry: Iterable[ActionSpec] = REGISTRY) -> list[Binding]:
    """One Textual binding per action at its default key, its id the action's id (what a keymap
    names), its action :attr:`ActionSpec.action` (``flow('<id>')`` for a flow). Read-only removal is
    :meth:`ConsoleApp.check_action`'s: a removed action is hidden and never runs."""
    return [Binding(spec.key, spec.action, spec.description, show=spec.show, id=spec.id, tooltip=spec.help,
                    priority=spec.id == "command_palette") for spec in registry]


def keymap(plan: KeyPlan) -> dict[str, str]:
    """The plan's remapped keys as a Textual keymap (binding id -> key)."""
    return {b.spec.id: b.key for b in plan.bound if b.key is not None and b.key != b.spec.key}
