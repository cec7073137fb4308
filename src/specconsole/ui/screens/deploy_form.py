"""The deploy wizard's form: the settings to change, prefilled so the common case is a few Enters.

* the algorithm is a Select of the choices the host's own ``--help`` lists (discovered when the
  form opens, with a status line while it runs); only the fields that apply to it show
  (:data:`~specconsole.actions.deploy.algorithms.FIELDS_FOR`, which says it once: the window for DFLASH,
  block size and tree budget for DDTREE, steps, top-k and draft tokens for the EAGLE family, draft
  tokens for NGRAM);
* every field is checked in place: a bad value shows its error beside the field and the form
  stays open; Enter moves to the next field (on the last one, to the Plan button);
* Plan runs the preflight (``check``) while the form stays open: a refusal is shown beside the
  field it is about, success closes the form with the :class:`DeployPlan`.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Button, Input, Label, Select, Static

from specconsole.actions.deploy.algorithms import FIELDS_FOR, NO_DRAFT_MODEL, SPECIFIC
from specconsole.actions.deploy.preflight import DeployPlan, DeployRefused, DeployRequest
from specconsole.base.errors import SpecConsoleError
from specconsole.base.samples import Sample
from specconsole.config import HostConfig
from specconsole.sources.sglang import SglangSnapshot
from specconsole.ui.style.formatting import escape

#: The window the wizard proposes when the deployment has none: the usual DFlash block size.
DEFAULT_WINDOW = "16"
#: Offered when the host's --help could not be read (the console's own two flows).
FALLBACK_ALGORITHMS = ("DFLASH", "NEXTN")
#: The help line the form shows under its hint for an algorithm whose numbers need saying
#: (DDTREE: what the block size and the tree budget count, so "up to 16 draft tokens" maps onto
#: them; the rules are sgl-project/sglang PR #29907's: the budget counts the draft tree's nodes
#: verified per step, >= 1, default block size - 1 (a chain, "spine mode"); a larger one branches).
HELP_FOR: dict[str, str] = {
    "DDTREE": "DDTREE · block size: the DFlash draft's block, the most tokens a step can accept (empty: the "
              "draft's config.json). Tree budget: the most draft tokens a step verifies. 'Up to 16' → block "
              "size 16, budget 16: a "
              "chain holds block size - 1 = 15, so 16 branches into a tree (full-tree mode: the plan adds "
              "triton attention); empty budget: block size - 1, one chain.",
}

Discover = Callable[[], Awaitable[list[str]]]
Check = Callable[[DeployRequest], Awaitable[DeployPlan]]


def prefill(cfg: HostConfig, sglang: Sample[SglangSnapshot] | None) -> dict[str, str]:
    """Form values from the config and what the server reports now."""
    info = sglang.value.info if sglang is not None else None
    window = info.draft_window if info is not None else None
    budget = info.tree_budget if info is not None else None
    draft = (cfg.sglang.draft_model_path if cfg.sglang else None) or (info.draft_model_path if info else None)
    running = info.algorithm if info is not None else None
    return {"algorithm": running if running in ("DFLASH", "DDTREE") else "DFLASH",
            "draft_window": str(window) if window else DEFAULT_WINDOW,
            "block_size": "", "tree_budget": str(budget) if budget else "", "draft_model": draft or ""}


def algorithm_choices(help_text: str) -> list[str]:
    """The algorithm names ``--help`` lists: ``{A,B}`` choices or a ``Builtins: A, B.`` list."""
    from specconsole.sglang.flags import SglangCli

    return SglangCli.from_help(help_text).algorithms()


class DeployForm(ModalScreen[DeployPlan | None]):
    """Algorithm, draft window, block size, draft model; Plan checks and plans, Escape cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel", show=False)]

    FIELDS: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("algorithm", "Speculative algorithm", ""),
        ("draft_window", "DFLASH draft window", ">= the block size"),
        ("block_size", "Block size", "empty: the draft model's config.json"),
        ("tree_budget", "DDTree tree budget", "empty: block size - 1 (a chain)"),
        ("num_steps", "Draft steps", "empty (all three): SGLang chooses"),
        ("eagle_topk", "Top-k per step", "needs draft steps"),
        ("draft_tokens", "Draft tokens", "EAGLE family: needs draft steps"),
        ("draft_model", "Draft model path", "on the host; empty: keep / from the config"),
    )

    def __init__(self, values: dict[str, str], *, discover: Discover | None = None,
                 check: Check | None = None, draft_model: str | None = None) -> None:
        """``draft_model``: open with this draft model (e.g. a training checkpoint) instead of
        ``values["draft_model"]``."""
        super().__init__(id="deploy-form")
        self.values = dict(values) if draft_model is None else {**values, "draft_model": draft_model}
        self.discover = discover
        self.check = check
        self.busy = False

    def compose(self) -> ComposeResult:
        algo = self.values.get("algorithm") or "DFLASH"
        with Vertical(id="deploy-box", classes="dialog"):
            yield Static("[b]Deploy: change the SGLang speculative settings[/]", classes="dialog-title")
            with VerticalScroll(id="deploy-fields"):
                yield Static("Nothing changes until you confirm the plan. Enter: next field.",
                             classes="dialog-hint")
                yield Static(escape(HELP_FOR.get(algo.upper(), "")), id="deploy-help", classes="dialog-hint")
                for key, label, hint in self.FIELDS:
                    with Horizontal(classes="form-row", id=f"row-{key}"):
                        yield Label(label, classes="form-label")
                        if key == "algorithm":
                            yield Select([(algo, algo)], value=algo, allow_blank=False, id="deploy-algorithm",
                                         classes="form-input")
                        else:
                            yield Input(self.values.get(key, ""), placeholder=hint, id=f"deploy-{key}",
                                        classes="form-input")
                    yield Static("", id=f"error-{key}", classes="form-error")
            yield Static("", id="deploy-status", classes="form-status")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Cancel", id="cancel", variant="primary", compact=True)
                yield Button("Plan", id="plan", variant="success", compact=True)

    def on_mount(self) -> None:
        for key, _, _ in self.FIELDS:
            self.query_one(f"#error-{key}").display = False
        self.show_fields()
        self._order()[1].focus()
        if self.discover is not None:
            self._status("asking the host's SGLang which algorithms it has (--help)…")
            self.run_worker(self._discover(), group="discover", exit_on_error=False)

    async def _discover(self) -> None:
        assert self.discover is not None
        try:
            found = await self.discover()
            problem = "" if found else "its --help lists no choices"
        except Exception as err:  # shown in the form; the flow's steps have the details
            found, problem = [], str(err).splitlines()[0] if str(err) else type(err).__name__
        current = self.query_one("#deploy-algorithm", Select).value
        choices = found or [*FALLBACK_ALGORITHMS]
        if isinstance(current, str) and current not in choices:
            choices.append(current)
        select = self.query_one("#deploy-algorithm", Select)
        with select.prevent(Select.Changed):  # not the operator's choice: the focus stays where it is
            select.set_options([(c, c) for c in choices])
            select.value = current if isinstance(current, str) else choices[0]
        if problem:
            self._status(f"algorithms: {escape(problem)}; offering {', '.join(choices)}", error=True)
        else:
            self._status(f"{len(found)} algorithms from the host's --help")

    # -- fields ---------------------------------------------------------------------------
    def applies(self, key: str) -> bool:
        """Whether field ``key`` applies to the algorithm chosen now."""
        algo = self.value("algorithm").upper()
        if key == "draft_model":
            return algo not in NO_DRAFT_MODEL
        return key not in SPECIFIC or key in FIELDS_FOR.get(algo, ())

    def show_fields(self) -> None:
        """Show the fields of the chosen algorithm only; a hidden field's error goes with it."""
        for key in (*SPECIFIC, "draft_model"):
            shown = self.applies(key)
            self.query_one(f"#row-{key}").display = shown
            if not shown:
                self.set_error(key, "")
        text = HELP_FOR.get(self.value("algorithm").upper(), "")
        help_line = self.query_one("#deploy-help", Static)
        help_line.update(escape(text))
        help_line.display = bool(text)

    def _status(self, text: str, *, error: bool = False) -> None:
        status = self.query_one("#deploy-status", Static)
        status.update(text)
        status.set_class(error, "-error")

    def set_error(self, key: str | None, message: str) -> None:
        """Show ``message`` beside field ``key`` (None: on the status line); empty clears it."""
        if key is None:
            self._status(escape(message), error=bool(message))
            return
        err = self.query_one(f"#error-{key}", Static)
        err.update(f"✗ {escape(message)}" if message else "")
        err.display = bool(message)
        self.query_one(f"#deploy-{key}").set_class(bool(message), "-invalid")

    def value(self, key: str) -> str:
        if key == "algorithm":
            v = self.query_one("#deploy-algorithm", Select).value
            return v if isinstance(v, str) else ""
        return self.query_one(f"#deploy-{key}", Input).value.strip()

    def validate_field(self, key: str) -> str:
        """The error for one field ('' when it is fine)."""
        v = self.value(key)
        if not self.applies(key):
            return ""
        if key in SPECIFIC and v:
            if not re.fullmatch(r"\+?\d+", v):
                return f"a whole number, got {v!r}"
            if int(v) <= 0:
                return "must be positive (SGLang refuses 0)"
        if key == "draft_window":
            window, block = self.value("draft_window"), self.value("block_size")
            if window.isdigit() and block.isdigit() and int(window) < int(block):
                return f"must be >= the block size {block} (SGLang's DFLASH constraint)"
        if key == "draft_model" and v and not v.startswith("/"):
            return "an absolute path on the host (starts with /)"
        return ""

    def validate_all(self) -> bool:
        ok = True
        for key, _, _ in self.FIELDS:
            problem = self.validate_field(key)
            self.set_error(key, problem)
            ok = ok and not problem
        return ok

    def request(self) -> DeployRequest:
        v = {key: self.value(key) if self.applies(key) else "" for key, _, _ in self.FIELDS}
        return DeployRequest(algorithm=v["algorithm"] or None, draft_window=v["draft_window"] or None,
                             block_size=v["block_size"] or None, tree_budget=v["tree_budget"] or None,
                             draft_model=v["draft_model"] or None, num_steps=v["num_steps"] or None,
                             eagle_topk=v["eagle_topk"] or None, draft_tokens=v["draft_tokens"] or None)

    def _order(self) -> list[Widget]:
        return [self.query_one(f"#deploy-{key}") for key, _, _ in self.FIELDS if self.applies(key)]

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter: check this field; fine -> the next field (after the last: the Plan button)."""
        event.stop()
        key = str(event.input.id).removeprefix("deploy-")
        problem = self.validate_field(key)
        self.set_error(key, problem)
        if problem:
            return
        order = self._order()
        index = order.index(event.input)
        (order[index + 1] if index + 1 < len(order) else self.query_one("#plan", Button)).focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        key = str(event.input.id).removeprefix("deploy-")
        if self.query_one(f"#error-{key}").display:  # re-check a field shown as wrong as it is fixed
            self.set_error(key, self.validate_field(key))

    def on_select_changed(self, event: Select.Changed) -> None:
        """An algorithm picked (Enter in the list): its fields show; on to the first of them."""
        event.stop()
        self.set_error("algorithm", "")
        self.show_fields()
        if self.is_mounted and self.focused is event.select:
            self._order()[1].focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id != "plan":
            self.dismiss(None)
            return
        if self.busy or not self.validate_all():
            return
        if self.check is None:
            self.dismiss(None)
            return
        self.busy = True
        self._status("preflight: reading the unit, the draft model and the GPUs… (steps below)")
        self.run_worker(self._plan(self.request()), group="plan", exit_on_error=False)

    async def _plan(self, request: DeployRequest) -> None:
        assert self.check is not None
        try:
            plan = await self.check(request)
        except SpecConsoleError as err:
            message = str(err)
            field = err.field if isinstance(err, DeployRefused) else None
            key = field if field is not None and self.applies(field) else None  # a hidden field: the status line
            self.set_error(key, message)
            if key is not None:
                self._status("refused: fix the field marked ✗ (nothing on the host was changed)", error=True)
                self.query_one(f"#deploy-{key}").focus()
            return
        except Exception as err:
            self.set_error(None, f"preflight failed: {err}")
            return
        finally:
            self.busy = False
        self.dismiss(plan)

    def action_cancel(self) -> None:
        self.dismiss(None)
