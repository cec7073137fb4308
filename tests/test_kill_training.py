"""Kill training against the lab: a real torchrun job on a real sshd host, the GPU double watching it."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import running_lab, wait_for
from specconsole.actions.kill.training import find_job, kill_job
from specconsole.base.pids import alive
from specconsole.config import load_config
from specconsole.hosts.ssh import SshHost
from specconsole.lab.parts.environment import Lab, LabOptions
from specconsole.lab.procs import children
from specconsole.process_tree import locate
from specconsole.steps import StepEvent, Steps


@pytest.fixture
def train_lab(tmp_path: Path, lab_parts: None) -> Iterator[Lab]:
    yield from running_lab(tmp_path / "lab", LabOptions(sglang=False, trainer=True, trainer_step_seconds=0.2),
                           wait_workers)


def wait_workers(lab: Lab, timeout: float = 90) -> None:
    def started() -> bool:
        pid, log = lab.state.trainer_pid, lab.train_log
        return bool(pid) and len(children(pid)) >= 2 and log.exists() and '"step"' in log.read_text()

    assert wait_for(started, timeout, what="the lab's torchrun job to start its 2 workers (and log a step)", step=0.2)


def assert_no_silent_gap(events: list[StepEvent], limit_s: float = 1.0) -> None:
    """The promise: during any wait a status line at least every second (from the events' own times)."""
    gaps = [(b.at - a.at, a.line(), b.line()) for a, b in itertools.pairwise(events)]
    longest = max(gaps, default=(0.0, "", ""))
    assert longest[0] <= limit_s, f"{longest[0]:.2f}s without a status line between {longest[1]!r} and {longest[2]!r}"


async def connect(lab: Lab) -> tuple[SshHost, object]:
    cfg = load_config(lab.config_path).host("train")
    host = SshHost(cfg)
    await host.start()
    assert await host.wait_connected(15)
    return host, cfg


async def test_kill_stops_every_process_and_releases_gpu_memory(train_lab: Lab) -> None:
    launcher = train_lab.state.trainer_pid
    assert launcher
    workers = children(launcher)
    events: list[StepEvent] = []
    host, cfg = await connect(train_lab)
    try:
        steps = Steps("kill-training", events.append, host="train")
        plan = await find_job(host, cfg, steps, current_step=123)  # type: ignore[arg-type]
        assert [p.pid for p in plan.launchers] == [launcher]
        assert sorted(p.pid for p in plan.workers) == sorted(workers)
        assert plan.found_by.startswith("pid file")
        held = {g.gpu_index: g.used_memory_mib for gs in plan.gpu_procs.values() for g in gs}
        assert held == {0: 61000, 1: 61000}  # LOCAL_RANK 0 and 1, as the double reports them
        text = "\n".join(plan.describe())
        assert f"pid {launcher}" in text and "at step 123" in text and "GPU 0: 61000 MiB" in text

        outcome = await kill_job(host, plan, steps, grace_s=30)
    finally:
        await host.close()
    assert outcome.ok, outcome.message
    assert not any(alive(p) for p in [launcher, *workers])
    before = {g: b for g, b, _ in outcome.memory}
    after = {g: a for g, _, a in outcome.memory}
    assert before[0] is not None and after[0] is not None and before[0] - after[0] == 61000
    assert before[1] - after[1] == 61000  # type: ignore[operator]
    assert after[2] == before[2]
    lines = [e.line() for e in events]
    commands = [e.command for e in events if e.kind == "command"]
    assert f"kill -TERM {launcher}" in commands
    assert "ps -eww -o pid=,ppid=,pgid=,stat=,args=" in commands
    assert any("GPU 0: " in ln and "-> " in ln for ln in lines)
    # the summary's step is the log's, read after the processes ended (not the 123 the plan had)
    log_lines = train_lab.train_log.read_text().splitlines()
    last_step = json.loads(next(ln for ln in reversed(log_lines) if ln.startswith("{")))["step"]
    assert log_lines[-1] == f"Received SIGTERM at step {last_step}, stopping training"
    assert events[-1].kind == "done"
    assert f"3 process(es) ended at step {last_step} (the log's last)" in events[-1].message
    assert outcome.step == last_step and outcome.stopped
    assert_no_silent_gap(events)
    # the launcher is reaped by whoever started it, never left as <defunct>
    assert wait_for(lambda: not Path(f"/proc/{launcher}").exists(), 15), \
        f"launcher {launcher} lingers: {Path(f'/proc/{launcher}/stat').read_text() if alive(launcher) else 'zombie'}"
    # every command is followed by its result with exit status and time
    for i, e in enumerate(events):
        if e.kind == "command":
            nxt = next(x for x in events[i + 1:] if x.kind in ("result", "heartbeat"))
            assert nxt.kind in ("result", "heartbeat")
    results = [e for e in events if e.kind == "result"]
    assert all(r.exit_status is not None and r.took_s is not None for r in results)


async def test_sigkill_escalation_when_workers_ignore_sigterm(train_lab: Lab) -> None:
    launcher = train_lab.state.trainer_pid
    assert launcher
    workers = children(launcher)
    host, cfg = await connect(train_lab)
    events: list[StepEvent] = []
    try:
        steps = Steps("kill-training", events.append, host="train")
        plan = await find_job(host, cfg, steps)  # type: ignore[arg-type]
        # stop the launcher from forwarding anything: the job now "survives" SIGTERM
        for pid in [launcher, *workers]:
            os.kill(pid, 19)  # SIGSTOP: a stopped process does not act on SIGTERM
        outcome = await kill_job(host, plan, steps, grace_s=2)
    finally:
        await host.close()
    assert outcome.ok, outcome.message
    assert not any(alive(p) for p in [launcher, *workers])
    kinds = [(e.step, e.kind) for e in events]
    assert ("SIGKILL survivors", "step") in kinds
    assert any(e.kind == "heartbeat" and "left" in e.message for e in events)
    assert any(e.command and e.command.startswith("kill -KILL") for e in events)
    assert_no_silent_gap(events)


async def test_nothing_to_kill_is_a_clear_success(lab_hosts: Lab) -> None:
    host, cfg = await connect(lab_hosts)
    events: list[StepEvent] = []
    try:
        steps = Steps("kill-training", events.append, host="train")
        plan = await find_job(host, cfg, steps)  # type: ignore[arg-type]
        assert plan.empty
        assert "does not exist" in plan.note or "no process" in plan.note
        outcome = await kill_job(host, plan, steps)
    finally:
        await host.close()
    assert outcome.ok and outcome.message.startswith("nothing to kill on train")


def test_cli_kill_training_prints_every_step(train_lab: Lab) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    res = subprocess.run([sys.executable, "-m", "specconsole", "kill-training", "--config",
                          str(train_lab.config_path), "--yes"], capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert "$ kill -TERM" in out and "exit 0 in" in out and "training job stopped on train" in out
    assert "Traceback" not in res.stderr
    audit = [json.loads(x) for x in (train_lab.dir / "audit.log").read_text().splitlines()]
    assert any(a["data"].get("command", "") and a["data"]["command"].startswith("kill -TERM") for a in audit)
    # and again: nothing left
    again = subprocess.run([sys.executable, "-m", "specconsole", "kill-training", "--config",
                            str(train_lab.config_path), "--yes"], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "nothing to kill" in again.stdout


@pytest.fixture
def stranger() -> Iterator[subprocess.Popen[bytes]]:
    """An unrelated long-running process (someone else's work), in its own session."""
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


async def test_stale_pid_file_naming_an_unrelated_process_is_refused(
        lab_hosts: Lab, stranger: subprocess.Popen[bytes]) -> None:
    """The job is gone and its pid was reused by another process: nothing of it is killed."""
    lab_hosts.trainer_pid_file.parent.mkdir(parents=True, exist_ok=True)
    lab_hosts.trainer_pid_file.write_text(f"{stranger.pid}\n")
    host, cfg = await connect(lab_hosts)
    events: list[StepEvent] = []
    try:
        steps = Steps("kill-training", events.append, host="train")
        plan = await find_job(host, cfg, steps)  # type: ignore[arg-type]
        outcome = await kill_job(host, plan, steps, grace_s=2)
    finally:
        await host.close()
    assert plan.empty and not outcome.ok
    assert f"pid {stranger.pid} (sleep 300), which does not match torchrun" in outcome.message
    assert outcome.message.startswith("refusing to kill on train:") and "\n" not in outcome.message
    assert not any(e.command and e.command.startswith("kill ") for e in events)
    assert alive(stranger.pid)


async def test_pid_file_older_than_its_process_is_refused(lab_hosts: Lab) -> None:
    """A process that looks like torchrun but started after the pid file was written is not the job."""
    lab_hosts.trainer_pid_file.parent.mkdir(parents=True, exist_ok=True)
    lookalike = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "torchrun"],
                                 start_new_session=True)
    try:
        lab_hosts.trainer_pid_file.write_text(f"{lookalike.pid}\n")
        hour_ago = time.time() - 3600
        os.utime(lab_hosts.trainer_pid_file, (hour_ago, hour_ago))
        host, cfg = await connect(lab_hosts)
        try:
            steps = Steps("kill-training", lambda _e: None, host="train")
            plan = await find_job(host, cfg, steps)  # type: ignore[arg-type]
            outcome = await kill_job(host, plan, steps, grace_s=2)
        finally:
            await host.close()
        assert plan.empty and not outcome.ok
        assert "after the file was written: the pid was reused; not killing it" in outcome.message
        assert alive(lookalike.pid)
    finally:
        lookalike.kill()
        lookalike.wait()


async def test_the_watch_reads_the_pid_file_beside_the_table_and_finds_what_the_kill_finds(
        lab_hosts: Lab, stranger: subprocess.Popen[bytes]) -> None:
    """The training source's check (``together``) reads the pid file while the process table is
    read, one round trip fewer; for each state of the pid file it finds what the kill's one-at-a-time
    reading finds."""
    pid_file = lab_hosts.trainer_pid_file
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    lookalike = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "torchrun"],
                                 start_new_session=True)
    host, cfg = await connect(lab_hosts)
    kill = cfg.training.kill  # type: ignore[attr-defined]
    try:
        states = {"missing": None, "a stranger's pid": f"{stranger.pid}\n", "not a pid": "soon\n",
                  "a job's pid": f"{lookalike.pid}\n"}
        for state, text in states.items():
            pid_file.unlink(missing_ok=True)
            if text is not None:
                pid_file.write_text(text)
            found = {}
            for together in (False, True):
                events: list[StepEvent] = []
                _procs, *rest = await locate(host, kill, Steps("watch", events.append, host="train"),
                                             together=together)
                found[together] = rest
                order = [(e.kind, e.command.split()[0]) for e in events if e.command]
                if together:  # both asked before either answered
                    assert order[:2] in ([("command", "ps"), ("command", "cat")],
                                         [("command", "cat"), ("command", "ps")]), (state, order)
                else:
                    assert order[:4] == [("command", "ps"), ("result", "ps"), ("command", "cat"),
                                         ("result", "cat")], (state, order)
            assert found[True] == found[False], state
        assert found[True][0] == [lookalike.pid], found  # the last state: the job's own pid
    finally:
        await host.close()
        lookalike.kill()
        lookalike.wait()


def test_cli_refuses_a_reused_pid_with_one_line_and_exit_1(lab_hosts: Lab, stranger: subprocess.Popen[bytes]) -> None:
    lab_hosts.trainer_pid_file.parent.mkdir(parents=True, exist_ok=True)
    lab_hosts.trainer_pid_file.write_text(f"{stranger.pid}\n")
    res = subprocess.run([sys.executable, "-m", "specconsole", "kill-training", "--config",
                          str(lab_hosts.config_path), "--yes"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"refusing to kill on train: pid file {lab_hosts.trainer_pid_file} names pid {stranger.pid}" in res.stdout
    assert "Traceback" not in res.stderr
    assert alive(stranger.pid)


@pytest.mark.serial  # asserts a time bound
async def test_waits_say_something_at_least_every_second_even_when_a_probe_is_slow() -> None:
    """Heartbeats follow the last event, not the last probe: a 1.3 s probe (a slow `ps` over SSH)
    and a 1.5 s command still leave no second without a status line."""
    events: list[StepEvent] = []
    steps = Steps("kill-training", events.append, host="train")
    steps.begin("wait for the job to exit")
    polls = 0

    async def probe() -> tuple[bool, str]:
        nonlocal polls
        polls += 1
        await asyncio.sleep(1.3)
        return polls > 1, f"{2 - polls} of 2 left: 101, 102"

    assert await steps.wait_for("the job to exit after SIGTERM", probe, timeout=30)
    assert polls == 2
    await steps.watch(asyncio.sleep(1.5), "connecting to train")
    steps.done("done")
    assert_no_silent_gap(events)
    beats = [e.message for e in events if e.kind == "heartbeat"]
    # the first probe's answer is quoted through the pause and all through the second, slow probe
    assert any("1 of 2 left: 101, 102" in b for b in beats) and any("connecting to train" in b for b in beats)


# -- read-only looks at a running job: one job for them all, last in the module (no other job runs beside it)

@pytest.fixture(scope="module")
def job_lab(tmp_path_factory: pytest.TempPathFactory, lab_parts: None) -> Iterator[Lab]:
    """A training job the tests below only look at (none of them stops it)."""
    yield from running_lab(tmp_path_factory.mktemp("kill-read-only") / "lab",
                           LabOptions(sglang=False, trainer=True, trainer_step_seconds=0.2), wait_workers)


@pytest.mark.xdist_group("kill-job-lab")  # one module lab per run, not one per worker
async def test_pattern_finds_the_launcher_not_the_workers(job_lab: Lab) -> None:
    cfg = load_config(job_lab.config_path).host("train")
    assert cfg.training is not None
    cfg = dataclasses.replace(cfg, training=dataclasses.replace(
        cfg.training, kill=dataclasses.replace(cfg.training.kill, pid_file=None)))
    host = SshHost(cfg)
    await host.start()
    assert await host.wait_connected(15)
    try:
        plan = await find_job(host, cfg, Steps("kill-training", lambda _e: None))
    finally:
        await host.close()
    assert [p.pid for p in plan.launchers] == [job_lab.state.trainer_pid]
    assert len(plan.workers) >= 2


@pytest.mark.xdist_group("kill-job-lab")  # one module lab per run, not one per worker
def test_cli_refuses_without_tty_or_yes(job_lab: Lab) -> None:
    res = subprocess.run([sys.executable, "-m", "specconsole", "kill-training", "--config",
                          str(job_lab.config_path)], capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL)
    assert res.returncode == 1
    assert "pass --yes" in res.stderr and "Traceback" not in res.stderr
    assert alive(job_lab.state.trainer_pid or 0)


async def test_the_systemd_unit_goes_to_systemctl_after_double_dash(lab_hosts: Lab) -> None:
    """A unit name is an operand: ``systemctl show ... -- UNIT`` (a name beginning with "-" is
    refused by the config as well), and the host's systemctl takes that form."""
    cfg = load_config(lab_hosts.config_path).host("train")
    assert cfg.training is not None
    cfg = dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, kill=dataclasses.replace(
        cfg.training.kill, pid_file=None, pattern=None, systemd_unit="trainer.service")))
    host = SshHost(cfg)
    await host.start()
    assert await host.wait_connected(15)
    events: list[StepEvent] = []
    try:
        plan = await find_job(host, cfg, Steps("kill-training", events.append, host="train"))
    finally:
        await host.close()
    shows = [e for e in events if e.command and e.command.startswith("systemctl show")]
    assert [e.command for e in shows if e.kind == "command"] == [
        "systemctl show -p MainPID --value -- trainer.service"]
    assert any(e.kind == "result" and e.message.startswith("exit 0") for e in shows), [e.line() for e in shows]
    assert plan.empty and plan.note == "unit trainer.service has no running MainPID"


@pytest.mark.xdist_group("kill-job-lab")  # one module lab per run, not one per worker
def test_a_stale_pid_file_is_not_bypassed_by_the_pattern_while_the_job_runs(job_lab: Lab, tmp_path: Path) -> None:
    """The first method set wins: the pid file names a dead pid, the pattern would find the running
    job; the kill refuses in one line naming the pid file and what the pattern found, and kills nothing."""
    stale = tmp_path / "trainer.pid"
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale.write_text(f"{dead.pid}\n")
    config = tmp_path / "config.toml"
    text = job_lab.config_path.read_text()
    config.write_text(text.replace(f'pid_file = "{job_lab.trainer_pid_file}"', f'pid_file = "{stale}"'))
    assert config.read_text() != text
    res = subprocess.run([sys.executable, "-m", "specconsole", "kill-training", "--config", str(config), "--yes"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 1, res.stdout + res.stderr
    launcher = job_lab.state.trainer_pid
    refusal = [line for line in res.stdout.splitlines() if line.startswith("refusing to kill on train: ")]
    assert refusal == [f"refusing to kill on train: pid file {stale} names pid {dead.pid}, which is not running, "
                       f"but pattern {load_config(config).host('train').training.kill.pattern!r} "  # type: ignore[union-attr]
                       f"matches pid(s) {launcher}; not killing them: pid_file comes first in training.kill (fix: "
                       f"correct training.kill.pid_file, or remove it to kill by pattern)"]
    assert "$ kill" not in res.stdout
    assert alive(launcher or 0) and all(alive(p) for p in children(launcher or 0))
