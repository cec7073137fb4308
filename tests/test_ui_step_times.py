"""The deploy's dialogs and the operator (issue 21), driven with Pilot on a lab of this module's own
(real SSH, systemctl, the SGLang simulator):

* honest step times: the time a dialog waits for the operator counts in no step; it shows as a line
  of its own ("waited 1.5 s for ..."), in the action view and in the audit log alike;
* at 80x24 no toast covers the deploy form or the plan dialog;
* the headless `specconsole deploy`'s [y/N] question (in a pty) is no step's time either."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Button, Select
from textual.widgets._toast import Toast

from conftest import running_lab, wait_for
from specconsole.config import load_config
from specconsole.lab.parts.environment import Lab, LabOptions
from specconsole.ui.console.app import ConsoleApp
from specconsole.ui.panes.action_view import ActionPanel
from specconsole.ui.screens.deploy_form import DeployForm
from specconsole.ui.screens.plan import PlanScreen
from specconsole.ui.style.themes import BUNDLED_DIR, load_themes

pytestmark = [pytest.mark.timeout(240), pytest.mark.serial]  # serial: asserts time bounds

WAIT_S = 1.5  # how long the operator "reads" each dialog
#: The console's own time a step may hold besides its commands': the issue's bar is 0.2 s (the tmux story
#: test holds it); on a loaded 2-core machine (beside the tmux smoke) the Pilot app's own work went past 0.2 s,
#: still far from a dialog's 1.5 s.
OWN_S = 0.5


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, lab_parts: None) -> Iterator[Lab]:
    yield from running_lab(tmp_path_factory.mktemp("lab"), LabOptions(trainer_step_seconds=0.3, sglang_startup_s=1.0,
                                                        gpu_interval_s=0.5, sglang_interval_s=0.5))


def step_spans(audit: list[dict[str, Any]]) -> dict[str, float]:
    """Each deploy step's time from the audit log: from its ``step`` record to the next step, wait or end."""
    records = [r for r in audit if r.get("action") == "deploy" and r.get("kind") in ("step", "wait", "done", "failed")]
    return {a["step"]: b["elapsed_s"] - a["elapsed_s"] for a, b in itertools.pairwise(records)
            if a["kind"] == "step"}


def host_time(audit: list[dict[str, Any]]) -> dict[str, float]:
    """Each deploy step's host time: from each command's record to its result's (the command's wall
    time as the console sees it, its SSH channel included)."""
    out: dict[str, float] = {}
    sent: float | None = None
    for r in audit:
        if r.get("action") != "deploy":
            continue
        if r.get("kind") == "command":
            sent = r["elapsed_s"]
        elif r.get("kind") == "result" and sent is not None:
            out[r["step"]] = out.get(r["step"], 0.0) + r["elapsed_s"] - sent
            sent = None
    return out


def make_app(lab: Lab, tmp_path: Path) -> ConsoleApp:
    cfg = load_config(lab.config_path)
    cfg = dataclasses.replace(cfg, console=dataclasses.replace(
        cfg.console, state_dir=str(tmp_path / "state"), audit_log=str(tmp_path / "audit.log")))
    return ConsoleApp(cfg, themes=load_themes([BUNDLED_DIR]))


def toasts_over(app: ConsoleApp, selector: str) -> list[str]:
    """The toasts on screen whose region overlaps the widget ``selector`` of the current screen."""
    box = app.screen.query_one(selector).region
    return [str(t.render()) for t in app.screen.query(Toast) if t.region.overlaps(box)]


async def test_no_toast_covers_the_deploy_form_or_the_plan_at_80x24(lab: Lab, tmp_path: Path) -> None:
    app = make_app(lab, tmp_path)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:  # Pilot hides toasts unless asked
        await wait_for(lambda: all(s.reachable for s in app.fleet.statuses()), 90, what="hosts connected",
                       pilot=pilot)
        await pilot.press("d")
        await wait_for(lambda: isinstance(app.screen, DeployForm), 90, what="the deploy form", pilot=pilot)
        algorithms = app.screen.query_one("#deploy-algorithm", Select)
        await wait_for(lambda: "EAGLE3" in [str(o[0]) for o in algorithms._options], 90, what="the algorithms",
                       pilot=pilot)
        for _ in range(5):  # the form's first second, when the "started" toast used to sit on it
            await pilot.pause(0.1)
            assert toasts_over(app, "#deploy-box") == []
        app.screen.query_one("#plan", Button).press()
        await wait_for(lambda: isinstance(app.screen, PlanScreen), 120, what="the plan", pilot=pilot)
        await pilot.pause(0.2)
        assert toasts_over(app, ".dialog") == []
        app.screen.query_one("#cancel", Button).press()
        await wait_for(lambda: not isinstance(app.screen, PlanScreen), 30, what="the cancel", pilot=pilot)
        # with no dialog open the toasts are back: the cancel's "done" is one
        await wait_for(lambda: any("cancelled by the operator" in str(t.render()) for t in app.screen.query(Toast)),
                       10, what="the done toast", pilot=pilot)


async def test_deploy_dialogs_open_for_seconds_add_nothing_to_any_step(lab: Lab, tmp_path: Path) -> None:
    app = make_app(lab, tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(lambda: all(s.reachable for s in app.fleet.statuses()), 90, what="hosts connected",
                       pilot=pilot)
        await pilot.press("d")
        await wait_for(lambda: isinstance(app.screen, DeployForm), 90, what="the deploy form", pilot=pilot)
        form = app.screen
        algorithms = form.query_one("#deploy-algorithm", Select)
        await wait_for(lambda: "EAGLE3" in [str(o[0]) for o in algorithms._options], 90, what="the algorithms",
                       pilot=pilot)
        await asyncio.sleep(WAIT_S)  # the operator reads the form
        form.query_one("#plan", Button).press()
        await wait_for(lambda: isinstance(app.screen, PlanScreen), 120, what="the plan", pilot=pilot)
        await asyncio.sleep(WAIT_S)  # ... and the plan
        app.screen.query_one("#cancel", Button).press()
        panel = app.query_one(ActionPanel)
        await wait_for(lambda: panel.track is not None and panel.track.finished, 30, what="the cancel", pilot=pilot)
        track = panel.track
        assert track is not None and track.ok
        waits = [r for r in track.rows if r.wait]
        assert [r.name.split(" s for ")[1] for r in waits] == ["you to fill in the deploy form",
                                                             "your confirmation of the plan"]
        assert all(WAIT_S <= r.elapsed(0) < WAIT_S + 1.0 for r in waits), [r.elapsed(0) for r in waits]
        shown = {r.name: r.elapsed(0) for r in track.rows if not r.wait}
        assert {"discover algorithms", "read the unit", "lock"} <= set(shown)
        await wait_for(lambda: f"· {waits[-1].name}" in app.screen_text(), 10, what="the last wait's line on screen",
                       pilot=pilot)
    audit = [json.loads(line)["data"] for line in (tmp_path / "audit.log").read_text().splitlines()]
    spans = step_spans(audit)
    waited = [r for r in audit if r.get("kind") == "waited"]
    assert len(waited) == 2 and all(WAIT_S <= r["took_s"] < WAIT_S + 1.0 for r in waited)
    host = host_time(audit)
    # each step's time (panel and audit log agree) is the host's own time: its commands' time plus a
    # little of our own, none of the 1.5 s each dialog stayed open
    for name, took in shown.items():
        assert abs(spans[name] - took) < 0.1, (name, spans[name], took)
        assert took - host.get(name, 0.0) <= OWN_S, f"{name}: {took:.2f}s, host {host.get(name, 0):.2f}s: {shown}"


def test_the_cli_s_question_is_no_step_s_time(lab: Lab, tmp_path: Path) -> None:
    """`specconsole deploy` on a terminal: the operator answers the [y/N] question after 1.5 s; the step
    before the question ends when it is asked and the wait is a line of its own."""
    audit = tmp_path / "cli-audit.log"
    config = tmp_path / "lab.toml"
    text = lab.config_path.read_text()
    config.write_text(re.sub(r"(?m)^audit_log = .*$", f"audit_log = {json.dumps(str(audit))}", text, count=1))
    assert load_config(config).console.audit_log == str(audit)
    main, sub = pty.openpty()
    exe = Path(sys.executable).parent / "specconsole"
    proc = subprocess.Popen([str(exe), "deploy", "--config", str(config), "--algorithm", "DFLASH",
                             "--draft-window", "16"], stdin=sub, stdout=sub, stderr=sub, close_fds=True)
    os.close(sub)
    out = b""

    def read_until(needle: bytes, timeout: float) -> None:
        closed = False

        def seen() -> bool:  # what the terminal got within 0.2 s, if anything
            nonlocal out, closed
            if needle not in out and select.select([main], [], [], 0.2)[0]:
                try:
                    out += os.read(main, 65536)
                except OSError:
                    closed = True  # the process is gone: nothing more comes
            return needle in out or closed

        wait_for(seen, timeout, step=0)
        assert needle in out, out.decode(errors="replace")

    try:
        read_until(b"[y/N]", 120)
        time.sleep(WAIT_S)  # the operator reads the plan
        os.write(main, b"n\n")
        read_until(b"cancelled by the operator", 30)
        assert proc.wait(30) == 0
    finally:
        proc.kill()
        os.close(main)
    printed = out.decode(errors="replace")
    assert "waiting for your confirmation" in printed and "s for your confirmation" in printed, printed
    records = [d for line in audit.read_text().splitlines()
               if (d := json.loads(line)["data"]).get("action") == "deploy"]
    kinds = [r["kind"] for r in records]
    wait = kinds.index("wait")
    step = max(i for i in range(wait) if kinds[i] == "step")
    spans = {records[step]["step"]: records[wait]["elapsed_s"] - records[step]["elapsed_s"]}
    host = host_time(records[step:wait])
    assert all(took - host.get(name, 0.0) <= OWN_S for name, took in spans.items()), (spans, host)
    waited = records[kinds.index("waited")]
    assert WAIT_S <= waited["took_s"] < WAIT_S + 1.0, waited
