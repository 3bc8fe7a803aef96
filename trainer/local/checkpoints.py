"""The local backend's checkpoint directories: writing and reading them, and loading their
weights into a model or into a frozen copy for a sampler.

A checkpoint directory holds the weights that train (``model.safetensors`` for full
fine-tuning; for LoRA the adapter alone, in ``peft``'s layout: ``adapter_config.json`` and
``adapter_model.safetensors``), ``optimizer.pt`` (AdamW's state, once a step was taken) and
``state.json`` (the step count, the LoRA settings and the user's metadata). It is written
beside its final place and renamed there, so a failed save leaves no half checkpoint.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import safetensors.torch
import torch

from trainer.local import lora
from trainer.local.buildlock import BUILD_LOCK
from trainer.local.config import LoadedModel, LocalModelConfig

CHECKPOINT_FORMAT = "arena-local-checkpoint/1"
"""Written to ``state.json`` in every checkpoint directory."""
WEIGHTS_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
STATE_FILE = "state.json"


def check_name(name: str) -> None:
    """Raise ValueError unless ``name`` is a plain file name (a checkpoint's name)."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or name[0] == ".":
        raise ValueError(f"checkpoint name {name!r} must be a plain file name")


def check_metadata(metadata: dict[str, str] | None) -> dict[str, str]:
    """A copy of a checkpoint's user metadata (``{}`` for None); raises ValueError unless it
    maps str to str."""
    if metadata is None:
        return {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise ValueError("user_metadata must map str to str")
    return dict(metadata)


def state_record(
    config: LocalModelConfig,
    *,
    step: int,
    base_model: str,
    has_optimizer: bool,
    metadata: dict[str, str],
) -> dict[str, Any]:
    """What ``state.json`` holds for a checkpoint of a client with ``config``."""
    return {
        "format": CHECKPOINT_FORMAT,
        "step": step,
        "model_path": config.model_path,
        "base_model": base_model,
        "has_optimizer": has_optimizer,
        # The built-in model's base weights come from the seed (an adapter checkpoint
        # holds none of them).
        "seed": config.seed,
        "lora_rank": config.lora_rank,
        "lora_alpha": config.lora_alpha,
        "lora_targets": list(config.lora_targets),
        "user_metadata": metadata,
    }


def write_checkpoint(
    final: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    state: dict[str, Any],
    *,
    overwrite: bool,
    adapter_base: str | None,
) -> Path:
    """Write ``model``'s weights that train (with ``adapter_base``, the name of its base
    model, the LoRA adapter alone; with None every weight), ``optimizer``'s state (unless
    None) and ``state`` as the checkpoint directory ``final``; its path. Raises
    FileExistsError when it exists and ``overwrite`` is False, or OSError when it cannot be
    written."""
    root = final.parent
    root.mkdir(parents=True, exist_ok=True)
    if final.exists() and not overwrite:
        raise FileExistsError(f"checkpoint {str(final)!r} exists; pass overwrite=True")
    partial = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=root))
    try:
        if adapter_base is not None:
            lora.save_adapter(model, partial, adapter_base)
        else:
            safetensors.torch.save_model(model, str(partial / WEIGHTS_FILE))
        if optimizer is not None:
            torch.save(optimizer.state_dict(), partial / OPTIMIZER_FILE)
        (partial / STATE_FILE).write_text(json.dumps(state, indent=1))
        if final.exists():
            shutil.rmtree(final)
        os.replace(partial, final)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return final


def read_checkpoint(
    directory: Path, *, is_lora: bool, with_optimizer: bool, device: torch.device
) -> tuple[dict[str, Any], Any]:
    """The checkpoint's ``state.json`` (``{}`` when it has none) and, ``with_optimizer``,
    its optimizer state on ``device`` (None when it has none). Raises ValueError unless
    ``directory`` holds the kind of weights a client of this kind saves (see
    ``check_kind``)."""
    check_kind(directory, is_lora=is_lora)
    state: dict[str, Any] = {}
    if (directory / STATE_FILE).is_file():
        state = json.loads((directory / STATE_FILE).read_text())
    optimizer_state = None
    if with_optimizer and (directory / OPTIMIZER_FILE).is_file():
        optimizer_state = torch.load(
            directory / OPTIMIZER_FILE, map_location=device, weights_only=True
        )
    return state, optimizer_state


def check_kind(directory: Path, *, is_lora: bool) -> None:
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


def load_weights(model: torch.nn.Module, directory: Path, device: torch.device) -> None:
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


def frozen_copy(model: torch.nn.Module, *, copy_weights: bool = True) -> torch.nn.Module:
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
            with BUILD_LOCK, warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # peft's notes on tied weights
                wrapped = PeftModel.from_pretrained(model, str(directory), is_trainable=False)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise ValueError(f"checkpoint {path!r}: cannot load its adapter: {exc}") from exc
        return replace(loaded, model=frozen_copy(wrapped, copy_weights=False))
    check_kind(directory, is_lora=lora.is_lora(model))
    frozen = frozen_copy(model, copy_weights=in_use)
    load_weights(frozen, directory, next(frozen.parameters()).device)
    return replace(loaded, model=frozen)
