"""The per-host panes' registry: every kind of pane about one host, in the order they are shown.

The app mounts them from here (all hosts, or the one a fleet drill-down shows) and redraws what is
mounted (:class:`~specconsole.ui.panes.pane_base.PerHostPane`).
"""

from __future__ import annotations

from collections.abc import Sequence

from specconsole.config import HostConfig
from specconsole.ui.panes.host_pane import HostPane
from specconsole.ui.panes.pane_base import PerHostPane
from specconsole.ui.panes.serving_pane import ServingPane
from specconsole.ui.panes.training_pane import TrainingPane

#: Every kind of per-host pane, in the order they are shown (within a slot: all hosts' panes of
#: the first kind, then the next kind's). The app mounts them from here and redraws what is mounted.
PER_HOST_PANES: tuple[type[PerHostPane], ...] = (HostPane, ServingPane, TrainingPane)


def per_host_panes(hosts: Sequence[HostConfig]) -> dict[str, list[PerHostPane]]:
    """The per-host panes of ``hosts``, by slot (``hosts``, ``middle``)."""
    slots: dict[str, list[PerHostPane]] = {"hosts": [], "middle": []}
    for kind in PER_HOST_PANES:
        slots[kind.SLOT].extend(kind(h) for h in hosts if kind.wanted(h))
    return slots
