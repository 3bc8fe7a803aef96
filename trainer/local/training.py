"""A local training client with ``tinker.TrainingClient``'s method surface.

The model trains with ``torch.optim.AdamW``: a LoRA adapter through ``peft`` when
``LocalModelConfig.lora_rank > 0`` (only the adapter's weights train, are checkpointed, and
are copied into each sampler, which shares the frozen base), else every parameter. All
work runs on one worker thread per client, in the order it was submitted, so
``forward_backward`` followed by ``optim_step`` behaves as with Tinker, and the event loop
never runs torch.
Methods return a ``LocalFuture`` at once (``.result()`` blocks; ``await fut`` or
``await fut.result_async()`` does not); the ``_async`` variants are coroutines returning
the same future, so trainer code written for Tinker runs unchanged:

    fut = await client.forward_backward_async(data, "importance_sampling")
    out = await fut.result_async()

Bad arguments (unknown loss, malformed datums, a bad checkpoint name) raise ValueError at
the call; failures that depend on the state when the work runs (a checkpoint that is
missing or already exists) are raised by the future.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from tinker import types

from trainer.local import lora
from trainer.local.checkpoints import (
    CHECKPOINT_FORMAT,
    OPTIMIZER_FILE,
    STATE_FILE,
    WEIGHTS_FILE,
    check_metadata,
    check_name,
    frozen_copy,
    load_weights,
    load_weights_copy,
    read_checkpoint,
    state_record,
    write_checkpoint,
)
from trainer.local.config import (
    LoadedModel,
    LocalModelConfig,
    LocalTokenizer,
    load_model,
    vocab_rows,
)
from trainer.local.forward import (
    Example,
    batch_loss,
    enable_gradient_checkpointing,
    examples,
    micro_batch_tokens,
    run_batches,
    shares_prefix,
)
from trainer.local.futures import LocalClientFuture, LocalFuture
from trainer.local.losses import check_loss
from trainer.local.optimizer import (
    OPTIMIZER_STATE_KEYS,
    adam_step,
    check_adam,
    memory_counts,
    new_optimizer,
)
from trainer.local.regularized import Regularized
from trainer.local.sampler import LocalSamplingClient

__all__ = [
    "CHECKPOINT_FORMAT",
    "DEFAULT_LOCAL_MODEL",
    "OPTIMIZER_FILE",
    "OPTIMIZER_STATE_KEYS",
    "STATE_FILE",
    "WEIGHTS_FILE",
    "LocalTrainingClient",
    "create_local_training_client",
    "load_weights_copy",
]

DEFAULT_LOCAL_MODEL = "arena/byte-gpt2"
"""The name of the built-in byte-level GPT-2 (``LocalModelConfig()``)."""


class LocalTrainingClient(Regularized):
    """Trains a local model; Tinker's ``TrainingClient`` methods (see the module docstring).

    Checkpoints (``save_state``) are directories holding the weights that train
    (``model.safetensors`` for full fine-tuning; for LoRA the adapter alone, in ``peft``'s
    layout: ``adapter_config.json`` and ``adapter_model.safetensors``), ``optimizer.pt``
    (AdamW's state, once a step was taken) and ``state.json`` (the step count and the
    LoRA settings); ``load_state`` restores them, so training resumes exactly.
    """

    def __init__(
        self, config: LocalModelConfig | None = None, base_model: str | None = None
    ) -> None:
        """Build the model ``config`` names (the default byte-level GPT-2 when None).
        ``base_model`` names it (default: ``model_path``, or ``DEFAULT_LOCAL_MODEL``).

        Raises ValueError as ``load_model`` does.
        """
        self.config = config if config is not None else LocalModelConfig()
        self.base_model = base_model or self.config.model_path or DEFAULT_LOCAL_MODEL
        """The model's name, as Tinker names a base model."""
        loaded = _trainable_model(self.config)
        self._loaded: LoadedModel = loaded
        self.model = loaded.model
        self._checkpointed: list[torch.nn.Module] = []
        if self.config.gradient_checkpointing:
            self._checkpointed = enable_gradient_checkpointing(self.model)
        self._share_prefix = shares_prefix(self.model, self._checkpointed, self.config)
        self.micro_batch_tokens = micro_batch_tokens(self.model, self.config.train_micro_batch_mb)
        """Most padded tokens in one forward/backward pass (``train_micro_batch_mb``)."""
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="arena-local-train")
        self._optimizer: torch.optim.AdamW | None = None
        self._step = 0
        self._snapshots = 0
        root = self.config.checkpoint_dir
        self._checkpoint_root: Path | None = Path(root) if root else None
        self._vocab_size = vocab_rows(self.model)
        self._device = next(self.model.parameters()).device

    @property
    def is_lora(self) -> bool:
        """True when a LoRA adapter trains (``lora_rank > 0``), False for every weight."""
        return self.config.lora_rank > 0

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """The parameters the optimizer updates (the adapter's for LoRA)."""
        return [p for p in self.model.parameters() if p.requires_grad]

    def memory(self) -> dict[str, int]:
        """What the model and its training state hold, counted from the tensors
        themselves (read it after an optimizer step for the optimizer's share):

        ``parameters`` and ``parameter_bytes`` (every weight, the frozen base included;
        a tied weight once), ``trainable_parameters`` and ``trainable_bytes``,
        ``gradient_bytes`` (gradients held now), ``optimizer_state_bytes`` (AdamW's
        moments and step counters)."""
        return memory_counts(self.model, self._optimizer)

    @property
    def step(self) -> int:
        """Optimizer steps taken (restored by ``load_state``)."""
        return self._step

    @property
    def context_length(self) -> int:
        """Most tokens one datum may hold."""
        return self._loaded.context_length

    def get_tokenizer(self) -> LocalTokenizer:
        """The model's tokenizer: ``ByteTokenizer`` for the default model, else the model
        directory's Hugging Face tokenizer."""
        return self._loaded.tokenizer

    def close(self) -> None:
        """Finish queued work and stop the worker thread; the client is unusable after."""
        self._executor.shutdown(wait=True)

    def __enter__(self) -> LocalTrainingClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- forward / backward ----------------------------------------------------------------

    def forward_backward(
        self,
        data: Sequence[types.Datum],
        loss_fn: str,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> LocalFuture[types.ForwardBackwardOutput]:
        """Compute the loss and add its gradient to the accumulated gradients.

        Gradients add up over calls until ``optim_step``. The output holds each datum's
        target logprobs (``loss_fn_outputs[i]["logprobs"]``) and ``metrics["loss:sum"]``.
        Raises ValueError at once for an unknown ``loss_fn`` (the message lists the
        choices), a bad ``loss_fn_config``, or a malformed datum.
        """
        settings = check_loss(loss_fn, loss_fn_config)
        return self._submit(self._run, self._examples(data, loss_fn), loss_fn, settings, True)

    async def forward_backward_async(
        self,
        data: Sequence[types.Datum],
        loss_fn: str,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> LocalFuture[types.ForwardBackwardOutput]:
        """``forward_backward`` as a coroutine returning the future; raises the same."""
        return self.forward_backward(data, loss_fn, loss_fn_config)

    def forward(
        self,
        data: Sequence[types.Datum],
        loss_fn: str,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> LocalFuture[types.ForwardBackwardOutput]:
        """Like ``forward_backward`` without gradients (nothing accumulates)."""
        settings = check_loss(loss_fn, loss_fn_config)
        return self._submit(self._run, self._examples(data, loss_fn), loss_fn, settings, False)

    async def forward_async(
        self,
        data: Sequence[types.Datum],
        loss_fn: str,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> LocalFuture[types.ForwardBackwardOutput]:
        """``forward`` as a coroutine returning the future; raises the same."""
        return self.forward(data, loss_fn, loss_fn_config)

    def _examples(self, data: Sequence[types.Datum], loss_fn: str) -> list[Example]:
        return examples(
            data, loss_fn, context_length=self.context_length, vocab_size=self._vocab_size
        )

    def _run(
        self,
        examples: list[Example],
        loss_fn: str,
        settings: Mapping[str, float],
        backward: bool,
    ) -> types.ForwardBackwardOutput:
        return self._measured(
            lambda: run_batches(
                examples,
                lambda chunk, counts: self._chunk_loss(chunk, loss_fn, settings, counts),
                micro_batch_size=self.config.train_micro_batch_size,
                backward=backward,
                checkpointed=self._checkpointed,
                micro_batch_tokens=self.micro_batch_tokens,
                share_prefix=backward and self._share_prefix,
            )
        )

    def _chunk_loss(self, chunk: list[Example], *loss: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Target logprobs ``[B, T]`` and the summed loss of a right-padded batch (``loss``:
        the loss, its settings and the token counts, as ``batch_loss`` takes them)."""
        return batch_loss(
            self._loaded, chunk, loss[0], loss[1], self._device, self._regularizer, loss[2]
        )

    # -- optimizer -------------------------------------------------------------------------

    def optim_step(
        self,
        optim_params: types.OptimParams | None = None,
        *,
        adam_params: types.AdamParams | None = None,
    ) -> LocalFuture[types.OptimStepResponse]:
        """Apply the accumulated gradients with AdamW, then zero them.

        Takes Adam parameters as ``optim_params`` or ``adam_params`` (Tinker's two spellings;
        give one). Uses their learning rate, betas, eps and weight decay (they may change
        from step to step); with ``grad_clip_norm > 0`` the gradients' global norm is
        clipped to it first. Metrics: ``grad_norm`` (before clipping) and ``step``.
        Raises ValueError at once for both or neither given, an optimizer other than Adam,
        or a negative learning rate, eps or clip norm.
        """
        return self._submit(self._optim_step, check_adam(optim_params, adam_params))

    async def optim_step_async(
        self,
        optim_params: types.OptimParams | None = None,
        *,
        adam_params: types.AdamParams | None = None,
    ) -> LocalFuture[types.OptimStepResponse]:
        """``optim_step`` as a coroutine returning the future; raises the same."""
        return self.optim_step(optim_params, adam_params=adam_params)

    def _optim_step(self, adam: types.AdamParams) -> types.OptimStepResponse:
        if self._optimizer is None:
            self._optimizer = new_optimizer(self.trainable_parameters(), adam)
        grad_norm = adam_step(self._optimizer, self.trainable_parameters(), adam)
        self._step += 1
        metrics = {"grad_norm": grad_norm, "step": float(self._step)}
        return types.OptimStepResponse(metrics={**metrics, **self._after_step()})

    # -- sampling --------------------------------------------------------------------------

    def save_weights_and_get_sampling_client(
        self,
        name: str | None = None,
        retry_config: Any = None,
        record_stability_info: bool = False,
        kind: types.SamplingClientKind = "snapshot",
    ) -> LocalClientFuture[LocalSamplingClient]:
        """A future of a sampling client over a frozen copy of the current weights.

        The copy is taken after the work queued before this call; later training does
        not change it. ``name`` only labels it (nothing is written to disk);
        ``retry_config`` is accepted and unused (local calls are not retried). Raises
        ValueError for ``record_stability_info=True`` or a ``kind`` other than
        ``snapshot``, which the local backend does not offer.
        """
        _unsupported(record_stability_info=(record_stability_info, False))
        if kind != "snapshot":
            raise ValueError(
                f"the local backend only makes 'snapshot' sampling clients, not {kind!r}"
            )
        return LocalClientFuture(self._executor.submit(self._snapshot, name))

    async def save_weights_and_get_sampling_client_async(
        self,
        name: str | None = None,
        retry_config: Any = None,
        record_stability_info: bool = False,
        kind: types.SamplingClientKind = "snapshot",
    ) -> LocalSamplingClient:
        """``save_weights_and_get_sampling_client``, awaited: the sampling client itself
        (as Tinker's ``_async`` variant returns it)."""
        future = self.save_weights_and_get_sampling_client(
            name, retry_config, record_stability_info, kind
        )
        return await future.result_async()

    def create_sampling_client(
        self, model_path: str, retry_config: Any = None, record_stability_info: bool = False
    ) -> LocalClientFuture[LocalSamplingClient]:
        """A future of a sampling client over weights saved by ``save_weights_for_sampler``
        (or ``save_state``) of this model. The future raises ValueError when ``model_path``
        is not such a checkpoint or does not fit this model."""
        _unsupported(record_stability_info=(record_stability_info, False))
        return LocalClientFuture(self._executor.submit(self._sampler_from, model_path))

    async def create_sampling_client_async(
        self, model_path: str, retry_config: Any = None, record_stability_info: bool = False
    ) -> LocalSamplingClient:
        """``create_sampling_client``, awaited: the sampling client itself."""
        future = self.create_sampling_client(model_path, retry_config, record_stability_info)
        return await future.result_async()

    def _sampler_from(self, model_path: str) -> LocalSamplingClient:
        loaded = load_weights_copy(self._loaded, model_path, in_use=True)
        return self._sampler(loaded, Path(model_path).name)

    def _snapshot(self, name: str | None) -> LocalSamplingClient:
        loaded = replace(self._loaded, model=frozen_copy(self.model))
        return self._sampler(loaded, name)

    def _sampler(self, loaded: LoadedModel, name: str | None) -> LocalSamplingClient:
        """A sampling client over ``loaded`` (named ``name``, else by the step), batching and
        seeded as the config says (each snapshot its own seed)."""
        self._snapshots += 1
        return LocalSamplingClient(
            loaded,
            max_batch_size=self.config.max_batch_size,
            batch_window_s=self.config.batch_window_s,
            batch_quiet_s=self.config.batch_quiet_s,
            seed=self.config.seed + self._snapshots,
            name=name if name is not None else f"step{self._step}-{self._snapshots}",
            base_model=self.base_model,
            prefix_cache_mb=self.config.prefix_cache_mb,
        )

    # -- checkpoints -----------------------------------------------------------------------

    def save_state(
        self,
        name: str,
        ttl_seconds: int | None = None,
        overwrite: bool = False,
        user_metadata: dict[str, str] | None = None,
    ) -> LocalFuture[types.SaveWeightsResponse]:
        """Save weights, optimizer state and step count; a future of the response, whose
        ``path`` is the checkpoint directory (``<checkpoint_dir>/<name>``).

        ``user_metadata`` is stored with it (``state.json``); ``ttl_seconds`` is accepted
        and ignored (local checkpoints never expire). Raises ValueError at once for a name
        that is empty or not a plain file name, or metadata that is not str to str; the
        future raises FileExistsError when the checkpoint exists and ``overwrite`` is
        False, or OSError when it cannot be written.
        """
        check_name(name)
        metadata = check_metadata(user_metadata)
        return self._submit(self._save_state, name, overwrite, metadata, True)

    async def save_state_async(
        self,
        name: str,
        ttl_seconds: int | None = None,
        overwrite: bool = False,
        user_metadata: dict[str, str] | None = None,
    ) -> LocalFuture[types.SaveWeightsResponse]:
        """``save_state`` as a coroutine returning the future; raises the same."""
        return self.save_state(name, ttl_seconds, overwrite, user_metadata)

    def save_weights_for_sampler(
        self, name: str, ttl_seconds: int | None = None, user_metadata: dict[str, str] | None = None
    ) -> LocalFuture[types.SaveWeightsForSamplerResponse]:
        """Save the weights alone (no optimizer state) for sampling later; a future of the
        response, whose ``path`` is ``<checkpoint_dir>/sampler_weights/<name>``. Load them
        with ``create_sampling_client(path)`` (here or on the service client). Raises as
        ``save_state`` does."""
        check_name(name)
        metadata = check_metadata(user_metadata)
        return self._submit(self._save_sampler_weights, name, metadata)

    async def save_weights_for_sampler_async(
        self, name: str, ttl_seconds: int | None = None, user_metadata: dict[str, str] | None = None
    ) -> LocalFuture[types.SaveWeightsForSamplerResponse]:
        """``save_weights_for_sampler`` as a coroutine returning the future."""
        return self.save_weights_for_sampler(name, ttl_seconds, user_metadata)

    def _save_sampler_weights(
        self, name: str, metadata: dict[str, str]
    ) -> types.SaveWeightsForSamplerResponse:
        saved = self._save_state(f"sampler_weights/{name}", False, metadata, False)
        return types.SaveWeightsForSamplerResponse(path=saved.path)

    def _save_state(
        self, name: str, overwrite: bool, metadata: dict[str, str], with_optimizer: bool
    ) -> types.SaveWeightsResponse:
        if self._checkpoint_root is None:
            self._checkpoint_root = Path(tempfile.mkdtemp(prefix="arena-local-checkpoints-"))
        optimizer = self._optimizer if with_optimizer else None
        state = state_record(
            self.config,
            step=self._step,
            base_model=self.base_model,
            has_optimizer=optimizer is not None,
            metadata=metadata,
        )
        final = write_checkpoint(
            self._checkpoint_root / name,
            self.model,
            optimizer,
            state,
            overwrite=overwrite,
            adapter_base=(self.config.model_path or self.base_model) if self.is_lora else None,
        )
        self._save_magnet(final, with_optimizer)
        return types.SaveWeightsResponse(path=str(final.resolve()))

    def load_state(
        self, path: str, weights_access_token: str | None = None
    ) -> LocalFuture[types.LoadWeightsResponse]:
        """Restore the weights of a ``save_state`` checkpoint (as Tinker's ``load_state``:
        the optimizer starts afresh; use ``load_state_with_optimizer`` to resume). The step
        count comes back. The future raises ValueError when ``path`` is not a checkpoint
        directory or does not fit this model."""
        return self._submit(self._load_state, path, False)

    async def load_state_async(
        self, path: str, weights_access_token: str | None = None
    ) -> LocalFuture[types.LoadWeightsResponse]:
        """``load_state`` as a coroutine returning the future."""
        return self.load_state(path, weights_access_token)

    def load_state_with_optimizer(
        self, path: str, weights_access_token: str | None = None
    ) -> LocalFuture[types.LoadWeightsResponse]:
        """Restore weights, optimizer state and step count, so training resumes exactly;
        accumulated gradients are dropped. Raises as ``load_state`` does."""
        return self._submit(self._load_state, path, True)

    async def load_state_with_optimizer_async(
        self, path: str, weights_access_token: str | None = None
    ) -> LocalFuture[types.LoadWeightsResponse]:
        """``load_state_with_optimizer`` as a coroutine returning the future."""
        return self.load_state_with_optimizer(path, weights_access_token)

    def _load_state(self, path: str, with_optimizer: bool) -> types.LoadWeightsResponse:
        directory = Path(path)
        state, optimizer_state = read_checkpoint(
            directory, is_lora=self.is_lora, with_optimizer=with_optimizer, device=self._device
        )
        load_weights(self.model, directory, self._device)
        self.model.zero_grad(set_to_none=True)
        if optimizer_state is None:
            self._optimizer = None
        else:
            self._optimizer = new_optimizer(self.trainable_parameters(), types.AdamParams())
            self._optimizer.load_state_dict(optimizer_state)
        self._step = int(state.get("step", 0))
        self._restore_magnet(directory)
        return types.LoadWeightsResponse(path=path)

    # -- plumbing --------------------------------------------------------------------------

    def _submit(self, fn: Any, *args: Any) -> LocalFuture[Any]:
        return LocalFuture(self._executor.submit(fn, *args))


def _unsupported(**settings: tuple[object, object]) -> None:
    """Raise ValueError naming the first setting that differs from the only value the
    local backend supports."""
    for name, (value, default) in settings.items():
        if value != default:
            raise ValueError(f"the local backend does not support {name}={value!r}")


def _trainable_model(config: LocalModelConfig) -> LoadedModel:
    """The model ``config`` names, with a LoRA adapter of ``config.lora_rank`` (0: none,
    every weight trains). Raises ValueError as ``load_model`` does."""
    loaded = load_model(config)
    if config.lora_rank == 0:
        return loaded
    adapted = lora.add_lora(
        loaded.model,
        rank=config.lora_rank,
        alpha=config.lora_alpha,
        targets=config.lora_targets,
        seed=config.seed,
    )
    return replace(loaded, model=adapted)


def create_local_training_client(config: LocalModelConfig | None = None) -> LocalTrainingClient:
    """The local counterpart of ``ServiceClient.create_lora_training_client``: a training
    client over the model ``config`` names (default: the byte-level GPT-2), with a LoRA
    adapter of ``config.lora_rank`` (0, the default: every weight trains).

    Raises ValueError as ``load_model`` does (e.g. ``model_path`` is not a model directory).
    """
    return LocalTrainingClient(config)
