"""The model service a run trains through, and the renderer that matches its model.

Both backends go through a service client with ``tinker.ServiceClient``'s methods: the
hosted service (``--backend tinker``), or ``trainer.local.LocalServiceClient``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from arena.renderers import RendererConfig, recommended_renderer, register_tokenizer
from trainer.backend import ServiceClientLike, tinker_service_client
from trainer.config import TrainConfig

RENDERER_METADATA_KEY = "renderer_name"


def base_model_name(config: TrainConfig) -> str:
    """The model the run starts from, as the service names it."""
    if config.model:
        return config.model
    from trainer.local.training import DEFAULT_LOCAL_MODEL

    return DEFAULT_LOCAL_MODEL


def renderer_name(config: TrainConfig) -> str:
    """The renderer the run uses (see ``TrainConfig.renderer``)."""
    if config.renderer:
        return config.renderer
    if config.builtin_model:
        return "bytes"
    if config.backend == "tinker":
        return recommended_renderer(base_model_name(config))
    return "chat"


def renderer_for(config: TrainConfig, tokenizer: Any) -> RendererConfig:
    """The renderer config matching the model's tokenizer (registered in this process)."""
    name = renderer_name(config)
    if name == "bytes":
        return RendererConfig(name="bytes")
    model = base_model_name(config)
    register_tokenizer(model, tokenizer)
    return RendererConfig(name=name, tokenizer_path=model)


def make_service_client(config: TrainConfig) -> ServiceClientLike:
    """The service the backend names: Tinker's (credentials checked first) or the local one
    (checkpoints under the run's log directory). Raises BackendError."""
    if config.backend == "tinker":
        return tinker_service_client()
    from trainer.local import LocalModelConfig
    from trainer.local.service import LocalServiceClient

    local = LocalModelConfig(
        seed=config.seed,
        device=config.device,
        dtype=config.dtype,
        gradient_checkpointing=config.gradient_checkpointing,
        prefix_cache_mb=LocalModelConfig.prefix_cache_mb if config.reuse_prefixes else 0,
        train_shared_prefix=config.reuse_prefixes,
    )
    local.weights_dtype(local.torch_device())  # ValueError now for a device or dtype not here
    return LocalServiceClient(local, checkpoint_dir=Path(config.log_dir) / "checkpoints")
