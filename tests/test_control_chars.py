"""Control and bidi characters are refused in host names and shown, never obeyed (issue 24 item 14).

A host name (or a GPU name, a process's command line, an error a host sent) holding an ANSI
escape, a newline, NUL or U+202E RIGHT-TO-LEFT OVERRIDE used to be printed raw: it could clear
the terminal, fake a line or reverse what follows. The config refuses them in host names; every
string a host or the config provides is shown through one helper (``values.printable``).
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

import sample_data as sd
from conftest import wait_for
from specconsole.base.errors import ConfigError
from specconsole.base.samples import Sample
from specconsole.base.values import printable
from specconsole.config import parse_config
from specconsole.hosts import ConnState
from specconsole.report import status_text
from specconsole.ui.console.app import ConsoleApp
from specconsole.ui.console.provider import FixedStatuses
from specconsole.ui.style.themes import BUNDLED_DIR, load_themes

RAW = ("\x1b", "\x00", "\u202e", "\x9b")


def test_printable_shows_each_control_and_bidi_character_as_an_escape() -> None:
    assert printable("gpu\x1b[2J\n\x00\t\u202eevil\x9b1") == "gpu\\x1b[2J\\n\\x00\\t\\u202eevil\\x9b1"
    assert printable("line one\nline\x1b two", newlines=True) == "line one\nline\\x1b two"
    assert printable("NVIDIA H200 · 96 %") == "NVIDIA H200 · 96 %"  # other non-ASCII text is left alone


@pytest.mark.parametrize(("name", "shown"), [("gpu\x1b[31m1", "\\x1b"), ("gpu\n1", "\\n"), ("gpu\x001", "\\x00"),
                                             ("gpu\u202e1", "\\u202e")])
def test_a_host_name_with_a_control_or_bidi_character_is_refused(name: str, shown: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"hosts": [{"name": name, "role": "train", "training": {"log_path": "/x"}}]}, "c.toml")
    escaped = printable(name)
    assert str(err.value) == (f"c.toml: hosts[0] ({escaped}).name: holds the control character {shown} in "
                              f"'{escaped}' (it would print as something else) (fix: use letters, digits, '-', "
                              f"'_' and '.', e.g. gpu1)")


def test_the_cli_refuses_it_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[[hosts]]\nname = "gpu\\n\\u001b[2J\\u202e1"\nrole = "train"\n'
                      '[hosts.training]\nlog_path = "/x"\n')
    res = subprocess.run([sys.executable, "-m", "specconsole", "status", "--config", str(config)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.splitlines()) == 1 and "holds the control character \\n" in res.stderr
    assert not any(ch in res.stderr for ch in RAW)


def hostile_statuses() -> list[object]:
    """The sample fleet, with what a hostile or broken host could send: a GPU name that clears
    the screen and reverses text, a command line with an escape, an error with a CSI byte."""
    train, serve = sd.sample_statuses()
    gpu = train.gpu
    assert gpu is not None
    readings = (dataclasses.replace(gpu.value.gpus[0], name="H200\x1b[2J\u202eevil"), *gpu.value.gpus[1:])
    procs = (dataclasses.replace(gpu.value.processes[0], name="python\x1b]0;owned\x07"), *gpu.value.processes[1:])
    train = dataclasses.replace(train, gpu=Sample(dataclasses.replace(gpu.value, gpus=readings, processes=procs),
                                                  at=gpu.at, interval=gpu.interval))
    serve = dataclasses.replace(serve, connection=dataclasses.replace(
        serve.connection, state=ConnState.DOWN, last_error="serve: refused\x9b2J\u202eyou"))
    return [train, serve]


def test_status_prints_host_strings_escaped() -> None:
    text = status_text(hostile_statuses(), now=sd.FROZEN_NOW)  # type: ignore[arg-type]
    assert "H200\\x1b[2J\\u202eevil" in text
    assert "serve: refused\\x9b2J\\u202eyou" in text
    assert not any(ch in text for ch in (*RAW, "\x07"))


async def test_the_console_shows_host_strings_escaped(tmp_path: Path) -> None:
    events = sd.sample_events()
    events.emit("train: tail said \x1b[2J\u202eboo", "train", "warning")
    app = ConsoleApp(sd.sample_config(str(tmp_path / "state")), fleet=FixedStatuses(hostile_statuses(), events),  # type: ignore[arg-type]
                     clock=lambda: sd.FROZEN_NOW, themes=load_themes([BUNDLED_DIR]))
    async with app.run_test(size=(200, 50)) as pilot:
        await wait_for(lambda: all(part in app.screen_text() for part in ("H200", "tail said")), 10,
                       what="the GPU name and the event on screen", pilot=pilot)
        screen = app.screen_text()
        assert "H200\\x1b[2J" in screen, screen
        assert "tail said \\x1b[2J\\u202eboo" in screen, screen
        assert not any(ch in screen for ch in (*RAW, "\x07"))
