"""bench.screen: the trainer's update on a lookup table, with exact yardsticks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import screen
from games.textarena_games import tic_tac_toe
from trainer.config import TrainConfig


def test_the_tic_tac_toe_yardsticks_are_exact() -> None:
    game = screen.TicTacToe()

    def perfect(key: str, legal: list[int]) -> list[float]:
        board = ["" if c == "." else c for c in key]
        mark = "X" if board.count("X") == board.count("O") else "O"
        best = set(tic_tac_toe.best_moves(board, mark))
        return [1.0 / len(best) if cell in best else 0.0 for cell in legal]

    figures = game.yardsticks(perfect)
    assert figures["non_loss_vs_optimal_t1"] == pytest.approx(1.0)
    assert figures["non_loss_vs_optimal_greedy"] == pytest.approx(1.0)
    assert 0.8 < figures["win_vs_random_t1"] < 1.0

    def uniform(key: str, legal: list[int]) -> list[float]:
        return [1.0 / len(legal)] * len(legal)

    assert 0.05 < game.yardsticks(uniform)["non_loss_vs_optimal_t1"] < 0.2


def test_the_default_settles_kuhn_where_no_kl_circles() -> None:
    """The built-in model's Kuhn default (the exact KL toward a magnet) on the table:
    its exploitability falls and stays low; without any KL it does not get as low."""
    runs = {}
    for name, settings in {"default": {}, "nokl": {"kl_reverse_coef": 0.0,
                                                   "kl_forward_coef": 0.0}}.items():  # fmt: skip
        config = TrainConfig(game_id="Kuhn-v0", seed=0, **settings)  # type: ignore[arg-type]
        curve = screen.Screen(config, screen.Kuhn()).run(1500, 100)
        runs[name] = screen.summarise(curve, "exploitability")
    assert runs["default"]["start"] == pytest.approx(0.458, abs=1e-3)  # uniform play
    assert runs["default"]["second_half_max"] < 0.1
    assert runs["nokl"]["second_half_mean"] > 2 * runs["default"]["second_half_mean"]


def test_the_command_writes_its_curves_and_refuses_a_bad_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "screen"
    args = ["--game", "Kuhn-v0", "--steps", "40", "--seeds", "0", "--every", "20"]
    assert screen.main([*args, "--out", str(out), "--set", "ppo_epochs=2"]) == 0
    report = json.loads((out / "Kuhn-v0-ppo_epochs2.json").read_text())
    assert [row["step"] for row in report["runs"][0]["curve"]] == [0, 20, 40]
    assert "exploitability" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        screen.main([*args, "--set", "no_such_field=1"])
