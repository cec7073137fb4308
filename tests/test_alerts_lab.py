"""Alerts end to end in the lab (one lab for the module: two sshd hosts and a real torchrun job, no
SGLang): ``specconsole lab freeze-training`` stalls the job, the stall alert (for_s = 3 here) fires
within 3 + 2 s, reaches a real local HTTP receiver as JSON, and resolves after ``thaw-training``;
a webhook receiver that hangs never slows the ``status --watch --alerts`` loop's ticks."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from alert_receiver import Receiver
from conftest import running_lab, wait_for
from specconsole.alerts.engine import AlertEngine
from specconsole.config import Config, load_config
from specconsole.lab.parts.environment import Lab, LabOptions
from specconsole.monitor import Fleet
from specconsole.status_watch import print_status

pytestmark = [pytest.mark.timeout(240), pytest.mark.xdist_group("alerts-lab")]  # one module lab per run
STALL_S = 3.0
TICK_S = 0.25


@pytest.fixture(scope="module")
def alert_lab(tmp_path_factory: pytest.TempPathFactory, lab_parts: None) -> Iterator[Lab]:
    options = LabOptions(sglang=False, trainer_steps=100_000, trainer_step_seconds=0.25,
                         trainer_steps_per_epoch=500, gpu_interval_s=0.5)
    yield from running_lab(tmp_path_factory.mktemp("alerts") / "lab", options)


def lab_config(lab: Lab, folder: Path, alerting: str, alerts: str) -> Config:
    path = folder / "alerts.toml"
    path.write_text(lab.config_path.read_text() + f"\n[alerting]\ndefaults = false\nbell = false\ntmux = false\n"
                    f"{alerting}\n{alerts}\n")
    return load_config(path)


def train_step(fleet: Fleet) -> int | None:
    training = fleet.monitors["train"].status().training
    if training is None or training.value.state != "running":
        return None
    return training.value.step


def lab_cli(lab: Lab, command: str) -> None:
    subprocess.run([sys.executable, "-m", "specconsole", "lab", command, "--dir", str(lab.dir)], check=True,
                   capture_output=True, timeout=60)


@contextlib.asynccontextmanager
async def watching(config: Config, lines: list[str]) -> Any:
    """``status --watch --alerts --interval 0.25`` in this loop, its lines into ``lines``."""
    fleet = Fleet(config)
    task = asyncio.ensure_future(print_status(fleet, as_json=False, watch=True, interval=TICK_S, timeout=0,
                                              write=lines.append, alerts=True))
    try:
        yield fleet
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await fleet.stop()


@pytest.mark.serial  # asserts a time bound
async def test_a_frozen_trainer_fires_the_stall_alert_at_the_webhook_and_resolves(alert_lab: Lab,
                                                                                  tmp_path: Path) -> None:
    lines: list[str] = []
    with Receiver() as receiver:
        config = lab_config(alert_lab, tmp_path, f'webhook = "{receiver.url}"',
                            f'[[alerts]]\nname = "training-stalled"\nfor_s = {STALL_S}\n')
        async with watching(config, lines) as fleet:
            await wait_for(lambda: train_step(fleet) is not None, 60, what="the training job's steps")
            first = train_step(fleet) or 0
            await wait_for(lambda: (train_step(fleet) or 0) > first + 2, 30, what="training progress")
            assert receiver.received == []
            lab_cli(alert_lab, "freeze-training")
            frozen_at = alert_lab.freeze_file.stat().st_mtime
            await wait_for(lambda: receiver.states("training-stalled") == ["firing"], STALL_S + 15,
                           what="the stall alert at the receiver")
            fired_at, fired = receiver.received[0]
            late = fired_at - frozen_at
            assert late <= STALL_S + 2, f"fired {late:.2f} s after the freeze (for_s {STALL_S})"
            assert fired["host"] == "train" and fired["level"] == "error" and fired["value"] == train_step(fleet)
            lab_cli(alert_lab, "thaw-training")
            thawed_at = time.time()
            await wait_for(lambda: receiver.states("training-stalled") == ["firing", "resolved"], 30,
                           what="the resolved alert at the receiver")
            print(f"\nstall alert: fired {late:.2f} s after the freeze (for_s {STALL_S:g}), resolved "
                  f"{receiver.received[1][0] - thawed_at:.2f} s after the thaw")
    assert any("alert    training-stalled firing on train" in line for line in lines), lines
    assert any("training-stalled resolved on train" in line for line in lines), lines


@pytest.mark.serial  # asserts a time bound
async def test_a_hanging_webhook_never_slows_the_watch_loop(alert_lab: Lab, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    ticks: list[float] = []
    evaluate = AlertEngine.evaluate

    def timed(self: AlertEngine, *args: Any) -> Any:
        ticks.append(time.monotonic())
        return evaluate(self, *args)

    monkeypatch.setattr(AlertEngine, "evaluate", timed)
    lines: list[str] = []
    with Receiver(hang=True) as receiver:
        # eight rules firing at once, and one that fires and resolves as steps come: more than the queue holds
        rules = "".join(f'[[alerts]]\nname = "training-{i}"\nwhen = "training.step > 0"\n' for i in range(8))
        config = lab_config(alert_lab, tmp_path,
                            f'webhook = "{receiver.url}"\nwebhook_timeout_s = 60\nwebhook_retries = 0\n'
                            "webhook_queue = 4",
                            rules + '[[alerts]]\nname = "step-flips"\nwhen = "unchanged(training.step)"\n')
        async with watching(config, lines) as fleet:
            await wait_for(lambda: train_step(fleet) is not None, 60, what="the training job's steps")
            await wait_for(lambda: receiver.posts >= 1, 30, what="a POST hanging at the receiver")
            start = len(ticks)
            await asyncio.sleep(4.0)
            window = ticks[start:]
            dropped = [line for line in lines if "dropped the oldest" in line]
    gaps = [b - a for a, b in itertools.pairwise(window)]
    print(f"\nwatch ticks while the webhook hangs: {len(window)} in 4 s (every {TICK_S} s: {4 / TICK_S:.0f}), "
          f"longest gap {max(gaps):.3f} s; POSTs in flight {receiver.posts}; {dropped[-1] if dropped else ''}")
    assert receiver.posts == 1  # the one POST still hangs: nothing else was sent
    assert len(window) >= 4 / TICK_S - 2 and max(gaps) < TICK_S + 0.35, gaps
    assert dropped, "a full queue says that it drops"


TMUX_SCRIPT = """
import asyncio, math, sys
from dataclasses import replace
sys.path.insert(0, {tests!r})
import sample_data as sd
from specconsole.alerts.delivery import AlertDelivery
from specconsole.alerts.engine import AlertEngine
from specconsole.alert_rules.rules import AlertRule, Alerting
from specconsole.base.events import EventLog
from specconsole.base.samples import Sample

async def main():
    log = EventLog()
    AlertDelivery(Alerting(bell=False), log)  # $TMUX and $TMUX_PANE: this pane's
    train, serve = sd.sample_statuses(sd.FROZEN_NOW)
    nan = replace(train, training=Sample(replace(train.training.value, loss=math.nan), sd.FROZEN_NOW, 1.0))
    rule = AlertRule(name="loss-not-finite", when="not finite(training.loss)", for_s=0, level="error",
                     summary="loss diverged #(touch {mark})")
    AlertEngine([rule], log).evaluate([nan, serve], sd.FROZEN_NOW)
    await asyncio.sleep(30)

asyncio.run(main())
"""


def test_inside_tmux_the_alert_is_displayed_in_the_consoles_own_session(tmp_path: Path, lab_parts: None) -> None:
    """A real tmux server with a client attached (through ``script``): the pane's alert reaches the
    client as a display-message, a ``#(...)`` in it is shown, never run."""
    tests, mark = Path(__file__).resolve().parent, tmp_path / "ran"
    script = tmp_path / "alert.py"
    script.write_text(TMUX_SCRIPT.format(tests=str(tests), mark=str(mark)))
    sock = f"sc-alerts-{tmp_path.name}"
    tmux = ["tmux", "-L", sock, "-f", "/dev/null"]
    subprocess.run([*tmux, "new-session", "-d", "-s", "console", "-x", "100", "-y", "30"], check=True, timeout=30)
    client = subprocess.Popen(["script", "-qfc", f"tmux -L {sock} attach -t console", "/dev/null"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def clients() -> list[str]:
            out = subprocess.run([*tmux, "list-clients", "-F", "#{client_name}"], capture_output=True, text=True)
            return out.stdout.split()

        assert wait_for(clients, 20), "the tmux client did not attach"
        subprocess.run([*tmux, "send-keys", "-t", "console", f"{sys.executable} {script}", "Enter"], check=True)

        def messages() -> str:
            out = subprocess.run([*tmux, "show-messages", "-t", clients()[0]], capture_output=True, text=True)
            return out.stdout

        shown = "message: loss-not-finite firing on train: loss diverged #(touch"
        assert wait_for(lambda: shown in messages(), 60), messages()
        assert not mark.exists()
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=30)
        client.kill()
        client.wait(10)


def test_status_watch_alerts_prints_json_lines_headless(alert_lab: Lab, tmp_path: Path) -> None:
    """The real command: ``specconsole status --watch --alerts --json`` prints its rules, then each alert
    as the webhook's JSON; ended by SIGINT like an operator's Ctrl-C."""
    config = lab_config(alert_lab, tmp_path, "", '[[alerts]]\nname = "stepping"\nwhen = "training.step > 0"\n')
    proc = subprocess.Popen([sys.executable, "-m", "specconsole", "status", "--config", config.path, "--watch",
                             "--alerts", "--json", "--interval", "0.5"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        header = proc.stdout.readline()
        line = proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    assert header.startswith("alerts: 1 rules (stepping) on 2 hosts, every 0.5 s")
    fired = json.loads(line)
    assert fired["alert"] == "stepping" and fired["host"] == "train" and fired["state"] == "firing"
    assert fired["value"] > 0 and fired["level"] == "warning"
