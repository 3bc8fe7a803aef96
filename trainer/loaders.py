"""Loading a checkpoint's weights into a sampling client, for seats that play it.

``load_sampler`` is what ``matchmaking.agents.use_loader`` installs: matchmaking seats
checkpoints (``run:NAME@STEP``) without knowing the model stack.
"""

from __future__ import annotations

from typing import Any


async def load_sampler(path: str) -> Any:
    """A sampling client for the weights at ``path`` (``arena.identity.WeightsRef``):
    ``tinker://`` through the Tinker service, ``model:NAME`` a model as released
    (``smollm2``, a ``.gguf`` file, a model directory) through the local backend, anything
    else a local checkpoint directory. Raises ValueError for a path that holds no weights
    (ModelNotFound for a model that is not here), BackendError without a Tinker
    credential."""
    from arena.identity import WeightsKind, WeightsRef

    weights = WeightsRef.parse(path)
    if weights.kind is WeightsKind.MODEL:
        from trainer.local.service import LocalServiceClient

        return await LocalServiceClient().create_sampling_client(base_model=weights.location)
    if weights.kind is WeightsKind.TINKER:
        from trainer.backend import tinker_service_client

        return await tinker_service_client().create_sampling_client(model_path=path)
    from trainer.local.service import LocalServiceClient

    return await LocalServiceClient().create_sampling_client(model_path=path)


def install() -> None:
    """Make ``load_sampler`` this process's checkpoint loader."""
    from matchmaking.agents import use_loader

    use_loader(load_sampler)
