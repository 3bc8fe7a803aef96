"""One training step's learning: from the played groups to advantages and datums
(``prepare_batch``), then the optimizer step (``optimize``: the KL penalty, then
``forward_backward`` and ``optim_step`` submitted together, as the cookbook does)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tinker import types

from trainer.config import TrainConfig
from trainer.data import (
    RoleBaseline,
    batch_centred_group,
    batch_seat_means,
    groups_to_datums,
    move_metrics,
    prepare_group,
    scale_advantages,
    weighted_tokens,
    wire_datums,
)
from trainer.rollout import BatchRollout, batch_metrics


def prepare_batch(
    config: TrainConfig, batch: BatchRollout, baseline: RoleBaseline | None
) -> tuple[list[types.Datum], dict[str, float]]:
    """The batch's datums (advantages per the config's baseline; per move with branch
    values), and its env metrics (``env/...``, the advantages by move, the branches)."""
    groups = batch.groups
    prepared = [
        prepare_group(
            g,
            game_id=builder.game_id,
            drop_constant_reward=config.drop_constant_reward_groups,
            baseline=baseline,
            per_seat=config.baseline == "seat",
            forfeit_wins_teach=config.forfeit_wins_teach,
        )
        for g, builder in zip(groups, batch.builders, strict=True)
    ]
    taught = 0
    if config.constant_groups_batch_baseline and any(p.dropped_constant for p in prepared):
        game_ids = [b.game_id for b in batch.builders]
        means = batch_seat_means(groups, game_ids)
        for i, (group, game_id) in enumerate(zip(groups, game_ids, strict=True)):
            if not prepared[i].dropped_constant:
                continue
            centred = batch_centred_group(
                group, game_id, means, forfeit_wins_teach=config.forfeit_wins_teach
            )
            if centred is not None:
                prepared[i], taught = centred, taught + 1
    datums = groups_to_datums(prepared)
    metrics = batch_metrics(groups, [b.logging_tags() for b in batch.builders])
    metrics["env/all/constant_groups_taught"] = float(taught)
    metrics.update(move_metrics(prepared, groups))
    metrics["env/all/aborted_games"] = float(
        sum(len(g.rollout_errors) for g in groups) + batch.failed_groups
    )
    metrics["env/all/failed_groups"] = float(batch.failed_groups)
    metrics["env/all/workers_lost"] = float(batch.workers_lost)
    metrics["env/all/constant_reward_groups"] = float(sum(p.dropped_constant for p in prepared))
    metrics["optim/datums"] = float(len(datums))
    return datums, metrics


async def optimize(
    config: TrainConfig,
    client: Any,
    datums: list[types.Datum],
    reference: Any,
    adam: Any,
    pg_scale: float = 1.0,
) -> dict[str, float]:
    """The sampled KL penalty (with a ``reference`` sampler), then ``forward_backward`` and
    ``optim_step`` for each of ``ppo_epochs`` passes. With the exact KL (local backend)
    the datums keep their answer mask and the client adds the KL terms; ``pg_scale``
    scales the advantages (the collapse guard). Its metrics (``optim/...``,
    ``kl_policy_base``; with the exact KL ``kl/...``, ``policy/...``)."""
    metrics: dict[str, float] = {}
    if reference is not None:
        from tinker_cookbook.rl.metrics import incorporate_kl_penalty

        metrics.update(
            await incorporate_kl_penalty(
                datums, reference, config.resolved_kl_coef(), config.kl_discount_factor
            )
        )
    loss_fn = config.resolved_loss_fn()
    exact = config.decision_kl() is not None
    sent = wire_datums(datums, loss_fn, keep=("mask",) if exact else ())
    if pg_scale != 1.0:
        sent = scale_advantages(sent, pg_scale)
    outputs, steps = [], []
    for _ in range(config.resolved_ppo_epochs()):
        # Submitted together, as the cookbook does: the optimizer step lands in the same
        # clock cycle as the gradients.
        fwd_bwd = client.forward_backward(sent, loss_fn)
        optim = client.optim_step(adam)
        outputs.append(await fwd_bwd)
        steps.append(getattr(await optim, "metrics", None) or {})
    grad_norm = steps[0].get("grad_norm")
    if grad_norm is not None:
        metrics["optim/grad_norm"] = float(grad_norm)
    tokens = weighted_tokens(datums)
    loss = float(outputs[0].metrics.get("loss:sum", 0.0))
    metrics["optim/loss"] = loss / tokens if tokens else 0.0
    metrics["optim/action_tokens"] = float(tokens)
    for name in ("tokens_computed", "tokens_reused"):  # the local client's shared prefixes
        if f"{name}:sum" in outputs[0].metrics:
            metrics[f"train/{name}"] = float(outputs[0].metrics[f"{name}:sum"])
    if exact:
        metrics.update(exact_kl_metrics(outputs[0].metrics, steps, pg_scale))
    gap = logprob_gap(datums, outputs[0])
    if gap is not None:
        metrics["sampler/logprob_gap"] = gap
    return metrics


def logprob_gap(datums: Sequence[types.Datum], output: Any) -> float | None:
    """The mean absolute difference between the sampler's logprob of each answer token
    (the datum's ``logprobs``) and the learner's, before the step (the first pass's
    ``loss_fn_outputs``): about 0 on policy when the sampler and the learner compute
    alike (an engine's float32 against the local model), more where the games are played
    off policy. None when the outputs hold no logprobs."""
    found = getattr(output, "loss_fn_outputs", None) or []
    total, count = 0.0, 0
    for datum, out in zip(datums, found, strict=False):
        sampled = datum.loss_fn_inputs.get("logprobs")
        learner = out.get("logprobs") if isinstance(out, dict) else None
        if sampled is None or learner is None:
            continue
        mask = datum.loss_fn_inputs.get("mask")
        # Answer tokens: the mask where the datum has one, else where the sampler gave a
        # logprob (prompt positions carry 0).
        keep = mask.data if mask is not None else [v != 0.0 for v in sampled.data]
        for s, lrn, k in zip(sampled.data, learner.data, keep, strict=False):
            if k:
                total += abs(float(s) - float(lrn))
                count += 1
    return total / count if count else None


def exact_kl_metrics(
    figures: dict[str, float], steps: list[dict[str, float]], pg_scale: float
) -> dict[str, float]:
    """The exact KL's figures, per answer: to the magnet both ways (``kl/reverse``,
    ``kl/forward``), the policy's entropy (``policy/answer_entropy``), how far the step
    moved it (``policy/step_kl``: KL(before || after), summed over the epochs' optimizer
    steps) and the collapse guard's scale (``policy/guard_scale``)."""
    answers = figures.get("answers:sum", 0.0)
    out: dict[str, float] = {"policy/guard_scale": pg_scale}
    if answers:
        out["kl/reverse"] = figures.get("kl_reverse:sum", 0.0) / answers
        out["kl/forward"] = figures.get("kl_forward:sum", 0.0) / answers
        out["policy/answer_entropy"] = figures.get("entropy:sum", 0.0) / answers
    moved = [s["policy_step_kl"] for s in steps if "policy_step_kl" in s]
    if moved:
        out["policy/step_kl"] = float(sum(moved))
    return out


def guard_scale(floor: float | None, entropy: float | None) -> float:
    """The collapse guard's scale of the policy gradient (``TrainConfig.entropy_floor``):
    the last step's entropy per answer over the floor, at most 1 (1 without a floor or a
    measured entropy)."""
    if not floor or entropy is None:
        return 1.0
    return min(1.0, max(entropy, 0.0) / floor)


def phase_ends(config: TrainConfig, phase_start: int, step: int, metrics: dict[str, float]) -> bool:
    """Whether the KL reference (or the exact KL's magnet) moves onto the policy after step
    ``step`` (NashPG's phases): every ``kl_reference_every`` steps, or with
    ``kl_phase_limit`` once the step's KL to it reaches the limit (the exact KL per answer,
    ``kl/reverse``, where it is on; else the sampled ``kl_policy_base``)."""
    every = config.kl_reference_every
    if not every:
        return False
    if config.kl_phase_limit is None:
        return (step + 1) % every == 0
    measured = "kl/reverse" if config.decision_kl() is not None else "kl_policy_base"
    reached = metrics.get(measured, 0.0) >= config.kl_phase_limit
    return reached or step + 1 - phase_start >= every
