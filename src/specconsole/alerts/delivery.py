"""Where an alert goes besides the console: tmux ``display-message`` and a webhook.

:class:`AlertDelivery` listens to the :class:`~specconsole.base.events.EventLog` for alert events
(``source="alert"``: firing and resolved) and hands each one to

- the terminal bell (a callable the console gives; firing only);
- :class:`TmuxNotifier`, inside tmux (``$TMUX`` set): ``tmux display-message -t $TMUX_PANE``
  shows the line on the clients of the console's own session. The message is a tmux format, so
  every ``#`` is doubled (``#(cmd)`` would run a command); it runs in the background, killed after
  2 s;
- :class:`WebhookSender`: the alert as JSON, POSTed by one background task. The queue is bounded
  (``webhook_queue``): when it is full the oldest alert is dropped and counted (a warning event,
  at most every 10 s). Each POST has ``webhook_timeout_s`` for all of it and is tried again
  ``webhook_retries`` times (backoff 0.5 s doubling); an answer's body is never read past 64 KiB.
  Nothing here waits on the network on the caller's behalf: a receiver that hangs delays only
  the alerts queued behind it. On the way out, :meth:`WebhookSender.stop` drains: the POST in
  flight and the alerts still queued get up to ``DRAIN_S`` (2 s) to go out; what is still unsent
  then is cancelled and said (a warning event naming how many and why), never dropped silently.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import deque
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import httpx

from specconsole.alert_rules.rules import Alerting
from specconsole.alerts.engine import is_alert
from specconsole.base.backoff import Backoff
from specconsole.base.events import Event, EventLog
from specconsole.base.http_body import BodyTooLarge, read_capped
from specconsole.base.values import output_line, printable

#: the most of a webhook's answer that is read
ANSWER_LIMIT = 64 << 10
#: a full queue says so at most this often
DROP_NOTE_S = 10.0
TMUX_TIMEOUT_S = 2.0
#: how long :meth:`WebhookSender.stop` waits for the POST in flight and the queue to go out
DRAIN_S = 2.0
TMUX_MAX_CHARS = 200


def payload(event: Event) -> dict[str, Any]:
    """The JSON a webhook receives: the event's data (alert, host, state, value, message), its
    level and its time (ISO 8601, UTC)."""
    return {**event.data, "level": event.level,
            "at": datetime.fromtimestamp(event.at, UTC).isoformat(timespec="milliseconds")}


class WebhookSender:
    """Sends queued payloads to ``url`` from one background task (:meth:`start` on the loop)."""

    def __init__(self, url: str, events: EventLog, *, timeout_s: float = 5.0, retries: int = 2,
                 queue: int = 100, backoff_initial_s: float = 0.5) -> None:
        self.url, self.events = url, events
        self.timeout_s, self.retries, self.limit = timeout_s, retries, queue
        self.backoff_initial_s = backoff_initial_s
        self.queue: deque[dict[str, Any]] = deque()
        self.sent = self.failed = self.dropped = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._noted_at: float | None = None
        self._closing = False
        self._in_flight: dict[str, Any] | None = None

    def put(self, item: dict[str, Any]) -> None:
        """Queue ``item`` (never waits); a full queue drops its oldest item and counts it."""
        if len(self.queue) >= self.limit:
            self.queue.popleft()
            self.dropped += 1
            now = time.monotonic()
            if self._noted_at is None or now - self._noted_at >= DROP_NOTE_S:
                self._noted_at = now
                self.events.emit(f"webhook: {self.limit} alerts waiting to be sent; dropped the oldest "
                                 f"({self.dropped} dropped so far)", "webhook", "warning")
        self.queue.append(item)
        self._wake.set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="alert-webhook")

    async def stop(self, drain_s: float = DRAIN_S) -> None:
        """Let the POST in flight and the queued alerts go out for up to ``drain_s``, then cancel
        what is left and say so (a warning event). A second call, or one before :meth:`start`, does
        nothing."""
        task, self._task = self._task, None
        if task is None:
            return
        self._closing = True
        self._wake.set()
        try:
            done, _ = await asyncio.wait({task}, timeout=drain_s)
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if done:
            return
        in_flight, self._in_flight = self._in_flight, None
        unsent = len(self.queue) + (in_flight is not None)
        what = (f"the POST of {in_flight.get('alert')} ({in_flight.get('state')}) in flight"
                if in_flight is not None else "the queue")
        self.events.emit(f"webhook: stopped after waiting {drain_s:g} s for {what} to {self.url}; "
                         f"{unsent} alert{'s' * (unsent != 1)} not sent", "webhook", "warning")

    async def _run(self) -> None:
        async with httpx.AsyncClient(timeout=self.timeout_s) as client:
            while True:
                while not self.queue:
                    if self._closing:
                        return
                    self._wake.clear()
                    await self._wake.wait()
                self._in_flight = self.queue.popleft()
                await self._send(client, self._in_flight)
                self._in_flight = None

    async def _send(self, client: httpx.AsyncClient, item: dict[str, Any]) -> None:
        backoff = Backoff(self.backoff_initial_s, 8 * self.backoff_initial_s)
        why = ""
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(backoff.next())
            try:
                async with asyncio.timeout(self.timeout_s):
                    async with client.stream("POST", self.url, json=item) as resp:
                        await read_capped(resp, ANSWER_LIMIT)
                        if resp.status_code < 300:
                            self.sent += 1
                            return
                        why = f"HTTP {resp.status_code}"
            except TimeoutError:
                why = f"no answer within {self.timeout_s:g} s"
            except (httpx.HTTPError, BodyTooLarge, OSError) as err:
                why = output_line(str(err) or type(err).__name__)
        self.failed += 1
        self.events.emit(f"webhook: POST of {item.get('alert')} ({item.get('state')}) to {self.url} failed after "
                         f"{self.retries + 1} tries: {why}", "webhook", "warning")


class TmuxNotifier:
    """``tmux display-message`` on the console's own session (``$TMUX_PANE``), in the background."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        self.pane = env.get("TMUX_PANE")
        self._running: set[asyncio.Task[None]] = set()
        self.shown: list[str] = []  # what was handed to tmux (tests)

    def command(self, message: str) -> list[str]:
        text = printable(message)[:TMUX_MAX_CHARS].replace("#", "##")  # a format: #(cmd) would run cmd
        target = ["-t", self.pane] if self.pane else []
        return ["tmux", "display-message", *target, "--", text]

    def notify(self, message: str) -> None:
        argv = self.command(message)
        self.shown.append(argv[-1])
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on the event loop (a library caller): nothing runs it
            return
        task = loop.create_task(_run_quietly(argv), name="alert-tmux")
        self._running.add(task)
        task.add_done_callback(self._running.discard)


async def _run_quietly(argv: list[str]) -> None:
    try:
        proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                    stdout=asyncio.subprocess.DEVNULL,
                                                    stderr=asyncio.subprocess.DEVNULL)
    except OSError:  # no tmux on PATH: nothing to show it on
        return
    try:
        async with asyncio.timeout(TMUX_TIMEOUT_S):
            await proc.wait()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


class AlertDelivery:
    """Hands every alert event of ``events`` to the bell, tmux and the webhook ``settings`` ask for."""

    def __init__(self, settings: Alerting, events: EventLog, *, bell: Callable[[], None] | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        self.bell = bell if settings.bell else None
        self.tmux = TmuxNotifier(env) if settings.tmux and env.get("TMUX") else None
        self.webhook = WebhookSender(settings.webhook, events, timeout_s=settings.webhook_timeout_s,
                                     retries=settings.webhook_retries, queue=settings.webhook_queue) \
            if settings.webhook else None
        events.subscribe(self._on_event)

    def start(self) -> None:
        """Start the webhook's task (on the running loop)."""
        if self.webhook is not None:
            self.webhook.start()

    async def stop(self) -> None:
        if self.webhook is not None:
            await self.webhook.stop()

    def _on_event(self, event: Event) -> None:
        if not is_alert(event):
            return
        if self.bell is not None and event.data.get("state") == "firing":
            self.bell()
        if self.tmux is not None:
            self.tmux.notify(event.message)
        if self.webhook is not None:
            self.webhook.put(payload(event))
