"""One training step's learning: from the played groups to advantages and datums
(``prepare_batch``), then the optimizer step (``optimize``: the KL penalty, then
``forward_backward`` and ``optim_step`` submitted together, as the cookbook does)."""

from __future__ import annotations

from typing import Any

from tinker import types

from trainer.config import TrainConfig
from trainer.data import (
    RoleBaseline,
    groups_to_datums,
    move_metrics,
    prepare_group,
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
        )
        for g, builder in zip(groups, batch.builders, strict=True)
    ]
    datums = groups_to_datums(prepared)
    metrics = batch_metrics(groups, [b.logging_tags() for b in batch.builders])
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
    config: TrainConfig, client: Any, datums: list[types.Datum], reference: Any, adam: Any
) -> dict[str, float]:
    """The KL penalty (with a ``reference`` sampler), then ``forward_backward`` and
    ``optim_step``: one optimizer step. Its metrics (``optim/...``, ``kl_policy_base``)."""
    metrics: dict[str, float] = {}
    if reference is not None:
        from tinker_cookbook.rl.metrics import incorporate_kl_penalty

        metrics.update(
            await incorporate_kl_penalty(
                datums, reference, config.resolved_kl_coef(), config.kl_discount_factor
            )
        )
    # Submitted together, as the cookbook does: the optimizer step lands in the same clock
    # cycle as the gradients.
    fwd_bwd = client.forward_backward(wire_datums(datums, config.loss_fn), config.loss_fn)
    optim = client.optim_step(adam)
    output = await fwd_bwd
    stepped = await optim
    grad_norm = (getattr(stepped, "metrics", None) or {}).get("grad_norm")
    if grad_norm is not None:
        metrics["optim/grad_norm"] = float(grad_norm)
    tokens = weighted_tokens(datums)
    loss = float(output.metrics.get("loss:sum", 0.0))
    metrics["optim/loss"] = loss / tokens if tokens else 0.0
    metrics["optim/action_tokens"] = float(tokens)
    return metrics
