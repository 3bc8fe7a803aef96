"""The built-in losses of ``forward_backward``, as Tinker defines them, in plain torch.

Every loss is a sum over tokens (not a mean), computed from the target tokens' logprobs
under the model (``logp``) and the datum's ``loss_fn_inputs``:

- ``cross_entropy``: ``-sum(weights * logp)`` (``weights`` default to 1);
- ``importance_sampling``: ``-sum(exp(logp - sampler_logp) * advantages)``;
- ``ppo``: ``-sum(min(r * A, clip(r, clip_low_threshold, clip_high_threshold) * A))`` with
  ``r = exp(logp - sampler_logp)``; the thresholds come from ``loss_fn_config``
  (Tinker's keys; defaults 0.8 and 1.2, i.e. epsilon 0.2 each side).

Positions with a zero advantage (prompt tokens, padding) add nothing and get no gradient,
whatever their sampler logprob.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from trainer.losses import LOCAL_LOSSES, LOSSES

REQUIRED_INPUTS: dict[str, tuple[str, ...]] = {
    name: LOSSES[name].required_inputs for name in LOCAL_LOSSES
}
"""The ``loss_fn_inputs`` keys each loss needs (``trainer.losses.Loss.required_inputs``)."""

PPO_DEFAULTS: dict[str, float] = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
"""PPO's ratio clip range when ``loss_fn_config`` does not set it."""

CONFIG_DEFAULTS: dict[str, dict[str, float]] = {"ppo": PPO_DEFAULTS}
"""The ``loss_fn_config`` keys a loss takes, with their defaults (none: it takes none)."""


def check_loss(loss_fn: str, loss_fn_config: Mapping[str, float | str] | None) -> dict[str, float]:
    """The loss's full configuration (defaults filled in).

    Raises ValueError for an unknown loss name, an unknown config key, a non-numeric value
    or (ppo) a clip range that does not contain 1.
    """
    if loss_fn not in LOCAL_LOSSES:
        raise ValueError(f"unknown loss_fn {loss_fn!r}; choose from: {', '.join(LOCAL_LOSSES)}")
    allowed = CONFIG_DEFAULTS.get(loss_fn, {})
    settings = dict(allowed)
    for key, value in (loss_fn_config or {}).items():
        if key not in allowed:
            choices = ", ".join(allowed) or "none"
            raise ValueError(
                f"loss_fn_config key {key!r} is not valid for {loss_fn!r}; valid keys: {choices}"
            )
        try:
            settings[key] = float(value)
        except ValueError:
            raise ValueError(f"loss_fn_config[{key!r}] must be a number, not {value!r}") from None
    if loss_fn == "ppo":
        low, high = settings["clip_low_threshold"], settings["clip_high_threshold"]
        if not 0.0 <= low <= 1.0 <= high:
            raise ValueError(
                f"ppo needs clip_low_threshold <= 1 <= clip_high_threshold, got {low}, {high}"
            )
    return settings


def token_losses(
    loss_fn: str,
    logp_BT: torch.Tensor,
    inputs: Mapping[str, torch.Tensor],
    settings: Mapping[str, float],
) -> torch.Tensor:
    """Per-token loss ``[B, T]`` (sum it for the total).

    ``inputs`` holds ``[B, T]`` tensors padded with zeros: ``weights`` (cross_entropy),
    ``logprobs`` and ``advantages`` (importance_sampling, ppo). Raises ValueError for an
    unknown ``loss_fn``.
    """
    if loss_fn == "cross_entropy":
        return -(inputs["weights"] * logp_BT)
    if loss_fn not in ("importance_sampling", "ppo"):
        raise ValueError(f"unknown loss_fn {loss_fn!r}; choose from: {', '.join(LOCAL_LOSSES)}")
    advantages = inputs["advantages"]
    active = advantages != 0
    # Masked positions get a log-ratio of 0 before exp: a stray sampler logprob there must
    # not overflow (inf * 0 would be NaN, in the loss and in the gradient).
    log_ratio = torch.where(active, logp_BT - inputs["logprobs"], torch.zeros_like(logp_BT))
    ratio = torch.exp(log_ratio)
    if loss_fn == "importance_sampling":
        return -(ratio * advantages)
    clipped = torch.clamp(ratio, settings["clip_low_threshold"], settings["clip_high_threshold"])
    return -torch.minimum(ratio * advantages, clipped * advantages)
