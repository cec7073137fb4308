"""What listing checkpoints and reading SpecForge lines cost.

- checkpoint listing: N checkpoint folders (each a few files) in a temp folder, listed through
  the local host with the one ``find``/``du`` command; prints the wall time per listing (median
  of R runs) and the parse time alone;
- line parsing: the two SpecForge session fixtures parsed repeatedly; prints lines per second.

Usage: .venv/bin/python bench/checkpoints_and_specforge.py [--checkpoints 200] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from specconsole.config import HostConfig
from specconsole.formats.training_log import LineParser
from specconsole.hosts.local import LocalHost
from specconsole.sources.checkpoints import list_checkpoints, list_command, parse_listing

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "training"


def build(root: Path, n: int) -> None:
    for step in range(1, n + 1):
        d = root / f"run-a-step{step * 500}"
        d.mkdir()
        (d / "config.json").write_text('{"architectures": ["DFlashDraftModel"]}')
        (d / "training_state.pt").write_bytes(b"\0" * 65536)
        (d / "model.safetensors").write_bytes(b"\0" * 65536)
    (root / "run-a-latest").symlink_to(f"run-a-step{n * 500}")
    (root / "run-a-best").symlink_to("run-a-step500")


async def bench_listing(n: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build(root, n)
        host = LocalHost(HostConfig(name="bench", role="train"))
        await host.start()
        try:
            times = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                listing = await list_checkpoints(host, str(root))
                times.append(time.perf_counter() - t0)
            assert listing.error is None and len(listing.checkpoints) == n, listing.error
            res = await host.run(list_command(str(root)))
            t0 = time.perf_counter()
            for _ in range(repeat):
                parse_listing(str(root), res.stdout)
            parse_s = (time.perf_counter() - t0) / repeat
        finally:
            await host.close()
    print(f"checkpoint listing, {n} folders: {statistics.median(times) * 1000:.1f} ms per listing "
          f"(median of {repeat}; one command), parse alone {parse_s * 1000:.2f} ms, "
          f"{len(res.stdout):,} bytes of output")


def bench_parsing(repeat: int) -> None:
    for name in ("specforge_train_session.log", "specforge_dflash_session.log"):
        lines = [ln for ln in (FIXTURES / name).read_bytes().decode().split("\n") if ln]
        parser = LineParser()
        t0 = time.perf_counter()
        count = 0
        while time.perf_counter() - t0 < 1.0 or count < repeat * len(lines):
            for ln in lines:
                parser.parse(ln)
            count += len(lines)
        rate = count / (time.perf_counter() - t0)
        print(f"parse {name}: {rate:,.0f} lines/s ({len(lines)} lines, auto format)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoints", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    asyncio.run(bench_listing(args.checkpoints, args.repeat))
    bench_parsing(args.repeat)


if __name__ == "__main__":
    main()
