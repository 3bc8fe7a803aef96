"""Per-move credit by branching (``arena.branching``): a game rebuilt at one of its decision
points continues exactly as the original did; values and advantages per move."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from arena import MatchGroupBuilder, do_group_rollout
from arena.branching import (
    VALUE_AFTER,
    VALUE_BEFORE,
    BranchConfig,
    branch_counts,
    decision_points,
    transition_advantages,
)
from arena.match import MatchSettings
from arena.policies import RandomMovePolicy
from arena.types import Trajectory, Transition
from games import make as make_game
from games.api import GAME, Game, GameMessage, MessageKind, MoveResult
from games.registration import register_game, unregister_game
from games.replay import replay_turns
from games.session import GameSession
from trainer.data import prepare_group


def _play_randomly(session: GameSession, seed: int) -> None:
    rng = random.Random(seed)
    while not session.done:
        movers = session.movers()
        moves = {}
        for seat in movers:
            legal = session.legal_moves(seat) or ["[0]"]
            moves[seat] = rng.choice(legal)
        session.step_round(moves)


def _transcript(session: GameSession) -> list[list[str]]:
    return [[m.text for m in session.seat_messages(s)] for s in range(session.num_players)]


@pytest.mark.parametrize("game_id", ["TicTacToe-v0", "Kuhn-v0", "Goofspiel-v0"])
def test_a_branch_continues_exactly_as_the_original_with_the_same_moves(game_id: str) -> None:
    """Rebuilt at any decision point (the same deal, the recorded moves replayed), a game
    given the rest of the original moves ends exactly as the original: the same messages to
    every seat, the same rewards (turn-based, hidden cards, simultaneous rounds)."""
    for seed in range(3):
        original = make_game(game_id, 2, seed)
        _play_randomly(original, seed)
        turns = list(original.turns)
        assert original.outcome is not None
        for point in decision_points(turns):
            twin = make_game(game_id, 2, seed)
            replay_turns(twin, turns[:point])
            assert len(twin.turns) == point
            replay_turns(twin, turns[point:])
            assert twin.outcome is not None
            assert twin.outcome.rewards == original.outcome.rewards
            assert _transcript(twin) == _transcript(original)


def test_replaying_another_games_moves_is_refused_with_the_seat_that_does_not_fit() -> None:
    original = make_game("TicTacToe-v0", 2, 0)
    _play_randomly(original, 0)
    other = make_game("Kuhn-v0", 2, 0)  # another game: its first move ends it
    with pytest.raises(Exception, match=r"the game asks|not this game"):
        replay_turns(other, original.turns)


def test_a_redrawn_branch_keeps_what_was_dealt() -> None:
    """``reseed`` changes the chance still to be drawn, never what was dealt: a Kuhn-v0
    game reseeded at its start keeps both cards (each seat's messages are unchanged)."""
    session = make_game("Kuhn-v0", 2, 4)
    before = _transcript(session)
    session.reseed(123)
    assert _transcript(session) == before


class CoinGame(Game):
    """Two seats; a coin tossed at the deal decides the winner; then each seat names
    ``[a]`` or ``[b]`` twice, which changes nothing. No move can change the result."""

    def __init__(self) -> None:
        self._messages: list[GameMessage] = []
        self.moves = 0
        self.turn = 0
        self.winner = 0

    def reset(self, num_players: int, seed: int) -> None:
        self.winner = random.Random(seed).randrange(2)
        self.moves = 0
        self.turn = 0
        self._messages = [GameMessage(GAME, "Name [a] or [b].", MessageKind.PROMPT, None)]

    def set_invalid_move_allowance(self, allowance: int) -> None:
        pass

    def current_player(self) -> int:
        return self.turn

    def step(self, action: str) -> MoveResult:
        self._messages.append(GameMessage(self.turn, action, MessageKind.ACTION, None))
        self.moves += 1
        self.turn = 1 - self.turn
        self._messages.append(GameMessage(GAME, "Name [a] or [b].", MessageKind.PROMPT, None))
        return MoveResult(True)

    def is_done(self) -> bool:
        return self.moves >= 4

    def rewards(self) -> dict[int, float]:
        return {self.winner: 1.0, 1 - self.winner: -1.0}

    def drain_messages(self) -> list[GameMessage]:
        out, self._messages = self._messages, []
        return out

    def legal_moves(self, seat: int) -> list[str] | None:
        return ["[a]", "[b]"] if seat == self.turn and not self.is_done() else None


@pytest.fixture
def coin() -> Iterator[str]:
    game_id = "CoinToss-v0"
    register_game(game_id, min_players=2, max_players=2, reward_sum=0.0)(CoinGame)
    yield game_id
    unregister_game(game_id)


async def test_every_advantage_is_zero_in_a_game_whose_result_no_move_can_change(
    coin: str,
) -> None:
    """The deal decides the result: branched at every decision point (the start
    included), every move's value before equals its value after, so every advantage is
    exactly 0. Without branches, group centring gives the moves the luck of the deal."""
    branching = BranchConfig(branches=2, points=0, seed=1)
    plain = MatchGroupBuilder(
        MatchSettings(coin, observation_format="compact"), group_size=6, seed=3
    )
    branched = MatchGroupBuilder(
        MatchSettings(coin, observation_format="compact"), group_size=6, seed=3, branching=branching
    )
    policy = RandomMovePolicy(seed=0)
    without = prepare_group(await do_group_rollout(plain, policy), per_seat=True)
    with_branches = await do_group_rollout(branched, policy)
    prepared = prepare_group(with_branches, per_seat=True)
    assert any(a != 0 for moves in without.move_advantages() for a in moves)
    moves = prepared.move_advantages()
    assert sum(len(m) for m in moves) == 6 * 4  # every move of every game
    assert all(a == 0.0 for m in moves for a in m)
    games, branch_moves = branch_counts(with_branches.trajectories_G)
    assert games == 6 * 4 * 2  # every decision point, 2 continuations each
    assert branch_moves == 6 * 2 * (4 + 3 + 2 + 1)


async def test_branch_values_give_each_move_its_own_advantage_in_tic_tac_toe() -> None:
    """Branched tic-tac-toe at every decision point: every move gets the value of its own
    decision point, and its advantage is the value of the next point (the opponent to
    move; the result after the last move) minus it, so the moves of one game get
    different advantages."""
    branching = BranchConfig(branches=3, points=0, seed=0)
    builder = MatchGroupBuilder("TicTacToe-v0", group_size=4, seed=0, branching=branching)
    group = await do_group_rollout(builder, RandomMovePolicy(seed=1, game_id="TicTacToe-v0"))
    distinct = set()
    for trajectory, reward in zip(group.trajectories_G, group.final_rewards_G, strict=True):
        advantages = transition_advantages(trajectory, reward, 0.0)
        distinct.update(advantages)
        transitions = trajectory.transitions
        assert transitions[-1].metrics["invalid_move"] == 0
        for transition, advantage in zip(transitions, advantages, strict=True):
            after = transition.metrics.get(VALUE_AFTER, reward)
            assert advantage == float(after) - float(transition.metrics[VALUE_BEFORE])
    assert len(distinct) > 2


def _transition(decision: int, before: float | None, after: float | None) -> Transition:
    import tinker

    from arena.types import TokensWithLogprobs

    metrics: dict[str, float | int] = {}
    if before is not None:
        metrics[VALUE_BEFORE] = before
    if after is not None:
        metrics[VALUE_AFTER] = after
    return Transition(
        ob=tinker.ModelInput.empty(),
        ac=TokensWithLogprobs(tokens=[1], maybe_logprobs=[0.0]),
        reward=0.0,
        episode_done=False,
        metrics=metrics,
        logs={"decision": decision},
    )


def test_advantages_fall_back_to_the_baseline_and_the_result_at_the_ends() -> None:
    """Before the first branch point the value is the baseline; after the last one, the
    game's result; in between, the branch values."""
    trajectory = Trajectory(
        transitions=[
            _transition(0, None, 0.5),
            _transition(2, 0.5, 0.25),
            _transition(4, 0.25, None),
        ],
        final_ob=None,  # type: ignore[arg-type]
    )
    assert transition_advantages(trajectory, 1.0, 0.1) == pytest.approx([0.4, -0.25, 0.75])


def test_branch_points_are_chosen_among_the_games_decisions() -> None:
    decisions = [0, 2, 4, 6, 8]
    assert BranchConfig(points=0).choose_points(decisions, "x") == decisions
    chosen = BranchConfig(points=2, seed=5).choose_points(decisions, "x")
    assert len(chosen) == 2 and set(chosen) <= set(decisions)
    assert chosen == BranchConfig(points=2, seed=5).choose_points(decisions, "x")
    assert BranchConfig(points=2, choose="even").choose_points(decisions, "x") == [2, 6]
    with pytest.raises(ValueError, match="branches must be at least 1"):
        BranchConfig(branches=0)
