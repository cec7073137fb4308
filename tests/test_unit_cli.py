"""The one "read the unit's SGLang CLI" step: the deploy form's algorithm discovery and preflight read
the unit and its program's --help the same way (issue 35 item 4; no lab: a host that answers from a script)."""

from __future__ import annotations

from importlib.resources import files

import pytest

from specconsole.actions.deploy.preflight import DeployRefused, DeployRequest, preflight
from specconsole.actions.deploy.unit_cli import read_unit_cli
from specconsole.config import HostConfig, parse_config
from specconsole.hosts.base import CommandResult
from specconsole.hosts.commands import Command, to_shell
from specconsole.hosts.local import LocalHost
from specconsole.steps import StepEvent, Steps
from specconsole.ui.flows.flows import discover_algorithms

HELP = files("specconsole.lab.data").joinpath("serve-help-0.5.23.txt").read_text()
UNIT = """# /etc/systemd/system/sglang.service
[Service]
EnvironmentFile=/etc/sglang.env
ExecStart=${PY} -m sglang.launch_server --model-path /m/target --speculative-algorithm NEXTN
"""


class ScriptedHost(LocalHost):
    """Answers the unit, its environment file and the --help of the program the file names."""

    def __init__(self, config: HostConfig, unit: str | None = UNIT) -> None:
        super().__init__(config)
        self.unit = unit
        self.ran: list[str] = []

    async def run(self, cmd: Command, *, timeout: float = 30.0, input: str | None = None) -> CommandResult:
        line = to_shell(cmd)
        self.ran.append(line)
        answers: dict[str, str | None] = {"systemctl cat -- sglang.service": self.unit,
                                          "cat -- /etc/sglang.env": "PY=/opt/sglang/bin/python\n",
                                          "/opt/sglang/bin/python -m sglang.launch_server --help": HELP}
        out = answers.get(line)
        return CommandResult(line, 0 if out is not None else 1, out or "", "" if out is not None else "no", 0.01)


def config() -> HostConfig:
    return parse_config({"hosts": [{"name": "serve", "role": "serve", "connect": "local",
                                    "sglang": {"base_url": "http://127.0.0.1:30000"}}]}, "<test>").host("serve")


async def test_discovery_and_preflight_read_the_unit_and_its_help_alike() -> None:
    cfg = config()
    events: list[StepEvent] = []
    host = ScriptedHost(cfg)
    found = await discover_algorithms(host, cfg, Steps("deploy", events.append, host="serve"))
    assert found[:3] == ["EAGLE", "EAGLE3", "NEXTN"] and "DFLASH" in found
    # the program comes from the EnvironmentFile, as systemd (and preflight) expand it
    read = ["systemctl cat -- sglang.service", "cat -- /etc/sglang.env",
            "/opt/sglang/bin/python -m sglang.launch_server --help"]
    assert host.ran == read
    assert [e.step for e in events if e.kind == "step"] == ["discover algorithms"]
    assert any(e.kind == "info" and "--speculative-algorithm choices: EAGLE" in e.message for e in events)

    host.ran.clear()
    plan = await preflight(host, cfg, DeployRequest(), Steps("deploy", lambda _e: None, host="serve"))
    assert host.ran[:3] == read and plan.old_argv[0] == "/opt/sglang/bin/python"
    got = await read_unit_cli(host, cfg, Steps("deploy", lambda _e: None, host="serve"))
    assert got.prefix == ["/opt/sglang/bin/python", "-m", "sglang.launch_server"] and got.cli.algorithms() == found
    assert got.base is got.unit  # no drop-in of the console's


async def test_an_unreadable_unit_is_refused_by_preflight_and_discovery_falls_back() -> None:
    cfg = config()
    events: list[StepEvent] = []
    host = ScriptedHost(cfg, unit=None)
    assert await discover_algorithms(host, cfg, Steps("deploy", events.append, host="serve")) == []
    warned = [e.message for e in events if e.kind == "warning"]
    assert warned == ["serve: `systemctl cat sglang.service` failed: no; check sglang.unit in the config; "
                      "offering DFLASH, NEXTN"]
    with pytest.raises(DeployRefused, match=r"`systemctl cat sglang\.service` failed") as err:
        await preflight(host, cfg, DeployRequest(), Steps("deploy", lambda _e: None, host="serve"))
    assert err.value.field is None
