"""The event log's audit file: one JSON line per event, its folder made once (and again when it
was removed), a write problem said once."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from specconsole.base.events import EventLog


@dataclass(frozen=True)
class _Point:
    x: int
    label: str


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_each_event_is_one_json_line_with_its_data(tmp_path: Path) -> None:
    path = tmp_path / "state" / "audit.log"
    log = EventLog(path)
    first = log.emit("restarting sglang.service", "serve", "step", kind="step", exit_status=None,
                     where=Path("/etc/systemd/system/sglang.service"), points=[_Point(1, "a"), (2, 3)])
    log.emit("connected", "train")
    rows = _lines(path)
    assert rows[0] == {"message": "restarting sglang.service", "source": "serve", "level": "step", "at": first.at,
                       "data": {"kind": "step", "exit_status": None, "where": "/etc/systemd/system/sglang.service",
                                "points": [{"x": 1, "label": "a"}, [2, 3]]}}
    assert rows[1]["message"] == "connected" and rows[1]["data"] == {}
    assert log.audit_error is None


def test_a_folder_removed_while_running_is_made_again_and_no_event_is_lost(tmp_path: Path) -> None:
    path = tmp_path / "state" / "audit.log"
    log = EventLog(path)
    log.emit("one")
    shutil.rmtree(path.parent)
    log.emit("two")
    log.emit("three")
    assert [r["message"] for r in _lines(path)] == ["two", "three"]
    assert log.audit_error is None


def test_an_unwritable_audit_file_is_said_once_and_events_go_on_in_memory(tmp_path: Path) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("a file where the folder should be\n")
    log = EventLog(blocker / "audit.log")
    log.emit("one")
    log.emit("two")
    assert log.audit_error is not None and log.audit_error.startswith(f"audit log {blocker / 'audit.log'} not writable")
    assert log.audit_error.endswith("; set console.audit_log")
    assert [e.message for e in log.recent] == ["one", log.audit_error, "two"]
    assert blocker.read_text() == "a file where the folder should be\n"
