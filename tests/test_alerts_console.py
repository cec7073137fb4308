"""Alert delivery without a lab: the console's summary bar, events pane and bell (Pilot, sample
fleet, frozen clock); the webhook against a real local HTTP receiver (JSON, retries, a hanging
receiver never blocks, a full queue drops the oldest and says so; stopping drains the post in
flight, bounded); tmux's command."""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

import pytest

import sample_data as sd
from alert_receiver import Receiver
from conftest import wait_for
from specconsole.alert_rules.rules import DEFAULT_RULES, Alerting
from specconsole.alerts.delivery import AlertDelivery, TmuxNotifier, WebhookSender
from specconsole.alerts.engine import AlertEngine
from specconsole.base.events import EventLog
from specconsole.base.samples import Sample
from specconsole.monitor import HostStatus
from specconsole.ui.console.app import ConsoleApp
from specconsole.ui.fleet.summary_bar import SummaryBar
from specconsole.ui.style.themes import BUNDLED_DIR, load_themes

pytestmark = pytest.mark.timeout(90)
NAN_RULE = [r for r in DEFAULT_RULES if r.name == "loss-not-finite"]


def with_loss(loss: float) -> list[HostStatus]:
    statuses = sd.sample_statuses(sd.FROZEN_NOW)
    train = statuses[0]
    assert train.training is not None
    progress = replace(train.training.value, loss=loss)
    return [replace(train, training=Sample(progress, train.training.at, 1.0)), *statuses[1:]]


async def test_the_summary_bar_and_events_show_an_alert_until_it_resolves(tmp_path: Path) -> None:
    now = sd.FROZEN_NOW
    fleet = sd.sample_fleet(now)
    app = ConsoleApp(sd.sample_config(str(tmp_path / "state")), fleet=fleet, clock=lambda: now,
                     themes=load_themes([BUNDLED_DIR]))
    bells: list[float] = []
    app.alerts.delivery.bell = lambda: bells.append(time.time())  # the terminal bell, counted
    async with app.run_test(size=(100, 60)) as pilot:
        await pilot.pause()
        assert "▲" not in app.query_one(SummaryBar).text
        fleet.set(with_loss(math.nan))
        await wait_for(lambda: "▲ loss-not-finite on train" in app.screen_text().splitlines()[0], 10,
                       what="the alert in the summary bar", pilot=pilot)
        await wait_for(lambda: "alert    loss-not-finite firing on train: training loss is NaN" in app.screen_text(),
                       10, what="the alert in the events pane", pilot=pilot)
        assert len(bells) == 1
        fleet.set(with_loss(0.5))
        await wait_for(lambda: "loss-not-finite resolved on train" in app.screen_text(), 10,
                       what="the resolved line in the events pane", pilot=pilot)
        assert "▲" not in app.screen_text().splitlines()[0] and len(bells) == 1  # no bell for resolved


async def test_the_webhook_posts_json_and_retries_a_failing_receiver() -> None:
    log = EventLog()
    with Receiver(fail_first=1) as receiver:
        delivery = AlertDelivery(Alerting(webhook=receiver.url, webhook_retries=2, webhook_timeout_s=5), log,
                                 env={})
        sender = delivery.webhook
        assert sender is not None
        sender.backoff_initial_s = 0.05
        delivery.start()
        engine = AlertEngine(NAN_RULE, log)
        engine.evaluate(with_loss(math.nan), sd.FROZEN_NOW)
        engine.evaluate(with_loss(1.0), sd.FROZEN_NOW + 1)
        # the sender counts a post once its answer is read, after the receiver has it
        assert await wait_for(lambda: len(receiver.received) == 2 and sender.sent == 2, 15)
        await delivery.stop()
    first = receiver.received[0][1]
    assert first["alert"] == "loss-not-finite" and first["host"] == "train" and first["state"] == "firing"
    assert first["value"] is None and first["level"] == "error" and "NaN" in first["message"]
    assert {"alert", "host", "state", "value", "message", "level", "at"} == set(first)
    assert receiver.states("loss-not-finite") == ["firing", "resolved"] and receiver.posts == 3
    assert sender.sent == 2 and sender.failed == 0


async def test_a_hanging_receiver_never_blocks_and_a_full_queue_drops_the_oldest() -> None:
    log = EventLog()
    with Receiver(hang=True) as receiver:
        sender = WebhookSender(receiver.url, log, timeout_s=30, retries=0, queue=3)
        sender.start()
        sender.put({"alert": "first"})
        assert await wait_for(lambda: receiver.posts == 1, 10)  # in flight, hanging
        started = time.monotonic()
        for i in range(10):
            sender.put({"alert": f"a{i}"})
        assert time.monotonic() - started < 0.05  # put never waits on the network
        assert [item["alert"] for item in sender.queue] == ["a7", "a8", "a9"] and sender.dropped == 7
        warnings = [e.message for e in log.recent if e.source == "webhook"]
        assert warnings == ["webhook: 3 alerts waiting to be sent; dropped the oldest (1 dropped so far)"]
        await sender.stop()


async def test_a_receiver_that_never_answers_fails_after_its_timeout_and_tries() -> None:
    log = EventLog()
    with Receiver(hang=True) as receiver:
        sender = WebhookSender(receiver.url, log, timeout_s=0.3, retries=1, queue=10, backoff_initial_s=0.05)
        sender.start()
        sender.put({"alert": "x", "state": "firing"})
        assert await wait_for(lambda: sender.failed == 1, 10)
        await sender.stop()
    assert receiver.posts == 2
    (note,) = [e.message for e in log.recent if e.source == "webhook"]
    assert "failed after 2 tries: no answer within 0.3 s" in note


async def test_stop_drains_the_post_in_flight_and_the_queue_behind_it() -> None:
    """A slow receiver (0.6 s an answer) has one POST in flight and one queued when the delivery
    stops: both arrive, both are counted sent, nothing is said; the old stop() cancelled the POST."""
    log = EventLog()
    with Receiver(delay_s=0.6) as receiver:
        delivery = AlertDelivery(Alerting(webhook=receiver.url, webhook_retries=0, webhook_timeout_s=5), log,
                                 env={})
        sender = delivery.webhook
        assert sender is not None
        delivery.start()
        engine = AlertEngine(NAN_RULE, log)
        engine.evaluate(with_loss(math.nan), sd.FROZEN_NOW)
        assert await wait_for(lambda: receiver.posts == 1, 10)  # in flight, its answer 0.6 s away
        engine.evaluate(with_loss(1.0), sd.FROZEN_NOW + 1)  # queued behind it
        started = time.monotonic()
        await delivery.stop()
        took = time.monotonic() - started
        assert receiver.states("loss-not-finite") == ["firing", "resolved"]
        assert sender.sent == 2 and sender.failed == 0 and not sender.queue
        assert 0.6 <= took < 2.0
        await delivery.stop()  # a second stop does nothing
    assert [e.message for e in log.recent if e.source == "webhook"] == []


async def test_stop_gives_a_hanging_post_two_seconds_then_says_what_was_not_sent() -> None:
    log = EventLog()
    with Receiver(hang=True) as receiver:
        sender = WebhookSender(receiver.url, log, timeout_s=30, retries=0, queue=10)
        sender.start()
        sender.put({"alert": "gpu-hot", "state": "firing"})
        assert await wait_for(lambda: receiver.posts == 1, 10)
        sender.put({"alert": "gpu-hot", "state": "resolved"})
        started = time.monotonic()
        await sender.stop(drain_s=0.5)
        assert 0.5 <= time.monotonic() - started < 1.5  # bounded: cancelled at the drain's end
    assert sender.sent == 0 and receiver.posts == 1
    (note,) = [e.message for e in log.recent if e.source == "webhook"]
    assert note == (f"webhook: stopped after waiting 0.5 s for the POST of gpu-hot (firing) in flight to "
                    f"{receiver.url}; 2 alerts not sent")


async def test_tmux_gets_the_console_pane_and_no_format_to_run() -> None:
    tmux = TmuxNotifier({"TMUX": "/tmp/tmux-0/default,1,0", "TMUX_PANE": "%3"})
    assert tmux.command("gpu #(touch /tmp/x) #{host}") == [
        "tmux", "display-message", "-t", "%3", "--", "gpu ##(touch /tmp/x) ##{host}"]
    delivery = AlertDelivery(Alerting(), EventLog(), env={})
    assert delivery.tmux is None  # not inside tmux: nothing to show it on
    log = EventLog()
    inside = AlertDelivery(Alerting(), log, env={"TMUX": "x", "TMUX_PANE": "%1", "PATH": ""})
    AlertEngine(NAN_RULE, log).evaluate(with_loss(math.inf), sd.FROZEN_NOW)
    assert inside.tmux is not None and inside.tmux.shown == [
        "loss-not-finite firing on train: training loss is NaN or infinite"]
    await asyncio.sleep(0)


@pytest.mark.serial  # asserts a time bound
async def test_a_hanging_webhook_never_slows_the_consoles_redraws(tmp_path: Path) -> None:
    """The console redraws every 0.25 s while an alert fires and resolves at every redraw and the
    webhook receiver never answers: the redraws keep their rhythm, the queue drops the oldest."""
    now = sd.FROZEN_NOW
    fleet = sd.sample_fleet(now)
    with Receiver(hang=True) as receiver:
        config = replace(sd.sample_config(str(tmp_path / "state"), refresh_s=0.25),
                         alerting=Alerting(webhook=receiver.url, webhook_timeout_s=60, webhook_retries=0,
                                           webhook_queue=4, bell=False, tmux=False),
                         alerts=tuple(NAN_RULE))
        app = ConsoleApp(config, fleet=fleet, clock=lambda: now, themes=load_themes([BUNDLED_DIR]))
        ticks: list[float] = []
        tick = app.alerts.tick

        def timed(statuses: Iterable[HostStatus], now: float) -> None:
            ticks.append(time.monotonic())
            tick(statuses, now)

        app.alerts.tick = timed  # type: ignore[method-assign]  # timed, then as before
        async with app.run_test(size=(100, 30)) as pilot:
            fleet.set(with_loss(math.nan))
            await wait_for(lambda: receiver.posts == 1, 10, what="a POST hanging at the receiver", pilot=pilot)
            start, flips = time.monotonic(), 0
            while time.monotonic() - start < 3.0:
                fleet.set(with_loss(math.nan if flips % 2 == 0 else 0.5))  # a redraw: fires, then resolves
                flips += 1
                await pilot.pause(0.15)
            window = [t for t in ticks if t >= start]
            sender = app.alerts.delivery.webhook
            assert sender is not None
            dropped, posts = sender.dropped, receiver.posts
    gaps = [b - a for a, b in itertools.pairwise(window)]
    print(f"\nconsole redraws while the webhook hangs: {len(window)} in 3 s, longest gap {max(gaps):.3f} s "
          f"(refresh 0.25 s); {flips} alert changes, {dropped} dropped, {posts} POST in flight")
    assert posts == 1 and dropped > 0
    assert max(gaps) < 0.25 + 0.35, gaps
