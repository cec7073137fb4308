"""The demo's first screen in a real tmux at 80x24 and 200x50 (issue 21), read from the screen only.

`specconsole demo` runs in a tmux server of its own (a socket in the test's folder, no status bar).
Without a key pressed or a line scrolled, the captured pane must show the eval comparison the demo
seeds: the baseline's name (z-lab), the average row with its ratio (``NN.N %``) and task rows. At
200x50 every task of the comparison is on screen, and no box holds a block of empty rows while
another is cut; the events pane is at most its lines and its border.
Then q quits, ``lab down`` and killing the tmux server leave nothing behind.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import wait_for
from specconsole.eval.store import ResultStore

pytestmark = pytest.mark.usefixtures("lab_parts")  # starts lab parts itself

AVERAGE = re.compile(r"\baverage\s+\d+\.\d\d\s+\d+\.\d\d\s+(\d+\.\d) %")
#: a task row of the comparison: name, ours, the baseline, the ratio (▲ ▼ mark best and worst)
TASK_ROW = re.compile(r"│\s+([a-z][a-z0-9_]*)\s+\d+\.\d\d(?: [▲▼])?\s+\d+\.\d\d(?: [▲▼])?\s+\d+\.\d %")
EVENT_LINE = re.compile(r"^\d\d:\d\d:\d\d ")


@dataclass(frozen=True)
class Box:
    """A pane's border on screen: its title, its inner rows, and whether its bottom is on screen."""

    title: str
    rows: tuple[str, ...]
    closed: bool

    def empty_run(self) -> int:
        """The longest run of inner rows with nothing on them (a scrollbar glyph aside)."""
        longest = run = 0
        for row in self.rows:
            run = run + 1 if not row.strip(" ▁▂▃▄▅▆▇█▔") else 0
            longest = max(longest, run)
        return longest


def boxes(lines: list[str]) -> list[Box]:
    """Every rounded box whose top-left corner is on screen."""
    found = []
    for y, line in enumerate(lines):
        for x, ch in enumerate(line):
            if ch != "╭":
                continue
            right = line.find("╮", x)
            if right < 0:
                continue
            title = line[x + 1:right].strip("─ ")
            rows: list[str] = []
            closed = False
            for below in lines[y + 1:]:
                corner = below[x] if x < len(below) else " "
                if corner == "╰":
                    closed = True
                    break
                if corner != "│":
                    break
                rows.append(below[x + 1:right])
            found.append(Box(title, tuple(rows), closed))
    return found


def first_screen(tmp_path: Path, width: int, height: int, ready: object) -> tuple[str, list[str]]:
    """Start the demo in a private tmux at ``width`` x ``height``; the first capture for which
    ``ready(text, tasks)`` holds (the seeded runs' task names), with those names. Always quits it."""
    if not shutil.which("tmux"):
        pytest.fail("tmux is required: apt-get install -y tmux (scripts/setup.sh does this)")
    exe = Path(sys.executable).parent / "specconsole"
    lab = tmp_path / "demo"
    socket = tmp_path / "tmux.sock"
    conf = tmp_path / "tmux.conf"
    conf.write_text("set -g status off\nset -g default-terminal xterm-256color\n")  # the pane is the window
    env = {**os.environ, "TERM": "xterm-256color"}

    def tmux(*args: str) -> str:
        return subprocess.run(["tmux", "-S", str(socket), "-f", str(conf), *args], capture_output=True, text=True,
                              timeout=20, env=env).stdout

    tmux("new-session", "-d", "-s", "first", "-x", str(width), "-y", str(height),
         f"{exe} demo --dir {lab} --sglang-startup 1; echo DEMO-EXITED $?; sleep 600")
    seen: dict[str, object] = {}
    try:
        def tasks() -> list[str]:
            runs = ResultStore(lab / "eval").runs() if (lab / "eval").is_dir() else []
            return sorted({t.task for r in runs for t in r.tasks})

        def check() -> bool:
            text = tmux("capture-pane", "-p", "-t", "first")
            seen["text"] = text
            names = tasks()
            return bool(names) and bool(ready(text, names))  # type: ignore[operator]

        if not wait_for(check, 300, step=0.5):
            pytest.fail(f"the first screen never showed what it should at {width}x{height}:\n{seen.get('text')}")
        text = str(seen["text"])
        names = tasks()
    finally:
        tmux("send-keys", "-t", "first", "q")
        deadline = time.time() + 60
        while time.time() < deadline and "DEMO-EXITED" not in tmux("capture-pane", "-p", "-t", "first"):
            time.sleep(0.5)
        subprocess.run([str(exe), "lab", "down", "--dir", str(lab)], capture_output=True, timeout=120)
        tmux("kill-server")
    return text, names


def comparison_shown(text: str, tasks: list[str], *, every_task: bool) -> bool:
    rows = {m.group(1) for m in TASK_ROW.finditer(text)} & set(tasks)
    hosts_up = text.count("H200") >= 2  # both hosts' GPUs read (a summary each, or a row per GPU)
    return (hosts_up and "z-lab" in text and AVERAGE.search(text) is not None
            and (rows == set(tasks) if every_task else len(rows) >= 3))


@pytest.mark.timeout(420)
def test_80x24_first_screen_shows_the_comparison(tmp_path: Path) -> None:
    text, tasks = first_screen(tmp_path, 80, 24, lambda t, names: comparison_shown(t, names, every_task=False))
    lines = text.splitlines()
    assert len(lines) <= 24 and all(len(line) <= 80 for line in lines), text
    assert "★ z-lab" in text and "ours / z-lab" in text, text  # the baseline, and the ratio column
    average = AVERAGE.search(text)
    assert average is not None and 0 < float(average.group(1)) < 1000, text
    assert len({m.group(1) for m in TASK_ROW.finditer(text)} & set(tasks)) >= 3, text
    assert "× H200 · util" in text, text  # the hosts summed up above it


@pytest.mark.timeout(420)
def test_200x50_first_screen_shows_the_whole_comparison_and_no_empty_block(tmp_path: Path) -> None:
    text, tasks = first_screen(tmp_path, 200, 50, lambda t, names: comparison_shown(t, names, every_task=True))
    lines = text.splitlines()
    assert "★ z-lab" in text and "ours / z-lab" in text and AVERAGE.search(text), text
    assert {m.group(1) for m in TASK_ROW.finditer(text)} >= set(tasks), text  # every task, none scrolled away
    shown = boxes(lines)
    titles = [b.title for b in shown]
    assert any(t.startswith("Eval") for t in titles) and any(t.startswith("Events") for t in titles), titles
    cut = [b.title for b in shown if not b.closed]
    empty = [(b.title, b.empty_run()) for b in shown if b.empty_run() >= 4]
    assert not (cut and empty), f"empty rows in {empty} while {cut} is cut:\n{text}"
    # the events pane is at most its lines and its border: no empty row inside it
    events = next(b for b in shown if b.title.startswith("Events"))
    assert events.closed and events.empty_run() == 0, f"events pane taller than its lines:\n{text}"
    assert any(EVENT_LINE.match(row.strip()) for row in events.rows), text
