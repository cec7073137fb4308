"""Shared fixtures: the lab (real sshd hosts on loopback, real systemctl, real torchrun).

``lab_hosts``: two SSH hosts only (cheap, one per test that breaks things).
``lab``: the whole lab, started once per session, for read-only checks against it.
:func:`running_lab`: THE way a test builds a lab of its own (a fixture's ``yield from``).
:class:`wait_for`: THE polling wait, for plain and async tests alike.

Every test that starts lab parts (sshd, systemctl, torchrun, tmux) asks for the ``lab_parts``
fixture (a lab fixture asks for it on its tests' behalf), which marks it ``lab``, so
``pytest -m "not lab"`` is the fast inner loop. Tests that assert time bounds are marked
``serial``: scripts/test.sh runs them alone after the parallel part.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from specconsole.lab.parts.environment import Lab, LabOptions, lab_leftovers

SHARED = Path(__file__).resolve().parents[2] / "shared"

# the same examples on every run: a property test that finds a case finds it every time (and the
# case then becomes an @example)
settings.register_profile("specconsole", derandomize=True)
settings.load_profile("specconsole")


def pytest_configure(config: pytest.Config) -> None:
    """pytest-xdist's workers run with ``COLUMNS=80 LINES=24``: a console the tests start in tmux
    would take them for its size (Textual reads them before the terminal's), so they go."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        for name in ("COLUMNS", "LINES"):
            os.environ.pop(name, None)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--serial-part", choices=("all", "skip", "only"), default="all",
                     help="tests marked serial (they assert time bounds): run them too (all), leave them out "
                          "(skip: the parallel part of scripts/test.sh) or run only them (only)")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``lab`` every test that uses :func:`lab_parts` (directly or through a lab fixture), put the
    session :func:`lab`'s tests on one worker (``--dist loadgroup``; a module that names its own lab
    fixture ``lab`` has its own group), and keep or leave out the ``serial`` tests as
    ``--serial-part`` says."""
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "lab_parts" in names:
            item.add_marker(pytest.mark.lab)
        if "lab" in names and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group("session-lab"))
    # lab tests first: they are the long ones, so the short ones fill the workers' gaps at the end
    items.sort(key=lambda i: i.get_closest_marker("lab") is None)
    part = config.getoption("--serial-part")
    if part == "all":
        return
    keep = [i for i in items if (i.get_closest_marker("serial") is not None) == (part == "only")]
    kept = set(map(id, keep))
    config.hook.pytest_deselected(items=[i for i in items if id(i) not in kept])
    items[:] = keep


@pytest.fixture(scope="session")
def lab_parts() -> None:
    """Says "this starts lab parts (sshd, systemctl, torchrun, tmux)": every fixture built on
    :func:`running_lab` asks for it, and so does a test that starts them itself, which marks
    them ``lab`` (``pytest -m "not lab"`` is the fast inner loop)."""


@pytest.fixture(autouse=True)
def _own_eval_results(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never read or write the user's eval results."""
    monkeypatch.setenv("SPECCONSOLE_EVAL_RESULTS", str(tmp_path_factory.mktemp("eval-results")))


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP port that records whether anything connected to it (a command that must contact no host)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    yield sock
    sock.close()


def _need_sshd() -> None:
    if not shutil.which("sshd") and not Path("/usr/sbin/sshd").exists():
        pytest.fail("OpenSSH sshd is required for the lab tests: apt-get install -y openssh-server "
                    "(scripts/test.sh does this)")


@pytest.fixture
def lab_hosts(tmp_path: Path, lab_parts: None) -> Iterator[Lab]:
    """Two fresh SSH hosts (train, serve) with no training job and no SGLang."""
    yield from running_lab(tmp_path / "lab", LabOptions(trainer=False, sglang=False))


FAST_LAB = LabOptions(
    trainer_steps=100_000, trainer_step_seconds=0.25, trainer_steps_per_epoch=500, trainer_epochs=6,
    sglang_startup_s=1.0, sglang_load_rps=4.0, sglang_step_ms=2.0,
    gpu_interval_s=0.5, sglang_interval_s=0.5,
)


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory, lab_parts: None) -> Iterator[Lab]:
    """The whole lab, shared by the session: do not break it (use lab_hosts for that)."""
    yield from running_lab(tmp_path_factory.mktemp("session") / "lab", FAST_LAB)


_JUDGE: dict[str, Any] = {}


def shared_sglang_judge() -> str:
    """One warm real-SGLang judge (:mod:`specconsole.lab.doubles.sglang_judge`) for the whole test run:
    every lab and every simulator the tests start asks it (importing SGLang costs seconds of CPU
    each time otherwise). Under pytest-xdist the run's workers share one (the first to need it
    starts it, under a lock; it ends with the run's controller). Its socket goes into the
    environment the labs and simulators read."""
    if "socket" in _JUDGE:
        return str(_JUDGE["socket"])
    import atexit
    import fcntl
    import subprocess
    import tempfile

    from specconsole.lab.doubles import sglang_judge
    from specconsole.lab.parts.environment import JUDGE_ENV, judge_env
    from specconsole.lab.parts.judge import judge_command

    python = sglang_judge.sglang_python()
    if python is None:
        pytest.fail(sglang_judge.missing_message())
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run:  # a worker: the controller (this process's parent) owns the run's judge
        folder, owner = Path(tempfile.gettempdir()) / f"sc-judge-{run[:16]}", os.getppid()
        folder.mkdir(exist_ok=True)
    else:
        folder, owner = Path(tempfile.mkdtemp(prefix="sc-judge-")), os.getpid()
    sock, log_path, pid_file = folder / "judge.sock", folder / "judge.log", folder / "judge.pid"
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not pid_file.exists():
            log = open(log_path, "wb")  # noqa: SIM115 - the judge keeps it
            proc = subprocess.Popen(judge_command(python, str(sock), folder / "warm-up", owner),
                                    stdout=log, stderr=log, start_new_session=True,
                                    env={**os.environ, **judge_env(folder / "hf-home")})
            pid_file.write_text(str(proc.pid))
            if not run:
                atexit.register(proc.kill)
    pid = int(pid_file.read_text())
    if not wait_for(lambda: sock.exists() or not Path(f"/proc/{pid}").exists(), 180, step=0.1) or not sock.exists():
        pytest.fail(f"the SGLang judge did not start: {log_path.read_text()[-2000:]}")
    os.environ[JUDGE_ENV] = os.environ[sglang_judge.SOCKET_ENV] = str(sock)
    _JUDGE["socket"] = str(sock)
    return str(sock)


#: the test labs' training batch per worker: a job stepping every 0.25 s takes 0.05 CPU-s a second
#: with it against 0.11 with the demo's 2048 tokens
TEST_BATCH_TOKENS = 256


def running_lab(path: Path, options: LabOptions | None = None,
                ready: Callable[[Lab], object] | None = None) -> Iterator[Lab]:
    """A lab in ``path`` with ``options``, up (and ``ready(lab)`` returned) for the body and always
    stopped after: a module's own lab fixture is ``yield from running_lab(tmp_path / "lab", LabOptions(...))``.
    Its training job steps on :data:`TEST_BATCH_TOKENS`-token batches (no test reads the batch size).
    A start-up that fails is stopped too; after the stop, any process still marked as the lab's
    fails the test that owned the lab (issue 36: a crash-looping unit's systemctl double and its
    simulator had outlived ``lab.down()``), and is killed so that it fails only once."""
    _need_sshd()
    options = replace(options or LabOptions(), trainer_batch_tokens=TEST_BATCH_TOKENS)
    if options.sglang:
        shared_sglang_judge()
    lab = Lab(path, options)
    try:
        lab.up()
        if ready is not None:
            ready(lab)
        yield lab
    finally:
        lab.down()
        assert_nothing_left(lab)


def assert_nothing_left(lab: Lab, grace_s: float = 2.0) -> None:
    """Fail when a process marked as ``lab``'s still runs ``grace_s`` after its ``down()``; kill it."""
    left = lab_leftovers(lab.marker_roots())
    deadline = time.monotonic() + grace_s
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = lab_leftovers(lab.marker_roots())
    if left:
        for line in left:
            with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
                os.kill(int(line.split()[0]), signal.SIGKILL)
        pytest.fail("the lab left running after lab.down():\n" + "\n".join(left), pytrace=False)


class wait_for:
    """Poll ``check`` every ``step`` s until it is true or ``timeout`` s passed; true when it became true.

    ``assert wait_for(check, 10)`` in plain code (waits at once, sleeping), ``assert await wait_for(check, 10)``
    in async code (``asyncio.sleep``, or ``pilot.pause`` with a Textual ``pilot`` so the app keeps
    drawing). With ``what``, a timeout raises AssertionError naming it (and, with a pilot, the
    console's screen) instead of returning False.
    """

    def __init__(self, check: Callable[[], Any], timeout: float = 30.0, *, what: str | None = None,
                 step: float = 0.1, pilot: Any = None) -> None:
        self.check, self.timeout, self.what, self.step, self.pilot = check, timeout, what, step, pilot
        self.result: bool | None = None
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # plain code: wait now, so ``ok = wait_for(...)`` has waited
            self.result = self._poll()

    def _outcome(self, ok: bool) -> bool:
        if ok or self.what is None:
            return ok
        screen_text = getattr(self.pilot.app, "screen_text", None) if self.pilot is not None else None
        screen = f"; screen:\n{screen_text()}" if screen_text is not None else ""  # the console's own screen
        raise AssertionError(f"timed out after {self.timeout:g}s waiting for {self.what}{screen}")

    def __bool__(self) -> bool:
        if self.result is None:
            self.result = self._poll()
        return self.result

    def _poll(self) -> bool:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.check():
                return True
            time.sleep(self.step)
        return self._outcome(bool(self.check()))

    async def _wait(self) -> bool:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.check():
                return True
            if self.pilot is not None:
                await self.pilot.pause(self.step)
            else:
                await asyncio.sleep(self.step)
        return self._outcome(bool(self.check()))

    def __await__(self) -> Generator[Any, None, bool]:
        return self._wait().__await__()


async def click(pilot: Any, target: Any, timeout: float = 30.0) -> None:
    """Click ``target`` (a widget or a selector on the current screen) once the screen's map puts it
    where the click lands, and fail if the click reaches something else. A widget mounts, and may
    take the focus, before its first layout: until then its region is empty and a click at it lands
    on whatever is at the screen's corner."""
    from textual.errors import NoWidget

    app = pilot.app
    widget = app.screen.query_one(target) if isinstance(target, str) else target

    def placed() -> bool:
        region = widget.region
        if not region:
            return False
        try:
            return bool(app.get_widget_at(*region.offset)[0] is widget)
        except NoWidget:
            return False

    await wait_for(placed, timeout, what=f"{target} laid out where a click lands", pilot=pilot)
    assert await pilot.click(widget), f"the click did not reach {target}"

