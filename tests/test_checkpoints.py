"""Listing a run's checkpoints: real folder trees, read with the one remote command through the
local host and, in the lab, over SSH."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from specconsole.config import HostConfig, TrainingConfig, load_config
from specconsole.hosts.local import LocalHost
from specconsole.lab.parts.environment import Lab
from specconsole.sources.checkpoints import (
    CheckpointWatch,
    default_directory,
    list_checkpoints,
    parse_listing,
    saved_checkpoint_path,
)

NOW = time.time()


def make_ckpt(root: Path, name: str, *, age_s: float, size: int = 4096, config: bool = True) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "training_state.pt").write_bytes(b"\0" * size)
    if config:
        (d / "config.json").write_text(json.dumps({"architectures": ["DFlashDraftModel"], "block_size": 16}))
    stamp = NOW - age_s
    os.utime(d, (stamp, stamp))
    return d


def newer_layout(root: Path) -> Path:
    """``specforge train``: run-stepN folders, -latest/-best links (relative), best_meta.json."""
    run = "qwen3-8b-dflash"
    make_ckpt(root, f"{run}-step500", age_s=3600, size=300_000)
    make_ckpt(root, f"{run}-step1000", age_s=1800, size=300_000, config=False)
    make_ckpt(root, f"{run}-step1500", age_s=60, size=300_000)
    (root / f"{run}-latest").symlink_to(f"{run}-step1500")
    (root / f"{run}-best").symlink_to(f"{run}-step1000")
    (root / f"{run}.best_meta.json").write_text(json.dumps(
        {"run_id": run, "step": 1000, "score": 3.12, "metric": "eval/simulated_acc_len",
         "metrics": {"eval/simulated_acc_len": 3.12}}, indent=2))
    (root / "train.log").write_text("step 1500: {'loss': 2.1}\n")
    (root / "tensorboard").mkdir()  # not a checkpoint
    return root


def older_layout(root: Path) -> Path:
    """``scripts/train_dflash.py``: epoch_E_step_S folders, no links."""
    make_ckpt(root, "epoch_0_step_150", age_s=7200)
    make_ckpt(root, "epoch_0_step_12207", age_s=3600)
    make_ckpt(root, "epoch_1_step_24414", age_s=30, size=50_000)
    (root / "epoch_1_step_24414.tmp").write_text("")  # a file, not a checkpoint folder
    return root


async def local_listing(directory: Path):  # type: ignore[no-untyped-def]
    host = LocalHost(HostConfig(name="trainbox", role="train"))
    await host.start()
    try:
        return await list_checkpoints(host, str(directory))
    finally:
        await host.close()


async def test_newer_layout_through_the_local_host(tmp_path: Path) -> None:
    listing = await local_listing(newer_layout(tmp_path / "runs"))
    assert listing.error is None, listing.error
    assert [c.step for c in listing.checkpoints] == [1500, 1000, 500]  # newest first
    latest, best, first = listing.checkpoints
    assert latest.is_latest and not latest.is_best and latest.name == "qwen3-8b-dflash-step1500"
    assert best.is_best and not best.is_latest
    assert not first.is_latest and not first.is_best
    assert latest.run_id == "qwen3-8b-dflash" and latest.layout == "specforge"
    assert latest.path == str(tmp_path / "runs" / "qwen3-8b-dflash-step1500")
    assert latest.size_bytes is not None and latest.size_bytes >= 300_000
    assert (latest.has_config, best.has_config) == (True, False)
    assert 40 < latest.age(time.time()) < 600 and 3500 < first.age(time.time()) < 4200
    assert (listing.best_metric, listing.best_score) == ("eval/simulated_acc_len", 3.12)


async def test_older_layout_through_the_local_host(tmp_path: Path) -> None:
    listing = await local_listing(older_layout(tmp_path / "dflash"))
    assert listing.error is None, listing.error
    assert [(c.epoch, c.step) for c in listing.checkpoints] == [(1, 24414), (0, 12207), (0, 150)]
    assert [c.is_latest for c in listing.checkpoints] == [True, False, False]  # highest step, no link
    assert not any(c.is_best for c in listing.checkpoints)  # nothing says which is best
    assert all(c.layout == "epoch_step" and c.has_config for c in listing.checkpoints)


async def test_best_meta_marks_the_best_when_the_link_is_missing(tmp_path: Path) -> None:
    root = newer_layout(tmp_path / "runs")
    (root / "qwen3-8b-dflash-best").unlink()
    listing = await local_listing(root)
    assert [c.step for c in listing.checkpoints if c.is_best] == [1000]


async def test_missing_folder_is_one_line_naming_it_and_the_setting(tmp_path: Path) -> None:
    listing = await local_listing(tmp_path / "nowhere")
    assert not listing.checkpoints
    assert listing.error is not None and str(tmp_path / "nowhere") in listing.error
    assert "checkpoint_dir" in listing.error and "\n" not in listing.error


async def test_empty_folder_lists_nothing_without_error(tmp_path: Path) -> None:
    listing = await local_listing(tmp_path)
    assert listing.error is None and listing.checkpoints == ()


def test_parse_listing_ignores_odd_lines_and_dangling_links() -> None:
    out = ("E\td\t1783000000.5\t\trun-step10\n"
           "E\tl\t1783000001.0\trun-step99\trun-latest\n"  # points at nothing listed
           "garbage line\n"
           "E\td\tnot-a-time\t\trun-step20\n"
           "S\t12\t./run-step10\n"
           "M\trun.best_meta.json\t{not json\n")
    listing = parse_listing("/ckpt", out, listed_at=0.0)
    assert [(c.step, c.size_bytes, c.is_latest) for c in listing.checkpoints] == [(10, 12 * 1024, True)]
    assert listing.notes == ("run.best_meta.json is not valid JSON; ignored",)


def test_saved_checkpoint_lines_give_the_folder() -> None:
    assert saved_checkpoint_path(
        "07/07/2026 09:18:06 - INFO - specforge.utils - Saved checkpoint to /ckpt/dflash/epoch_0_step_150"
    ) == "/ckpt/dflash/epoch_0_step_150"
    assert saved_checkpoint_path(
        "2026-07-08 10:08:19,002 INFO saved checkpoint run-step250 to /ckpt/runs/run-step250/"
    ) == "/ckpt/runs/run-step250"
    assert saved_checkpoint_path("step 120: {'loss': 2.31}") is None
    assert saved_checkpoint_path("Loading checkpoint shards: 100%") is None


def test_folder_is_configured_else_from_the_log() -> None:
    cfg = TrainingConfig(log_path="/runs/a/train.log")
    assert default_directory(cfg) == "/runs/a"
    watch = CheckpointWatch(LocalHost(HostConfig(name="t", role="train")), cfg)
    watch.saw_line("Saved checkpoint to /ckpt/dflash/epoch_0_step_150")
    assert watch.directory == "/ckpt/dflash"
    pinned = TrainingConfig(log_path="/runs/a/train.log", checkpoint_dir="/data/ckpt")
    watch = CheckpointWatch(LocalHost(HostConfig(name="t", role="train")), pinned)
    watch.saw_line("Saved checkpoint to /ckpt/dflash/epoch_0_step_150")
    assert watch.directory == "/data/ckpt"


async def test_both_layouts_over_ssh(lab_hosts: Lab) -> None:
    from specconsole.hosts.ssh import SshHost

    root = lab_hosts.root("train")
    newer_layout(root / "runs")
    older_layout(root / "dflash")
    host = SshHost(load_config(lab_hosts.config_path).host("train"))
    await host.start()
    try:
        assert await host.wait_connected(30), host.status
        newer = await list_checkpoints(host, str(root / "runs"))
        older = await list_checkpoints(host, str(root / "dflash"))
        missing = await list_checkpoints(host, str(root / "absent dir"))
    finally:
        await host.close()
    assert newer.error is None and [(c.step, c.is_latest, c.is_best) for c in newer.checkpoints] == [
        (1500, True, False), (1000, False, True), (500, False, False)]
    assert older.error is None and [c.step for c in older.checkpoints if c.is_latest] == [24414]
    assert missing.error is not None and "absent dir" in missing.error and "train" in missing.error
