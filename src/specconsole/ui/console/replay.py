"""``specconsole replay FILE``: the console itself, fed from a recording, read-only.

:class:`ReplayFleet` is a :class:`~specconsole.ui.console.provider.StatusProvider` whose statuses are a
:class:`~specconsole.recorder.recording.Cursor`'s at the replay clock; recorded events go into the
events pane at their own times and the action steps among them into the action view, as they
were shown. :class:`ReplayApp` is :class:`~specconsole.ui.console.app.ConsoleApp` with the replay clock,
the timeline bar (on its :class:`ReplayScreen`) and the timeline keys
(:data:`~specconsole.ui.registry.REPLAY_REGISTRY`); it is ``OFFLINE``: the destructive actions and
the eval are not bound, and ``host(name)`` is None, so no key reaches a host.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import tomllib
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from rich.markup import escape
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.widgets import Static

from specconsole.base.errors import ConfigError
from specconsole.base.events import Event, EventLog
from specconsole.config import Config, parse_config
from specconsole.hosts import Host
from specconsole.monitor import ChangeListener, HistoryPoints, HostStatus
from specconsole.recorder.recording import Recording
from specconsole.recorder.records import FleetState, step_fields
from specconsole.sglang.acceptance import AcceptanceDetail
from specconsole.steps import StepEvent
from specconsole.ui.console.app import ConsoleApp
from specconsole.ui.console.app_alerts import ConsoleAlerts
from specconsole.ui.console.console_screen import ConsoleScreen, ScreenHost
from specconsole.ui.panes.history import History
from specconsole.ui.registry import BY_ID, REGISTRY, REPLAY_REGISTRY, ActionSpec, registry_bindings

#: how often the replay clock moves (and the cursor applies what became due)
TICK_S = 0.1
SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)


class ReplayFleet:
    """The recording at the replay clock (``now``), moving at ``speed`` unless ``paused``."""

    def __init__(self, recording: Recording, start: float, speed: float = 1.0) -> None:
        self.recording = recording
        self.events = EventLog()
        self.now = min(max(start, recording.start), recording.end)
        self.speed = speed
        self.paused = False
        self.cursor = recording.cursor(self.now)
        self._listeners: list[ChangeListener] = []
        self._task: asyncio.Task[None] | None = None
        self._wall = time.monotonic()
        #: called after the clock jumped (a seek): the app redraws at once
        self.on_jump: Callable[[], None] | None = None

    @property
    def state(self) -> FleetState:
        return self.cursor.state

    def clock(self) -> float:
        return self.now

    def statuses(self) -> list[HostStatus]:
        return self.cursor.state.statuses()

    def subscribe(self, listener: ChangeListener) -> None:
        self._listeners.append(listener)

    def host(self, name: str) -> Host | None:
        return None  # nothing to act through: a replay touches no host

    def take_history(self) -> HistoryPoints:
        return {}

    async def start(self) -> None:
        self._wall = time.monotonic()
        self._task = asyncio.create_task(self._play(), name="replay")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _play(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            wall = time.monotonic()
            dt, self._wall = wall - self._wall, wall
            if not self.paused:
                self.play_to(self.now + dt * self.speed)

    # -- moving the clock ------------------------------------------------------------------
    def play_to(self, t: float) -> None:
        """Forward to ``t``: what became due is applied, its events shown in order."""
        end = self.recording.end
        self.now = min(t, end)
        self.cursor.advance(self.now)
        self._flush_events()
        if self.now >= self.recording.end and not self.paused:
            self.paused = True
            self.events.emit(self.recording.problem or "end of the recording", "replay",
                             "warning" if self.recording.problem else "info")

    def seek(self, t: float) -> None:
        """Jump to ``t`` (either way): the fleet as it was then; the events pane says where it jumped."""
        t = min(max(t, self.recording.start), self.recording.end)
        if t >= self.now:
            self.cursor.advance(t)
            self.cursor.new_events.clear()
        else:
            self.cursor = self.recording.cursor(t)
        self.now = t
        self.events.emit(f"replay: at {time.strftime('%H:%M:%S', time.localtime(t))}", "replay")
        self._notify()

    def step(self, seconds: float = 1.0) -> None:
        self.paused = True
        self.play_to(self.now + seconds)

    def next_event(self) -> bool:
        t = self.recording.next_event_after(self.now)
        if t is None:
            return False
        self.play_to(t)
        return True

    def _flush_events(self) -> None:
        events, self.cursor.new_events = self.cursor.new_events, []
        for event in events:
            self.events.replay(event)

    def _notify(self) -> None:
        """After a jump: the app redraws at once (playing, its own redraw every refresh_s follows)."""
        for name in self.cursor.state.hosts:
            for listener in list(self._listeners):
                listener(name, "connection")
        if self.on_jump is not None:
            self.on_jump()


def replay_config(state: FleetState, path: str) -> Config:
    """The recorded config (so the console is laid out as it was), else one made from the hosts
    the recording names."""
    if state.config_text:
        with contextlib.suppress(tomllib.TOMLDecodeError, ConfigError):
            return parse_config(tomllib.loads(state.config_text), f"{path} (recorded)")
    hosts: list[dict[str, Any]] = []
    for entry in state.hosts.values():
        host: dict[str, Any] = {"name": entry.name, "role": entry.role or "both"}
        if "sglang" in entry.expected:
            host["sglang"] = {"base_url": "http://127.0.0.1:1"}
        if "training" in entry.expected:
            host["training"] = {"log_path": "/recorded"}
        hosts.append(host)
    return parse_config({"hosts": hosts or [{"name": "nothing-recorded", "role": "both"}]}, f"{path} (hosts)")


class ReplayAlerts(ConsoleAlerts):
    """A replay's alerts: the ones the recording says were firing at the replay clock (in the
    summary bar as the console showed them); no rule is evaluated and nothing delivered (a replay
    rings no bell and posts no webhook)."""

    def __init__(self, fleet: ReplayFleet) -> None:  # no engine, no delivery
        self.fleet = fleet

    def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def tick(self, statuses: Iterable[HostStatus], now: float) -> None:
        pass

    def summary(self) -> str | None:
        alerts = self.fleet.state.alerts
        worst = self.fleet.state.worst_alert()
        if worst is None:
            return None
        more = f" +{len(alerts) - 1}" if len(alerts) > 1 else ""
        colour = "$error" if worst.level == "error" else "$warning"
        return f"[b {colour}]▲ {escape(f'{worst.name} on {worst.host}')}{more}[/]"


class TimelineBar(Static):
    """``REPLAY read-only ▶ 4x 12:03:04 ━━━━━●────── 12:00:00–12:30:00`` and the timeline's keys."""

    DEFAULT_CSS = """
    TimelineBar { dock: bottom; height: 1; background: $panel; color: $text; padding: 0 1; }
    """

    def show_at(self, fleet: ReplayFleet) -> None:
        rec = fleet.recording
        span = max(rec.end - rec.start, 1e-9)
        width = 24
        pos = round((fleet.now - rec.start) / span * (width - 1))
        bar = "━" * pos + "●" + "─" * (width - 1 - pos)
        mark = "⏸" if fleet.paused else "▶"
        hms = "%H:%M:%S"
        text = (f"REPLAY read-only {mark} {fleet.speed:g}x {time.strftime(hms, time.localtime(fleet.now))} {bar} "
                f"{time.strftime(hms, time.localtime(rec.start))}–{time.strftime(hms, time.localtime(rec.end))}"
                "  p pause · . step · [ ] 1m · { } 10m · n next · + - speed")
        self.update(escape(text))


def _title(action: str) -> str:
    for spec in REGISTRY:
        if spec.flow is not None and spec.step_action == action:
            return spec.description
    return "Eval run" if action == "eval" else action


class ReplayScreen(ConsoleScreen):
    """The console's screen with the timeline bar under it, redrawn with the panes."""

    def __init__(self, console: ScreenHost, replay: ReplayFleet) -> None:
        super().__init__(console)
        self.replay = replay

    def compose(self) -> ComposeResult:
        yield from super().compose()
        yield TimelineBar(id="timeline")

    def refresh_panes(self) -> None:
        super().refresh_panes()
        bar = self._one(TimelineBar)
        if bar is not None:
            bar.show_at(self.replay)


class ReplayApp(ConsoleApp):
    """The console on a recording (read-only, offline)."""

    KEY_REGISTRY: ClassVar[tuple[ActionSpec, ...]] = REGISTRY + REPLAY_REGISTRY
    OFFLINE: ClassVar[bool] = True
    BINDINGS: ClassVar[list[BindingType]] = [*ConsoleApp.BINDINGS, *registry_bindings(REPLAY_REGISTRY)]

    def __init__(self, fleet: ReplayFleet, config: Config, **kwargs: Any) -> None:
        super().__init__(config, fleet=fleet, read_only=True, clock=fleet.clock, **kwargs)
        self.replay = fleet
        self.alerts = ReplayAlerts(fleet)
        fleet.on_jump = self._jumped
        self.events.subscribe(self._replayed_step)

    def new_console_screen(self) -> ConsoleScreen:
        return ReplayScreen(self, self.replay)

    def unavailable_reason(self, action_id: str) -> str | None:
        if action_id in BY_ID or action_id not in {s.id for s in REPLAY_REGISTRY}:
            return super().unavailable_reason(action_id)
        return None

    def _jumped(self) -> None:
        self.history = History()  # the plots start again from the new time
        if self.is_running:
            self.refresh_panes()

    def _replayed_step(self, event: Event) -> None:
        """A recorded action step: into the action view as the console showed it."""
        data = step_fields(event)
        if data is None or not self.is_running:
            return
        message = event.message[2:] if data["kind"] == "command" and event.message.startswith("$ ") else event.message
        step = StepEvent(str(data["action"]), data["kind"], message, step=str(data.get("step") or ""),
                         host=event.source if event.source != data["action"] else "", command=data.get("command"),
                         exit_status=data.get("exit_status"), elapsed_s=float(data.get("elapsed_s") or 0.0),
                         took_s=data.get("took_s"), at=event.at, acceptance=_acceptance(data.get("acceptance")))
        panel = self.actions.action_panel
        track = panel.track
        if track is not None and track.action != step.action and not track.finished:
            panel.start(step.action, _title(step.action), step.host, self.clock())  # one cut off by a jump
        elif track is None or track.action != step.action or (track.finished and step.kind == "step"):
            self.actions.open(step.action, _title(step.action), step.host)
        self.actions.emit(step)

    # -- the timeline's keys ---------------------------------------------------------------
    def action_replay_pause(self) -> None:
        self.replay.paused = not self.replay.paused
        self.refresh_panes()

    def action_replay_step(self) -> None:
        self.replay.step(1.0)
        self.refresh_panes()

    def action_replay_back(self) -> None:
        self.replay.seek(self.replay.now - 60)

    def action_replay_forward(self) -> None:
        self.replay.seek(self.replay.now + 60)

    def action_replay_back_far(self) -> None:
        self.replay.seek(self.replay.now - 600)

    def action_replay_forward_far(self) -> None:
        self.replay.seek(self.replay.now + 600)

    def action_replay_next_event(self) -> None:
        if not self.replay.next_event():
            self.notify("no event after this point in the recording", timeout=3)
        self.refresh_panes()

    def action_replay_faster(self) -> None:
        self.replay.speed = next((s for s in SPEEDS if s > self.replay.speed), SPEEDS[-1])
        self.refresh_panes()

    def action_replay_slower(self) -> None:
        self.replay.speed = next((s for s in reversed(SPEEDS) if s < self.replay.speed), SPEEDS[0])
        self.refresh_panes()


def run_replay(recording: Recording, *, start: float, speed: float, theme: str | None) -> int:
    """``specconsole replay FILE``: until q."""
    import sys

    if not sys.stdout.isatty() or not sys.stdin.isatty():
        print("specconsole: replay needs a terminal; for the fleet at a time use `specconsole replay FILE --at T "
              "--json`", file=sys.stderr)
        return 2
    fleet = ReplayFleet(recording, start, speed)
    app = ReplayApp(fleet, replay_config(fleet.state, str(recording.path)), theme=theme, handle_signals=True)
    result = app.run()
    return int(result) if isinstance(result, int) else 0


def _acceptance(raw: object) -> tuple[tuple[str, AcceptanceDetail], ...]:
    """A recorded step's acceptance series (``audit`` writes ``[{label, histogram, ...}]``)."""
    if not isinstance(raw, list):
        return ()
    out = []
    for item in raw:
        detail = AcceptanceDetail.from_json(item) if isinstance(item, dict) else None
        if detail is not None:
            out.append((str(item.get("label") or ""), detail))
    return tuple(out)
