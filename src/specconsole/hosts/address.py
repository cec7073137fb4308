"""Addresses: ``user@host:port`` of a configured host, and an HTTP endpoint reached through a host.

One formatter for every place that names an SSH host (the connection's messages, the pane's
border, ``status``), and one way to turn an SGLang ``base_url`` into a URL that works from
this machine (directly, or through the host's SSH tunnel).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    from specconsole.config import HostConfig
    from specconsole.hosts.base import Host


def ssh_address(cfg: HostConfig) -> str:
    """``user@host:port``, the user and port only when configured."""
    user = f"{cfg.user}@" if cfg.user else ""
    port = f":{cfg.port}" if cfg.port else ""
    return f"{user}{cfg.host}{port}"


def url_endpoint(url: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of an http(s) URL; the port defaults to the scheme's (80, 443)."""
    parts = urlsplit(url)
    scheme = parts.scheme or "http"
    return scheme, parts.hostname or "127.0.0.1", parts.port or (443 if scheme == "https" else 80)


async def tunnel_url(host: Host, url: str) -> str:
    """``url`` rewritten to a local end of ``host``'s tunnel to the URL's host and port (path kept)."""
    scheme, target, port = url_endpoint(url)
    local_host, local_port = await host.reach(target, port)
    netloc = f"[{local_host}]:{local_port}" if ":" in local_host else f"{local_host}:{local_port}"
    return urlunsplit((scheme, netloc, urlsplit(url).path.rstrip("/"), "", ""))
