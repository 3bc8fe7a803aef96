"""The exact KL at answer tokens toward a slowly moving magnet, the step's KL, the collapse
guard's inputs, PPO epochs and the forfeit-win option."""

from __future__ import annotations

from pathlib import Path

import pytest
import tinker
import torch
from tinker import types

from trainer.config import TrainConfig
from trainer.data import prepare_group
from trainer.familydefaults import game_family
from trainer.local.magnet import DecisionKL, answer_kl
from trainer.local.training import LocalTrainingClient
from trainer.step import optimize

PROMPT = list(range(40, 76))
ANSWER = [91, 52, 93]  # "[4]" in the built-in model's bytes


def datum(advantage: float = 0.0, answer: list[int] = ANSWER) -> types.Datum:
    """One prompt and answer, the answer marked (``mask``) as the trainer marks it."""
    tokens = PROMPT + answer
    n = len(tokens) - 1
    marked = [0.0] * (len(PROMPT) - 1) + [1.0] * len(answer)

    def tensor(values: list[float], dtype: str = "float32") -> types.TensorData:
        return types.TensorData(data=values, dtype=dtype, shape=[n])  # type: ignore[arg-type]

    return types.Datum(
        model_input=tinker.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": tensor([float(t) for t in tokens[1:]], "int64"),
            "logprobs": tensor([-0.5 * m for m in marked]),
            "advantages": tensor([advantage * m for m in marked]),
            "mask": tensor(marked),
        },
    )


def adam(lr: float = 1e-2) -> types.AdamParams:
    return types.AdamParams(learning_rate=lr)


def test_answer_kl_matches_the_definitions_and_their_gradients() -> None:
    torch.manual_seed(0)
    logits = torch.randn(5, 7, requires_grad=True)
    magnet = torch.log_softmax(torch.randn(5, 7), dim=-1)
    reverse, forward, entropy = answer_kl(logits, magnet)
    p = torch.softmax(logits.detach(), -1)
    q = magnet.exp()
    dist_p = torch.distributions.Categorical(probs=p)
    dist_q = torch.distributions.Categorical(probs=q)
    assert torch.allclose(reverse, torch.distributions.kl_divergence(dist_p, dist_q), atol=1e-5)
    assert torch.allclose(forward, torch.distributions.kl_divergence(dist_q, dist_p), atol=1e-5)
    assert torch.allclose(entropy, dist_p.entropy(), atol=1e-5)
    (grad,) = torch.autograd.grad(forward.sum(), logits)
    assert torch.allclose(grad, p - q, atol=1e-5)  # the pull toward the magnet, every move


def test_the_kl_terms_add_exactly_their_coefficients_times_the_reported_sums() -> None:
    plain = LocalTrainingClient()
    regular = LocalTrainingClient()
    regular.regularize(DecisionKL(reverse=0.3, forward=0.7, magnet_rate=0.0))
    data = [datum(1.0), datum(-1.0, [91, 51, 93])]
    for client in (plain, regular):  # the same step on the same weights: both move alike
        client.forward_backward(data, "importance_sampling").result()
        client.optim_step(adam()).result()
    base = plain.forward(data, "importance_sampling").result().metrics
    out = regular.forward(data, "importance_sampling").result().metrics
    assert out["answers:sum"] == 2.0 and out["answer_tokens:sum"] == 6.0
    assert out["kl_reverse:sum"] > 0 and out["kl_forward:sum"] > 0
    added = 0.3 * out["kl_reverse:sum"] + 0.7 * out["kl_forward:sum"]
    assert out["loss:sum"] - base["loss:sum"] == pytest.approx(added, rel=1e-4, abs=1e-5)


def test_the_magnet_starts_at_the_policy_and_follows_it_at_its_rate() -> None:
    client = LocalTrainingClient()
    client.regularize(DecisionKL(reverse=0.1, forward=0.1, magnet_rate=0.25))
    first = client.forward([datum(1.0)], "importance_sampling").result().metrics
    assert first["kl_reverse:sum"] == pytest.approx(0.0, abs=1e-6)
    param = client.trainable_parameters()[0]
    magnet = client._regularizer.magnet.weights[0]  # type: ignore[union-attr]
    before = param.detach().clone()
    client.forward_backward([datum(1.0)], "importance_sampling").result()
    stepped = client.optim_step(adam()).result()
    after = param.detach()
    assert not torch.equal(before, after)
    assert torch.allclose(magnet, before + 0.25 * (after - before), atol=1e-6)
    assert stepped.metrics["policy_step_kl"] > 0
    client.reset_magnet().result()
    assert torch.equal(magnet, param.detach())


def test_the_forward_kl_pulls_back_a_move_the_policy_gave_up() -> None:
    """Collapse the answer's middle token onto one byte, then train on the forward KL
    alone (advantages 0): the policy's entropy there comes back toward the magnet's."""
    client = LocalTrainingClient()
    client.regularize(DecisionKL(reverse=0.0, forward=1.0, magnet_rate=0.0))
    collapse = types.Datum(
        model_input=datum().model_input,
        loss_fn_inputs={"target_tokens": datum().loss_fn_inputs["target_tokens"]},
    )  # no mask: cross-entropy alone
    for _ in range(30):
        client.forward_backward([collapse], "cross_entropy").result()
        client.optim_step(adam(3e-2)).result()
    collapsed = client.forward([datum()], "importance_sampling").result().metrics
    for _ in range(30):
        client.forward_backward([datum()], "importance_sampling").result()
        client.optim_step(adam(3e-2)).result()
    pulled = client.forward([datum()], "importance_sampling").result().metrics
    assert pulled["kl_forward:sum"] < 0.5 * collapsed["kl_forward:sum"]
    assert pulled["entropy:sum"] > collapsed["entropy:sum"]


def test_a_checkpoint_keeps_the_magnet(tmp_path: Path) -> None:
    from trainer.local import LocalModelConfig

    settings = DecisionKL(reverse=0.1, forward=0.1, magnet_rate=0.5)
    client = LocalTrainingClient(LocalModelConfig(checkpoint_dir=str(tmp_path)))
    client.regularize(settings)
    client.forward_backward([datum(1.0)], "importance_sampling").result()
    client.optim_step(adam()).result()
    path = client.save_state("one").result().path
    again = LocalTrainingClient(LocalModelConfig(checkpoint_dir=str(tmp_path / "b")))
    again.load_state_with_optimizer(path).result()
    again.regularize(settings)
    kept = client._regularizer.magnet.weights  # type: ignore[union-attr]
    restored = again._regularizer.magnet.weights  # type: ignore[union-attr]
    assert all(torch.equal(a, b) for a, b in zip(kept, restored, strict=True))
    assert not torch.equal(restored[0], again.trainable_parameters()[0].detach())


async def test_ppo_epochs_take_one_optimizer_step_a_pass_and_report_the_exact_kl() -> None:
    config = TrainConfig(game_id="Kuhn-v0", ppo_epochs=3)
    assert config.resolved_loss_fn() == "ppo"
    client = LocalTrainingClient()
    client.regularize(config.decision_kl())
    metrics = await optimize(config, client, [datum(1.0), datum(-1.0)], None, adam(1e-3))
    assert client.step == 3
    assert metrics["policy/step_kl"] > 0
    assert metrics["kl/reverse"] == pytest.approx(0.0, abs=1e-6)  # the first pass: at the magnet
    assert "policy/answer_entropy" in metrics and metrics["policy/guard_scale"] == 1.0


def test_settings_by_game_family_and_their_errors() -> None:
    assert game_family("Kuhn-v0") == "imperfect"
    assert game_family("TicTacToe-v0") == "perfect"
    kuhn = TrainConfig(game_id="Kuhn-v0").decision_kl()
    assert kuhn is not None and kuhn.forward > 0 and kuhn.magnet_rate > 0
    assert TrainConfig(model="smollm2").decision_kl() is None  # not measured there
    with pytest.raises(ValueError, match="local"):
        TrainConfig(backend="tinker", model="m", kl_forward_coef=0.1).validate()
    with pytest.raises(ValueError, match="loss_fn ppo"):
        TrainConfig(ppo_epochs=2, loss_fn="importance_sampling").validate()
    with pytest.raises(ValueError, match="entropy_floor"):
        TrainConfig(entropy_floor=0.2, kl_reverse_coef=0.0, kl_forward_coef=0.0).validate()
    with pytest.raises(ValueError, match="magnet_rate"):
        TrainConfig(magnet_rate=1.5).validate()


def _group(rewards: list[float], metrics: list[dict[str, float]]) -> object:
    from arena.types import Trajectory, TrajectoryGroup

    return TrajectoryGroup(
        [Trajectory(transitions=[], final_ob=tinker.ModelInput.empty()) for _ in rewards],
        rewards,
        metrics,
    )


def test_a_win_by_forfeit_teaches_nothing_when_asked() -> None:
    metrics = [
        {"seat": 0, "win": 1, "opponent_forfeit": 1},  # won: seat 1 answered invalidly
        {"seat": 1, "win": 0, "forfeit": 1},
        {"seat": 0, "win": 0},
        {"seat": 1, "win": 1},
    ]
    group = _group([1.0, -2.0, -1.0, 1.0], metrics)
    counted = prepare_group(group, per_seat=True)  # type: ignore[arg-type]
    assert counted.advantages == [1.0, -1.5, -1.0, 1.5]
    ignored = prepare_group(group, per_seat=True, forfeit_wins_teach=False)  # type: ignore[arg-type]
    assert len(ignored.trajectories) == 3
    assert ignored.advantages == [-1.5, 0.0, 1.5]  # seat 0 alone: nothing to compare
