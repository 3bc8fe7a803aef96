"""Who won (``games.outcome``): one definition, and every place that reports a result
agrees with it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from arena.eventbus import EventBus
from arena.match import MatchSettings
from arena.play import play_matches
from arena.policies import RandomMovePolicy
from games.outcome import Result, ranks, result_of, score_of, seat_outcomes
from games.registration import register_game, unregister_game
from storage import Recorder, open_database, policy_results
from tests.conftest import CountingGame
from trainer.evaluate import evaluate
from web.agents.agentdesk import result_for
from web.live.convert import ended_result


def test_results_scores_and_ranks_of_the_documented_example() -> None:
    rewards = (0.5, 0.5, -1.0)
    assert [result_of(s, rewards) for s in range(3)] == [Result.DRAW, Result.DRAW, Result.LOSS]
    assert [score_of(s, rewards) for s in range(3)] == [0.75, 0.75, 0.0]
    assert ranks(rewards) == [1, 1, 3]
    assert [
        o.result
        for o in seat_outcomes(
            {0: 1.0, 2: 0.0},
        )
    ] == [
        Result.WIN,
        Result.LOSS,
        Result.LOSS,
    ]  # a mapping's missing seat counts 0.0: seat 1 ties seat 2 but is below seat 0


@pytest.mark.parametrize(
    ("rewards", "results", "scores"),
    [
        ((1.0, -1.0), ["win", "loss"], [1.0, 0.0]),
        ((0.0, 0.0), ["draw", "draw"], [0.5, 0.5]),
        ((2.0, -2.0), ["win", "loss"], [1.0, 0.0]),  # chips: the sign is not the point
        ((-1.0, -2.0), ["win", "loss"], [1.0, 0.0]),  # above the other, though negative
        ((1.0, 0.0, 0.0), ["win", "loss", "loss"], [1.0, 0.25, 0.25]),
        ((3.0, 2.0, 1.0), ["win", "loss", "loss"], [1.0, 0.5, 0.0]),
        ((1.0,), ["win"], [1.0]),  # one seat: the sign decides
        ((0.0,), ["draw"], [0.5]),
        ((-1.0,), ["loss"], [0.0]),
    ],
)
def test_result_against_the_best_other_seat(
    rewards: tuple[float, ...], results: list[str], scores: list[float]
) -> None:
    outcomes = seat_outcomes(rewards)
    assert [o.result.value for o in outcomes] == results
    assert [o.score for o in outcomes] == scores
    assert ended_result("finished", "", rewards, [0] * len(rewards), [], 3)["results"] == results


class PodiumGame(CountingGame):
    """Three seats count to three; seats 0 and 1 share first place: (0.5, 0.5, -1)."""

    def __init__(self) -> None:
        super().__init__(rounds=1)

    def rewards(self) -> dict[int, float]:
        return {0: 0.5, 1: 0.5, 2: -1.0}


@pytest.fixture
def podium() -> Iterator[str]:
    register_game("Podium-v0", min_players=3, max_players=3)(PodiumGame)
    try:
        yield "Podium-v0"
    finally:
        unregister_game("Podium-v0")


async def test_play_results_evaluation_and_agents_agree_on_a_shared_first_place(
    podium: str, tmp_path: Path
) -> None:
    # arena play's table
    bus = EventBus()
    database = await open_database(str(tmp_path / "arena.db"))
    try:
        async with Recorder(database, bus):
            stats = await play_matches(podium, ["random"] * 3, 4, bus=bus)
        stored = await policy_results(database, game=podium)
    finally:
        await database.close()
    assert [(s.wins, s.draws, s.losses) for s in stats.seats] == [(0, 4, 0), (0, 4, 0), (0, 0, 4)]
    assert [s.mean_reward for s in stats.seats] == [0.5, 0.5, -1.0]
    # arena results (the stored matches): the one policy sat in every seat of 4 matches
    (row,) = stored
    assert (row.games, row.wins, row.draws, row.losses) == (12, 0, 8, 4)
    assert row.mean_reward == pytest.approx(0.0)
    # evaluation, the learner in each seat in turn (3 games: one per seat)
    (result,) = await evaluate(
        RandomMovePolicy(seed=1),
        MatchSettings(podium, 3),
        ["random"],
        3,
        max_games_per_builder=1,
    )
    metrics = result.metrics()
    assert (result.wins, result.draws, result.losses) == (0, 2, 1)
    assert metrics["test/random/score"] == pytest.approx((0.75 + 0.75 + 0.0) / 3)
    # the agent protocol's match_ended
    assert [result_for(s, "finished", (0.5, 0.5, -1.0)) for s in range(3)] == [
        "draw",
        "draw",
        "loss",
    ]
    assert result_for(0, "aborted", None) == "aborted"
