"""A/B, in one process: the console's CroppingCompositor against Textual's stock Compositor.

The console runs headless (``App.run_test``) on tests/sample_data.py's two realistic hosts (and,
``fleet50``, tests/fleet_sample.py's 50-host fleet view), with a fake clock and new samples every
"second": GPU utilization and power, tokens/s, the training step and log lines move, so every
refresh changes what a live console changes (the badge ages, a few table cells, the plots, the
summary bar). Each refresh is ``refresh_panes()`` followed by the screen's update (the frame);
the headless driver writes nothing, so the frame's text is made as a terminal would get it
(``CompositorUpdate.render_segments``) and its bytes counted.

Per variant and round (the variants alternate, ``--rounds`` times, a fresh app each time):

- CPU ms per refresh: ``time.process_time`` over ``--refreshes`` refreshes (the panes' work,
  the compositor, the escape codes; the loop's idle cost is in it for both);
- render ms per refresh: only the compositor's ``render_update`` plus ``render_segments``
  (``time.thread_time``: CPU of the loop's thread);
- KiB per minute written to the terminal at one refresh a second.

The medians per variant are printed, and the ratio cropping / stock: for CPU the median of the
rounds' ratios (each round's two runs are back to back, so machine drift cancels), its range
beside it; then the median over all cases, against the decision threshold (15 %).

The cropping compositor was deleted on these figures (issue 20; ``--rounds 9 --refreshes 40``,
Textual 8.2, a shared 2-core machine; CPU ms per refresh, cropping / stock):

    two hosts 200x50   7.19 / 9.53    saved 25 %  (rounds 0.58..1.12)   bytes -3 %
    two hosts  80x24   7.84 / 8.64    saved  8 %  (rounds 0.73..1.28)   bytes -4 %
    fleet50   200x50  14.53 / 15.57   saved  3 %  (rounds 0.87..1.16)   bytes -2 %
    fleet50    80x24   8.62 / 8.48    saved  9 %  (rounds 0.62..1.58)   bytes -3 %
    all cases: median saving 8 % < 15 %: deleted. At most ~2 ms per refresh (0.14 CPU-s a minute
    at 1 Hz) now that the line-based widgets repaint only changed rows; the bytes saved were
    cursor moves that wrote nothing.

Issue 34 brought it back (``specconsole.ui.console.cropping``): those figures were taken while a
hidden TextBlock (the host pane's GPU summary on a tall screen) laid the whole screen out at every
refresh, a full render for both variants. Without that, ``--sizes 200x50 --scenarios two --rounds 5
--refreshes 30`` measured cropping 11.97 / stock 16.93 CPU ms per refresh (render 6.47 / 10.23 ms):
25 % saved; after ConsoleScreen (the console's own screen, its compositor swapped per variant),
``--rounds 6 --refreshes 30``: 9.44 / 12.47 (render 4.28 / 6.38), 19 % saved.
The compositor is read from this tree, or from git with ``--cropping-from REV``
(``src/specconsole/ui/console_screen.py`` at that revision, as it was before its deletion).

Usage: .venv/bin/python bench/compositor_ab.py [--sizes 200x50,80x24] [--scenarios two,fleet50]
       [--rounds 5] [--refreshes 40] [--cropping-from REV]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # sample_data, fleet_sample

from textual._compositor import Compositor, CompositorUpdate
from textual.screen import Screen

import fleet_sample as fs
import sample_data as sd
from specconsole.base.samples import Sample
from specconsole.config import Config
from specconsole.monitor import HostStatus
from specconsole.ui.console.app import ConsoleApp
from specconsole.ui.console.provider import FixedStatuses
from specconsole.ui.style.themes import BUNDLED_DIR, load_themes

ROOT = Path(__file__).resolve().parents[1]
#: the decision rule (issue 20): the cropping compositor stays if it saves this share of the CPU
THRESHOLD = 0.15
MODULE = "src/specconsole/ui/console_screen.py"


def cropping_compositor(rev: str | None) -> type[Compositor]:
    """CroppingCompositor: from this tree, or from git at ``rev`` (its file before issue 20 deleted it)."""
    if rev is None:
        from specconsole.ui.console.cropping import CroppingCompositor

        return CroppingCompositor
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{MODULE}"], capture_output=True, text=True,
                            check=True).stdout
    spec = importlib.util.spec_from_loader("bench_console_screen", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    exec(compile(source, f"{rev}:{MODULE}", "exec"), module.__dict__)
    print(f"(CroppingCompositor from git: {rev})")
    return module.CroppingCompositor  # type: ignore[no-any-return]


class Clock:
    def __init__(self) -> None:
        self.now = sd.FROZEN_NOW

    def __call__(self) -> float:
        return self.now


def moved(status: HostStatus, i: int, now: float) -> HostStatus:
    """``status`` one "second" later: fresh samples with values that move as a live host's do."""
    gpu = status.gpu
    if gpu is not None:
        snap = gpu.value
        gpus = tuple(dataclasses.replace(r, utilization_pct=float((r.utilization_pct or 0) + (i * 7 + r.index) % 5),
                                         power_draw_w=(r.power_draw_w or 0) + (i * 13 + r.index) % 23)
                     for r in snap.gpus)
        gpu = Sample(dataclasses.replace(snap, gpus=gpus, at=now - 0.4), at=now - 0.4, interval=1.0)
    training = status.training
    if training is not None:
        p = training.value
        step = (p.step or 0) + i
        line = f'{{"step": {step}, "epoch": 0.3741, "loss": 0.59{i % 10}, "tokens_per_s": {48000 + i % 500}}}'
        p = dataclasses.replace(p, step=step, tokens_per_s=48000.0 + (i * 37) % 900, last_line_at=now - 0.9,
                                recent_lines=(*p.recent_lines[1:], line))
        training = Sample(p, at=now - 0.4, interval=1.0)
    sglang = status.sglang
    if sglang is not None:
        v = sglang.value
        m = v.metrics
        if m is not None:
            m = dataclasses.replace(m, tokens_per_s=1800.0 + (i * 53) % 200, running_reqs=4 + i % 5,
                                    spec_accept_length=6.2 + (i % 7) / 20)
        sglang = Sample(dataclasses.replace(v, metrics=m, at=now - 0.7), at=now - 0.7, interval=1.0)
    conn = dataclasses.replace(status.connection, last_ok=now - 0.3)
    return dataclasses.replace(status, connection=conn, gpu=gpu, training=training, sglang=sglang)


@dataclasses.dataclass
class Figures:
    cpu_ms: float  # per refresh, everything
    render_ms: float  # per refresh, compositor + escape codes
    kib_per_min: float  # at one refresh a second


class MeasuredApp(ConsoleApp):
    """The console, its frames turned into terminal text (as a real driver's) and counted."""

    CSS_PATH = str(Path(sys.modules[ConsoleApp.__module__].__file__ or "").parent / "console.tcss")

    def __init__(self, *args: Any, compositor: type[Compositor], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.compositor = compositor
        self.bytes_out = 0
        self.render_s = 0.0
        self.frames = 0
        self.frame_out = asyncio.Event()

    def get_default_screen(self) -> Screen[Any]:
        screen = super().get_default_screen()  # the console's own screen (its panes), with the variant's compositor
        screen._compositor = self.compositor()
        return screen

    def timed_compositor(self) -> None:
        compositor = self.screen._compositor
        original = compositor.render_update

        def render_update(*args: Any, **kwargs: Any) -> Any:
            t0 = time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                self.render_s += time.thread_time() - t0

        compositor.render_update = render_update  # type: ignore[method-assign]

    def _display(self, screen: Screen[Any], renderable: Any) -> None:
        if isinstance(renderable, CompositorUpdate) and screen is self.screen:
            t0 = time.thread_time()
            self.bytes_out += len(renderable.render_segments(self.console).encode())
            self.render_s += time.thread_time() - t0
            self.frames += 1
            self.frame_out.set()
        super()._display(screen, renderable)


async def measure(config: Config, statuses: list[HostStatus], size: tuple[int, int], *,
                  compositor: type[Compositor], refreshes: int, warmup: int = 5) -> Figures:
    clock = Clock()
    fleet = FixedStatuses(statuses, sd.sample_events(clock.now))
    app = MeasuredApp(config, fleet=fleet, clock=clock, themes=load_themes([BUNDLED_DIR]), compositor=compositor)
    sd.seed_history(app.history, clock.now)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        assert type(app.screen._compositor) is compositor, type(app.screen._compositor)
        app.timed_compositor()

        async def one(i: int) -> None:
            clock.now += 1.0
            fleet._statuses = [moved(s, i, clock.now) for s in statuses]
            app.frame_out.clear()
            app.refresh_panes()
            await asyncio.wait_for(app.frame_out.wait(), 2.0)  # the frame with this refresh is out
            await asyncio.sleep(0.05)  # and what it set off (call_after_refresh, a second frame)

        for i in range(warmup):
            await one(i)
        app.bytes_out, app.render_s = 0, 0.0
        c0 = time.process_time()
        for i in range(warmup, warmup + refreshes):
            await one(i)
        cpu = time.process_time() - c0
        figures = Figures(1000 * cpu / refreshes, 1000 * app.render_s / refreshes,
                          app.bytes_out / refreshes * 60 / 1024)
        await pilot.press("q")
    return figures


def scenario(name: str, state: str) -> tuple[Config, list[HostStatus]]:
    if name == "two":
        return sd.sample_config(state), sd.sample_statuses()
    if name.startswith("fleet"):
        n = int(name[5:])
        return fs.fleet_config(n, state), fs.fleet_statuses(n, stale=range(3, n, 17), down=range(5, n, 23))
    raise SystemExit(f"unknown scenario {name!r} (two, fleetN)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="200x50,80x24")
    ap.add_argument("--scenarios", default="two,fleet50")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--refreshes", type=int, default=40)
    ap.add_argument("--cropping-from", metavar="REV", help="read CroppingCompositor from this git revision")
    args = ap.parse_args()
    variants = {False: cropping_compositor(args.cropping_from), True: Compositor}
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
    med: Callable[[list[float]], float] = statistics.median
    print(f"{'scenario':<9} {'size':>7}  {'variant':<8} {'CPU ms/refresh':>15} {'render ms':>10} {'KiB/min':>9}")
    ratios: list[float] = []
    with tempfile.TemporaryDirectory() as state:
        for name in args.scenarios.split(","):
            config, statuses = scenario(name, state)
            for w, h in sizes:
                got: dict[bool, list[Figures]] = {False: [], True: []}
                for r in range(args.rounds):  # alternate, the first variant swapping each round
                    for stock in ((False, True) if r % 2 == 0 else (True, False)):
                        got[stock].append(asyncio.run(measure(config, statuses, (w, h), compositor=variants[stock],
                                                              refreshes=args.refreshes)))
                rows = {}
                for stock, label in ((False, "cropping"), (True, "stock")):
                    f = got[stock]
                    rows[stock] = (med([x.cpu_ms for x in f]), med([x.render_ms for x in f]),
                                   med([x.kib_per_min for x in f]))
                    cpu, render, kib = rows[stock]
                    print(f"{name:<9} {f'{w}x{h}':>7}  {label:<8} {cpu:>15.2f} {render:>10.2f} {kib:>9.1f}")
                # each round's pair ran back to back: their ratio cancels the machine's drift
                paired = sorted(c.cpu_ms / s.cpu_ms for c, s in zip(got[False], got[True], strict=True))
                ratio = med(paired)
                ratios.append(ratio)
                (_, c_ren, c_kib), (_, s_ren, s_kib) = rows[False], rows[True]
                print(f"{name:<9} {f'{w}x{h}':>7}  {'ratio':<8} {ratio:>15.2f} {c_ren / s_ren:>10.2f} "
                      f"{c_kib / s_kib:>9.2f}   (cropping / stock, CPU: median of the rounds' pairs, "
                      f"{paired[0]:.2f}..{paired[-1]:.2f}; CPU saved {100 * (1 - ratio):.0f} %)", flush=True)
    overall = med(ratios)
    print(f"all cases: median CPU ratio {overall:.2f}: the cropping compositor saves {100 * (1 - overall):.0f} % "
          f"of the UI's CPU per refresh ({THRESHOLD:.0%} or more: keep it; less: delete it)")

if __name__ == "__main__":
    main()
