"""The `arena` command line: tables, summaries, and one-line errors with exit code 2."""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys

import pytest

from arena_cli import build_parser, main


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "arena_cli", *args], capture_output=True, text=True, timeout=120
    )


def test_games_table_lists_ids_player_counts_and_availability(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["games"]) == 0
    out = capsys.readouterr().out
    assert "TicTacToe-v0" in out and "LowestUnique-v0" in out and "2-15" in out
    assert "available here" in out


def test_games_json_filters_by_player_count(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["games", "--json", "--players", "3", "--available"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["available"] for r in rows)
    assert any(r["id"] == "LowestUnique-v0" for r in rows)
    assert not any(r["id"] == "TicTacToe-v0" for r in rows)


def test_play_prints_results_per_seat(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "play",
            "--game",
            "TicTacToe-v0",
            "--players",
            "random,optimal",
            "--games",
            "40",
            "--quiet",
            "--json",
        ]
    )
    assert code == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["games"] == 40 and summary["aborted"] == 0
    assert summary["seats"][1]["losses"] == 0
    assert sum(summary["seats"][0][k] for k in ("wins", "draws", "losses")) == 40


def test_play_watch_shows_moves(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "play",
            "--game",
            "TicTacToe-v0",
            "--players",
            "optimal,optimal",
            "--games",
            "2",
            "--watch",
            "--watch-delay",
            "0",
            "--quiet",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "move 1: seat 0 plays" in out and "finished" in out
    assert "== game 1 of 2: TicTacToe-v0 (seed 0)" in out and "seed -1" not in out
    assert "TicTacToe-v0: 2 games in" in out  # the watched game is one of the two


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["play", "--game", "TicTacToe-v9"], "unknown game 'TicTacToe-v9'"),
        (["play", "--game", "TicTacToe-v0", "--players", "random,random,random"], "takes 2"),
        (["play", "--game", "TicTacToe-v0", "--players", "random,deepblue"], "random"),
        (["play", "--game", "ConnectFour-v0", "--players", "optimal,random"], "TicTacToe-v0"),
        (["play", "--game", "TicTacToe-v0", "--games", "0"], "--games"),
    ],
)
def test_bad_input_gets_one_line_and_exit_code_2(args: list[str], needle: str) -> None:
    result = run_cli(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0]
    assert "Traceback" not in result.stderr


def test_every_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    commands = sorted(sub.choices)
    assert {"games", "play", "train", "serve", "matches", "leaderboard", "agent"} <= set(commands)
    for command in [[], *([c] for c in commands)]:
        with pytest.raises(SystemExit) as exited:
            main([*command, "--help"])
        assert exited.value.code == 0, command
        out = capsys.readouterr().out
        assert out.startswith(f"usage: arena {' '.join(command)}".rstrip()), command
    assert "the game to train on" in run_cli("train", "--help").stdout.lower()  # in a process


def test_options_are_not_abbreviated() -> None:
    result = run_cli("play", "--game", "TicTacToe-v0", "--player", "random", "--games", "2")
    assert result.returncode == 2 and "unrecognized arguments: --player" in result.stderr


def test_train_help_is_the_config_fields_docstrings(capsys: pytest.CaptureFixture[str]) -> None:
    from trainer.cli import field_docs
    from trainer.config import TrainConfig

    docs = field_docs(TrainConfig)
    assert set(docs) == {f.name for f in dataclasses.fields(TrainConfig)}  # none undocumented
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert " ".join(docs["league_past_share"].split()[:6]) in out


def test_play_exits_1_and_says_so_when_games_hit_the_move_cap() -> None:
    result = run_cli(
        "play", "--game", "TicTacToe-v0", "--games", "3", "--max-turns", "2", "--no-record",
        "--quiet",
    )  # fmt: skip
    assert result.returncode == 1
    assert "3 of 3 games reached the move cap (--max-turns 2)" in result.stderr
    assert "truncated 3" in result.stdout  # the results are still shown
