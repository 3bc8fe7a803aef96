"""Advantages and datum assembly against hand-computed examples."""

from __future__ import annotations

import pytest
import tinker

from arena.types import TokensWithLogprobs, Trajectory, TrajectoryGroup, Transition
from trainer.data import (
    RoleBaseline,
    group_centered_advantages,
    prepare_group,
    seat_centered_advantages,
    trajectory_to_datums,
)


def ob(tokens: list[int]) -> tinker.ModelInput:
    return tinker.ModelInput.from_ints(tokens)


def transition(o: list[int], a: list[int], lp: list[float] | None = None) -> Transition:
    return Transition(ob=ob(o), ac=TokensWithLogprobs(a, lp), reward=0.0, episode_done=False)


def data(datum, key: str) -> list[float]:  # type: ignore[no-untyped-def]
    return list(datum.loss_fn_inputs[key].data)


def test_group_centering() -> None:
    assert group_centered_advantages([1.0, -1.0, 0.0, 0.0]) == [1.0, -1.0, 0.0, 0.0]
    assert group_centered_advantages([1.0, 1.0, -1.0, 1.0]) == [0.5, 0.5, -1.5, 0.5]
    assert group_centered_advantages([]) == []


def test_multi_turn_trajectory_merges_into_one_datum_with_masking() -> None:
    # Turn 1: ob [1,2] action [3,4]; turn 2's ob extends it: [1,2,3,4,5] action [6].
    traj = Trajectory(
        transitions=[
            transition([1, 2], [3, 4], [-0.1, -0.2]),
            transition([1, 2, 3, 4, 5], [6], [-0.3]),
        ],
        final_ob=ob([1, 2, 3, 4, 5, 6, 7]),
    )
    (datum,) = trajectory_to_datums(traj, advantage=0.5)
    assert datum.model_input.to_ints() == [1, 2, 3, 4, 5]
    assert data(datum, "target_tokens") == [2, 3, 4, 5, 6]
    assert data(datum, "mask") == [0.0, 1.0, 1.0, 0.0, 1.0]
    assert data(datum, "advantages") == [0.0, 0.5, 0.5, 0.0, 0.5]
    assert data(datum, "logprobs") == pytest.approx([0.0, -0.1, -0.2, 0.0, -0.3])


def test_turn_that_does_not_extend_starts_a_new_datum() -> None:
    traj = Trajectory(
        transitions=[transition([1, 2], [3], [-1.0]), transition([9, 8], [7], [-2.0])],
        final_ob=ob([]),
    )
    first, second = trajectory_to_datums(traj, advantage=-1.0)
    assert first.model_input.to_ints() == [1, 2]
    assert data(first, "target_tokens") == [2, 3]
    assert data(first, "advantages") == [0.0, -1.0]
    assert second.model_input.to_ints() == [9, 8]
    assert data(second, "logprobs") == [0.0, -2.0]


def test_empty_trajectory_has_no_datum() -> None:
    assert trajectory_to_datums(Trajectory(transitions=[], final_ob=ob([1])), 1.0) == []


def make_group(rewards: list[float], aborted: list[int]) -> TrajectoryGroup:
    trajs = [Trajectory([transition([1], [2], [-0.5])], final_ob=ob([1, 2])) for _ in rewards]
    metrics = [{"aborted": a, "seat": i % 2} for i, a in enumerate(aborted)]
    return TrajectoryGroup(trajs, list(rewards), metrics)  # type: ignore[arg-type]


def test_aborted_trajectories_are_dropped_before_centering() -> None:
    prepared = prepare_group(make_group([1.0, -1.0, 0.0, 0.0], [0, 0, 1, 1]))
    assert prepared.dropped_aborted == 2
    assert prepared.advantages == [1.0, -1.0]
    assert len(prepared.trajectories) == 2


def test_all_aborted_group_is_empty() -> None:
    prepared = prepare_group(make_group([0.0, 0.0], [1, 1]))
    assert prepared.trajectories == [] and prepared.dropped_aborted == 2


def test_constant_reward_group_can_be_dropped() -> None:
    group = make_group([0.0, 0.0, 0.0, 0.0], [0, 0, 0, 0])
    assert prepare_group(group, drop_constant_reward=True).dropped_constant
    kept = prepare_group(group, drop_constant_reward=False)
    assert kept.advantages == [0.0, 0.0, 0.0, 0.0]


def test_role_baseline_subtracts_each_seats_moving_average() -> None:
    baseline = RoleBaseline(decay=0.5)
    # Seat 0 always wins: its baseline climbs, so its advantage shrinks.
    first = baseline.advantages("G", [0, 1], [1.0, -1.0])
    assert first == [1.0, -1.0]  # baselines start at 0
    second = baseline.advantages("G", [0, 1], [1.0, -1.0])
    assert second == [0.0, 0.0]  # after the first update the baselines equal the rewards
    third = baseline.advantages("G", [0, 1], [-1.0, 1.0])
    assert third == [-2.0, 2.0]
    assert baseline.values == {"G/0": 0.0, "G/1": 0.0}


def test_role_baseline_in_prepare_group_uses_the_seat_metric() -> None:
    baseline = RoleBaseline(decay=0.0)
    prepare_group(make_group([1.0, -1.0], [0, 0]), game_id="G", baseline=baseline)
    prepared = prepare_group(make_group([1.0, -1.0], [0, 0]), game_id="G", baseline=baseline)
    assert prepared.advantages == [0.0, 0.0]


def test_seat_centred_advantages_compare_each_seat_with_itself() -> None:
    # Self-play: seat 0 won three games of four. Group-centred, every seat-0 move would be
    # credited and every seat-1 move blamed; seat-centred, each game is compared with the
    # other games of the same seat.
    rewards = [1.0, -1.0, 1.0, -1.0, 1.0, -1.0, -1.0, 1.0]
    group = make_group(rewards, [0] * 8)
    prepared = prepare_group(group, per_seat=True)
    assert prepared.advantages == [0.5, -0.5, 0.5, -0.5, 0.5, -0.5, -1.5, 1.5]
    assert sum(prepared.advantages[0::2]) == 0 and sum(prepared.advantages[1::2]) == 0
    assert seat_centered_advantages([1.0, 0.0], [0, 0]) == [0.5, -0.5]


def test_a_group_where_one_seat_always_wins_has_no_signal_per_seat() -> None:
    group = make_group([1.0, -1.0] * 4, [0] * 8)
    assert prepare_group(group, per_seat=True, drop_constant_reward=True).dropped_constant
    assert not prepare_group(group, drop_constant_reward=True).dropped_constant


def test_one_loss_table_drives_the_config_the_wire_and_the_local_backend(
    tmp_path: object,
) -> None:
    import torch

    from trainer.config import TrainConfig
    from trainer.data import wire_datums
    from trainer.local.losses import REQUIRED_INPUTS, token_losses
    from trainer.losses import LOCAL_LOSSES, LOSSES, RL_LOSSES

    datum = tinker.types.Datum(
        model_input=tinker.types.ModelInput.from_ints([1, 2]),
        loss_fn_inputs={
            k: tinker.types.TensorData(data=[0.0, 1.0], dtype="float32", shape=[2])
            for k in ("target_tokens", "weights", "logprobs", "advantages", "mask")
        },
    )
    for name, loss in LOSSES.items():
        (sent,) = wire_datums([datum], name)
        assert set(sent.loss_fn_inputs) == set(loss.wire_inputs)
        assert set(loss.required_inputs) <= set(loss.wire_inputs)
    assert tuple(n for n, loss in LOSSES.items() if loss.local) == LOCAL_LOSSES
    zeros = torch.zeros(1, 2)
    for name in LOCAL_LOSSES:  # every local loss has its torch code
        inputs = {k: zeros for k in LOSSES[name].wire_inputs if k != "target_tokens"}
        settings = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
        assert token_losses(name, zeros, inputs, settings).shape == (1, 2)
        assert REQUIRED_INPUTS[name] == LOSSES[name].required_inputs
    with pytest.raises(ValueError, match="unknown loss_fn 'nope'; choose from: cross_entropy"):
        wire_datums([datum], "nope")
    for name in RL_LOSSES:
        TrainConfig(backend="tinker", model="m", loss_fn=name).validate()
    with pytest.raises(ValueError, match="'cispo' runs on the tinker backend only"):
        TrainConfig(loss_fn="cispo").validate()
    with pytest.raises(ValueError, match="'cross_entropy' is not for RL"):
        TrainConfig(loss_fn="cross_entropy").validate()


def test_a_group_whose_games_ended_alike_is_centred_on_the_batch() -> None:
    from trainer.data import batch_centred_group, batch_seat_means

    alike = make_group([1.0, -1.0, 1.0, -1.0], [0, 0, 0, 0])  # seat 0 won every game
    mixed = make_group([1.0, -1.0, -1.0, 1.0], [0, 0, 0, 0])
    assert prepare_group(alike, drop_constant_reward=True, per_seat=True).dropped_constant
    means = batch_seat_means([alike, mixed], ["G", "G"])
    assert means == {("G", 0): 0.5, ("G", 1): -0.5}
    centred = batch_centred_group(alike, "G", means)
    assert centred is not None and not centred.dropped_constant
    assert centred.advantages == [0.5, -0.5, 0.5, -0.5]
    # a batch in which every group ended alike still has nothing to teach
    only = batch_seat_means([alike], ["G"])
    assert batch_centred_group(alike, "G", only) is None


def test_the_step_counts_the_constant_groups_the_batch_taught() -> None:
    from types import SimpleNamespace

    from trainer.config import TrainConfig
    from trainer.rollout import BatchRollout
    from trainer.step import prepare_batch

    builder = SimpleNamespace(game_id="G", logging_tags=lambda: ["G"])
    groups = [
        make_group([1.0, -1.0, 1.0, -1.0], [0] * 4),
        make_group([1.0, -1.0, -1.0, 1.0], [0] * 4),
    ]
    batch = BatchRollout(groups=groups, builders=[builder, builder])
    for on, datums, taught, dropped in ((False, 4, 0.0, 1.0), (True, 8, 1.0, 0.0)):
        config = TrainConfig(constant_groups_batch_baseline=on)
        found, metrics = prepare_batch(config, batch, None)
        assert len(found) == datums
        assert metrics["env/all/constant_groups_taught"] == taught
        assert metrics["env/all/constant_reward_groups"] == dropped
