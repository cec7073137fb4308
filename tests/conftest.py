"""Shared fixtures: the lab (real sshd hosts on loopback, real systemctl, real torchrun).

``lab_hosts``: two SSH hosts only (cheap, one per test that breaks things).
``lab``: the whole lab, started once per session, for read-only checks against it.

Every test that starts lab parts (sshd, systemctl, torchrun, tmux) is marked ``lab``, so
``pytest -m "not lab"`` is the fast inner loop: the tests using the fixtures above, plus
:data:`LAB_TESTS`, which start them on their own.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from specconsole.lab.environment import Lab, LabOptions

SHARED = Path(__file__).resolve().parents[2] / "shared"

LAB_FIXTURES = frozenset({"lab", "lab_hosts"})
#: Node-id prefixes (below tests/) of tests that start lab parts without those fixtures.
LAB_TESTS = (
    "test_deploy.py",  # its own serving lab (sshd, systemctl, the SGLang simulator)
    "test_kill_training.py",  # its own training lab (sshd, torchrun)
    "test_ui_actions.py",  # its own whole lab
    "test_tmux_smoke.py",  # the demo in tmux
    "test_lab_trainer.py::test_torchrun_",  # a real torchrun job
    "test_status_cli.py::test_lab_cli_",  # `specconsole lab up` / `down`
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        node = item.nodeid.removeprefix("tests/")
        if LAB_FIXTURES & set(getattr(item, "fixturenames", ())) or node.startswith(LAB_TESTS):
            item.add_marker(pytest.mark.lab)


@pytest.fixture(autouse=True)
def _own_eval_results(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never read or write the user's eval results."""
    monkeypatch.setenv("SPECCONSOLE_EVAL_RESULTS", str(tmp_path_factory.mktemp("eval-results")))


def _need_sshd() -> None:
    if not shutil.which("sshd") and not Path("/usr/sbin/sshd").exists():
        pytest.fail("OpenSSH sshd is required for the lab tests: apt-get install -y openssh-server "
                    "(scripts/test.sh does this)")


@pytest.fixture
def lab_hosts(tmp_path: Path) -> Iterator[Lab]:
    """Two fresh SSH hosts (train, serve) with no training job and no SGLang."""
    _need_sshd()
    lab = Lab(tmp_path / "lab", LabOptions(trainer=False, sglang=False))
    lab.up()
    try:
        yield lab
    finally:
        lab.down()


FAST_LAB = LabOptions(
    trainer_steps=100_000, trainer_step_seconds=0.25, trainer_steps_per_epoch=500, trainer_epochs=6,
    sglang_startup_s=1.0, sglang_load_rps=4.0, sglang_step_ms=2.0,
    gpu_interval_s=0.5, sglang_interval_s=0.5,
)


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """The whole lab, shared by the session: do not break it (use lab_hosts for that)."""
    _need_sshd()
    lab = Lab(tmp_path_factory.mktemp("session") / "lab", FAST_LAB)
    lab.up()
    try:
        yield lab
    finally:
        lab.down()
