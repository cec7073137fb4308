"""Who may open a console session in a browser: the token, the Host and Origin, the cap.

textual-serve has no access control of its own, and every session is a whole console on the
operator's hosts, so a request is let in only when all of these hold:

* the **token**, random per launch (:func:`new_token`), is in the URL: ``/?token=T`` for the page,
  ``/ws/T`` for the websocket (the page's script appends ``?width=..&height=..`` to that URL);
* the **Host** header names this server as the operator reaches it (loopback names on its port,
  or ``--public-url``'s): a page on another name that resolves to 127.0.0.1 (DNS rebinding) is out;
* on the websocket, the **Origin** is exactly ``http://`` + that Host (``https://`` behind a TLS
  ``--public-url``): a page of another site, open in the same browser, cannot drive a session
  (cross-site websocket hijacking) even where it learnt the token;
* fewer than ``max_sessions`` sessions are open.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from dataclasses import dataclass, field
from urllib.parse import urlsplit

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def new_token() -> str:
    """A fresh launch token (32 bytes of randomness, URL-safe)."""
    return secrets.token_urlsafe(32)


def is_loopback(address: str) -> bool:
    """Whether a bind address only listens on this machine."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Refusal:
    """A refused request: the HTTP status and the one line the browser (and the log) gets."""

    status: int
    reason: str


@dataclass
class Gate:
    """The checks of one launch (see the module's docstring)."""

    token: str
    port: int
    bind: str = "127.0.0.1"
    public_url: str | None = None
    max_sessions: int = 4
    open_sessions: set[str] = field(default_factory=set)

    def hosts(self) -> set[str]:
        """The Host header values that name this server."""
        names = {f"{n}:{self.port}" for n in LOOPBACK_NAMES}
        if not is_loopback(self.bind) and self.bind not in ("0.0.0.0", "::"):
            names.add(f"{self.bind}:{self.port}" if ":" not in self.bind else f"[{self.bind}]:{self.port}")
        if self.public_url:
            names.add(urlsplit(self.public_url).netloc)
        return names

    def scheme(self) -> str:
        return "https" if (self.public_url or "").startswith("https:") else "http"

    def token_ok(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def check_page(self, host: str | None, token: str | None) -> Refusal | None:
        """The page (``GET /?token=T``)."""
        if host not in self.hosts():
            return Refusal(421, f"specconsole web: this server does not answer to the name {host!r} "
                                f"(open it as http://127.0.0.1:{self.port}/ through your SSH tunnel)")
        if not self.token_ok(token):
            return Refusal(403, "specconsole web: this page needs its launch token: open the URL that "
                                "`specconsole web` printed (…/?token=…)")
        return None

    def check_websocket(self, host: str | None, origin: str | None, token: str | None) -> Refusal | None:
        """A session's websocket (``GET /ws/T``): the token, the Host, the exact Origin, the cap."""
        if not self.token_ok(token):
            return Refusal(403, "specconsole web: wrong or missing launch token on the websocket")
        if host not in self.hosts():
            return Refusal(421, f"specconsole web: websocket to an unknown name {host!r}")
        if origin != f"{self.scheme()}://{host}":
            return Refusal(403, f"specconsole web: websocket from a foreign origin {origin!r} refused "
                                f"(only {self.scheme()}://{host} may open a session)")
        if len(self.open_sessions) >= self.max_sessions:
            return Refusal(503, f"specconsole web: {len(self.open_sessions)} sessions are open, the most "
                                f"--max-sessions allows; close one and reload")
        return None
