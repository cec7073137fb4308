"""What every pane shares: the :class:`View` a redraw passes, and :class:`PerHostPane`, the base of
the panes about one host (their registry is :data:`specconsole.ui.panes.per_host.PER_HOST_PANES`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeVar

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widget import Widget

from specconsole.base.freshness import Staleness
from specconsole.config import HostConfig
from specconsole.monitor import HostStatus
from specconsole.ui.panes.history import History
from specconsole.ui.style import formatting as fmt
from specconsole.ui.style.formatting import escape
from specconsole.ui.widgets.text_block import TextBlock


@dataclass(frozen=True)
class View:
    """What every pane needs besides its status: the clock, the colours and the histories."""

    now: float
    palette: fmt.Palette
    history: History
    compact: bool = False
    #: each value's stale state between redraws (hysteresis: :mod:`specconsole.base.freshness`)
    freshness: Staleness = field(default_factory=Staleness)


W = TypeVar("W", bound=Widget)


def part(pane: Widget, selector: str, widget_type: type[W]) -> W:
    """``pane.query_one(selector)``, remembered: a pane's parts never change after compose."""
    cache: dict[str, Widget] = pane.__dict__.setdefault("_parts", {})
    found = cache.get(selector)
    if found is None:
        found = cache[selector] = pane.query_one(selector, widget_type)
    return found  # type: ignore[return-value]


def set_classes(widget: Any, **flags: bool) -> None:
    """Toggle ``-name`` classes; only real changes reach Textual (each one restyles the subtree)."""
    for name, on in flags.items():
        cls = f"-{name.replace('_', '-')}"
        if widget.has_class(cls) != on:
            widget.set_class(on, cls)


# ------------------------------------------------------------------------------ per-host panes

def dom_id(name: str) -> str:
    """A host name as it can appear in a DOM id."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


class PerHostPane(Vertical):
    """A pane about one host: titled, a body line until the first sample, redrawn by ``show``.

    A subclass names its ``KIND`` (its DOM id is ``<KIND>-<host>``, its CSS class ``<KIND>-pane``),
    its ``SLOT`` (``hosts``: the top row; ``middle``: the column beside the eval pane), which hosts get one
    (:meth:`wanted`), its titles, the parts under the body (:meth:`compose_parts`) and what a status
    looks like (:meth:`draw`); it goes into :data:`PER_HOST_PANES`.
    """

    KIND: ClassVar[str] = ""
    SLOT: ClassVar[Literal["hosts", "middle"]] = "middle"
    #: the body's text until the first sample, and its CSS class
    WAITING: ClassVar[str] = ""
    BODY: ClassVar[str] = "body"

    def __init__(self, host: HostConfig, **kwargs: Any) -> None:
        super().__init__(id=f"{self.KIND}-{dom_id(host.name)}", classes=f"pane {self.KIND}-pane", **kwargs)
        self.host = host

    @classmethod
    def wanted(cls, host: HostConfig) -> bool:
        """Whether ``host`` gets this pane."""
        return True

    def titles(self) -> tuple[str, str | None]:
        """The border's title and subtitle (markup)."""
        return escape(self.host.name), None

    def compose(self) -> ComposeResult:
        self.border_title, self.border_subtitle = self.titles()
        yield TextBlock(self.WAITING, classes=self.BODY)
        yield from self.compose_parts()

    def compose_parts(self) -> ComposeResult:
        """The widgets under the body."""
        yield from ()

    @property
    def body(self) -> TextBlock:
        return part(self, f".{self.BODY}", TextBlock)

    def show(self, status: HostStatus | None, view: View) -> None:
        """Redraw from ``status`` (None: the host is not among the statuses; nothing changes)."""
        if status is not None:
            self.draw(status, view)

    def draw(self, status: HostStatus, view: View) -> None:
        raise NotImplementedError

    def show_missing(self, what: str, status: HostStatus, note: str) -> None:
        """The empty state: ``what: note`` (or ``host not reachable``), dimmed, the pane stale."""
        note = "host not reachable" if not status.reachable else note
        self.body.set(f"[$text-muted]{escape(what)}: {note}[/]")
        set_classes(self, stale=True)
