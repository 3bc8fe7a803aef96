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

import copy
import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import safetensors.torch
import torch
from tinker import types

from trainer.local import lora
from trainer.local.config import (
    LoadedModel,
    LocalModelConfig,
    LocalTokenizer,
    load_model,
    vocab_rows,
)
from trainer.local.futures import LocalClientFuture, LocalFuture
from trainer.local.losses import REQUIRED_INPUTS, check_loss, token_losses
from trainer.local.sampler import LocalSamplingClient

DEFAULT_LOCAL_MODEL = "arena/byte-gpt2"
"""The name of the built-in byte-level GPT-2 (``LocalModelConfig()``)."""
CHECKPOINT_FORMAT = "arena-local-checkpoint/1"
"""Written to ``state.json`` in every checkpoint directory."""
OPTIMIZER_STATE_KEYS = ("exp_avg", "exp_avg_sq")
"""AdamW's per-parameter state tensors (``memory()`` counts their bytes)."""
WEIGHTS_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
STATE_FILE = "state.json"


@dataclass
class _Example:
    tokens: list[int]
    targets: torch.Tensor
    inputs: dict[str, torch.Tensor]


class LocalTrainingClient:
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
        loaded = load_model(self.config)
        if self.config.lora_rank > 0:
            loaded = replace(
                loaded,
                model=lora.add_lora(
                    loaded.model,
                    rank=self.config.lora_rank,
                    alpha=self.config.lora_alpha,
                    targets=self.config.lora_targets,
                    seed=self.config.seed,
                ),
            )
        self._loaded: LoadedModel = loaded
        self.model = loaded.model
        self._checkpointed: list[torch.nn.Module] = []
        if self.config.gradient_checkpointing:
            self._checkpointed = _enable_gradient_checkpointing(self.model)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="arena-local-train")
        self._optimizer: torch.optim.AdamW | None = None
        self._step = 0
        self._snapshots = 0
        self._checkpoint_root: Path | None = (
            Path(self.config.checkpoint_dir) if self.config.checkpoint_dir else None
        )
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
        params = list({id(p): p for p in self.model.parameters()}.values())
        trainable = [p for p in params if p.requires_grad]
        optimizer_bytes = 0
        if self._optimizer is not None:
            for state in self._optimizer.state.values():
                for value in state.values():
                    if isinstance(value, torch.Tensor):
                        optimizer_bytes += value.numel() * value.element_size()
        return {
            "parameters": sum(p.numel() for p in params),
            "parameter_bytes": sum(p.numel() * p.element_size() for p in params),
            "trainable_parameters": sum(p.numel() for p in trainable),
            "trainable_bytes": sum(p.numel() * p.element_size() for p in trainable),
            "gradient_bytes": sum(
                p.grad.numel() * p.grad.element_size() for p in trainable if p.grad is not None
            ),
            "optimizer_state_bytes": optimizer_bytes,
        }

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
        examples = self._examples(data, loss_fn)
        return self._submit(self._run, examples, loss_fn, settings, True)

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
        examples = self._examples(data, loss_fn)
        return self._submit(self._run, examples, loss_fn, settings, False)

    async def forward_async(
        self,
        data: Sequence[types.Datum],
        loss_fn: str,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> LocalFuture[types.ForwardBackwardOutput]:
        """``forward`` as a coroutine returning the future; raises the same."""
        return self.forward(data, loss_fn, loss_fn_config)

    def _examples(self, data: Sequence[types.Datum], loss_fn: str) -> list[_Example]:
        if not data:
            raise ValueError("data is empty: pass at least one Datum")
        required = REQUIRED_INPUTS[loss_fn]
        examples = []
        for i, datum in enumerate(data):
            tokens = datum.model_input.to_ints()
            n = len(tokens)
            if n == 0:
                raise ValueError(f"datum {i}: model_input is empty")
            if n > self.context_length:
                raise ValueError(
                    f"datum {i}: {n} tokens exceed the model's context_length "
                    f"({self.context_length})"
                )
            missing = [k for k in required if k not in datum.loss_fn_inputs]
            if missing:
                raise ValueError(
                    f"datum {i}: loss {loss_fn!r} needs loss_fn_inputs "
                    f"{', '.join(required)}; missing {', '.join(missing)}"
                )
            tensors: dict[str, torch.Tensor] = {}
            for key in ("target_tokens", "weights", "logprobs", "advantages"):
                if key not in datum.loss_fn_inputs:
                    continue
                tensor = datum.loss_fn_inputs[key].to_torch().reshape(-1)
                if tensor.numel() != n:
                    raise ValueError(
                        f"datum {i}: loss_fn_inputs[{key!r}] has {tensor.numel()} values for "
                        f"{n} input tokens (they must align: position t predicts target t)"
                    )
                tensors[key] = tensor
            targets = tensors.pop("target_tokens").long()
            if int(targets.min()) < 0 or int(targets.max()) >= self._vocab_size:
                raise ValueError(f"datum {i}: target_tokens must be in [0, {self._vocab_size})")
            if min(tokens) < 0 or max(tokens) >= self._vocab_size:
                raise ValueError(f"datum {i}: model_input ids must be in [0, {self._vocab_size})")
            if loss_fn == "cross_entropy" and "weights" not in tensors:
                tensors["weights"] = torch.ones(n)
            inputs = {k: v.float() for k, v in tensors.items()}
            examples.append(_Example(tokens, targets, inputs))
        return examples

    def _run(
        self,
        examples: list[_Example],
        loss_fn: str,
        settings: Mapping[str, float],
        backward: bool,
    ) -> types.ForwardBackwardOutput:
        outputs: list[dict[str, types.TensorData]] = []
        total = 0.0
        size = self.config.train_micro_batch_size
        for start in range(0, len(examples), size):
            chunk = examples[start : start + size]
            with torch.set_grad_enabled(backward), _checkpointing(self._checkpointed, backward):
                logp_BT, loss = self._chunk_loss(chunk, loss_fn, settings)
                if backward:
                    loss.backward()
            total += float(loss.detach())
            logp_BT = logp_BT.detach().cpu()
            for i, example in enumerate(chunk):
                logprobs = logp_BT[i, : len(example.tokens)].clone()
                outputs.append({"logprobs": types.TensorData.from_torch(logprobs)})
        return types.ForwardBackwardOutput(
            loss_fn_output_type="ArrayRecord",
            loss_fn_outputs=outputs,
            metrics={"loss:sum": total},
        )

    def _chunk_loss(
        self, chunk: list[_Example], loss_fn: str, settings: Mapping[str, float]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Target logprobs ``[B, T]`` and the summed loss of a right-padded batch."""
        width = max(len(e.tokens) for e in chunk)
        pad = self._loaded.pad_token_id
        device = self._device
        ids = torch.tensor([e.tokens + [pad] * (width - len(e.tokens)) for e in chunk])
        mask = torch.zeros(len(chunk), width)
        targets = torch.zeros(len(chunk), width, dtype=torch.long)
        keys = set().union(*(e.inputs for e in chunk))
        inputs = {k: torch.zeros(len(chunk), width) for k in keys}
        for i, e in enumerate(chunk):
            n = len(e.tokens)
            mask[i, :n] = 1.0
            targets[i, :n] = e.targets
            for k, v in e.inputs.items():
                inputs[k][i, :n] = v
        ids, mask, targets = ids.to(device), mask.to(device), targets.to(device)
        inputs = {k: v.to(device) for k, v in inputs.items()}
        with self._loaded.compute():
            out = self.model(input_ids=ids, attention_mask=mask.long(), use_cache=False)
        logits = out.logits.float()
        logp_BT = -torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), targets.flatten(), reduction="none"
        ).view(len(chunk), width)
        loss = (token_losses(loss_fn, logp_BT, inputs, settings) * mask).sum()
        return logp_BT * mask, loss

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
        adam = _adam_params(optim_params, adam_params)
        if adam.learning_rate < 0 or adam.eps < 0:
            raise ValueError("learning_rate and eps must not be negative")
        if adam.grad_clip_norm < 0:
            raise ValueError("grad_clip_norm must not be negative (0 turns clipping off)")
        return self._submit(self._optim_step, adam)

    async def optim_step_async(
        self,
        optim_params: types.OptimParams | None = None,
        *,
        adam_params: types.AdamParams | None = None,
    ) -> LocalFuture[types.OptimStepResponse]:
        """``optim_step`` as a coroutine returning the future; raises the same."""
        return self.optim_step(optim_params, adam_params=adam_params)

    def _new_optimizer(self, adam: types.AdamParams) -> torch.optim.AdamW:
        return torch.optim.AdamW(
            self.trainable_parameters(),
            lr=adam.learning_rate,
            betas=(adam.beta1, adam.beta2),
            eps=adam.eps,
            weight_decay=adam.weight_decay,
        )

    def _optim_step(self, adam: types.AdamParams) -> types.OptimStepResponse:
        if self._optimizer is None:
            self._optimizer = self._new_optimizer(adam)
        for group in self._optimizer.param_groups:
            group["lr"] = adam.learning_rate
            group["betas"] = (adam.beta1, adam.beta2)
            group["eps"] = adam.eps
            group["weight_decay"] = adam.weight_decay
        params = self.trainable_parameters()
        grads = [p.grad for p in params if p.grad is not None]
        grad_norm = (
            float(
                torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
            )
            if grads
            else 0.0
        )
        if adam.grad_clip_norm > 0 and grads:
            torch.nn.utils.clip_grad_norm_(params, adam.grad_clip_norm)
        self._optimizer.step()
        self._optimizer.zero_grad(set_to_none=True)
        self._step += 1
        return types.OptimStepResponse(metrics={"grad_norm": grad_norm, "step": float(self._step)})

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
        self._snapshots += 1
        return LocalSamplingClient(
            loaded,
            max_batch_size=self.config.max_batch_size,
            batch_window_s=self.config.batch_window_s,
            batch_quiet_s=self.config.batch_quiet_s,
            seed=self.config.seed + self._snapshots,
            name=Path(model_path).name,
            base_model=self.base_model,
        )

    def _snapshot(self, name: str | None) -> LocalSamplingClient:
        model = _frozen_copy(self.model)
        self._snapshots += 1
        return LocalSamplingClient(
            replace(self._loaded, model=model),
            max_batch_size=self.config.max_batch_size,
            batch_window_s=self.config.batch_window_s,
            batch_quiet_s=self.config.batch_quiet_s,
            seed=self.config.seed + self._snapshots,
            name=name if name is not None else f"step{self._step}-{self._snapshots}",
            base_model=self.base_model,
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
        _check_name(name)
        metadata = _check_metadata(user_metadata)
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
        _check_name(name)
        metadata = _check_metadata(user_metadata)
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
        final = self._checkpoint_root / name
        root = final.parent
        root.mkdir(parents=True, exist_ok=True)
        if final.exists() and not overwrite:
            raise FileExistsError(f"checkpoint {str(final)!r} exists; pass overwrite=True")
        partial = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=root))
        try:
            if self.is_lora:
                lora.save_adapter(self.model, partial, self.config.model_path or self.base_model)
            else:
                safetensors.torch.save_model(self.model, str(partial / WEIGHTS_FILE))
            has_optimizer = with_optimizer and self._optimizer is not None
            if has_optimizer:
                assert self._optimizer is not None
                torch.save(self._optimizer.state_dict(), partial / OPTIMIZER_FILE)
            state = {
                "format": CHECKPOINT_FORMAT,
                "step": self._step,
                "model_path": self.config.model_path,
                "base_model": self.base_model,
                "has_optimizer": has_optimizer,
                # The built-in model's base weights come from the seed (an adapter
                # checkpoint holds none of them).
                "seed": self.config.seed,
                "lora_rank": self.config.lora_rank,
                "lora_alpha": self.config.lora_alpha,
                "lora_targets": list(self.config.lora_targets),
                "user_metadata": metadata,
            }
            (partial / STATE_FILE).write_text(json.dumps(state, indent=1))
            if final.exists():
                shutil.rmtree(final)
            os.replace(partial, final)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
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
        _check_checkpoint_kind(directory, is_lora=self.is_lora)
        state: dict[str, Any] = {}
        if (directory / STATE_FILE).is_file():
            state = json.loads((directory / STATE_FILE).read_text())
        optimizer_state = None
        if with_optimizer and (directory / OPTIMIZER_FILE).is_file():
            optimizer_state = torch.load(
                directory / OPTIMIZER_FILE, map_location=self._device, weights_only=True
            )
        _load_weights(self.model, directory, self._device)
        self.model.zero_grad(set_to_none=True)
        if optimizer_state is None:
            self._optimizer = None
        else:
            self._optimizer = self._new_optimizer(types.AdamParams())
            self._optimizer.load_state_dict(optimizer_state)
        self._step = int(state.get("step", 0))
        return types.LoadWeightsResponse(path=path)

    # -- plumbing --------------------------------------------------------------------------

    def _submit(self, fn: Any, *args: Any) -> LocalFuture[Any]:
        return LocalFuture(self._executor.submit(fn, *args))


def _adam_params(
    optim_params: types.OptimParams | None, adam_params: types.AdamParams | None
) -> types.AdamParams:
    if (optim_params is None) == (adam_params is None):
        raise ValueError("give the optimizer parameters once: optim_params or adam_params")
    params = optim_params if optim_params is not None else adam_params
    if not isinstance(params, types.AdamParams):
        raise ValueError(f"the local backend runs AdamW; got {type(params).__name__}")
    return params


def _check_name(name: str) -> None:
    if not name or name in (".", "..") or "/" in name or "\\" in name or name[0] == ".":
        raise ValueError(f"checkpoint name {name!r} must be a plain file name")


def _check_metadata(metadata: dict[str, str] | None) -> dict[str, str]:
    if metadata is None:
        return {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise ValueError("user_metadata must map str to str")
    return dict(metadata)


def _unsupported(**settings: tuple[object, object]) -> None:
    """Raise ValueError naming the first setting that differs from the only value the
    local backend supports."""
    for name, (value, default) in settings.items():
        if value != default:
            raise ValueError(f"the local backend does not support {name}={value!r}")


def _check_checkpoint_kind(directory: Path, *, is_lora: bool) -> None:
    """Raise ValueError unless ``directory`` holds the kind of weights a client of this
    kind saves (an adapter for LoRA, every weight otherwise)."""
    full, adapter = (directory / WEIGHTS_FILE).is_file(), lora.has_adapter(directory)
    if not full and not adapter:
        raise ValueError(
            f"{str(directory)!r} is not a checkpoint directory of the local backend: missing "
            f"{WEIGHTS_FILE} or {lora.ADAPTER_WEIGHTS_FILE} (save one with save_state)"
        )
    if is_lora and not adapter:
        raise ValueError(
            f"checkpoint {str(directory)!r} holds every weight (full fine-tuning) but this "
            "client trains a LoRA adapter: load it with lora_rank 0"
        )
    if not is_lora and not full:
        raise ValueError(
            f"checkpoint {str(directory)!r} holds a LoRA adapter but this client trains every "
            f"weight: load it with lora_rank {lora.adapter_rank(directory)}"
        )


def _load_weights(model: torch.nn.Module, directory: Path, device: torch.device) -> None:
    """Load the checkpoint's weights into ``model`` (an adapter into a LoRA model, every
    weight otherwise). Raises ValueError when they do not fit."""
    if lora.is_lora(model):
        lora.load_adapter(model, directory)
        return
    try:
        safetensors.torch.load_model(
            model, str(directory / WEIGHTS_FILE), strict=True, device=str(device)
        )
    except RuntimeError as exc:
        raise ValueError(f"checkpoint {str(directory)!r} does not fit this model: {exc}") from exc


def _frozen_copy(model: torch.nn.Module, *, copy_weights: bool = True) -> torch.nn.Module:
    """A frozen copy of ``model`` for a sampler: for LoRA only the adapter is copied (the
    base is shared), otherwise every weight; without ``copy_weights``, ``model`` itself,
    frozen."""
    if lora.is_lora(model) and copy_weights:
        return lora.sampler_copy(model)
    frozen = copy.deepcopy(model) if copy_weights else model
    for p in frozen.parameters():
        p.grad = None
        p.requires_grad_(False)
    return frozen.eval()


def load_weights_copy(loaded: LoadedModel, path: str, *, in_use: bool = False) -> LoadedModel:
    """``loaded`` with a frozen model holding the weights saved at ``path``.

    With ``in_use`` (``loaded.model`` is a training client's), the weights load into a copy
    of it (for LoRA a copy of the adapter alone: the base is shared); otherwise
    ``loaded.model`` is taken over. A LoRA checkpoint (an adapter in peft's layout) loads
    into a LoRA model, or wraps a base model through ``peft``. Raises ValueError when
    ``path`` is not a checkpoint directory of the local backend or does not fit."""
    directory = Path(path)
    model = loaded.model
    if lora.has_adapter(directory) and not lora.is_lora(model):
        import warnings

        from peft import PeftModel

        if in_use:
            raise ValueError(
                f"checkpoint {path!r} holds a LoRA adapter; this client trains every weight"
            )
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # peft's notes on tied weights
                wrapped = PeftModel.from_pretrained(model, str(directory), is_trainable=False)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise ValueError(f"checkpoint {path!r}: cannot load its adapter: {exc}") from exc
        return replace(loaded, model=_frozen_copy(wrapped, copy_weights=False))
    _check_checkpoint_kind(directory, is_lora=lora.is_lora(model))
    frozen = _frozen_copy(model, copy_weights=in_use)
    _load_weights(frozen, directory, next(frozen.parameters()).device)
    return replace(loaded, model=frozen)


def _enable_gradient_checkpointing(model: Any) -> list[torch.nn.Module]:
    """Turn on transformers' gradient checkpointing; the layers it applies to. Raises
    ValueError for a model that does not support it."""
    base = model.get_base_model() if lora.is_lora(model) else model
    if not getattr(base, "supports_gradient_checkpointing", False):
        raise ValueError(f"{type(base).__name__} does not support gradient checkpointing")
    base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return [m for m in base.modules() if getattr(m, "gradient_checkpointing", False) is True]


class _checkpointing:
    """While a backward pass is wanted, mark the checkpointed layers as training:
    transformers checkpoints a layer only in training mode, and the rest of the model stays
    in eval mode (dropout off), so the forward pass computes the same as without."""

    def __init__(self, layers: list[torch.nn.Module], active: bool) -> None:
        self.layers = layers if active else []

    def __enter__(self) -> None:
        for layer in self.layers:
            layer.training = True

    def __exit__(self, *exc_info: object) -> None:
        for layer in self.layers:
            layer.training = False


def create_local_training_client(config: LocalModelConfig | None = None) -> LocalTrainingClient:
    """The local counterpart of ``ServiceClient.create_lora_training_client``: a training
    client over the model ``config`` names (default: the byte-level GPT-2), with a LoRA
    adapter of ``config.lora_rank`` (0, the default: every weight trains).

    Raises ValueError as ``load_model`` does (e.g. ``model_path`` is not a model directory).
    """
    return LocalTrainingClient(config)
