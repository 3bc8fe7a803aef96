"""The local model backend: Tinker's training and sampling clients, run with PyTorch here.

    from trainer.local import LocalModelConfig, create_local_training_client

    client = create_local_training_client(LocalModelConfig())   # byte-level GPT-2
    fut = await client.forward_backward_async(datums, "importance_sampling")
    out = await fut.result_async()
    await (await client.optim_step_async(tinker.types.AdamParams(learning_rate=1e-3)))
    sampler = await client.save_weights_and_get_sampling_client_async()
    response = await sampler.sample_async(prompt, 1, tinker.types.SamplingParams(max_tokens=8))

Nothing is downloaded: the default model is built from a config in code, and
``LocalModelConfig(model_path=...)`` loads a local Hugging Face model directory.
"""

from trainer.local.config import LoadedModel, LocalModelConfig, LocalTokenizer, load_model
from trainer.local.futures import LocalFuture
from trainer.local.sampler import LocalSamplingClient, SamplerStats, create_local_sampling_client
from trainer.local.training import LocalTrainingClient, create_local_training_client

__all__ = [
    "LoadedModel",
    "LocalFuture",
    "LocalModelConfig",
    "LocalSamplingClient",
    "LocalTokenizer",
    "LocalTrainingClient",
    "SamplerStats",
    "create_local_sampling_client",
    "create_local_training_client",
    "load_model",
]
