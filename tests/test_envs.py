"""Per-seat envs and MatchGroupBuilder on real TextArena games."""

from __future__ import annotations

import asyncio
import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor

import pytest

from arena.envs import MatchGroupBuilder, PlayerEnv
from arena.match import MatchSettings
from arena.policies import FixedTextPolicy, RandomMovePolicy
from arena.rollouts import do_group_rollout
from arena.types import GameOverBeforeFirstMove
from games.bots import UnknownBot
from games.limits import SessionLimits
from games.registry import UnknownGame
from tests.conftest import HANG_GUARD_S, decode_ob, no_hang


def test_a_game_id_alone_is_that_game_with_the_default_settings() -> None:
    builder = MatchGroupBuilder("TicTacToe-v0", group_size=3, seed=5)
    assert builder.settings == MatchSettings("TicTacToe-v0")
    assert builder == MatchGroupBuilder(MatchSettings("TicTacToe-v0"), group_size=3, seed=5)
    assert pickle.loads(pickle.dumps(builder)) == builder


async def test_self_play_group_has_one_env_per_seat_per_game() -> None:
    builder = MatchGroupBuilder("TicTacToe-v0", group_size=3, seed=5)
    group = await do_group_rollout(builder, RandomMovePolicy(seed=1))
    assert len(group.trajectories_G) == 6
    for g in range(3):
        a, b = group.final_rewards_G[2 * g], group.final_rewards_G[2 * g + 1]
        assert a == -b  # zero-sum two-player outcome
    for metrics in group.metrics_G:
        assert metrics["aborted"] == 0
        assert metrics["win"] + metrics["draw"] + metrics["loss"] == 1
        assert metrics["invalid_moves"] == 0
    for traj in group.trajectories_G:
        assert all(t.reward == 0.0 for t in traj.transitions)
        assert traj.transitions[-1].episode_done


async def test_learner_against_bot_seat() -> None:
    builder = MatchGroupBuilder(
        "TicTacToe-v0", learner_seats=(1,), opponents=("optimal",), group_size=4
    )
    group = await do_group_rollout(builder, RandomMovePolicy(seed=2))
    assert len(group.trajectories_G) == 4
    assert all(r <= 0 for r in group.final_rewards_G)  # random never beats perfect play


async def test_first_move_invalid_partner_gets_its_own_observation() -> None:
    """Seat 0 forfeits on its first move: seat 1 never moves, and its observation is
    its own prompt, not seat 0's."""
    builder = MatchGroupBuilder("TicTacToe-v0")
    env0, env1 = await builder.make_envs()
    assert isinstance(env0, PlayerEnv) and isinstance(env1, PlayerEnv)
    await env0.initial_observation()
    partner = asyncio.create_task(env1.initial_observation())
    result = await env0.step(FixedTextPolicy("no idea").tokens)
    assert result.episode_done and result.metrics["invalid_move"] == 1
    initial = await no_hang(partner, "the partner's wait")
    assert isinstance(initial, GameOverBeforeFirstMove)  # no sampling for seat 1
    assert initial.metrics == {"stop/completed": 1.0}
    assert env1.done_before_first_move
    text = decode_ob(env1.observation())
    assert "You are Player 1" in text and "You are Player 0" not in text
    rewards = await builder.compute_group_rewards([], [env0, env1])
    assert rewards[0][0] == -1.0 and rewards[0][1]["forfeit"] == 1
    assert rewards[1][0] == 1.0 and rewards[1][1]["win"] == 1


async def test_first_move_invalid_with_retry_partner_prompt_is_its_own() -> None:
    builder = MatchGroupBuilder(
        MatchSettings("TicTacToe-v0", limits=SessionLimits(invalid_move_policy="retry"))
    )
    env0, env1 = await builder.make_envs()
    await env0.initial_observation()
    partner = asyncio.create_task(env1.initial_observation())
    retry = await env0.step(FixedTextPolicy("garbage").tokens)
    assert not retry.episode_done and retry.metrics["invalid_move"] == 1
    assert "You are Player 0" in decode_ob(retry.next_observation)
    moved = asyncio.create_task(env0.step(FixedTextPolicy("[4]").tokens))
    ob1, _ = await no_hang(partner, "the partner's wait")
    text = decode_ob(ob1)
    assert "You are Player 1" in text and "You are Player 0" not in text
    env1.abort("test over")
    await moved


async def test_kuhn_poker_seats_see_only_their_own_card() -> None:
    builder = MatchGroupBuilder("KuhnPoker-v0", seed=3)
    _env0, env1 = await builder.make_envs()
    ob1, _ = await env1.initial_observation()  # Kuhn poker: seat 1 acts first
    text1 = decode_ob(ob1)
    session = env1.coordinator.session
    private0 = [m.text for m in session.seat_messages(0) if not m.public]
    assert private0 and not any(p in text1 for p in private0 if "card" in p.lower())
    env1.abort("test over")


def test_builder_round_trips_through_pickle() -> None:
    builder = MatchGroupBuilder(
        "TicTacToe-v0", learner_seats=(0,), opponents=("random",), group_size=2, seed=9
    )
    clone = pickle.loads(pickle.dumps(builder))
    assert clone == builder


def _rollout_in_child(builder: MatchGroupBuilder) -> tuple[list[float], list[int]]:
    group = asyncio.run(do_group_rollout(builder, RandomMovePolicy(seed=4)))
    return group.final_rewards_G, [len(t.transitions) for t in group.trajectories_G]


@pytest.mark.slow
def test_group_rolls_out_in_a_spawn_process_pool() -> None:
    builder = MatchGroupBuilder("TicTacToe-v0", group_size=2, seed=1)
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        rewards, lengths = pool.submit(_rollout_in_child, builder).result(timeout=4 * HANG_GUARD_S)
    assert len(rewards) == 4 and all(n >= 2 for n in lengths)
    assert (rewards, lengths) == _rollout_in_child(builder)  # same seed, same games


def test_builder_validates_its_configuration() -> None:
    with pytest.raises(UnknownGame, match="TicTacToe-v0"):
        MatchGroupBuilder("TicTacToe-v9")
    with pytest.raises(ValueError, match="takes 2 players"):
        MatchGroupBuilder(MatchSettings("TicTacToe-v0", 3))
    with pytest.raises(ValueError, match="give 1 opponent"):
        MatchGroupBuilder("TicTacToe-v0", learner_seats=(0,))
    with pytest.raises(UnknownBot):
        MatchGroupBuilder("TicTacToe-v0", learner_seats=(0,), opponents=("alphazero",))


async def test_three_player_native_game_with_bots() -> None:
    builder = MatchGroupBuilder(
        MatchSettings("LowestUnique-v0", 4),
        learner_seats=(0, 2),
        opponents=("random", "random"),
        group_size=3,
    )
    group = await do_group_rollout(builder, RandomMovePolicy(seed=0))
    assert len(group.trajectories_G) == 6
    assert all(m["aborted"] == 0 for m in group.metrics_G)
