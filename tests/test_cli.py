"""The `arena` command line: tables, summaries, and one-line errors with exit code 2."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from arena_cli import build_parser, main

ROOT = Path(__file__).resolve().parent.parent


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


MODEL_STACK = ("torch", "transformers", "tinker", "tinker_cookbook")
"""What only the commands that train, sample or load a model may import."""

_FRONT_DOOR = textwrap.dedent(
    """
    import argparse, contextlib, io, json, sys
    import arena_cli

    def run(argv):
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            try:
                arena_cli.main(argv)
            except SystemExit:
                pass

    parser = arena_cli.build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    commands = [["--help"], ["games"], ["agents", "create", "alice"], ["agents", "list"]]
    commands += [[c, "--help"] for c in sorted(sub.choices) if c != "cookbook"]
    commands += [["db", "upgrade", "--help"]]
    loaded = {}
    for argv in commands:
        run(argv)
        loaded[" ".join(argv)] = sorted(m for m in %r if m in sys.modules)
    print(json.dumps(loaded))
    """
)


def test_front_door_commands_do_not_load_the_model_stack(tmp_path: Path) -> None:
    # `arena --help`, `arena games`, `arena agents ...` and every command's help, in a fresh
    # process: none may import torch, transformers or tinker (seconds and hundreds of MB).
    # `arena cookbook --help` is the cookbook's own trainer's help: it needs tinker.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ARENA_DB": str(tmp_path / "arena.db")}
    result = subprocess.run(
        [sys.executable, "-c", _FRONT_DOOR % (MODEL_STACK,)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert len(loaded) > 10 and "agents list" in loaded and "serve --help" in loaded
    assert {argv: found for argv, found in loaded.items() if found} == {}
    assert (tmp_path / "arena.db").exists()  # the agents commands ran for real


def test_old_train_option_names_still_work_with_a_note(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = build_parser().parse_args(
        ["train", "--steps", "3", "--groups-per-batch", "2", "--games-per-group", "4"]
    )
    assert (args.num_batches, args.batch_size, args.group_size) == (3, 2, 4)
    notes = capsys.readouterr().err.splitlines()
    assert notes == [
        "note: --steps is now --num-batches; the old name still works",
        "note: --groups-per-batch is now --batch-size; the old name still works",
        "note: --games-per-group is now --group-size; the old name still works",
    ]
    new = build_parser().parse_args(["train", "--num-batches", "5"])
    assert (new.num_batches, new.batch_size) == (5, 8) and not capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "--steps" not in capsys.readouterr().out  # the old names are not advertised


def test_a_resumed_run_reads_the_old_config_json_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from storage.rundir import RunDirectory
    from trainer.cli import with_stored_settings
    from trainer.config import TrainConfig

    run = RunDirectory(tmp_path / "old")
    run.write_config({"steps": 7, "groups_per_batch": 3, "games_per_group": 5, "seed": 2})
    given = build_parser().parse_args(["train", "--log-dir", str(run.path), "--seed", "4"])
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    values = with_stored_settings({k: v for k, v in vars(given).items() if k in fields}, run)
    config = TrainConfig(**values)
    assert (config.num_batches, config.batch_size, config.group_size) == (7, 3, 5)
    assert config.seed == 4  # given on the command line: it wins over the stored one
    err = capsys.readouterr().err
    assert f"note: {run.config_path}: steps is now num_batches; the old name still works" in err


def test_train_loss_choices_are_the_loss_tables_rl_losses(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from trainer.losses import LOSSES, RL_LOSSES

    for name in LOSSES:
        if name in RL_LOSSES:
            assert build_parser().parse_args(["train", "--loss-fn", name]).loss_fn == name
        else:
            with pytest.raises(SystemExit):
                build_parser().parse_args(["train", "--loss-fn", name])
            assert "invalid choice" in capsys.readouterr().err
