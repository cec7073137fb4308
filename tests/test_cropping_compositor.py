"""The console's cropping compositor (ui/console/cropping.py) sends the terminal exactly what
Textual's own would, for less work."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from textual._compositor import Compositor
from textual.geometry import Region
from textual.widget import Widget

import sample_data as sd
from specconsole.ui.console.app import ConsoleApp
from specconsole.ui.console.cropping import CroppingCompositor
from specconsole.ui.fleet.summary_bar import SummaryBar
from specconsole.ui.panes.host_pane import HostPane
from specconsole.ui.panes.training_pane import TrainingPane
from specconsole.ui.widgets.plot_row import PlotRow

pytestmark = pytest.mark.timeout(120)


def frozen_app(tmp_path: Path) -> ConsoleApp:
    return sd.frozen_console(str(tmp_path / "state"))  # type: ignore[no-any-return]


#: A cursor move that writes nothing before the next move, line end or the end: Textual moves to a
#: chop that starts exactly at a span's end and then writes none of it (``x > x2`` where its
#: crop test is exclusive), so its output has such a move where a container behind was rendered.
_NO_OP_MOVE = re.compile(r"\x1b\[\d+;\d+H(?=\x1b\[\d+;\d+H|\r?\n|$)")


def _shown(text: str) -> str:
    """What the terminal shows for ``text``: the same, less the cursor moves that write nothing."""
    return _NO_OP_MOVE.sub("", text)


def _update(compositor: Compositor, regions: list[Region], plain: bool, console: object,
            rendered: list[Widget] | None = None) -> tuple[str, int]:
    """One partial update of ``regions``: the text for the terminal and how many widgets rendered
    (those widgets are appended to ``rendered``)."""
    rendered = [] if rendered is None else rendered
    for widget in compositor.visible_widgets:
        original = widget.render_lines

        def counting(crop: Region, _w: Widget = widget, _orig: object = original) -> object:
            rendered.append(_w)
            return _orig(crop)  # type: ignore[operator]

        widget.render_lines = counting  # type: ignore[method-assign]
    try:
        compositor._dirty_regions.update(regions)
        update = (Compositor.render_partial_update(compositor) if plain
                  else compositor.render_partial_update())
    finally:
        for widget in compositor.visible_widgets:
            del widget.render_lines
    assert update is not None
    return update.render_segments(console), len(rendered)  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 50)])
async def test_partial_updates_match_textuals_own_compositor(tmp_path: Path, size: tuple[int, int]) -> None:
    app = frozen_app(tmp_path)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        app.refresh_panes()
        await pilot.pause()
        compositor = app.screen._compositor
        assert isinstance(compositor, CroppingCompositor)
        plots = list(app.screen.query(PlotRow))
        summary = app.screen.query_one(SummaryBar)
        training = app.screen.query_one(TrainingPane)
        host = app.screen.query_one(HostPane)
        cases = [
            [summary.region],  # one line at the top
            [summary.region, plots[-1].region],  # top and bottom: Textual's box spans both
            [p.region for p in plots] + [Region(training.region.x + 3, training.region.y + 2, 5, 3)],
            [Region(0, 0, size[0], size[1])],  # everything
            [host.region],  # a whole pane, its border included
            [Region(host.region.x, host.region.y + 1, 2, 3)],  # its border and padding only
            [Region(host.region.x + 1, host.region.y + 2, 3, 2)],  # its padding (1 column) and a row
            [Region(host.region.right - 2, host.region.y + 2, 4, 2)],  # its right edge and past it
            [Region(plots[0].region.right - 3, plots[0].region.y, 8, 3)],  # a plot's end and past it
        ]
        screen = Region(0, 0, *size)
        for regions in cases:
            regions = [r.intersection(screen) for r in regions if r.intersection(screen)]
            if not regions:  # below the fold at this size
                continue
            ours, ours_rendered = _update(compositor, regions, plain=False, console=app.console)
            theirs, theirs_rendered = _update(compositor, regions, plain=True, console=app.console)
            assert _shown(ours) == _shown(theirs)
            assert ours_rendered <= theirs_rendered
        # a one-line change renders that line's widget only, not the screen, body and pane behind
        # it (Textual's whole-clip rule renders all of them)
        line = [plots[0].region.intersection(screen)]
        _, ours_rendered = _update(compositor, line, plain=False, console=app.console)
        _, theirs_rendered = _update(compositor, line, plain=True, console=app.console)
        assert ours_rendered == 1 < theirs_rendered
        # a row across two panes side by side: together they hide the containers behind them
        hosts = list(app.screen.query(HostPane))
        left, right = hosts[0].region, hosts[-1].region
        if left.y == right.y and left.right == right.x:
            across = [Region(left.x + 4, left.y + 3, right.right - left.x - 8, 1)]
            rendered: list[Widget] = []
            ours, _ = _update(compositor, across, plain=False, console=app.console, rendered=rendered)
            theirs, _ = _update(compositor, across, plain=True, console=app.console)
            assert _shown(ours) == _shown(theirs)
            assert {w for w in rendered if w.children} <= set(hosts)  # no screen, body or row behind
