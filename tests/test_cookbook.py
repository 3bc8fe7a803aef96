"""The Tinker cookbook's own code, unchanged, on arena's builders.

Its driver (``do_group_rollout``), its rollout strategies (``FailFast``,
``RetryOnFailure``), its ``rollout_executor`` with a spawn pool, its data code
(``compute_advantages``, ``assemble_training_data``, ``compute_trajectory_metrics``) and
its trainer (``rl.train.main``), with the cookbook's own policy (``TinkerTokenCompleter``)
over the local model. The fault cases (a seat that raises, one that hangs, a first move
that is illegal) must be handled by arena's envs and coordinator, whatever the driver.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import tinker
from tinker_cookbook.completers import TinkerTokenCompleter, TokensWithLogprobs
from tinker_cookbook.rl.data_processing import assemble_training_data, compute_advantages
from tinker_cookbook.rl.metric_util import compute_trajectory_metrics
from tinker_cookbook.rl.rollout_strategy import FailFast, RetryOnFailure
from tinker_cookbook.rl.rollouts import (
    do_group_rollout,
    do_group_rollout_and_filter_constant_reward,
    set_rollout_executor,
)

from arena.envs import MatchGroupBuilder, PlayerEnv
from arena.match import MatchSettings
from arena.renderers import ByteTokenizer, prompt_tokens
from arena.rollouts import GameRetry
from games.limits import SessionLimits
from games.session import Status
from tests.conftest import no_hang, spin
from trainer.data import groups_to_datums, prepare_group
from trainer.local import LocalModelConfig, create_local_training_client

BYTES = ByteTokenizer()


@pytest.fixture(scope="module")
def sampler() -> Any:
    """A sampling client of the built-in model (random weights: it plays mostly garbage)."""
    client = create_local_training_client(LocalModelConfig(seed=3))
    return client.save_weights_and_get_sampling_client().result()


def seat_of(ob: tinker.ModelInput) -> int:
    """The seat a TicTacToe prompt (full transcript) belongs to."""
    text = BYTES.decode(prompt_tokens(ob))
    return 1 if "You are Player 1" in text else 0


class ScriptedPolicy:
    """A cookbook token policy that plays legal moves, and misbehaves on demand for one
    seat: ``raise_once``/``raise_always`` raise, ``hang`` never answers."""

    def __init__(self, bad_seat: int = -1, mode: str = "ok") -> None:
        self.bad_seat = bad_seat
        self.mode = mode
        self.failures = 0
        self.hung = asyncio.Event()

    async def __call__(self, ob: tinker.ModelInput, stop: Any, **_: Any) -> TokensWithLogprobs:
        text = BYTES.decode(prompt_tokens(ob))
        if seat_of(ob) == self.bad_seat:
            if self.mode == "raise_always" or (self.mode == "raise_once" and not self.failures):
                self.failures += 1
                raise RuntimeError("sampler crashed")
            if self.mode == "hang":
                self.hung.set()
                await asyncio.Event().wait()
        free = [c for c in "012345678" if f"[{c}]" in text[-400:]]
        tokens = [*BYTES.encode(f"[{free[0] if free else '0'}]"), ByteTokenizer.EOS]
        return TokensWithLogprobs(tokens=tokens, maybe_logprobs=[-0.5] * len(tokens))


def coordinators_of(builder: MatchGroupBuilder) -> list[Any]:
    return [game[0].coordinator for game in builder.__dict__.get("_games", [])]


async def assert_nothing_left_running() -> None:
    await asyncio.sleep(0)
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert others == [], f"tasks left pending: {others}"


@pytest.mark.parametrize(
    ("game_id", "players"),
    [("TicTacToe-v0", 2), ("LowestUnique-v0", 3), ("Goofspiel-v0", 3), ("Goofspiel-v0", 4)],
)
async def test_cookbook_rollout_and_data_code_on_arena_builders(
    sampler: Any, game_id: str, players: int
) -> None:
    settings = MatchSettings(game_id, players, observation_format="compact")
    builder = MatchGroupBuilder(settings, group_size=3, seed=5)
    policy = TinkerTokenCompleter(sampler, max_tokens=6)
    group = await do_group_rollout(builder, policy, strategy=FailFast())
    assert len(group.trajectories_G) == 3 * players
    assert all(t.stop_reason in ("completed", "max_turns") for t in group.trajectories_G)
    if game_id == "TicTacToe-v0":  # zero-sum: every game's rewards sum to zero
        for g in range(3):
            assert sum(group.final_rewards_G[2 * g : 2 * g + 2]) == pytest.approx(0)
    advantages = compute_advantages([group])
    assert float(advantages[0].sum()) == pytest.approx(0, abs=1e-5)
    data, metadata = assemble_training_data([group], advantages)
    assert data and len(data) == len(metadata)
    ours = groups_to_datums([prepare_group(group)])
    assert [d.model_input.to_ints() for d in ours] == [d.model_input.to_ints() for d in data]
    for mine, theirs in zip(ours, data, strict=True):
        for key in ("target_tokens", "logprobs", "advantages", "mask"):
            assert mine.loss_fn_inputs[key].to_numpy().tolist() == pytest.approx(
                theirs.loss_fn_inputs[key].to_numpy().tolist(), abs=1e-6
            )
    metrics = compute_trajectory_metrics([group], [builder.logging_tags()])
    assert metrics["env/all/total_episodes"] == 3 * players
    await assert_nothing_left_running()


async def test_cookbook_seat_whose_game_ends_before_it_moves() -> None:
    """Seat 0 forfeits on its first move: the cookbook never samples for seat 1."""

    class Garbage:
        calls: list[int] = []

        async def __call__(self, ob: tinker.ModelInput, stop: Any) -> TokensWithLogprobs:
            Garbage.calls.append(seat_of(ob))
            tokens = [*BYTES.encode("no idea"), ByteTokenizer.EOS]
            return TokensWithLogprobs(tokens=tokens, maybe_logprobs=[-1.0] * len(tokens))

    builder = MatchGroupBuilder("TicTacToe-v0", group_size=2)
    group = await do_group_rollout(builder, Garbage())
    assert Garbage.calls == [0, 0]
    seat1 = group.trajectories_G[1]
    assert [t.ac.tokens for t in seat1.transitions] == [[]] and seat1.stop_reason == "completed"
    assert group.final_rewards_G == [-1.0, 1.0, -1.0, 1.0]
    data, _ = assemble_training_data([group], compute_advantages([group]))
    assert len(data) == 2  # seat 0's moves only: the empty transition yields no tokens


async def test_cookbook_failfast_seat_that_raises_aborts_every_seat() -> None:
    builder = MatchGroupBuilder("TicTacToe-v0", group_size=2)
    with pytest.raises(RuntimeError, match="sampler crashed"):
        await no_hang(
            do_group_rollout(builder, ScriptedPolicy(bad_seat=1, mode="raise_always")),
            "the rollout",
        )
    # FailFast raises at the first error; the partners are woken by the abort, in the
    # loop's next rounds (no time passes), not by a move clock or join timeout.
    await spin()
    games = coordinators_of(builder)
    assert games and all(c.done for c in games)
    assert all("sampler crashed" in c.outcome.reason for c in games)
    await assert_nothing_left_running()


async def test_cookbook_driver_seat_that_hangs_is_aborted_within_the_move_timeout() -> None:
    move_timeout = 0.5
    builder = MatchGroupBuilder(
        MatchSettings("TicTacToe-v0", limits=SessionLimits(move_timeout_s=move_timeout)),
        group_size=1,
    )
    policy = ScriptedPolicy(bad_seat=1, mode="hang")
    envs = list(await builder.make_envs())
    from tinker_cookbook.rl.rollouts import do_single_rollout

    tasks = [asyncio.ensure_future(do_single_rollout(policy, env)) for env in envs]
    await no_hang(policy.hung.wait(), "seat 1's sampler")
    coordinator = envs[0].coordinator  # type: ignore[attr-defined]
    # The builder's coordinator keeps time on the event loop: the real 0.5 s move clock
    # ends it (the reason says which timer did; how long a busy machine took is no verdict).
    await no_hang(coordinator.wait_done(), "the move clock")
    assert coordinator.outcome.status is Status.ABORTED
    assert f"seat 1 (learner) timed out after {move_timeout:g} s" in coordinator.outcome.reason
    seat0 = await no_hang(tasks[0], "the partner's episode")
    assert seat0.transitions[-1].metrics.get("aborted") == 1
    tasks[1].cancel()  # the hung sampler is the driver's to cancel
    await asyncio.gather(*tasks, return_exceptions=True)
    await builder.cleanup()
    await assert_nothing_left_running()


async def test_game_retry_bounds_a_hung_sampler_for_the_cookbook_driver() -> None:
    """With GameRetry's sample time limit the cookbook's driver returns: the hung game is
    dropped whole and recorded, nothing is left pending."""
    builder = MatchGroupBuilder(
        MatchSettings("TicTacToe-v0", limits=SessionLimits(move_timeout_s=5.0)), group_size=2
    )
    policy = ScriptedPolicy(bad_seat=1, mode="hang")
    strategy = GameRetry(sample_timeout_s=0.3)
    from tinker_cookbook.exceptions import AllTrajectoriesFailedError

    # The sample time limit (not the 5 s move clock) is what ends it: the error says so.
    with pytest.raises(AllTrajectoriesFailedError, match="SampleTimeoutError"):
        await no_hang(do_group_rollout(builder, policy, strategy=strategy), "the rollout")
    assert all(c.done for c in coordinators_of(builder))
    await assert_nothing_left_running()


async def test_game_retry_replays_the_whole_game() -> None:
    builder = MatchGroupBuilder("TicTacToe-v0", group_size=2, seed=11)
    policy = ScriptedPolicy(bad_seat=1, mode="raise_once")
    group = await do_group_rollout(builder, policy, strategy=GameRetry(max_retries=1))
    assert len(group.trajectories_G) == 4
    assert [e.error_type for e in group.rollout_errors] == ["RuntimeError"]
    assert all(m["aborted"] == 0 for m in group.metrics_G)
    # What the strategy returns: seats in whole games, each game finished with all seats.
    builder = MatchGroupBuilder("TicTacToe-v0", group_size=2, seed=11)
    result = await GameRetry(max_retries=1).execute(
        builder, ScriptedPolicy(bad_seat=1, mode="raise_once")
    )
    games: dict[int, list[int]] = {}
    for env in result.envs:
        assert isinstance(env, PlayerEnv)
        games.setdefault(id(env.coordinator), []).append(env.seat)
        assert env.coordinator.outcome.status is Status.FINISHED
    assert sorted(games.values()) == [[0, 1], [0, 1]]
    await builder.cleanup()
    await assert_nothing_left_running()


async def test_cookbook_retry_on_failure_leaves_no_orphaned_seat() -> None:
    """The cookbook's RetryOnFailure rebuilds one env of a new group: the new game's other
    seat is never driven, so the join timeout aborts that game and cleanup ends it."""
    builder = MatchGroupBuilder(
        MatchSettings("TicTacToe-v0", limits=SessionLimits(join_timeout_s=0.3)), group_size=1
    )
    policy = ScriptedPolicy(bad_seat=1, mode="raise_once")
    group = await no_hang(
        do_group_rollout(builder, policy, strategy=RetryOnFailure(max_retries=1)), "the rollout"
    )
    assert len(group.trajectories_G) == 2
    aborted = [m for m in group.metrics_G if m["aborted"]]
    assert aborted, "the half-games are marked aborted, so trainers drop them"
    games = coordinators_of(builder)
    assert games == [] or all(c.done for c in games)
    await assert_nothing_left_running()


def _rollout_with_executor(sampler: Any, builder: MatchGroupBuilder) -> Any:
    async def go() -> Any:
        return await do_group_rollout_and_filter_constant_reward(
            sampler, builder, 6, 1.0, do_remove_constant_reward_groups=False
        )

    return asyncio.run(go())


@pytest.mark.slow
def test_cookbook_rollout_executor_with_a_spawn_pool(sampler: Any) -> None:
    builder = MatchGroupBuilder(
        MatchSettings("TicTacToe-v0", observation_format="compact"), group_size=2, seed=2
    )
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        set_rollout_executor(pool)
        try:
            group = _rollout_with_executor(sampler, builder)
        finally:
            set_rollout_executor(None)
    assert group is not None and len(group.trajectories_G) == 4
    assert all(m["aborted"] == 0 for m in group.metrics_G)


@pytest.mark.slow
def test_cookbook_trainer_on_an_arena_game(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``tinker_cookbook.rl.train.main`` with arena's dataset builder, against the strict
    fake service: it trains, and arena records every match it played."""
    from tinker_cookbook import tokenizer_utils
    from tinker_cookbook.rl.train import Config, main
    from transformers import AutoTokenizer

    from storage import list_matches, open_database
    from tests.chat_model import write_chat_model_dir
    from tests.fake_tinker import FakeServiceClient
    from trainer.cookbook import SelfPlayDatasetBuilder

    hosted = "Qwen/Qwen3-4B-Instruct-2507"
    model_dir = tmp_path / "model"
    write_chat_model_dir(model_dir)
    hf = AutoTokenizer.from_pretrained(model_dir)
    tokenizer_utils.register_tokenizer(hosted, lambda: hf)
    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
    monkeypatch.setattr(tinker, "ServiceClient", FakeServiceClient)
    monkeypatch.setattr(FakeServiceClient, "models", {hosted: str(model_dir)})
    monkeypatch.setattr(FakeServiceClient, "checkpoint_dir", tmp_path / "service")
    monkeypatch.setattr(FakeServiceClient, "calls", [])
    db = tmp_path / "arena.db"
    builder = SelfPlayDatasetBuilder(
        game_id="TicTacToe-v0",
        model_name_for_tokenizer=hosted,
        renderer_name="qwen3_instruct",
        batch_size=2,
        group_size=2,
        num_batches=2,
        db=str(db),
    )
    config = Config(
        learning_rate=1e-4,
        dataset_builder=builder,
        model_name=hosted,
        recipe_name="arena_test",
        renderer_name="qwen3_instruct",
        max_tokens=6,
        log_path=str(tmp_path / "log"),
        eval_every=0,
        save_every=0,
        rollout_error_tolerance=GameRetry(max_retries=1),
    )
    try:
        asyncio.run(main(config))
    finally:
        tokenizer_utils.unregister_tokenizer(hosted)
    names = [name for name, _ in FakeServiceClient.calls]
    assert names.count("forward_backward_async") == 2
    assert (tmp_path / "log" / "metrics.jsonl").exists()

    async def stored() -> int:
        database = await open_database(str(db))
        try:
            return len(await list_matches(database, limit=100))
        finally:
            await database.close()

    assert asyncio.run(stored()) == 2 * 2 * 2  # batches x groups x games


def test_player_env_takes_the_cookbook_extra_keyword() -> None:
    import inspect

    from tinker_cookbook.rl.types import Env

    ours = inspect.signature(PlayerEnv.step).parameters
    theirs = inspect.signature(Env.step).parameters
    assert list(ours) == list(theirs)
    assert ours["extra"].kind is inspect.Parameter.KEYWORD_ONLY
