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

``--once-first`` (before the command): run the query once without its ``-lms N`` first and send
what it printed as a burst, an empty one too (a ``.`` alone), then the loop. ``--query-compute-apps``
prints nothing at all when no process uses a GPU, so a loop never says "none"; a query that exited
does. Its failure (no driver) is this script's exit status, and the loop is not started.
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
        else:
            out.append(escaped(line))
    out.append(END)
    return b"\n".join(out) + b"\n"


def escaped(line: bytes) -> bytes:
    """``line`` as sent whole: with a ``\\`` before it when it starts as a frame's own lines do."""
    return ESCAPE + line if line[:1] in (SAME, END, ESCAPE, PATCH) else line


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


def cut(line: bytes) -> bytes:
    """A line as a burst holds it: cut to ``LINE_BYTES`` plus one byte, without its ``\\r``."""
    return line[:LINE_BYTES + 1].rstrip(b"\r")


def once(argv: list[str]) -> list[str]:
    """``argv`` without its loop (``-lms N``, ``-l N``): the query run once."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("-lms", "-l"):
            skip = True
        elif not arg.startswith(("-lms=", "--loop-ms=", "--loop=")):
            out.append(arg)
    return out


def main(argv: list[str]) -> int:
    once_first = argv[:1] == ["--once-first"]
    if once_first:
        argv = argv[1:]
    if not argv:
        sys.stderr.write("smi_frames: usage: smi_frames [--once-first] NVIDIA-SMI-COMMAND...\n")
        return 2
    out = sys.stdout.fileno()
    last: list[bytes] = []
    if once_first:
        try:
            first = subprocess.run(once(argv), stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, check=False)
        except OSError as err:
            sys.stderr.write(f"{argv[0]}: {err.strerror or err}\n")
            return 127
        lines = [cut(line) for line in first.stdout.split(b"\n")]
        lines = lines[:-1] if lines and not lines[-1] else lines
        try:
            if first.returncode != 0:  # what it said (no burst: no ``.``), and its status
                os.write(out, b"".join(escaped(line) + b"\n" for line in lines))
                return 128 - first.returncode if first.returncode < 0 else first.returncode
            for at in range(0, max(1, len(lines)), BURST_LINES):  # no process: an empty burst
                part = lines[at:at + BURST_LINES]
                os.write(out, encode(part, last))
                last = part
        except BrokenPipeError:  # the console is gone
            return 1
    try:
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    except OSError as err:
        sys.stderr.write(f"{argv[0]}: {err.strerror or err}\n")
        return 127
    assert child.stdout is not None
    fd = child.stdout.fileno()
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
                burst.append(cut(line))
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
