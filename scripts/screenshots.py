"""Regenerate the README's screenshots: docs/screenshot-80x24.svg, -120x40.svg and -200x50.svg.

    .venv/bin/python scripts/screenshots.py           # write them
    .venv/bin/python scripts/screenshots.py --check   # exit 1 when one differs from what the code draws

The console on the tests' sample state (tests/sample_data.py: two hosts, SGLang serving DFLASH, a
training run, z-lab's published eval run and ours), the clock frozen and the histories seeded as
the layout snapshots have them, so the same code draws the same pictures on every machine.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIZES = ((80, 24), (120, 40), (200, 50))


async def shoot(size: tuple[int, int], work: Path, out: Path) -> Path:
    import sample_data as sd  # tests/ is on sys.path (main)

    app = sd.frozen_console(str(work / "state"))
    width, height = size
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        app.refresh_panes()
        await pilot.pause()
        await pilot.wait_for_scheduled_animations()
        name = f"screenshot-{width}x{height}.svg"
        app.save_screenshot(name, path=str(out))
    return out / name


def main() -> int:
    os.environ["TZ"] = "UTC"  # the events' clock times
    time.tzset()
    sys.path.insert(0, str(ROOT / "tests"))
    import sample_data as sd

    check = "--check" in sys.argv[1:]
    docs = ROOT / "docs"
    stale = []
    with tempfile.TemporaryDirectory(prefix="specconsole-shots-") as tmp:
        work = Path(tmp)
        os.environ["SPECCONSOLE_EVAL_RESULTS"] = str(sd.save_runs(work / "eval", sd.comparison_runs()))
        out = work / "out" if check else docs
        out.mkdir(exist_ok=True)
        for size in SIZES:
            path = asyncio.run(shoot(size, work, out))
            if not check:
                print(f"wrote {path.relative_to(ROOT)}")
            elif not (docs / path.name).is_file() or (docs / path.name).read_bytes() != path.read_bytes():
                stale.append(f"docs/{path.name}")
    if stale:
        print(f"out of date: {', '.join(stale)}; run .venv/bin/python scripts/screenshots.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
