"""What a redraw skips for hosts whose samples did not change (1,000 hosts redrawn each second):
the history records a sample once, a fleet row works out utilization/power/tokens once per new
sample, and both follow a new sample at once. The fleet rows' cache belongs to its fleet view
(no module-wide state) and forgets the hosts that left the fleet."""

from __future__ import annotations

import dataclasses

from fleet_sample import fleet_config, fleet_statuses
from sample_data import FROZEN_NOW, sample_statuses
from specconsole.base.freshness import Staleness
from specconsole.base.samples import Sample
from specconsole.formats.nvidia_smi import GpuReading, GpuSnapshot, GpuState
from specconsole.monitor import HostStatus
from specconsole.ui.fleet.fleet_rows import DerivedCache, fleet_row
from specconsole.ui.fleet.fleet_view import FleetView
from specconsole.ui.panes.history import History
from specconsole.ui.panes.pane_base import View
from specconsole.ui.style import formatting as fmt


def _with_gpus(status: HostStatus, utils: list[float], at: float) -> HostStatus:
    gpus = tuple(GpuReading(index=i, uuid=None, name=None, utilization_pct=u, power_draw_w=100.0)
                 for i, u in enumerate(utils))
    return dataclasses.replace(status, gpu=Sample(GpuSnapshot(GpuState.OK, gpus, at=at), at, 1.0))


def test_history_records_each_sample_once_and_every_new_one() -> None:
    s = _with_gpus(sample_statuses()[0], [10.0, 30.0], FROZEN_NOW)
    history = History()
    for _ in range(5):  # five redraws of the same sample: one point
        history.record(s)
    assert history.series(s.name, "util").values() == [20.0]
    s2 = _with_gpus(s, [50.0, 70.0], FROZEN_NOW + 1)
    history.record(s2)
    history.record(s2)
    assert history.series(s.name, "util").values() == [20.0, 60.0]


def test_fleet_row_follows_a_new_sample_and_its_age_every_redraw() -> None:
    s = _with_gpus(sample_statuses()[0], [10.0, 30.0], FROZEN_NOW)
    staleness, derived = Staleness(), DerivedCache()
    first = fleet_row(s, None, FROZEN_NOW + 0.2, staleness, derived)
    again = fleet_row(s, None, FROZEN_NOW + 0.7, staleness, derived)
    assert first.util == again.util == 20.0 and first.power == again.power == 200.0
    assert first.state_text != again.state_text  # the age moved: "0.2s" -> "0.7s"
    s2 = _with_gpus(s, [90.0, 90.0, 90.0], FROZEN_NOW + 1)
    row = fleet_row(s2, None, FROZEN_NOW + 1.1, staleness, derived)
    assert row.util == 90.0 and row.power == 300.0


def test_a_hosts_figures_are_worked_out_once_per_sample() -> None:
    s = _with_gpus(sample_statuses()[0], [10.0, 30.0], FROZEN_NOW)
    derived = DerivedCache()
    figures = derived.figures(s)
    assert figures[:2] == (20.0, 200.0)
    # the same samples (a later redraw, a copy of the status): the very tuple, not worked out again
    assert derived.figures(s) is figures
    assert derived.figures(dataclasses.replace(s, connection=s.connection)) is figures
    # equal values in a new sample object are a new sample: worked out again
    again = _with_gpus(s, [10.0, 30.0], FROZEN_NOW)
    assert derived.figures(again) == figures and derived.figures(again) is not figures


def _view() -> View:
    return View(now=FROZEN_NOW + 0.5, palette=fmt.Palette(), history=History())


def test_each_fleet_view_keeps_its_own_figures_and_forgets_hosts_that_left() -> None:
    config = fleet_config(6)
    statuses = fleet_statuses(6, FROZEN_NOW)
    one, other = FleetView(config), FleetView(config)
    assert one.derived is not other.derived
    one.rows_for(statuses, _view())
    assert len(one.derived) == 6 and len(other.derived) == 0  # nothing shared between views
    other.rows_for(statuses[:2], _view())
    assert len(one.derived) == 6 and len(other.derived) == 2
    # two hosts left the first view's fleet: their entries go, the others' stay
    left = {statuses[1].name, statuses[4].name}
    rows = one.rows_for([s for s in statuses if s.name not in left], _view())
    assert len(rows) == 4 and len(one.derived) == 4
    assert not any(name in one.derived for name in left)
    assert all(s.name in one.derived for s in statuses if s.name not in left)
