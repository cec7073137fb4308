"""What an action's heartbeat on screen costs the idle console, against the same console without it.

The console runs headless (``App.run_test``, 200x50) on tests/sample_data.py's two hosts with a
fake clock and new samples every "second" (as bench/compositor_ab.py does: the badge ages, GPU
cells, plots, the step counter move). Per "second": one refresh (``refresh_panes``, as the
``refresh_s`` timer does), and, in the ``heartbeat`` variant, a running deploy's two heartbeats
(a deploy step waits for ``/health``; ``steps.heartbeat`` at least every 0.5 s), each through
``steps.audit`` (the events pane, the audit log) into the action view, as a flow emits them.

Per variant and round (alternating, a fresh app each time), over ``--seconds`` fake seconds:

- CPU ms per second: ``time.process_time`` (the loop's thread, everything the app does);
- layouts per second: the screen's full reflows (``Screen._refresh_layout``): a widget that asks
  for a relayout on every update (``Static.update``) lays the whole screen out and renders it;
- frames per second: the compositor's updates.

Usage: .venv/bin/python bench/heartbeat_cost.py [--rounds 5] [--seconds 20] [--size 200x50] [--events 60]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # sample_data
sys.path.insert(0, str(Path(__file__).resolve().parent))  # compositor_ab (its fleet and moved())

from compositor_ab import Clock, FixedStatuses, moved

import sample_data as sd
from specconsole.steps import StepEvent, audit
from specconsole.ui.console.app import ConsoleApp
from specconsole.ui.style.themes import BUNDLED_DIR, load_themes

SETTLE_S = 0.05  # after each refresh or heartbeat: the frame it sets off


async def measure(state: str, size: tuple[int, int], seconds: int, heartbeat: bool, earlier: int = 0,
                  warmup: int = 5) -> tuple[float, float, float]:
    """(CPU ms, layouts, frames) per fake second."""
    clock = Clock()
    statuses = sd.sample_statuses()
    events = sd.sample_events(clock.now)
    for i in range(earlier):
        events.emit(f"earlier event {i}", "serve")
    fleet = FixedStatuses(statuses, events)
    app = ConsoleApp(sd.sample_config(state), fleet=fleet, clock=clock, themes=load_themes([BUNDLED_DIR]))
    sd.seed_history(app.history, clock.now)
    counts = {"layouts": 0, "frames": 0}
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        screen = app.screen
        layout, update = screen._refresh_layout, screen._compositor.render_update

        def counted_layout(*args: Any, **kwargs: Any) -> Any:
            counts["layouts"] += 1
            return layout(*args, **kwargs)

        def counted_update(*args: Any, **kwargs: Any) -> Any:
            counts["frames"] += 1
            return update(*args, **kwargs)

        screen._refresh_layout = counted_layout  # type: ignore[method-assign]
        screen._compositor.render_update = counted_update  # type: ignore[method-assign]
        emit = audit(app.events, also=app.actions.emit)
        start = clock.now
        if heartbeat:
            app.actions.open("deploy", "Deploy to serve", "serve")
            emit(StepEvent("deploy", "step", "restarting sglang.service", step="restart", host="serve",
                           at=clock.now))
            emit(StepEvent("deploy", "command", "systemctl restart sglang.service", step="restart", host="serve",
                           command="systemctl restart sglang.service", at=clock.now))
        await pilot.pause()

        async def one(i: int) -> None:
            clock.now += 1.0
            fleet._statuses = [moved(s, i, clock.now) for s in statuses]
            app.refresh_panes()
            await asyncio.sleep(SETTLE_S)
            if heartbeat:
                for half in (0.0, 0.5):
                    waited = clock.now + half - start
                    emit(StepEvent("deploy", "heartbeat", f"waiting for /health: {waited:.0f}s of 600s; HTTP 503; "
                                   "journal: loading draft model weights", step="restart", host="serve",
                                   elapsed_s=waited, at=clock.now + half))
                    await asyncio.sleep(SETTLE_S)
            else:
                await asyncio.sleep(2 * SETTLE_S)  # the same wall time: the loop's idle cost alike

        for i in range(warmup):
            await one(i)
        counts.update(layouts=0, frames=0)
        c0 = time.process_time()
        for i in range(warmup, warmup + seconds):
            await one(i)
        cpu = time.process_time() - c0
        await pilot.press("q")
    return 1000 * cpu / seconds, counts["layouts"] / seconds, counts["frames"] / seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--size", default="200x50")
    ap.add_argument("--events", type=int, default=0,
                    help="events logged before the console opens (60: the events pane already full at 200x50, "
                         "as after a console's first minutes; 0: it grows, and is laid out again, with each one)")
    args = ap.parse_args()
    w, h = (int(v) for v in args.size.split("x"))
    got: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as state:
        for r in range(args.rounds):  # alternate, the first variant swapping each round
            for heartbeat in ((False, True) if r % 2 == 0 else (True, False)):
                got[heartbeat].append(asyncio.run(measure(state, (w, h), args.seconds, heartbeat, args.events)))
    med = statistics.median
    print(f"{'variant':<22} {'CPU ms/s':>9} {'layouts/s':>10} {'frames/s':>9}   ({args.size}, {args.rounds} rounds "
          f"x {args.seconds} fake seconds, {args.events} events before)")
    for heartbeat, label in ((False, "no action"), (True, "heartbeat 2/s on screen")):
        f = got[heartbeat]
        print(f"{label:<22} {med([x[0] for x in f]):>9.2f} {med([x[1] for x in f]):>10.2f} "
              f"{med([x[2] for x in f]):>9.2f}")
    paired = sorted(a[0] / b[0] for a, b in zip(got[True], got[False], strict=True))
    print(f"heartbeat / no action, CPU: {med(paired):.2f} (median of the rounds' pairs, "
          f"{paired[0]:.2f}..{paired[-1]:.2f}; the issue's bar: <= 1)")


if __name__ == "__main__":
    main()
