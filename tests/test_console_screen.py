"""The one-widget plot row keeps its colours through a theme change. (The cropping compositor
this file also tested was deleted in issue 20: bench/compositor_ab.py measured it.)"""

from __future__ import annotations

from pathlib import Path

import pytest

import sample_data as sd
from specconsole.ui.console.app import ConsoleApp
from specconsole.ui.widgets.plot_row import PlotRow

pytestmark = pytest.mark.timeout(120)


def frozen_app(tmp_path: Path) -> ConsoleApp:
    return sd.frozen_console(str(tmp_path / "state"))  # type: ignore[no-any-return]


async def test_plot_row_recolours_with_the_theme(tmp_path: Path) -> None:
    app = frozen_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        app.refresh_panes()
        await pilot.pause()
        plot = app.screen.query_one(".util", PlotRow)
        assert plot.values, "the seeded history reaches the plot"
        before = plot.render_line(0)
        bar_before = [s.style for s in before if "█" in s.text or "▁" in s.text]
        themes = [name for name in app.available_themes if name != app.theme]
        app.theme = next(t for t in themes if app.get_theme(t).success != app.get_theme(app.theme).success)
        await pilot.pause()
        after = plot.render_line(0)
        bar_after = [s.style for s in after if "█" in s.text or "▁" in s.text]
        assert bar_before and bar_after and bar_before != bar_after
        assert "".join(s.text for s in before) == "".join(s.text for s in after)
