"""The action view: a panel docked above the footer whenever an action runs (kill, deploy, eval).

It shows the live step list built from the action's :class:`~specconsole.steps.StepEvent`
stream (one line per step: mark, name, elapsed, the step's latest command and outcome), the latest
heartbeat (what is being waited for, what was last seen), and one last line saying what state the
host is in now. It stays on screen after the action ends until the operator closes it (escape);
the full history stays in the Events pane and the audit log.

:class:`ActionTrack` is the model (pure: events in, rows out); :class:`ActionPanel` draws it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Self

from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.geometry import Region

from specconsole.actions.rollout.board import Board
from specconsole.sglang.acceptance import AcceptanceDetail
from specconsole.steps import StepEvent
from specconsole.ui.style.acceptance_plot import acceptance_plot
from specconsole.ui.style.formatting import escape
from specconsole.ui.widgets.text_block import TextBlock

#: Step marks: readable without colour.
MARKS = {"running": "▶", "ok": "✓", "failed": "✗", "warning": "!", "waiting": "…", "waited": "·"}
NAME_WIDTH = 24


@dataclass
class StepRow:
    """One step of an action as the panel shows it."""

    name: str
    started_at: float
    ended_at: float | None = None
    state: str = "running"  # running | ok | warning | failed
    command: str | None = None
    outcome: str | None = None
    wait: bool = False      # not a step: the time a dialog waited for the operator (its own line)

    def elapsed(self, now: float) -> float:
        return max(0.0, (self.ended_at if self.ended_at is not None else now) - self.started_at)


@dataclass
class ActionTrack:
    """An action's step list, built from its step events (see :meth:`feed`)."""

    title: str
    host: str
    started_at: float
    action: str = ""          # the Steps' action name (``deploy``, ``kill-training``, ``eval``)
    rows: list[StepRow] = field(default_factory=list)
    latest: str = ""          # the latest heartbeat (or, between heartbeats, the latest event)
    final: StepEvent | None = None
    count: int = 0            # events fed so far
    #: the latest acceptance detail an event carried (the smoke test's; the gate's beside the fleet's)
    acceptance: tuple[tuple[str, AcceptanceDetail], ...] = ()

    @property
    def finished(self) -> bool:
        return self.final is not None

    @property
    def ok(self) -> bool:
        return self.final is not None and self.final.kind == "done"

    def _row(self, name: str, at: float) -> StepRow:
        if self.rows and self.rows[-1].name == name and self.rows[-1].ended_at is None:
            return self.rows[-1]
        self._close(at)
        row = StepRow(name or "start", at)
        self.rows.append(row)
        return row

    def _close(self, at: float) -> None:
        if self.rows and self.rows[-1].ended_at is None:
            last = self.rows[-1]
            last.ended_at = at
            if last.state == "running":
                last.state = "ok"
            elif last.state == "waiting":
                last.state = "waited"

    def feed(self, event: StepEvent) -> None:
        self.count += 1
        if event.acceptance:
            self.acceptance = event.acceptance
        self.started_at = min(self.started_at, event.at - event.elapsed_s)
        if event.kind == "wait":  # the step before it ends here: the operator's time is no step's
            self._close(event.at)
            self.rows.append(StepRow(event.message, event.at, state="waiting", wait=True))
            self.latest = event.message
            return
        if event.kind == "waited":
            if self.rows and self.rows[-1].wait:
                self.rows[-1].name = event.message
            self._close(event.at)
            self.latest = event.message
            return
        if event.kind == "step":
            row = self._row(event.step or event.message, event.at)
            if event.message != row.name:
                row.outcome = event.message
            self.latest = event.message
            return
        if event.kind in ("done", "failed"):
            self.final = event
            if self.rows and self.rows[-1].ended_at is None:
                last = self.rows[-1]
                self._close(event.at)
                if event.kind == "failed" and not last.wait:
                    last.state = "failed"
            self.latest = event.message
            return
        name = event.step or next((r.name for r in reversed(self.rows) if not r.wait), "start")
        row = self._row(name, event.at)
        if event.kind == "command":
            row.command = event.message
            row.outcome = None
        elif event.kind == "result":
            row.outcome = event.message  # a probe's non-zero exit is not a problem by itself
        elif event.kind in ("info", "warning", "error"):
            row.outcome = event.message
            if event.kind == "error":
                row.state = "failed"
            elif event.kind == "warning" and row.state == "running":
                row.state = "warning"
        self.latest = event.message

    def status(self, now: float) -> str:
        """``running 12.3s`` / ``done in 25.1s`` / ``FAILED after 3.0s``."""
        if self.final is None:
            return f"running {now - self.started_at:.1f}s"
        took = self.final.at - self.started_at
        return f"done in {took:.1f}s" if self.ok else f"FAILED after {took:.1f}s"

    def step_lines(self, now: float, limit: int | None = None, width: int | None = None) -> list[str]:
        """One markup line per step: mark, name, elapsed, ``$ command → outcome``. With ``limit``
        and more steps than that, the earliest ones are named on one line instead (``✓ 6 earlier:
        read the unit, SGLang flags, …``), so that the latest step is always in view and every
        step's name is on screen at some point, however fast it was: a line longer than ``width``
        leaves out the earliest names (``✓ 9 earlier: …, draft model, constraints``), which were on
        screen before the latest ones."""
        out = self._lines(now)
        if limit is None or len(out) <= limit:
            return out
        cut = len(out) - max(1, limit) + 1
        hidden = [r for r in self.rows[:cut] if not r.wait]  # the operator's waits are no steps
        failed = any(r.state == "failed" for r in hidden)
        mark = f"[b $error]{MARKS['failed']}[/]" if failed else f"[b $success]{MARKS['ok']}[/]"
        head, names = f"{len(hidden)} earlier: ", [r.name for r in hidden]
        while width is not None and len(names) > 1 and 2 + len(head) + len(", ".join(["…", *names])) > width:
            names = names[1:]
        if len(names) < len(hidden):
            names = ["…", *names]
        return [f"{mark} [$text-muted]{escape(head + ', '.join(names))}[/]", *out[cut:]]

    def _lines(self, now: float) -> list[str]:
        out = []
        for row in self.rows:
            if row.wait:  # the operator's time: a line of its own, no step time column
                text = row.name if row.ended_at is not None else f"{row.name} ({row.elapsed(now):.1f} s)"
                out.append(f"[$text-muted]{MARKS[row.state]} {escape(text)}[/]")
                continue
            state = row.state if row.ended_at is not None or row.state != "running" else "running"
            mark = MARKS.get(state, "·")
            colour = {"ok": "$success", "failed": "$error", "warning": "$warning", "running": "$accent"}[state]
            detail = []
            if row.command:
                detail.append(f"$ {row.command}")
            if row.outcome:
                detail.append(row.outcome)
            text = escape(" → ".join(detail))
            name = escape(row.name.ljust(NAME_WIDTH))
            out.append(f"[b {colour}]{mark}[/] [b]{name}[/] {row.elapsed(now):6.1f}s  [$text-muted]{text}[/]")
        return out


class ActionPanel(Vertical):
    """The docked panel drawing an :class:`ActionTrack`; hidden until an action starts.

    A redraw (each event, and each refresh; a heartbeat, at least every 0.5 s, waits for the next
    refresh when refreshes come at least once a second: ``heartbeats_wait``) repaints only what changed:
    its lines are :class:`TextBlock` s (the changed rows; a relayout only when a height changes),
    and the border's title, subtitle, classes and height are set only when they change
    (``Static.update`` laid the whole screen out). A new title (its clock ticks every second)
    repaints the border's top row, a new subtitle its bottom row, not the whole panel: Textual
    repaints a widget whole when its title is set, and with it every line of the panel's children."""

    def __init__(self, heartbeats_wait: Callable[[], bool] = lambda: False, **kwargs: Any) -> None:
        super().__init__(classes="pane action-panel", **kwargs)
        self.track: ActionTrack | None = None
        self.state_fn: Callable[[], str] | None = None
        #: a rollout's one line per replica (:class:`~specconsole.actions.rollout.board.Board`): shown
        #: instead of the step list; the replicas' events go to it, the rollout's own to the track
        self.board: Board | None = None
        self._shown_shape: tuple[int, int] = (-1, -1)
        self._titles: tuple[str, str] | None = None
        self._border_row: str | None = None  # "top"/"bottom": a repaint asked for now needs only that row
        #: whether a heartbeat waits for the screen's next redraw (the screen's answer: it redraws at
        #: least once a second): it then costs no frame of its own, and is on screen within a second
        self.heartbeats_wait = heartbeats_wait

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="action-scroll"):
            yield TextBlock("", id="action-steps")
        yield TextBlock("", id="action-latest")
        yield TextBlock("", id="action-state")

    @property
    def busy(self) -> bool:
        """An action is shown and still running."""
        return self.track is not None and not self.track.finished

    def start(self, action: str, title: str, host: str, now: float,
              state: Callable[[], str] | None = None) -> ActionTrack:
        """Show a new action (replacing a finished one)."""
        self.track = ActionTrack(title, host, now, action=action)
        self.state_fn = state
        self.board = None
        self._shown_shape = (-1, -1)
        self.display = True
        self.redraw(now)
        return self.track

    def replica_event(self, event: StepEvent) -> bool:
        """``event`` is one replica's in a rollout (the rollout's own steps carry no host): its
        done/failed ends that replica's part, not the action."""
        return event.action == "rollout" and bool(event.host)

    def feed(self, event: StepEvent) -> bool:
        """Show ``event`` if it belongs to the action shown (False: it does not)."""
        if self.track is None or (self.track.action and event.action != self.track.action):
            return False
        if self.replica_event(event):  # its board line (a replay has no board), and the latest line
            if self.board is not None:
                self.board.feed(event)
            self.track.count += 1
            if event.acceptance:
                self.track.acceptance = event.acceptance
            self.track.latest = f"{event.host}: {event.message}"
        else:
            self.track.feed(event)
        if event.kind != "heartbeat" or not self.heartbeats_wait():
            self.redraw(event.at)
        return True

    def close(self) -> bool:
        """Hide the panel; refused (False) while its action still runs."""
        if self.track is not None and not self.track.finished:
            return False
        self.display = False
        return True

    @property
    def state_line(self) -> str:
        if self.state_fn is None:
            return ""
        try:
            return self.state_fn()
        except Exception as err:  # a status that cannot be read must not take the console down
            return f"host state unknown ({type(err).__name__}: {err})"

    def redraw(self, now: float) -> None:
        track = self.track
        if track is None or not self.is_mounted:
            return
        title = f"{escape(track.title)} · {track.status(now)}"
        subtitle = "esc: close · history in Events" if track.finished else "live"
        if self.has_class("-failed") != (track.finished and not track.ok):
            self.set_class(track.finished and not track.ok, "-failed")
        if self.has_class("-ok") != (track.finished and track.ok):
            self.set_class(track.finished and track.ok, "-ok")
        latest = track.latest
        latest_rows = (2 if len(latest) > self.size.width - 8 else 1) if latest else 0
        state = self.state_line
        tall = self.screen.has_class("-tall") if self.is_attached else False
        board = self.board
        steps = self.query_one("#action-steps", TextBlock)
        # the acceptance plot (the smoke test's, the gate's) below the steps or the board, which stay
        # in view (the step list is cut to the panel's rows); the scroll holds the rest of the plot
        plot = acceptance_plot(track.acceptance, width=min(80, max(40, steps.size.width or 80))) \
            if track.acceptance else []
        wanted = (len(board.replicas) + 1 if board is not None else len(track.rows)) + max(1, latest_rows) + 3 \
            + len(plot)
        height = max(6, min(16 if tall else 12, wanted))
        rows = height - 2 - latest_rows - (1 if state else 0)  # inside the border, above the last lines
        if board is not None:  # one line per replica (the scroll shows the ones past the panel's height);
            # the rollout's own step is in the title
            lines = [escape(line) for line in board.lines(max(20, steps.size.width or 80), now=now)]
            if track.rows:
                title += f" · {escape(track.rows[-1].name)}"
        else:
            lines = track.step_lines(now, rows, width=steps.size.width or None)
        lines += [escape(line) for line in plot]
        if self._titles != (title, subtitle):
            before, self._titles = self._titles or (None, None), (title, subtitle)
            try:
                if title != before[0]:
                    self._border_row = "top"
                    self.border_title = title
                if subtitle != before[1]:
                    self._border_row = "bottom"
                    self.border_subtitle = subtitle
            finally:
                self._border_row = None
        steps.set("\n".join(lines) or "starting…")
        mark = "✓ " if track.ok else ("✗ " if track.finished else "… ")
        self.query_one("#action-latest", TextBlock).set(f"[$text-muted]{escape(mark + latest)}[/]" if latest else "")
        self.query_one("#action-state", TextBlock).set(f"[b]▸ {escape(state)}[/]" if state else "")
        if self.styles.height is None or self.styles.height.value != height:
            self.styles.height = height
        shape = (len(track.rows), len(lines))  # what can bring a new line (a heartbeat does not)
        if shape != self._shown_shape:
            self._shown_shape = shape
            scroll = self.query_one("#action-scroll", VerticalScroll)
            # the steps (or the board) stay in view; an acceptance plot is below them, for the scroll
            if plot:
                self.call_after_refresh(scroll.scroll_home, animate=False)
            else:  # the newest line into view, once the new lines are laid out (the end in view: no scroll)
                self.call_after_refresh(self._steps_to_end)

    def refresh(self, *regions: Region, repaint: bool = True, layout: bool = False,
                recompose: bool = False) -> Self:
        """Textual's, except that a whole-widget repaint asked for while a title is set repaints
        the border row it is drawn on (the title's top row, the subtitle's bottom row)."""
        row = self._border_row
        if row is not None and not regions and repaint and not layout and not recompose and self.is_mounted:
            width, height = self.outer_size
            left, top = self.content_offset  # the regions are in content coordinates
            if width and height:
                regions = (Region(-left, (0 if row == "top" else height - 1) - top, width, 1),)
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def _steps_to_end(self) -> None:
        scroll = self.query_one("#action-scroll", VerticalScroll)
        if scroll.scroll_y < scroll.max_scroll_y:
            scroll.scroll_end(animate=False)

    @property
    def text(self) -> str:
        """Plain text of the panel (tests)."""
        parts = [str(self.query_one(f"#{i}", TextBlock).render()) for i in ("action-steps", "action-latest",
                                                                               "action-state")]
        return "\n".join(parts)
