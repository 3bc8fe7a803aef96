"""One backend interface for training: Tinker's client surface, served by Tinker or locally.

The trainer talks to a training client through the methods of ``tinker.TrainingClient``
(``forward_backward_async``, ``optim_step_async``, ``save_weights_and_get_sampling_client_async``,
``save_state_async``, ``load_state_async``, ``get_tokenizer``) and samples through
``sample_async`` of a sampling client. Both the real SDK and ``trainer.local`` provide them,
so the same loop drives either.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Protocol

from tinker import types

from arena.types import Observation, StopCondition, TokensWithLogprobs


class BackendError(RuntimeError):
    """The backend cannot be used as configured; the message says what to do."""


class SamplingClientLike(Protocol):
    """What the trainer needs of a sampling client (``tinker.SamplingClient``)."""

    async def sample_async(
        self, prompt: types.ModelInput, num_samples: int, sampling_params: types.SamplingParams
    ) -> types.SampleResponse:
        """Sample ``num_samples`` continuations of ``prompt``."""
        ...


class TrainingClientLike(Protocol):
    """What the trainer needs of a training client (``tinker.TrainingClient``)."""

    async def forward_backward_async(
        self,
        data: list[types.Datum],
        loss_fn: Any,
        loss_fn_config: dict[str, float | str] | None = None,
    ) -> Any:
        """Accumulate gradients; returns a future of ``ForwardBackwardOutput``."""
        ...

    async def optim_step_async(self, adam_params: types.AdamParams) -> Any:
        """Apply the accumulated gradients; returns a future."""
        ...

    async def save_weights_and_get_sampling_client_async(self, name: str | None = None) -> Any:
        """A sampling client for the current weights."""
        ...

    async def save_state_async(self, name: str) -> Any:
        """Save weights and optimizer state; returns a future of the saved path."""
        ...

    async def load_state_async(self, path: str) -> Any:
        """Restore weights and optimizer state saved by ``save_state``."""
        ...

    def get_tokenizer(self) -> Any:
        """The tokenizer the model reads."""
        ...


async def resolve(value: Any) -> Any:
    """The result of a Tinker-style future (``result_async()``), or the value itself."""
    result_async = getattr(value, "result_async", None)
    if result_async is not None:
        return await result_async()
    return value


def saved_path(result: Any) -> str:
    """The path in a ``save_state`` result (Tinker returns an object with ``.path``)."""
    path = getattr(result, "path", result)
    if not isinstance(path, str):
        raise BackendError(f"save_state returned {type(result).__name__}, not a path")
    return path


class SamplerPolicy:
    """A token policy that samples one action per request from a sampling client.

    Concurrent calls reach the client concurrently, so a batching sampler (the local
    backend's) serves all envs of a batch in shared forward passes.
    """

    def __init__(
        self,
        client: SamplingClientLike,
        max_tokens: int,
        temperature: float = 1.0,
        seed: int | None = None,
    ) -> None:
        if max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        self.client = client
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.seed = seed

    async def __call__(self, ob: Observation, stop: StopCondition) -> TokensWithLogprobs:
        params = types.SamplingParams(
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            stop=stop or None,
            seed=self.seed,
        )
        response = await self.client.sample_async(prompt=ob, num_samples=1, sampling_params=params)
        sequence = response.sequences[0]
        return TokensWithLogprobs(tokens=list(sequence.tokens), maybe_logprobs=sequence.logprobs)


@dataclass(frozen=True)
class TinkerSettings:
    """How to reach a hosted model through the Tinker API."""

    base_model: str
    """The model to fine-tune, e.g. ``Qwen/Qwen3-4B-Instruct-2507``."""
    lora_rank: int = 32
    api_key_env: str = "TINKER_API_KEY"


def check_tinker_key(settings: TinkerSettings) -> None:
    """Raise BackendError (before any work starts) when the API key is not set."""
    if not os.environ.get(settings.api_key_env):
        raise BackendError(
            f"the tinker backend needs an API key: set {settings.api_key_env} "
            "(or use the local backend, the default: --backend local)"
        )


async def create_tinker_training_client(
    settings: TinkerSettings, service_client: Any | None = None
) -> TrainingClientLike:
    """A LoRA training client on the Tinker service.

    ``service_client`` defaults to ``tinker.ServiceClient()``; anything with the same
    ``create_lora_training_client_async`` method works. Raises BackendError when the API
    key is missing.
    """
    check_tinker_key(settings)
    if service_client is None:
        import tinker

        service_client = tinker.ServiceClient()
    client = await service_client.create_lora_training_client_async(
        base_model=settings.base_model, rank=settings.lora_rank
    )
    return await resolve(client)
