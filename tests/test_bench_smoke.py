"""The benchmarks' loops play what they say (a figure from a loop that skipped its games
would be meaningless); the timings themselves are for ``make bench``, never asserted."""

from __future__ import annotations

import pytest

from bench.coordinator import arena_loop, floor_loop, raw_loop


@pytest.mark.parametrize("game_id", ["TicTacToe-v0", "ConnectFour-v0"])
def test_the_coordinator_benchmark_loops_play_every_game(game_id: str) -> None:
    assert raw_loop(game_id, 5, 0) == 5
    assert arena_loop(game_id, 16, 0, group_size=8, groups_per_batch=2) == 16
    assert floor_loop(game_id, 20, 0, batch=8) == 20  # every game finished, none aborted
