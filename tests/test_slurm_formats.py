"""formats/slurm.py against real Slurm 22.05.8 output (tests/fixtures/slurm: captured from the lab's
cluster and the feasibility spike on Debian 12), and against odd input: names with ``|``, spaces and
``Key=``-looking words, unknown states, truncated lines, a controller that is down."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from specconsole.config import SlurmConfig
from specconsole.formats.slurm import (
    SQUEUE_FIELDS,
    SQUEUE_FORMAT,
    SlurmJob,
    apply_scontrol,
    controller_down,
    parse_sacct,
    parse_scontrol,
    parse_squeue,
    parse_squeue_line,
    slurm_error,
    slurm_lines,
)

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"


def fixture(name: str) -> str:
    """A captured output without the capture's own ``rc=`` trailer lines."""
    text = (FIXTURES / name).read_text()
    return "".join(ln for ln in text.splitlines(keepends=True) if not ln.startswith("rc="))


def test_the_squeue_format_asks_for_every_field_with_the_name_last() -> None:
    assert SQUEUE_FORMAT == ("JobID:|,State:|,TimeUsed:|,TimeLimit:|,NumNodes:|,NodeList:|,UserName:|,Name:")
    assert SQUEUE_FIELDS[-1] == "Name"


def test_squeue_three_jobs_with_odd_names() -> None:
    jobs, problems = parse_squeue(fixture("squeue_O_three_jobs.txt"))
    assert problems == []
    train, odd, uni = jobs
    assert (train.job_id, train.name, train.state, train.nodes, train.num_nodes, train.elapsed,
            train.time_limit, train.user) == ("1", "drafter-train", "RUNNING", "n[1-2]", 2, "0:22", "UNLIMITED", "root")
    assert odd.name == "odd|name with space" and odd.nodes == "n1"
    assert uni.name == "ünï [x]=y" and uni.active
    assert train.summary() == "job 1 drafter-train RUNNING on n[1-2] (2 nodes), 0:22 of UNLIMITED"


def test_squeue_cancelled_job_has_ended() -> None:
    (job,), _ = parse_squeue(fixture("squeue_O_cancelled.txt"))
    assert job.state == "CANCELLED" and job.ended and not job.active


def test_unknown_state_is_kept_and_said() -> None:
    job = parse_squeue_line("7|WIBBLING|0:01|5:00|1|n1|bob|exp")
    assert job.state == "WIBBLING" and not job.known_state and not job.active and not job.ended
    assert "a state this console does not know" in job.summary()


def test_truncated_line_is_one_problem_not_an_exception() -> None:
    jobs, problems = parse_squeue("1|RUNNING|0:22|UNLIM\n2|RUNNING|0:01|5:00|1|n1|root|ok\n")
    assert [j.job_id for j in jobs] == ["2"]
    assert problems == ["squeue line cut short (4 of 8 fields): '1|RUNNING|0:22|UNLIM'"]


def test_garbage_line_without_a_job_id() -> None:
    _, problems = parse_squeue("slurm_load_jobs error: something|a|b|c|d|e|f|g\n")
    assert problems and problems[0].startswith("squeue line without a job id")


def test_control_characters_in_a_name_are_shown_escaped() -> None:
    job = parse_squeue_line("3|RUNNING|0:01|5:00|1|n1|root|evil\x1b[31mred")
    assert job.name == "evil\x1b[31mred"
    assert "\x1b" not in job.summary() and "\\x1b" in job.summary()


@given(st.text(alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\n\r"), max_size=40))
def test_any_name_survives_squeue(name: str) -> None:
    line = f"12|PENDING|0:00|1:00:00|2||alice|{name}"
    jobs, problems = parse_squeue(line)
    assert problems == [] and jobs[0].name == name.rstrip() and jobs[0].job_id == "12"


@given(st.text(max_size=200))
def test_squeue_never_raises(text: str) -> None:
    parse_squeue(text)
    parse_sacct(text)
    parse_scontrol(text)


def test_scontrol_running_two_nodes() -> None:
    f = parse_scontrol(fixture("scontrol_o_2node_training.txt"))
    assert f["JobState"] == "RUNNING" and f["NodeList"] == "n[1-2]" and f["NumNodes"] == "2"
    assert f["StdOut"] == "/tmp/r32/lab1/hosts/train/runs/dflash/train.jsonl"
    assert f["TRES"] == "cpu=2,node=2,billing=2" and f["AllocNode:Sid"] == "localhost:32087"


def test_scontrol_odd_name_and_path_with_spaces() -> None:
    for name, stdout in (("scontrol_o_odd_name.txt", "/tmp/r32/lab1/slurm/jobs/out 2.txt"),
                         ("scontrol_show_job_-o_odd_name.txt", "/tmp/slurm-spike/lab/jobs/out 2.txt")):
        f = parse_scontrol(fixture(name))
        assert f["JobName"] == "odd|name with space"
        assert f["StdOut"] == stdout and f["UserId"] == "root(0)"


def test_scontrol_name_with_key_looking_words() -> None:
    f = parse_scontrol("JobId=5 JobName=a b=c Nice=3 UserId=bob(1000) JobState=RUNNING StdOut=/x/y z.out Power=")
    assert f["JobName"] == "a b=c"  # b is no key of scontrol's; Nice is, and ends the name
    assert f["UserId"] == "bob(1000)" and f["StdOut"] == "/x/y z.out" and f["Power"] == ""


def test_scontrol_pending_has_no_nodes_yet() -> None:
    f = parse_scontrol(fixture("scontrol_show_job_-o_PENDING.txt"))
    assert f["JobState"] == "PENDING" and f["NodeList"] == ""
    job = apply_scontrol(SlurmJob("12", "spec-pending", "PENDING"), f)
    assert job.stdout == "/tmp/slurm-spike/jobs/spec-pending-12.out" and job.nodes == ""


def test_scontrol_every_spike_capture_has_state_and_stdout() -> None:
    for name in ("scontrol_show_job_-o_RUNNING.txt", "scontrol_show_job_-o_2node.txt",
                 "scontrol_show_job_-o_CANCELLED.txt"):
        f = parse_scontrol(fixture(name))
        assert f["JobState"] in ("RUNNING", "CANCELLED") and f["StdOut"].startswith("/")


def test_sacct_completion_log() -> None:
    (job,), problems = parse_sacct(fixture("sacct_c_P_completed.txt"))
    assert problems == [] and (job.job_id, job.state, job.name, job.nodes, job.seen_by) == (
        "4", "COMPLETED", "plain-sleep", "n1", "sacct")


def test_sacct_completion_log_garbles_names_with_spaces() -> None:
    """22.05's ``sacct -c`` reads jobcomp/filetxt's space-separated file: a name with a space comes back
    cut and the state empty (it prints ``Unknown type with space``); the console shows it as unknown."""
    jobs, _ = parse_sacct(fixture("sacct_c_P_cancelled.txt"))
    assert jobs and jobs[0].state == "UNKNOWN" and not jobs[0].known_state


def test_sacct_steps_are_left_out_and_cancelled_by_is_cancelled() -> None:
    jobs, _ = parse_sacct("9|CANCELLED by 0|00:00:03|0:15|n[1-2]|spec 2node\n"
                          "9.batch|CANCELLED|00:00:03|0:15|n1|batch\n")
    assert [j.job_id for j in jobs] == ["9"]
    assert jobs[0].base_state == "CANCELLED" and jobs[0].ended and jobs[0].name == "spec 2node"


def test_controller_down_is_one_line() -> None:
    for name in ("squeue_controller_down.txt", "ctld_down_squeue_MessageTimeout3.txt", "scancel_controller_down.txt",
                 "ctld_down_scancel_6.txt"):
        assert controller_down(fixture(name)) == (
            "slurmctld not reachable: Unable to contact slurm controller (connect failure)")
    assert controller_down(fixture("squeue_-j_unknown_job.txt")) is None


def test_slurm_error_lines() -> None:
    assert slurm_error("scancel", fixture("scancel_as_nobody.txt"), 210) == (
        "scancel: Kill job error on job id 1: Access/permission denied")
    assert slurm_error("sacct", fixture("sacct_P_accounting_off.txt"), 1) == (
        "sacct exited 1: Slurm accounting storage is disabled")
    assert slurm_error("squeue", fixture("squeue_-j_unknown_job.txt"), 1) == (
        "squeue: slurm_load_jobs error: Invalid job id specified")
    assert slurm_error("squeue", "", 3) == "squeue exited 3: no output"


def test_pane_lines() -> None:
    job = SlurmJob("1", "drafter-train", "RUNNING", "0:22", "UNLIMITED", "n[1-2]", 2, "root", "/r/train.jsonl",
                   read_at=100.0)
    assert slurm_lines(job, 101.0) == ["slurm: job 1 drafter-train RUNNING on n[1-2] (2 nodes), 0:22 of UNLIMITED",
                                       "slurm log: /r/train.jsonl"]
    down = SlurmJob("1", "drafter-train", "RUNNING", read_at=100.0, error="slurmctld not reachable: x")
    assert slurm_lines(down, 130.0)[-1] == "slurm: job as read 30s ago; slurmctld not reachable: x"
    missing = SlurmJob("", "drafter-train", "", seen_by="", error="no Slurm job found: y")
    assert slurm_lines(missing, 0.0) == ["slurm: no Slurm job found: y"]


def test_commands() -> None:
    from specconsole.slurm.query import sacct_argv, squeue_argv

    cfg = SlurmConfig(job_name="drafter-train", user="bob", conf="/etc/slurm/x.conf")
    assert squeue_argv(cfg) == ["env", "SLURM_CONF=/etc/slurm/x.conf", "squeue", "-h", "-t", "all", "-O",
                                SQUEUE_FORMAT, "-n", "drafter-train", "-u", "bob"]
    assert squeue_argv(SlurmConfig(job_id=7)) == ["squeue", "-h", "-t", "all", "-O", SQUEUE_FORMAT, "-j", "7"]
    assert sacct_argv(SlurmConfig(job_id=7), None, completion_log=True) == [
        "sacct", "-c", "-P", "-n", "-o", "JobID,State,Elapsed,ExitCode,NodeList,JobName", "-j", "7", "-a"]


def test_the_watch_keeps_the_job_as_last_read_while_slurm_does_not_answer() -> None:
    from typing import Any, cast

    from specconsole.sources.slurm import SlurmJobWatch

    followed: list[str] = []
    changes: list[int] = []
    watch = SlurmJobWatch(cast(Any, None), SlurmConfig(job_name="drafter-train"), followed.append)
    running = SlurmJob("1", "drafter-train", "RUNNING", stdout="/r/train.jsonl", read_at=10.0)
    watch._take(running, lambda: changes.append(1))
    assert (watch.state, followed, watch.job) == ("running", ["/r/train.jsonl"], running)
    down = SlurmJob("", "drafter-train", "", seen_by="", error="slurmctld not reachable: x", read_at=20.0)
    watch._take(down, lambda: changes.append(1))
    assert (watch.state, watch.detail) == ("unknown", "slurmctld not reachable: x")
    assert watch.job == SlurmJob("1", "drafter-train", "RUNNING", stdout="/r/train.jsonl", read_at=10.0,
                                 error="slurmctld not reachable: x")  # as last read, aged
    ended = SlurmJob("1", "drafter-train", "CANCELLED", seen_by="sacct", read_at=30.0)
    watch._take(ended, lambda: changes.append(1))
    assert (watch.state, watch.job) == ("stopped", ended)
    gone = SlurmJob("", "drafter-train", "", seen_by="", error="no Slurm job found: ...", read_at=40.0)
    watch._take(gone, lambda: changes.append(1))
    assert (watch.state, watch.job) == ("unknown", gone)  # not found: nothing to keep showing
