"""Bots: the perfect tic-tac-toe bot never loses; the random bot plays legal moves; game bots
are found through their game's module."""

from __future__ import annotations

import pytest

from arena.play import play_matches
from games.bots import UnknownBot, bot_names, bots_for, check_bot, make_bot
from games.registry import get_spec
from games.textarena_games.tic_tac_toe import best_moves as best_tictactoe_moves
from games.textarena_games.tic_tac_toe import parse_board as parse_tictactoe_board


def test_minimax_takes_a_win_and_blocks_a_loss() -> None:
    # X to move can win at 2; O threatens 6 (column 0)... X must win first.
    cells = ["X", "X", "", "O", "O", "", "", "", ""]
    assert best_tictactoe_moves(cells, "X") == [2]
    assert best_tictactoe_moves(cells, "O") == [5]
    empty = [""] * 9
    assert set(best_tictactoe_moves(empty, "O")) == set(range(9))  # every opening draws


def test_board_parsing_reads_the_last_board() -> None:
    text = " O | 1 | 2 \n---+---+---\n 3 | X | 5 \n---+---+---\n 6 | 7 | 8 "
    assert parse_tictactoe_board(text) == ["O", "", "", "", "X", "", "", "", ""]
    assert parse_tictactoe_board("no board here") is None


@pytest.mark.parametrize("order", [("optimal", "random"), ("random", "optimal")])
async def test_optimal_never_loses_to_random(order: tuple[str, str]) -> None:
    stats = await play_matches("TicTacToe-v0", list(order), 200, seed=0)
    optimal_seat = order.index("optimal")
    assert stats.aborted == 0
    assert stats.seats[optimal_seat].losses == 0
    assert stats.seats[optimal_seat].wins > 100
    assert stats.seats[1 - optimal_seat].invalid_moves == 0


async def test_optimal_against_itself_always_draws() -> None:
    stats = await play_matches("TicTacToe-v0", ["optimal", "optimal"], 50, seed=1)
    assert stats.seats[0].draws == 50


def test_unknown_bot_and_wrong_game_are_refused() -> None:
    with pytest.raises(UnknownBot, match=r"choose from: alphabeta-1, .*optimal, prize, random"):
        make_bot("genius", 0)
    with pytest.raises(UnknownBot, match=r"'optimal' plays only TicTacToe-v0, not ConnectFour"):
        check_bot("optimal", get_spec("ConnectFour-v0"))
    with pytest.raises(UnknownBot, match=r"bots for TicTacToe-v0: random, optimal"):
        check_bot("alphabeta-2", get_spec("TicTacToe-v0"))


def test_game_bots_come_from_the_game_modules() -> None:
    assert {"optimal", "nash", "alphabeta-2", "alphabeta-4", "random"} <= set(bot_names())
    assert bots_for(get_spec("TicTacToe-v0")) == ["random", "optimal"]
    assert "alphabeta-4" in bots_for(get_spec("ConnectFour-v0"))
    assert "nash" in bots_for(get_spec("KuhnPoker-v0"))
    # Without the game id, a game bot binds to the game it is first shown.
    assert make_bot("optimal", 0).name == "optimal"
    assert make_bot("alphabeta-3", 0, game_id="ConnectFour-v0").name == "alphabeta-3"
