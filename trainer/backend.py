"""One backend interface for training: Tinker's client surface, served by Tinker or locally.

The trainer talks to a service client with the methods of ``tinker.ServiceClient``
(``create_lora_training_client``, ``create_training_client_from_state_with_optimizer``,
``create_sampling_client``) and to the training clients it returns with those of
``tinker.TrainingClient`` (``forward_backward``, ``optim_step``, ``save_state``,
``save_weights_for_sampler``, ``save_weights_and_get_sampling_client``, ``get_tokenizer``),
the current SDK's spellings: each returns an awaitable future at once, so
``forward_backward`` and ``optim_step`` are submitted in the same clock cycle. The hosted
service is ``tinker.ServiceClient``; ``trainer.local.LocalServiceClient`` serves the same
methods with PyTorch on this machine, so one loop drives either.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol

from tinker import types

from arena.policies import DEFAULT_SAMPLE_TIMEOUT_S, SamplerPolicy, SamplingClientLike

__all__ = [
    "DEFAULT_SAMPLE_TIMEOUT_S",
    "BackendError",
    "SamplerPolicy",
    "SamplingClientLike",
    "adam_params",
]

ADAM_BETA1 = 0.9
ADAM_BETA2 = 0.95
ADAM_EPS = 1e-8
"""Adam's settings, as the Tinker cookbook's RL loop sets them."""


class BackendError(RuntimeError):
    """The backend cannot be used as configured; the message says what to do."""


class TrainingClientLike(Protocol):
    """What the trainer needs of a training client (``tinker.TrainingClient``)."""

    def forward_backward(
        self,
        data: list[types.Datum],
        loss_fn: Any,
        loss_fn_config: Any = None,
    ) -> Awaitable[types.ForwardBackwardOutput]:
        """Accumulate gradients; a future of the output."""
        ...

    def optim_step(self, optim_params: Any = None) -> Awaitable[types.OptimStepResponse]:
        """Apply the accumulated gradients; a future."""
        ...

    def save_weights_and_get_sampling_client(self) -> Awaitable[Any]:
        """A future of a sampling client for the current weights."""
        ...

    def save_state(
        self,
        name: str,
        ttl_seconds: int | None = None,
        overwrite: bool = False,
        user_metadata: dict[str, str] | None = None,
    ) -> Awaitable[types.SaveWeightsResponse]:
        """Save weights and optimizer state; a future of the response (``.path``)."""
        ...

    def save_weights_for_sampler(
        self,
        name: str,
        ttl_seconds: int | None = None,
        user_metadata: dict[str, str] | None = None,
    ) -> Awaitable[types.SaveWeightsForSamplerResponse]:
        """Save the weights for sampling; a future of the response (``.path``)."""
        ...

    def get_tokenizer(self) -> Any:
        """The tokenizer the model reads."""
        ...


class ServiceClientLike(Protocol):
    """What the trainer needs of a service client (``tinker.ServiceClient``)."""

    def create_lora_training_client(
        self,
        base_model: str,
        rank: int = 32,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = True,
        user_metadata: dict[str, str] | None = None,
        optimizer: Any = None,
    ) -> Awaitable[Any]:
        """A future of a new training client."""
        ...

    def create_training_client_from_state(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
        optimizer: Any = None,
    ) -> Awaitable[Any]:
        """A future of a training client with saved weights and a fresh optimizer."""
        ...

    def create_training_client_from_state_with_optimizer(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
    ) -> Awaitable[Any]:
        """A future of a training client resumed from saved weights and optimizer state."""
        ...

    def create_sampling_client(
        self,
        model_path: str | None = None,
        base_model: str | None = None,
        retry_config: Any = None,
        record_stability_info: bool = False,
    ) -> Awaitable[Any]:
        """A future of a sampling client over saved weights or a base model."""
        ...


def adam_params(learning_rate: float) -> types.AdamParams:
    """Adam as the cookbook's RL loop runs it (betas 0.9/0.95, eps 1e-8)."""
    return types.AdamParams(
        learning_rate=learning_rate, beta1=ADAM_BETA1, beta2=ADAM_BETA2, eps=ADAM_EPS
    )


def check_tinker_credentials() -> None:
    """Raise BackendError (before any work starts) when the Tinker SDK finds no
    credential: ``TINKER_API_KEY``, ``TINKER_CREDENTIAL_CMD``, or a key stored by
    ``tinker auth login``."""
    from tinker.auth import tinker_has_credentials

    if not tinker_has_credentials():
        raise BackendError(
            "the tinker backend needs a Tinker credential: set TINKER_API_KEY, set "
            "TINKER_CREDENTIAL_CMD, or run `tinker auth login` "
            "(or train the local model: arena train, whose default backend is local)"
        )


def tinker_service_client() -> Any:
    """``tinker.ServiceClient()``, after checking that a credential is configured."""
    check_tinker_credentials()
    import tinker

    return tinker.ServiceClient()
