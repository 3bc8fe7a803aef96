"""The checks of a run's update settings (``check_update``, which ``TrainConfig.validate``
runs): the exact KL, its magnet and phases, the collapse guard, the epochs. Light, as
``trainer.config`` is: no torch or tinker."""

from __future__ import annotations

from typing import Any, Protocol


class UpdateSettings(Protocol):
    """The settings ``check_update`` reads (``TrainConfig``'s)."""

    @property
    def backend(self) -> str: ...
    @property
    def kl_reverse_coef(self) -> float | None: ...
    @property
    def kl_forward_coef(self) -> float | None: ...
    @property
    def magnet_rate(self) -> float | None: ...
    @property
    def entropy_floor(self) -> float | None: ...
    @property
    def kl_phase_limit(self) -> float | None: ...
    @property
    def kl_reference_every(self) -> int: ...
    def decision_kl(self) -> Any: ...
    def resolved_ppo_epochs(self) -> int: ...
    def resolved_loss_fn(self) -> str: ...
    def resolved_kl_coef(self) -> float: ...


def check_update(config: UpdateSettings) -> None:
    """Raise ValueError for bad settings of the update: the exact KL, its magnet and
    phases, the collapse guard, the epochs."""
    for name in ("kl_reverse_coef", "kl_forward_coef", "entropy_floor"):
        value = getattr(config, name)
        if value is not None and value < 0:
            raise ValueError(f"{name} must not be negative, got {value}")
    if config.magnet_rate is not None and not 0.0 <= config.magnet_rate <= 1.0:
        raise ValueError(f"magnet_rate must be in [0, 1], got {config.magnet_rate}")
    if config.backend == "tinker" and (config.kl_reverse_coef or config.kl_forward_coef):
        raise ValueError(
            "the exact KL (kl_reverse_coef, kl_forward_coef) reads the logits: the local "
            "backend only; the tinker backend offers the sampled kl_penalty_coef"
        )
    if config.entropy_floor and not config.decision_kl():
        raise ValueError("entropy_floor guards the exact KL's update: set its coefficients")
    epochs = config.resolved_ppo_epochs()
    if epochs < 1:
        raise ValueError(f"ppo_epochs must be at least 1, got {epochs}")
    if epochs > 1 and config.resolved_loss_fn() != "ppo":
        raise ValueError(
            "ppo_epochs > 1 passes over each batch several times: it needs loss_fn ppo "
            "(its clip keeps the later passes near the sampler)"
        )
    if config.kl_phase_limit is not None and (
        config.kl_phase_limit <= 0 or not config.kl_reference_every
    ):
        raise ValueError(
            "kl_phase_limit must be positive, and it ends phases of kl_reference_every "
            "steps: give kl_reference_every too"
        )
    if config.kl_reference_every < 0:
        raise ValueError("kl_reference_every must not be negative (0: a fixed reference)")
    if config.kl_reference_every and config.resolved_kl_coef() == 0 and not config.decision_kl():
        raise ValueError(
            "kl_reference_every moves the KL reference: it needs kl_penalty_coef > 0 "
            "or the exact KL (kl_reverse_coef, kl_forward_coef)"
        )
