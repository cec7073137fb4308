"""What a redraw skips for hosts whose samples did not change (1,000 hosts redrawn each second):
the history records a sample once, a fleet row works out utilization/power/tokens once per new
sample, and both follow a new sample at once."""

from __future__ import annotations

import dataclasses

from sample_data import FROZEN_NOW, sample_statuses
from specconsole.formats.nvidia_smi import GpuReading, GpuSnapshot, GpuState
from specconsole.freshness import Staleness
from specconsole.monitor import HostStatus
from specconsole.samples import Sample
from specconsole.ui.fleet_rows import fleet_row
from specconsole.ui.history import History


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
    staleness = Staleness()
    first = fleet_row(s, None, FROZEN_NOW + 0.2, staleness)
    again = fleet_row(s, None, FROZEN_NOW + 0.7, staleness)
    assert first.util == again.util == 20.0 and first.power == again.power == 200.0
    assert first.state_text != again.state_text  # the age moved: "0.2s" -> "0.7s"
    s2 = _with_gpus(s, [90.0, 90.0, 90.0], FROZEN_NOW + 1)
    row = fleet_row(s2, None, FROZEN_NOW + 1.1, staleness)
    assert row.util == 90.0 and row.power == 300.0
