"""Starting an eval run: the core that ``specconsole eval run`` and the console's ``e`` share.

:func:`start_eval` loads the suite, finds the serving host's SGLang (through an SSH tunnel when
its ``sglang.tunnel`` is true) and runs and saves the suite against it. The console passes the
monitor's own, already connected host as ``connection`` so no second SSH connection is opened;
the command line opens (and closes) its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from specconsole.base.errors import ConfigError, HostUnavailable
from specconsole.eval.store import ResultStore
from specconsole.hosts.base import ConnState

if TYPE_CHECKING:
    from specconsole.config import Config, HostConfig
    from specconsole.eval.runner import OnResult
    from specconsole.eval.store import EvalRun
    from specconsole.hosts import Host
    from specconsole.steps import StepEvent

Emit = Callable[["StepEvent"], None]


def pick_serve_host(config: Config, name: str | None) -> HostConfig:
    candidates = config.serve_hosts
    if name:
        candidates = tuple(h for h in candidates if h.name == name)
    if not candidates:
        which = f"host {name!r}" if name else "host"
        raise ConfigError(config.path, "hosts", f"no serving {which} (role 'serve' or 'both' with [hosts.sglang])",
                          "add one, pass --host NAME, or measure a URL directly with --url")
    if len(candidates) > 1:
        names = ", ".join(h.name for h in candidates)
        raise ConfigError(config.path, "hosts", f"several serving hosts ({names})", "pick one with --host NAME")
    return candidates[0]


@contextlib.asynccontextmanager
async def serving_endpoint(config: Config, host_name: str | None = None,
                           emit_info: Callable[[str], None] | None = None, *,
                           connection: Host | None = None) -> AsyncIterator[tuple[str, str | None]]:
    """``(base URL reachable from here, api key)`` of the configured serving host's SGLang
    (``sglang.base_url`` is what messages and stored runs name).

    With ``sglang.tunnel = true`` the tunnel goes through ``connection`` (a host already started,
    e.g. the console's monitor of it; left open) or through a connection opened here (closed on exit).
    """
    from specconsole.hosts import make_host
    from specconsole.hosts.address import tunnel_url, url_endpoint

    cfg = pick_serve_host(config, host_name)
    sg = cfg.sglang
    assert sg is not None
    if not sg.tunnel:
        yield sg.base_url.rstrip("/"), sg.api_key
        return
    _scheme, target, port = url_endpoint(sg.base_url)
    own = connection is None
    host = make_host(cfg) if connection is None else connection
    try:
        if emit_info:
            lazy = host.status.state is ConnState.ON_DEMAND  # Prometheus-fed: not connected yet
            how = "connecting to" if own or lazy else "using the open connection to"
            emit_info(f"{how} {cfg.name} for a tunnel to {target}:{port}")
        if own:
            await host.start()
        if not await host.wait_connected(cfg.ssh.connect_timeout_s + 2):
            raise HostUnavailable(host.status.last_error or f"{cfg.name}: not reachable")
        url = await tunnel_url(host, sg.base_url)
        if emit_info:
            emit_info(f"tunnel {url} -> {cfg.name}:{target}:{port}")
        yield url, sg.api_key
    finally:
        if own:
            await host.close()


async def start_eval(config: Config | None, *, emit: Emit, on_result: OnResult | None = None,
                     url: str | None = None, host: str | None = None, label: str | None = None,
                     tasks: list[str] | None = None, concurrency: int = 1, max_new_tokens: int | None = None,
                     suite: str | None = None, results: str | None = None, timeout_s: float = 300.0,
                     api_key: str | None = None, connection: Host | None = None) -> EvalRun:
    """Run the suite against ``url`` or the configured serving host and save it (what ``e`` in the pane does).

    Progress goes to ``emit`` (one :class:`StepEvent` line per task); raises SpecConsoleError when
    nothing could be measured (no config/host, unreachable server). ``connection``: the serving
    host's open connection to tunnel through (see :func:`serving_endpoint`).
    """
    from specconsole.eval.runner import run_and_save
    from specconsole.eval.suite import load_suite
    from specconsole.steps import Steps

    bench = load_suite(suite).select(tasks)
    store = ResultStore(results)
    steps = Steps("eval", emit)
    if url:
        return await run_and_save(url.rstrip("/"), bench, store, steps=steps, label=label, concurrency=concurrency,
                                  max_new_tokens=max_new_tokens, timeout_s=timeout_s, api_key=api_key,
                                  on_result=on_result)
    if config is None:
        raise ConfigError("<no config>", None, "eval needs a serving host to measure",
                          "pass --config FILE, or --url http://HOST:PORT")
    steps.host = pick_serve_host(config, host).name
    async with serving_endpoint(config, host, steps.info, connection=connection) as (base, key):
        return await run_and_save(base, bench, store, steps=steps, label=label, concurrency=concurrency,
                                  max_new_tokens=max_new_tokens, timeout_s=timeout_s, api_key=api_key or key,
                                  on_result=on_result, source={"host": steps.host},
                                  display_url=pick_serve_host(config, host).sglang.base_url)  # type: ignore[union-attr]


