"""Runs on a GPU host (standard library only): an ``nvidia-smi ... -lms`` query, sent on in frames.

``python3 -c "$(cat smi_frames.py)" nvidia-smi --query-gpu=... --format=csv,noheader,nounits -lms 1000``

nvidia-smi prints a burst of rows every period, and a pipe may carry each row as a write of its own:
over SSH each becomes a packet the console decrypts and dispatches (8 GPUs: 8 packets a second). This
filter reads the rows as they come, and once the burst is over (no output for ``QUIET_S``) writes it
in one write: one packet a period, and of each row only what changed. A row is sent

- as ``=`` when it is the same as the row at its place in the last burst;
- as ``~P=V;P=V...`` when only some of its cells changed (cells are what ``", "`` separates, P a
  cell's position from 0, V its new text), where that is shorter than the row and no new cell
  holds a ``;``;
- else whole, with a ``\\`` before it when it starts with ``=``, ``~``, ``.`` or ``\\``.

A line ``.`` closes the burst.
nvidia-smi's standard error passes through untouched, and its exit status is this script's (128+N
when a signal N killed it, as a shell reports it).
The console's side is :class:`specconsole.sources.nvidia_smi.Unframer`.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys

#: no output for this long ends a burst (nvidia-smi prints a burst's rows within microseconds)
QUIET_S = 0.02
#: bounds: a burst goes out at this many lines even without a quiet (a flood never waits), and a
#: line longer than this is cut to it plus one byte (the console then reports it as over its limit)
BURST_LINES = 256
LINE_BYTES = 64 * 1024
SAME = b"="
END = b"."
ESCAPE = b"\\"
PATCH = b"~"
CELLS = b", "  # what separates nvidia-smi's CSV cells


def encode(burst: list[bytes], last: list[bytes]) -> bytes:
    """One burst's frame against the burst before it."""
    out = []
    for i, line in enumerate(burst):
        before = last[i] if i < len(last) else None
        patch = _patch(line, before) if before is not None and before != line else None
        if before == line:
            out.append(SAME)
        elif patch is not None:
            out.append(patch)
        elif line[:1] in (SAME, END, ESCAPE, PATCH):
            out.append(ESCAPE + line)
        else:
            out.append(line)
    out.append(END)
    return b"\n".join(out) + b"\n"


def _patch(line: bytes, before: bytes) -> bytes | None:
    """``line`` as the cells that differ from ``before``'s (``~P=V;...``), or None when it has
    other cells than ``before``, a new cell holds a ``;``, or the patch is not shorter."""
    cells, old = line.split(CELLS), before.split(CELLS)
    if len(cells) != len(old):
        return None
    changed = [b"%d=%s" % (i, cells[i]) for i in range(len(cells)) if cells[i] != old[i]]
    patch = PATCH + b";".join(changed)
    if len(patch) >= len(line) or any(b";" in c for c in changed):
        return None
    return patch


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write("smi_frames: usage: smi_frames NVIDIA-SMI-COMMAND...\n")
        return 2
    try:
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    except OSError as err:
        sys.stderr.write(f"{argv[0]}: {err.strerror or err}\n")
        return 127
    assert child.stdout is not None
    fd, out = child.stdout.fileno(), sys.stdout.fileno()
    last: list[bytes] = []
    burst: list[bytes] = []
    partial = b""
    try:
        while True:
            ready, _, _ = select.select([fd], [], [], QUIET_S if burst else None)
            if not ready:  # quiet: the burst is over
                os.write(out, encode(burst, last))
                last, burst = burst, []
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            *lines, partial = (partial + chunk).split(b"\n")
            partial = partial[:LINE_BYTES + 1]
            for line in lines:
                burst.append(line[:LINE_BYTES + 1].rstrip(b"\r"))
                if len(burst) >= BURST_LINES:
                    os.write(out, encode(burst, last))
                    last, burst = burst, []
        if partial:
            burst.append(partial.rstrip(b"\r"))
        if burst:
            os.write(out, encode(burst, last))
    except BrokenPipeError:  # the console is gone: so is this
        child.terminate()
    code = child.wait()
    return 128 - code if code < 0 else code  # killed by signal N: 128+N, as a shell says it


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
