"""The losses ``forward_backward`` knows, in one table: each loss's inputs on the wire,
whether the local backend implements it and whether RL training may use it. The config's
validation (``TrainConfig.loss_fn``), the datums sent (``trainer.data.wire_datums``) and
the local backend (``trainer.local.losses``) all read it. Light on purpose: no torch, no
tinker (the CLI's help reads it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Loss:
    """One of ``forward_backward``'s built-in losses (Tinker's names)."""

    name: str
    wire_inputs: tuple[str, ...]
    """The ``loss_fn_inputs`` Tinker documents for it: nothing else is sent."""
    required_inputs: tuple[str, ...]
    """The inputs a datum must carry (the others have defaults: ``weights`` are 1)."""
    local: bool
    """The local backend implements it (``trainer.local.losses.token_losses``)."""
    rl: bool
    """RL training may use it (``TrainConfig.loss_fn``): a policy-gradient loss over the
    sampler's logprobs and the advantages, needing no ``loss_fn_config``."""


_POLICY_GRADIENT = ("target_tokens", "logprobs", "advantages")

LOSSES: dict[str, Loss] = {
    loss.name: loss
    for loss in (
        Loss("cross_entropy", ("target_tokens", "weights"), ("target_tokens",), True, False),
        Loss("importance_sampling", _POLICY_GRADIENT, _POLICY_GRADIENT, True, True),
        Loss("ppo", _POLICY_GRADIENT, _POLICY_GRADIENT, True, True),
        Loss("cispo", _POLICY_GRADIENT, _POLICY_GRADIENT, False, True),
        Loss("dro", _POLICY_GRADIENT, _POLICY_GRADIENT, False, False),
    )
}
"""Every loss by name. ``dro`` is sent as documented but not offered to RL training: it
takes settings (``loss_fn_config``) the trainer does not send."""

LOCAL_LOSSES: tuple[str, ...] = tuple(name for name, loss in LOSSES.items() if loss.local)
"""The losses the local backend's ``forward_backward`` accepts."""

RL_LOSSES: tuple[str, ...] = tuple(name for name, loss in LOSSES.items() if loss.rl)
"""The losses ``TrainConfig.loss_fn`` may name."""


def get_loss(name: str) -> Loss:
    """The loss called ``name``. Raises ValueError naming the known ones."""
    loss = LOSSES.get(name)
    if loss is None:
        raise ValueError(f"unknown loss_fn {name!r}; choose from: {', '.join(LOSSES)}")
    return loss


def check_rl_loss(name: str, backend: str) -> None:
    """Raise ValueError when RL training on ``backend`` cannot use loss ``name``."""
    if name not in RL_LOSSES:
        raise ValueError(f"loss_fn {name!r} is not for RL; choose from: {', '.join(RL_LOSSES)}")
    if backend == "local" and not LOSSES[name].local:
        local = ", ".join(n for n in RL_LOSSES if LOSSES[n].local)
        raise ValueError(
            f"loss_fn {name!r} runs on the tinker backend only; the local one offers: {local}"
        )
