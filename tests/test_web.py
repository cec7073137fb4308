"""``specconsole web`` (issue 33): the console in a real browser, and who may open it.

The browser is Debian's Chromium, headless, driven by playwright (which downloads no browser of
its own). Chromium runs with ``--disable-3d-apis``: without WebGL the page's xterm.js draws with its
DOM renderer, so the terminal's text can be read from the page (``.xterm-rows``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import wait_for
from specconsole.lab.parts.environment import Lab
from specconsole.lab.parts.state import free_port
from specconsole.web.access import Gate, is_loopback

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-3d-apis", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions"]
#: where the README's screenshot is written when set (docs/screenshot-web.png)
SCREENSHOT_ENV = "SPECCONSOLE_WEB_SCREENSHOT"


# --- the gate alone -------------------------------------------------------------------------

def test_the_gate_lets_in_only_the_token_the_served_names_and_their_own_origin() -> None:
    gate = Gate("t0ken", 8000, max_sessions=2)
    assert gate.check_page("127.0.0.1:8000", "t0ken") is None
    assert gate.check_page("localhost:8000", "t0ken") is None
    assert gate.check_page("127.0.0.1:8000", "t0ke") == gate.check_page("127.0.0.1:8000", None)
    assert gate.check_page("127.0.0.1:8000", None).status == 403  # type: ignore[union-attr]
    rebound = gate.check_page("evil.example:8000", "t0ken")  # DNS rebinding: a foreign name for 127.0.0.1
    assert rebound is not None and rebound.status == 421
    assert gate.check_websocket("127.0.0.1:8000", "http://127.0.0.1:8000", "t0ken") is None
    assert gate.check_websocket("localhost:8000", "http://localhost:8000", "t0ken") is None
    for origin in ("http://evil.example", "http://127.0.0.1:8001", "https://127.0.0.1:8000", "null", None,
                   "http://localhost:8000"):  # the page's own origin is the Host it was loaded from
        refused = gate.check_websocket("127.0.0.1:8000", origin, "t0ken")
        assert refused is not None and refused.status == 403 and "foreign origin" in refused.reason, origin
    assert gate.check_websocket("127.0.0.1:8000", "http://127.0.0.1:8000", "wrong").status == 403  # type: ignore[union-attr]
    gate.open_sessions.update({"web-1", "web-2"})
    full = gate.check_websocket("127.0.0.1:8000", "http://127.0.0.1:8000", "t0ken")
    assert full is not None and full.status == 503 and "--max-sessions" in full.reason
    proxied = Gate("t", 8000, public_url="https://ops.example.org")
    assert proxied.check_websocket("ops.example.org", "https://ops.example.org", "t") is None
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")


# --- the server ------------------------------------------------------------------------------

@dataclass
class WebServer:
    """A running ``specconsole web``: its URL (with the token) and what it printed."""

    proc: subprocess.Popen[str]
    port: int
    url: str = ""
    lines: list[str] = field(default_factory=list)

    @property
    def token(self) -> str:
        return self.url.rsplit("token=", 1)[1]

    def output(self) -> str:
        return "\n".join(self.lines)


def start_web(config: Path, *extra: str, env: dict[str, str] | None = None) -> WebServer:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "specconsole", "web", "--config", str(config), "--port", str(port),
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env or dict(os.environ))
    server = WebServer(proc, port)

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            server.lines.append(line.rstrip("\n"))

    threading.Thread(target=read, daemon=True).start()
    found = bool(wait_for(lambda: any("token=" in ln for ln in server.lines) or proc.poll() is not None, 60, step=0.1))
    url = next((m.group(0) for ln in server.lines if (m := re.search(r"http://\S+token=\S+", ln))), "")
    if not (found and url):
        stop_web(server)  # never left running by a failed start
        pytest.fail(f"specconsole web did not start:\n{server.output()}")
    server.url = url
    return server


def stop_web(server: WebServer) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(30)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait(10)


@pytest.fixture
def web(lab: Lab) -> Iterator[WebServer]:
    """``specconsole web`` on the shared lab, read-only (the default)."""
    server = start_web(lab.config_path)
    yield server
    stop_web(server)


def audit_events(lab: Lab) -> list[dict[str, object]]:
    from specconsole.config import load_config

    path = Path(load_config(lab.config_path).console.audit_log).expanduser()
    lines = path.read_text().splitlines() if path.exists() else []
    return [e for e in map(json.loads, lines) if e.get("source") == "web"]


@pytest.fixture
def browser() -> Iterator[object]:
    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium is required: apt-get install -y chromium (scripts/setup.sh does this)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def terminal_text(page: object) -> str:
    """The terminal's rows as the page shows them (xterm.js's DOM renderer)."""
    return str(page.evaluate(  # type: ignore[attr-defined]
        "() => { const r = document.querySelector('.xterm-rows'); return r ? r.innerText : ''; }"))


def open_console(browser: object, url: str, seen: dict[str, str]) -> object:
    """A page on the console at 1280x800, once both host panes hold GPU readings."""
    page = browser.new_page(viewport={"width": 1280, "height": 800})  # type: ignore[attr-defined]
    page.goto(url)

    def ready() -> bool:
        seen["text"] = text = terminal_text(page)
        return "train" in text and "serve" in text and text.count("H200") >= 2 and "step" in text

    assert wait_for(ready, 90, step=0.5), f"the console never showed both hosts in the page:\n{seen.get('text')}"
    return page


@pytest.mark.usefixtures("lab_parts")
def test_a_browser_shows_the_console_on_the_lab_read_only(lab: Lab, web: WebServer, browser: object,
                                                          tmp_path: Path) -> None:
    seen: dict[str, str] = {}
    page = open_console(browser, web.url, seen)
    shot = Path(os.environ.get(SCREENSHOT_ENV) or tmp_path / "web.png")
    page.screenshot(path=str(shot))  # type: ignore[attr-defined]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    text = seen["text"]
    footer = text.splitlines()[-1]
    assert "Help" in footer and "Kill training" not in footer and "Deploy" not in footer, footer
    page.focus(".xterm-helper-textarea")  # type: ignore[attr-defined]  # where xterm.js takes keys (no click)
    page.keyboard.press("k")  # type: ignore[attr-defined]
    # the read-only refusal, in the console's own words (its events pane), read from the page
    assert wait_for(lambda: "kill training: unavailable: removed in read-only mode" in terminal_text(page), 30,
                    step=0.3), terminal_text(page)
    after = terminal_text(page)
    assert "Cancel" not in after and "kill plan" not in after.lower(), after  # no confirm, no form
    assert "read-only" in web.output() and "web-1 opened from 127.0.0.1" in web.output(), web.output()
    page.close()  # type: ignore[attr-defined]
    assert wait_for(lambda: "web-1 closed after" in web.output(), 30, step=0.2), web.output()
    said = [str(e["message"]) for e in audit_events(lab)]
    assert any(m.startswith("web: web-1 opened from 127.0.0.1") for m in said), said
    assert any(m.startswith("web: web-1 closed after") for m in said), said


class _Foreign(BaseHTTPRequestHandler):
    """Another site's page on the same laptop: it knows (or guessed) the token and tries a session."""

    target = ""

    def do_GET(self) -> None:
        body = (f"<html><body><p id=state>trying</p><script>const ws = new WebSocket({self.target!r});"
                "ws.onopen = () => document.getElementById('state').textContent = 'OPEN';"
                "ws.onclose = () => { const s = document.getElementById('state');"
                " if (s.textContent !== 'OPEN') s.textContent = 'REFUSED'; };</script></body></html>").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.usefixtures("lab_parts")
def test_a_wrong_token_a_foreign_origin_and_one_session_too_many_are_refused(
        lab: Lab, browser: object, tmp_path: Path) -> None:
    web = start_web(lab.config_path, "--max-sessions", "1")
    foreign = ThreadingHTTPServer(("127.0.0.1", 0), _Foreign)
    _Foreign.target = f"ws://127.0.0.1:{web.port}/ws/{web.token}?width=80&height=24"
    threading.Thread(target=foreign.serve_forever, daemon=True).start()
    try:
        page = browser.new_page()  # type: ignore[attr-defined]
        wrong = page.goto(web.url.replace(web.token, "not-the-token"))
        assert wrong.status == 403 and "needs its launch token" in page.inner_text("body")
        bare = page.goto(web.url.split("?")[0])
        assert bare.status == 403

        evil = f"http://127.0.0.1:{foreign.server_address[1]}/"
        page.goto(evil)
        assert wait_for(lambda: page.inner_text("#state") != "trying", 30, step=0.2)
        assert page.inner_text("#state") == "REFUSED"
        assert f"refused a session from 127.0.0.1: specconsole web: websocket from a foreign origin " \
               f"'{evil.rstrip('/')}' refused" in web.output(), web.output()

        seen: dict[str, str] = {}
        first = open_console(browser, web.url, seen)
        second = browser.new_page()  # type: ignore[attr-defined]
        second.goto(web.url)
        assert wait_for(lambda: "sessions are open, the most --max-sessions allows" in web.output(), 30, step=0.2)
        assert "web-2" not in web.output()  # never opened
        first.close()  # type: ignore[attr-defined]
        second.close()  # type: ignore[attr-defined]
        refusals = [str(e["message"]) for e in audit_events(lab) if e.get("level") == "warning"]
        assert any("foreign origin" in m for m in refusals) and any("--max-sessions" in m for m in refusals)
        assert any("launch token" in m for m in refusals), refusals
    finally:
        foreign.shutdown()
        stop_web(web)


@pytest.mark.usefixtures("lab_parts")
def test_allow_actions_gives_the_browser_kill_and_deploy(lab: Lab, browser: object) -> None:
    web = start_web(lab.config_path, "--allow-actions")
    try:
        seen: dict[str, str] = {}
        page = open_console(browser, web.url, seen)
        footer = seen["text"].splitlines()[-1]
        assert "Kill training" in footer and "Deploy" in footer, footer
        assert "actions allowed (--allow-actions)" in web.output()
        page.focus(".xterm-helper-textarea")  # type: ignore[attr-defined]
        page.keyboard.press("k")  # type: ignore[attr-defined]  # the kill plan, Cancel focused; escape leaves it
        assert wait_for(lambda: "Cancel" in terminal_text(page), 60, step=0.3), terminal_text(page)
        page.keyboard.press("Escape")  # type: ignore[attr-defined]
        assert wait_for(lambda: "Cancel" not in terminal_text(page), 30, step=0.3), terminal_text(page)
        page.close()  # type: ignore[attr-defined]
    finally:
        stop_web(web)


def test_a_non_loopback_address_needs_a_flag_and_gets_a_warning(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[[hosts]]\nname = "local"\nrole = "serve"\nconnect = "local"\n[hosts.gpu]\nsource = "none"\n'
                      '[hosts.sglang]\nbase_url = "http://127.0.0.1:30000"\n')
    refused = subprocess.run([sys.executable, "-m", "specconsole", "web", "--config", str(config), "--bind", "0.0.0.0"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and len(refused.stderr.splitlines()) == 1, refused.stderr
    assert "--bind 0.0.0.0 listens beyond this machine" in refused.stderr and "--allow-remote" in refused.stderr
    web = start_web(config, "--bind", "0.0.0.0", "--allow-remote")
    try:
        assert "warning: listening on 0.0.0.0" in web.output(), web.output()
    finally:
        stop_web(web)

