"""Bot matches (``arena.play``): results, and memory that does not grow with the games."""

from __future__ import annotations

import asyncio

import pytest

from arena.play import play_matches


async def test_play_creates_tasks_only_for_the_games_in_progress() -> None:
    most = 0

    def done(_coordinator: object) -> None:
        nonlocal most
        most = max(most, len(asyncio.all_tasks()))

    stats = await play_matches(
        "TicTacToe-v0", ["random", "random"], 300, concurrency=4, on_match_done=done
    )
    assert stats.games == stats.finished == 300
    assert most <= 1 + 4 + 4  # this test, 4 workers, the driver tasks of their 4 games


async def test_an_error_in_the_callback_stops_play_and_ends_the_games_in_progress() -> None:
    def boom(_coordinator: object) -> None:
        raise RuntimeError("callback broke")

    with pytest.raises(RuntimeError, match="callback broke"):
        await play_matches(
            "TicTacToe-v0", ["random", "random"], 50, concurrency=4, on_match_done=boom
        )
    await asyncio.sleep(0)
    assert len(asyncio.all_tasks()) == 1  # no game left running


async def test_the_watch_printer_does_not_outlive_a_play_that_raises() -> None:
    import argparse

    from arena.eventbus import EventBus
    from games.bots import UnknownBot
    from games.limits import SessionLimits
    from matchmaking.playcli import _watch_one

    args = argparse.Namespace(game="TicTacToe-v0", seed=1, games=1, watch_delay=0.0)
    bus = EventBus()
    with pytest.raises(UnknownBot):
        await _watch_one(args, ["random", "nobody"], SessionLimits(), bus)
    await asyncio.sleep(0)
    assert len(asyncio.all_tasks()) == 1  # only this test: the printer task is gone
    assert not bus.has_subscribers
