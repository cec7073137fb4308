"""SGLang's command line as each version spells it: algorithms, DDTree flags, aliases (no lab)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specconsole.lab.doubles import sglang_versions
from specconsole.lab.doubles.sglang_versions import BASE_VERSION, DDTREE_VERSION
from specconsole.sglang.flags import Argv, SglangCli
from specconsole.sglang.info import ServerInfo
from specconsole.sglang.logs import worker_facts, worker_log_command
from specconsole.ui.panes.serving_facts import deployment_lines

SHARED = Path(__file__).resolve().parents[2] / "shared"
REAL_HELP = (SHARED / "fixtures" / "sglang" / "serve-help-0.5.23.txt").read_text()


def cli(version: str) -> SglangCli:
    return SglangCli.from_help(sglang_versions.help_text(version, REAL_HELP))


def test_the_simulated_0_5_23_help_is_the_real_one() -> None:
    assert sglang_versions.help_text(BASE_VERSION, REAL_HELP) == REAL_HELP


def test_algorithms_come_from_the_help_of_each_version() -> None:
    old, new = cli(BASE_VERSION).algorithms(), cli(DDTREE_VERSION).algorithms()
    assert old == ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO"]
    assert new == ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DDTREE", "DSPARK", "UNO"]


def test_choices_in_braces_win_over_the_builtins_text() -> None:
    text = "  --speculative-algorithm {EAGLE,DFLASH,DDTREE}\n                        Builtins: NGRAM, UNO.\n"
    assert SglangCli.from_help(text).algorithms() == ["EAGLE", "DFLASH", "DDTREE"]


def test_ddtree_flags_and_the_renamed_block_size() -> None:
    old, new = cli(BASE_VERSION), cli(DDTREE_VERSION)
    assert old.name_for("tree_budget") is None
    assert new.name_for("tree_budget") == "--speculative-ddtree-budget"
    # 0.5.23: a DFLASH-only option of its own; newer: one option, two names
    assert not old.same("--speculative-dflash-block-size", "--speculative-num-draft-tokens")
    assert new.same("--speculative-dflash-block-size", "--speculative-num-draft-tokens")
    assert "DDTREE only" in new.flags["--speculative-ddtree-budget"].help


def test_the_hidden_window_alias_is_known_but_not_offered() -> None:
    c = cli(DDTREE_VERSION)
    assert "--speculative-dflash-draft-window-size" not in sglang_versions.help_text(DDTREE_VERSION, REAL_HELP)
    assert c.name_for("draft_window") == "--speculative-draft-window-size"
    assert c.same("--speculative-draft-window-size", "--speculative-dflash-draft-window-size")


@pytest.mark.parametrize("spelled", ["--speculative-dflash-draft-window-size", "--speculative-draft-window-size"])
def test_a_setting_is_changed_in_place_under_the_units_own_name(spelled: str) -> None:
    c = cli(DDTREE_VERSION)
    args = Argv.parse(["sglang", "serve", "--model-path", "m", spelled, "32", "--port", "1"], c)
    names = c.aliases("--speculative-draft-window-size")
    assert args.get(names) == "32"
    args.set("--speculative-draft-window-size", "48", names)
    assert args.argv() == ["sglang", "serve", "--model-path", "m", spelled, "48", "--port", "1"]


def test_a_repeated_option_under_two_names_collapses_to_the_first() -> None:
    c = cli(DDTREE_VERSION)
    names = c.aliases("--speculative-num-draft-tokens")
    args = Argv.parse(["sglang", "--speculative-dflash-block-size", "8", "--speculative-num-draft-tokens", "8"], c)
    args.set("--speculative-num-draft-tokens", "16", names)
    assert args.argv() == ["sglang", "--speculative-dflash-block-size", "16"]


def test_server_info_is_read_under_either_name() -> None:
    new = ServerInfo.from_json({"speculative_algorithm": "DDTREE", "speculative_num_draft_tokens": 16,
                                "speculative_ddtree_budget": 32, "speculative_dflash_draft_window_size": 48})
    assert (new.block_size, new.tree_budget, new.draft_window) == (16, 32, 48)
    old = ServerInfo.from_json({"speculative_algorithm": "DFLASH", "speculative_dflash_block_size": 16,
                                "speculative_num_draft_tokens": 16, "speculative_draft_window_size": 16})
    assert (old.block_size, old.tree_budget, old.draft_window) == (16, None, 16)


def test_the_ddtree_worker_line_is_read_from_the_journal_text() -> None:
    journal = ("Dec 04 00:36:52 serve sglang[812]: [2026-12-04 00:36:52 TP0] Load weight end. type=DFlashDraftModel\n"
               "Dec 04 00:36:52 serve sglang[812]: [2026-12-04 00:36:52 TP0] Initialized DDTree worker. "
               "block_size=16, tree_budget=32\n")
    assert worker_facts(journal, "DDTREE") == (("block_size", "16"), ("tree_budget", "32"))
    assert worker_facts(journal, "DFLASH") == () and worker_facts("no such line", "DDTREE") == ()
    assert worker_log_command("sglang.service", "NEXTN") is None
    assert "grep -F 'Initialized DDTree worker.'" in (worker_log_command("sglang.service", "DDTREE") or "")


def test_the_serving_pane_shows_the_tree_budget_and_the_worker_facts() -> None:
    info = ServerInfo.from_json({"speculative_algorithm": "DDTREE", "speculative_num_draft_tokens": 16,
                                 "speculative_ddtree_budget": 32})
    lines = deployment_lines(info, (("block_size", "16"), ("tree_budget", "32")))
    assert "tree budget [b]32[/]" in lines[1] and "full tree" in lines[1]
    assert lines[2].endswith("block_size=16, tree_budget=32")
    spine = ServerInfo.from_json({"speculative_algorithm": "DDTREE", "speculative_num_draft_tokens": 16,
                                  "speculative_ddtree_budget": 15})
    assert "spine" in deployment_lines(spine)[1] and len(deployment_lines(spine)) == 2
    dflash = ServerInfo.from_json({"speculative_algorithm": "DFLASH", "speculative_num_draft_tokens": 16})
    assert len(deployment_lines(dflash)) == 1
