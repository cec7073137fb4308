"""What an action's heartbeat on screen costs the idle console, against the same console without it.

The console runs headless (``App.run_test``, 200x50) on tests/sample_data.py's two hosts with a
fake clock and new samples every "second" (as bench/compositor_ab.py does: the badge ages, GPU
cells, plots, the step counter move). Per "second": one refresh (``refresh_panes``, as the
``refresh_s`` timer does), and, in the ``heartbeat`` variant, a running deploy's two heartbeats
(a deploy step waits for ``/health``; ``steps.heartbeat`` at least every 0.5 s), each through
``steps.audit`` (the events pane, the audit log) into the action view, as a flow emits them.

The screen's own redraw timer (real time) is paused: the bench's redraws stand in for it.

Three variants: no action; an action's view open, its step running, no heartbeat (its clocks tick
at each refresh); and that action's heartbeats. Per variant and round (taking turns, a fresh app
each time), over ``--seconds`` fake seconds:

- CPU ms per second: ``time.process_time`` (the loop's thread, everything the app does);
- layouts per second: the screen's full reflows (``Screen._refresh_layout``): a widget that asks
  for a relayout on every update (``Static.update``) lays the whole screen out and renders it;
- frames per second: the compositor's updates.

Usage: .venv/bin/python bench/heartbeat_cost.py [--rounds 5] [--seconds 20] [--size 200x50] [--events 60]
       [--interleaved S]
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


VARIANTS = {"none": "no action", "action": "action, no heartbeat", "heartbeat": "heartbeat 2/s on screen"}


async def measure(state: str, size: tuple[int, int], seconds: int, variant: str, earlier: int = 0,
                  warmup: int = 5, block: int = 0) -> tuple[float, float, float]:
    """(CPU ms, layouts, frames) per fake second of ``variant`` (a key of VARIANTS). With ``block``
    (``interleaved``), the action's view is open throughout and its heartbeats come in every other
    ``block`` seconds: the figures are then (CPU ms per second with heartbeats, without, 0)."""
    heartbeat = variant == "heartbeat"
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
        # the redraws are this bench's, one a fake second: the screen's own redraw timer (real time,
        # a redraw every ~7 fake seconds here) would add redraws a real console does not have, each
        # then drawing the heartbeats queued since the last in a frame of its own
        screen._redraw_timer.pause()  # type: ignore[attr-defined]
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
        if variant != "none" or block:
            app.actions.open("deploy", "Deploy to serve", "serve")
            emit(StepEvent("deploy", "step", "restarting sglang.service", step="restart", host="serve",
                           at=clock.now))
            emit(StepEvent("deploy", "command", "systemctl restart sglang.service", step="restart", host="serve",
                           command="systemctl restart sglang.service", at=clock.now))
        await pilot.pause()

        async def one(i: int, heartbeat: bool = heartbeat) -> None:
            clock.now += 1.0
            fleet._statuses = [moved(s, i, clock.now) for s in statuses]
            app.refresh_panes()
            await asyncio.sleep(SETTLE_S)
            for half in (0.0, 0.5):  # the same wakeups in every variant: the loop's idle cost alike
                if heartbeat:
                    waited = clock.now + half - start
                    emit(StepEvent("deploy", "heartbeat", f"waiting for /health: {waited:.0f}s of 600s; HTTP 503; "
                                   "journal: loading draft model weights", step="restart", host="serve",
                                   elapsed_s=waited, at=clock.now + half))
                await asyncio.sleep(SETTLE_S)

        for i in range(warmup):
            await one(i)
        if block:  # blocks ABBA..., each timed on its own
            cpu_of = {True: 0.0, False: 0.0}
            for b in range(seconds // block):
                beats = (b % 4) in (1, 2)
                c0 = time.process_time()
                for i in range(block):
                    await one(warmup + b * block + i, beats)
                cpu_of[beats] += time.process_time() - c0
            await pilot.press("q")
            half = seconds // block * block / 2
            return 1000 * cpu_of[True] / half, 1000 * cpu_of[False] / half, 0.0
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
    ap.add_argument("--interleaved", type=int, default=0, metavar="S",
                    help="instead: one console per round, its action's view open throughout, heartbeats in "
                         "every other block of S fake seconds (ABBA): with against without, in the same app")
    args = ap.parse_args()
    w, h = (int(v) for v in args.size.split("x"))
    if args.interleaved:
        interleaved(args, (w, h))
        return
    got: dict[str, list[tuple[float, float, float]]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as state:
        for r in range(args.rounds):  # the variants take turns, the order rotating each round
            order = list(VARIANTS)[r % len(VARIANTS):] + list(VARIANTS)[:r % len(VARIANTS)]
            for variant in order:
                got[variant].append(asyncio.run(measure(state, (w, h), args.seconds, variant, args.events)))
    med = statistics.median
    print(f"{'variant':<24} {'CPU ms/s':>9} {'layouts/s':>10} {'frames/s':>9}   ({args.size}, {args.rounds} rounds "
          f"x {args.seconds} fake seconds, {args.events} events before)")
    for variant, label in VARIANTS.items():
        f = got[variant]
        print(f"{label:<24} {med([x[0] for x in f]):>9.2f} {med([x[1] for x in f]):>10.2f} "
              f"{med([x[2] for x in f]):>9.2f}")
    for base in ("action", "none"):
        paired = sorted(a[0] / b[0] for a, b in zip(got["heartbeat"], got[base], strict=True))
        print(f"heartbeat / {VARIANTS[base]}, CPU: {med(paired):.2f} (median of the rounds' pairs, "
              f"{paired[0]:.2f}..{paired[-1]:.2f}; the issue's bar: <= 1)")


def interleaved(args: argparse.Namespace, size: tuple[int, int]) -> None:
    rounds = []
    with tempfile.TemporaryDirectory() as state:
        for _ in range(args.rounds):
            rounds.append(asyncio.run(measure(state, size, args.seconds, "action", args.events,
                                              block=args.interleaved)))
    med = statistics.median
    print(f"{'variant':<24} {'CPU ms/s':>9}   ({args.size}, {args.rounds} consoles x {args.seconds} fake seconds "
          f"in blocks of {args.interleaved}, {args.events} events before)")
    print(f"{'action, no heartbeat':<24} {med([r[1] for r in rounds]):>9.2f}")
    print(f"{'heartbeat 2/s on screen':<24} {med([r[0] for r in rounds]):>9.2f}")
    paired = sorted(r[0] / r[1] for r in rounds)
    print(f"heartbeat / action, no heartbeat, CPU: {med(paired):.2f} (median of the consoles, "
          f"{paired[0]:.2f}..{paired[-1]:.2f}; the issue's bar: <= 1)")


if __name__ == "__main__":
    main()
