"""The operator's story in a real tmux at 80x24 (issue 10), read from the screen only.

`specconsole demo` runs in a tmux server of its own (a socket in the test's folder, no status bar, 80x24). A recorder
captures the pane every 0.25 s while the test, like an operator, reads the eval table, kills
training (k, Tab, Enter) and then makes the operator's request of issue 21, "deploy with z-lab
DDTree up to 16 draft len", on the demo's DDTree build of SGLang: d, shift+Tab to the algorithm,
Enter, Down to DDTREE, Enter, block size 16, tree budget 16 (the form's help line says "'Up to 16'
→ block size 16, budget 16"), Enter to Plan, Tab, Enter on the plan; then e measures the new deployment. Asserted
from the captured frames:

* every step of the three actions (as the audit log names them) appeared on screen;
* the kill dialog's and the plan's buttons were on screen; the plan named the tree budget 16 and
  the triton attention its full-tree mode needs;
* the demo's seeded eval comparison (ours / z-lab, the average ratio) is on screen after two Tabs,
  and after e the new DDTREE run beside the z-lab baseline with its average ratio;
* no step a dialog followed took longer than its commands' own time by more than 0.2 s (the
  dialog's time is a "waited ... for your confirmation" line of its own);
* the final state lines ("train: training stopped", "serve: serving DDTREE, block 16, tree budget
  16, healthy") were visible, and SGLang's /server_info says DDTREE, 16 draft tokens, budget 16;
* q quits the demo with status 0 and nothing it started is left running (the checks the full
  scripts/tmux-smoke.sh run makes; tests/test_tmux_smoke.py runs the script with --quick);
* the longest interval, while an action ran and no dialog was up, without a new status line in
  the action view is at most 1.5 s. When that bar is missed and the action's own event timeline
  (the audit log) was just as silent there, the silence is the emitter's (the deploy agent's and
  the kill's heartbeats, other work of issue 10), not the screen's: that single assertion is then
  reported as an expected failure naming the measured gap; a gap the timeline does not have fails.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import wait_for

pytestmark = [pytest.mark.usefixtures("lab_parts"),  # starts lab parts itself
              pytest.mark.serial]  # asserts time bounds

POLL_S = 0.25
MAX_SILENT_S = 1.5
WIDTH, HEIGHT = 80, 24
DIALOGS = ("Kill training on train?", "Deploy to serve?", "Deploy: change the SGLang")
PANEL_TITLE = re.compile(r"╭─ (Kill training on train|Deploy to serve) · (running|done|FAILED)")
ELAPSED = re.compile(r"\s\d+\.\d+s\b")
#: the eval table's average row with two runs and one ratio: new run, baseline, new / baseline
EVAL_AVERAGE = re.compile(r"average\s+\d+\.\d\d\s+\d+\.\d\d\s+\d+\.\d %")


@dataclass(frozen=True)
class Frame:
    at: float
    lines: tuple[str, ...]

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def panel(self) -> tuple[str, str, tuple[str, ...]] | None:
        """(action title, running|done|FAILED, the panel's rows below its title) or None."""
        for i, line in enumerate(self.lines):
            m = PANEL_TITLE.search(line)
            if m:
                return m.group(1), m.group(2), self.lines[i + 1:]
        return None

    def status(self) -> tuple[str, ...] | None:
        """What the action view says, minus its ticking clocks: the rows of the steps (without their
        elapsed column) and the latest event line (verbatim: a heartbeat's counter makes it new)."""
        found = self.panel()
        if found is None:
            return None
        rows = []
        for row in found[2]:
            body = row.strip("│ ")
            rows.append(row if body.startswith("…") else ELAPSED.sub(" ", row))
        return tuple(rows)


class Recorder(threading.Thread):
    """Captures the pane every POLL_S into ``frames`` until stopped."""

    def __init__(self, tmux: Callable[..., str], target: str) -> None:
        super().__init__(daemon=True)
        self.tmux = tmux
        self.target = target
        self.frames: list[Frame] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            started = time.time()
            try:
                text = self.tmux("capture-pane", "-p", "-t", self.target)
            except subprocess.SubprocessError:
                text = ""
            self.frames.append(Frame(started, tuple(text.splitlines())))
            self.stopped.wait(max(0.0, POLL_S - (time.time() - started)))

    def latest(self) -> Frame | None:
        return self.frames[-1] if self.frames else None

    def wait_for(self, check: Callable[[Frame], bool], what: str, timeout: float) -> Frame:
        """The first frame recorded that passes ``check`` (every frame, not only the latest)."""
        seen = 0
        hits: list[Frame] = []

        def new_frame_passes() -> bool:
            nonlocal seen
            frames = self.frames[seen:]
            seen += len(frames)
            hits.extend(frame for frame in frames if check(frame))
            return bool(hits)

        if not wait_for(new_frame_passes, timeout, step=POLL_S / 2):
            last = self.latest()
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}; the screen was:\n"
                                 f"{last.text if last else '(nothing captured)'}")
        return hits[0]


def longest_silence(frames: list[Frame]) -> tuple[float, float, float, str]:
    """(gap, start, end, step shown) of the longest interval without a new status line, counted only
    while an action runs with no dialog up (a dialog waits for the operator, not for a host)."""
    best = (0.0, 0.0, 0.0, "")
    last_change: float | None = None
    last_status: tuple[str, ...] | None = None
    for frame in frames:
        found = frame.panel()
        waiting = (found is not None and found[1] == "running"
                   and not any(d in frame.text for d in DIALOGS))
        if not waiting:
            if last_change is not None and frame.at - last_change > best[0]:
                best = (frame.at - last_change, last_change, frame.at, _current_step(frame))
            last_change, last_status = None, None
            continue
        status = frame.status()
        if last_change is None:
            last_change, last_status = frame.at, status
            continue
        if status != last_status:
            if frame.at - last_change > best[0]:
                best = (frame.at - last_change, last_change, frame.at, _current_step(frame))
            last_change, last_status = frame.at, status
    return best


def _current_step(frame: Frame) -> str:
    found = frame.panel()
    rows = [r for r in (found[2] if found else ()) if "▶" in r]
    return rows[-1].strip("│ ") if rows else ""


def audit_steps(audit: Path) -> tuple[dict[str, list[str]], list[float]]:
    """Each action's step names (in order) and the timestamps of every step event."""
    steps: dict[str, list[str]] = {}
    times: list[float] = []
    for line in audit.read_text().splitlines():
        try:
            event: dict[str, Any] = json.loads(line)
        except ValueError:
            continue
        data = event.get("data") or {}
        action = data.get("action")
        if action not in ("kill-training", "deploy", "eval"):
            continue
        if action != "eval":  # the silence check watches the kill's and the deploy's view
            times.append(float(event["at"]))
        if data.get("kind") == "step" and data.get("step"):
            names = steps.setdefault(action, [])
            if data["step"] not in names:
                names.append(data["step"])
    return steps, sorted(times)


def command_time(records: list[dict[str, Any]]) -> float:
    """The host's own time in ``records``: from each command's record to its result's (the command's
    wall time as the console sees it, its SSH channel included)."""
    total, sent = 0.0, None
    for r in records:
        if r.get("kind") == "command":
            sent = r["elapsed_s"]
        elif r.get("kind") == "result" and sent is not None:
            total, sent = total + r["elapsed_s"] - sent, None
    return total


def dialog_padding(audit: Path) -> list[tuple[str, str, float, float]]:
    """For every step a dialog followed (closed by a ``wait`` record: the operator's turn), its
    ``(action, step, span, host)``: the step's time in the audit log and its commands' (:func:`command_time`)."""
    records = [d for line in audit.read_text().splitlines() if line.strip()
               and (d := json.loads(line).get("data") or {}).get("action") in ("kill-training", "deploy")]
    out = []
    for i, rec in enumerate(records):
        if rec.get("kind") != "wait":
            continue
        start = next((j for j in range(i - 1, -1, -1) if records[j].get("kind") == "step"
                      and records[j]["action"] == rec["action"]), None)
        if start is None:
            continue
        host = command_time(records[start:i])
        out.append((rec["action"], records[start]["step"], rec["elapsed_s"] - records[start]["elapsed_s"], host))
    return out


def demo_processes(needle: str, skip: set[int]) -> list[str]:
    """Processes (besides ours, ``skip`` and the tmux server, whose command line holds the session's)
    whose command line names ``needle``, the demo's folder."""
    skip = skip | {os.getpid()}
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) in skip:
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if needle in cmd and Path(cmd.split(" ", 1)[0]).name != "tmux":
            found.append(f"{d.name} {cmd[:160]}")
    return found


def timeline_gap(times: list[float], start: float, end: float) -> float:
    """The longest silence of the event timeline overlapping [start, end]."""
    inside = [start] + [t for t in times if start < t < end] + [end]
    before = [t for t in times if t <= start]
    after = [t for t in times if t >= end]
    if before:
        inside[0] = before[-1]
    if after:
        inside[-1] = after[0]
    return max(b - a for a, b in itertools.pairwise(inside))


@pytest.mark.timeout(900)
def test_kill_then_deploy_story_on_screen_at_80x24(tmp_path: Path) -> None:
    if not shutil.which("tmux"):
        pytest.fail("tmux is required: apt-get install -y tmux (scripts/setup.sh does this)")
    exe = Path(sys.executable).parent / "specconsole"
    lab = tmp_path / "demo"
    socket = tmp_path / "tmux.sock"  # a private tmux server, gone with the test's folder
    conf = tmp_path / "tmux.conf"
    conf.write_text("set -g status off\nset -g default-terminal xterm-256color\n")
    env = {**os.environ, "SPECCONSOLE_EVAL_RESULTS": str(tmp_path / "eval"), "TERM": "xterm-256color"}

    def tmux(*args: str) -> str:
        return subprocess.run(["tmux", "-S", str(socket), "-f", str(conf), *args], capture_output=True, text=True,
                              timeout=20, env=env).stdout

    def keys(*names: str) -> None:
        for name in names:
            tmux("send-keys", "-t", "story", name)
            time.sleep(0.3)

    tmux("new-session", "-d", "-s", "story", "-x", str(WIDTH), "-y", str(HEIGHT),
         f"{exe} demo --dir {lab} --sglang-startup 1; echo DEMO-EXITED $?; sleep 600")
    pane = int(tmux("display-message", "-p", "-t", "story", "#{pane_pid}").strip() or 0)
    rec = Recorder(tmux, "story")
    rec.start()
    marks = [("start", time.time())]  # when each part of the story began (printed: where the time goes)
    try:
        rec.wait_for(lambda f: re.search(r"step [0-9,]+/", f.text) is not None, "the training step", 240)
        rec.wait_for(lambda f: "serve ●" in f.text, "the serving host connected", 120)

        # the eval pane (tab, tab: the focus moves to it, bringing it into view) opens on the comparison
        keys("Tab", "Tab")
        seeded = rec.wait_for(lambda f: "ours / z-lab" in f.text, "the seeded comparison", 30)

        # kill: the plan dialog with its buttons, then every step and the host's state
        marks.append(("kill", time.time()))
        keys("k")
        dialog = rec.wait_for(lambda f: "Kill training on train?" in f.text, "the kill dialog", 120)
        dialog = rec.wait_for(lambda f: "Kill training on train?" in f.text and "Cancel" in f.text
                              and re.search(r"Kill \d+ processes", f.text) is not None, "its buttons", 10)
        keys("Tab", "Enter")
        rec.wait_for(lambda f: "▸ train: training stopped" in f.text, "the kill's final state line", 180)
        keys("Escape")

        # deploy, the operator's request: DDTREE (after DFLASH in the host's --help), block 16, budget 16
        marks.append(("deploy", time.time()))
        keys("d")
        rec.wait_for(lambda f: "Deploy: change the SGLang" in f.text, "the deploy form", 60)
        rec.wait_for(lambda f: "algorithms from the host's --help" in f.text, "the DDTree build's algorithms", 120)
        keys("BTab", "Enter")
        rec.wait_for(lambda f: "DDTREE" in f.text and "DSPARK" in f.text, "the algorithm list", 10)
        keys("Down", "Enter")
        form = rec.wait_for(lambda f: re.search(r"Speculative algorithm\s+DDTREE", f.text) is not None
                            and "DDTree tree budget" in f.text, "DDTREE's fields", 10)
        # block size (focused), tree budget, Enter past the draft model onto Plan, Enter presses it
        keys("16", "Enter", "16", "Enter", "Enter", "Enter")
        plan = rec.wait_for(lambda f: "Deploy to serve?" in f.text and "Cancel" in f.text
                            and "Deploy and restart" in f.text, "the plan with its buttons", 180)
        keys("Tab", "Enter")
        final = rec.wait_for(lambda f: "▸ serve: serving DDTREE, block 16, tree budget 16, healthy" in f.text
                             and (p := f.panel()) is not None and p[1] == "done", "the deploy's final state line",
                             300)
        # the deploy really happened: SGLang itself says DDTREE, 16 draft tokens, budget 16
        port = json.loads((lab / "state.json").read_text())["sglang_port"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=10) as answer:
            info = json.loads(answer.read())

        # e: measure the new deployment; the new run shows beside the z-lab baseline with its ratio
        marks.append(("eval", time.time()))
        keys("Escape", "e")
        rec.wait_for(lambda f: "Eval run · done" in f.text, "the eval run to end", 180)
        keys("Escape")
        measured = rec.wait_for(lambda f: "DDTREE / z-lab" in f.text and EVAL_AVERAGE.search(f.text) is not None,
                                "the new run beside the baseline with its ratio", 30)
        running = demo_processes(str(lab), skip={pane})  # what the check after q would find now
    finally:
        rec.stopped.set()
        rec.join(5)
        marks.append(("quit", time.time()))
        keys("q")
        exited = ""

        def demo_exited() -> bool:
            nonlocal exited
            exited = tmux("capture-pane", "-p", "-t", "story")
            return "DEMO-EXITED" in exited

        wait_for(demo_exited, 60, step=0.5)  # (the asserts below say what was left)
        left = demo_processes(str(lab), skip={pane})
        if "DEMO-EXITED" in exited:  # the last of them may still be on its way out
            wait_for(lambda: not demo_processes(str(lab), skip={pane}), 5, step=0.2)
            left = demo_processes(str(lab), skip={pane})
        marks.append(("end", time.time()))
        tmux("kill-server")
        subprocess.run([str(exe), "lab", "down", "--dir", str(lab)], capture_output=True, timeout=120)

    assert info["speculative_algorithm"] == "DDTREE" and info["speculative_num_draft_tokens"] == 16, info
    assert info["speculative_ddtree_budget"] == 16 and info["attention_backend"] == "triton", info
    # q quits cleanly and the demo takes down everything it started
    assert "DEMO-EXITED 0" in exited, exited
    assert running and not left, f"processes of the demo still running after q: {left}"
    assert "Cancel" in dialog.text and "Cancel" in plan.text and "Deploy and restart" in plan.text
    assert "▸ serve: serving DDTREE, block 16, tree budget 16, healthy" in final.text
    # the form said how "up to 16" maps; the plan named the budget and the full tree's triton attention
    assert "'Up to 16'" in form.text and "budget 16" in form.text, form.text
    assert re.search(r"--speculative-ddtree-budget\s+- → 16", plan.text) and "triton" in plan.text, plan.text
    # the new run (DDTREE) beside the z-lab baseline (★), its ratio on the average row
    assert re.search(r"task\s+DDTREE\s+★ z-lab\s+DDTREE / z-lab", measured.text), measured.text

    # the seeded comparison was on screen (issue 21): ours beside the z-lab baseline with the ratio
    assert "ours / z-lab" in seeded.text and re.search(r"average .*\d+\.\d %", seeded.text), seeded.text
    # honest step times (issue 21): the step before each dialog ends when the dialog opens, so its
    # time is its commands' own time; the operator's reading time is a "waited" line of its own
    padded = dialog_padding(lab / "audit.log")
    assert {a for a, *_ in padded} == {"kill-training", "deploy"}, padded
    for action, step, span, host in padded:
        assert span - host <= 0.2, f"{action}: {step!r} took {span:.2f}s, its commands {host:.2f}s"
    assert any("waited" in s and "for your confirmation" in s for s in (f.text for f in rec.frames))

    steps, times = audit_steps(lab / "audit.log")
    assert steps.get("kill-training") and steps.get("deploy") and steps.get("eval"), steps
    screens = [f.text for f in rec.frames]
    for action, names in steps.items():
        missing = [n for n in names if not any(n in s for s in screens)]
        assert not missing, f"{action}: steps never on screen: {missing} (all: {names})"

    gap, start, end, step = longest_silence(rec.frames)
    print("story: " + ", ".join(f"{a} {t1 - t0:.1f}s" for (a, t0), (_, t1) in itertools.pairwise(marks)))
    print(f"longest interval without a new status line: {gap:.2f}s (during {step!r})")
    if gap > MAX_SILENT_S:
        silent = timeline_gap(times, start, end)
        if silent >= gap - 2 * POLL_S - 0.5:
            pytest.xfail(f"longest interval without a new status line {gap:.2f}s > {MAX_SILENT_S}s during "
                         f"{step!r}; the action's own event timeline was silent {silent:.2f}s there (heartbeats "
                         f"of the deploy agent / kill, issue 10, other branches), not the screen")
        pytest.fail(f"the screen went {gap:.2f}s without a new status line during {step!r} although the event "
                    f"timeline's longest silence there was {silent:.2f}s")
