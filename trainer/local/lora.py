"""LoRA adapters for the local backend, through ``peft``.

``add_lora`` wraps a base model in a ``peft`` LoRA model whose adapters are the only
trainable weights; ``sampler_copy`` makes a frozen copy for a sampler that shares every
base weight with the trainer (only the adapters are copied, so a snapshot costs the
adapter's size, not the model's); ``save_adapter`` and ``load_adapter`` write and read
checkpoints in ``peft``'s own layout (``adapter_config.json``, ``adapter_model.safetensors``),
which ``PeftModel.from_pretrained`` and vLLM load.

Which layers get adapters: every linear layer (``nn.Linear``, or GPT-2's ``Conv1D``) under
an attention block (``attn``), under an MLP block (``mlp``), and the output layer
(``unembed``), as Tinker's ``train_attn``, ``train_mlp`` and ``train_unembed`` choose.
A layer is placed by the names of the modules above it (``self_attn``, ``attention``,
``mlp``, ``feed_forward``, ...), which covers Llama, Qwen2/Qwen3, GPT-2 and their kin.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from trainer.local.buildlock import BUILD_LOCK

ADAPTER_CONFIG_FILE = "adapter_config.json"
ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"
_ATTN_NAMES = ("attn", "attention")
_MLP_NAMES = ("mlp", "feed_forward", "ffn", "ff")


def _is_linear(module: torch.nn.Module) -> bool:
    return isinstance(module, torch.nn.Linear) or type(module).__name__ == "Conv1D"


def _kind(name: str) -> str | None:
    parts = name.lower().split(".")[:-1]
    if any(any(a in part for a in _ATTN_NAMES) for part in parts):
        return "attn"
    if any(part in _MLP_NAMES or part.endswith("mlp") for part in parts):
        return "mlp"
    return None


def target_modules(model: Any, targets: Iterable[str]) -> list[str]:
    """Full names of the linear layers that ``targets`` (``attn``, ``mlp``, ``unembed``)
    cover in ``model``. Raises ValueError when they cover none (the message lists the
    linear layers the model has)."""
    wanted = set(targets)
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    names = []
    linear = []
    for name, module in model.named_modules():
        if not _is_linear(module):
            continue
        linear.append(name)
        kind = "unembed" if module is output else _kind(name)
        if kind in wanted:
            names.append(name)
    if not names:
        shown = ", ".join(linear[:8]) + (" ..." if len(linear) > 8 else "")
        raise ValueError(
            f"LoRA targets {sorted(wanted)} cover no layer of this model; its linear layers: "
            f"{shown or 'none'}"
        )
    return names


def add_lora(
    model: Any, *, rank: int, alpha: int, targets: Iterable[str], seed: int = 0
) -> torch.nn.Module:
    """``model`` wrapped in a ``peft`` LoRA model: adapters of ``rank`` (scaled by
    ``alpha / rank``, no dropout) on the layers ``targets`` cover, stored in float32
    whatever the base's dtype, initialised so that the model's output is unchanged
    (``lora_B`` is zero, ``lora_A`` drawn from ``seed``); every base weight is frozen.
    Raises ValueError as ``target_modules`` does."""
    import warnings

    from peft import LoraConfig, get_peft_model

    modules = target_modules(model, targets)
    conv1d = any(type(m).__name__ == "Conv1D" for _, m in model.named_modules())
    config = LoraConfig(
        r=rank,
        lora_alpha=alpha,
        lora_dropout=0.0,
        bias="none",
        target_modules=modules,
        fan_in_fan_out=conv1d,  # GPT-2's Conv1D stores weights transposed (peft fixes Linear)
        task_type="CAUSAL_LM",
    )
    with warnings.catch_warnings(), torch.random.fork_rng(devices=[]):
        # peft notes the fan_in_fan_out fix per layer and the tied output layer; both fine.
        warnings.simplefilter("ignore", UserWarning)
        torch.manual_seed(seed)
        with BUILD_LOCK:
            peft_model = get_peft_model(model, config, autocast_adapter_dtype=True)
    peft_model.eval()
    return peft_model


def is_lora(model: torch.nn.Module) -> bool:
    """True for a ``peft`` model (``add_lora``'s)."""
    return hasattr(model, "peft_config")


def adapter_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The adapter's weights, keyed as ``peft`` saves them (the adapter alone: never the
    base's embedding or output weights, which peft would add when the output layer has an
    adapter)."""
    from peft import get_peft_model_state_dict

    state: dict[str, torch.Tensor] = get_peft_model_state_dict(model, save_embedding_layers=False)
    return state


def sampler_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A frozen copy of a LoRA ``model`` (in eval mode) that shares every frozen tensor
    (the base's weights and buffers) with ``model`` and owns copies of the adapters, so
    later training does not change it. The shared weights are never written (the base is
    frozen), so trainer and sampler may run on different threads at once."""
    memo: dict[int, Any] = {}
    for p in model.parameters():
        if not p.requires_grad:
            memo[id(p)] = p
    for b in model.buffers():
        memo[id(b)] = b
    frozen = copy.deepcopy(model, memo)
    for p in frozen.parameters():
        p.grad = None
        p.requires_grad_(False)
    return frozen.eval()


def save_adapter(model: Any, directory: Path, base_model: str | None) -> None:
    """Write ``model``'s adapter to ``directory`` in ``peft``'s layout. ``base_model`` is
    recorded as ``base_model_name_or_path`` (the model directory it adapts)."""
    import safetensors.torch

    config = model.peft_config["default"]
    settings = config.to_dict()
    settings["base_model_name_or_path"] = base_model
    for key, value in list(settings.items()):
        if isinstance(value, set):
            settings[key] = sorted(value)
    (directory / ADAPTER_CONFIG_FILE).write_text(json.dumps(settings, indent=2, sort_keys=True))
    state = {k: v.detach().contiguous().cpu() for k, v in adapter_state(model).items()}
    safetensors.torch.save_file(state, str(directory / ADAPTER_WEIGHTS_FILE))


def has_adapter(directory: Path) -> bool:
    """True when ``directory`` holds an adapter in ``peft``'s layout."""
    return (directory / ADAPTER_WEIGHTS_FILE).is_file()


def adapter_rank(directory: Path) -> int:
    """The rank recorded in ``directory``'s ``adapter_config.json``; raises ValueError
    when it is missing or malformed."""
    try:
        settings = json.loads((directory / ADAPTER_CONFIG_FILE).read_text())
        return int(settings["r"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{str(directory)!r}: no readable {ADAPTER_CONFIG_FILE}: {exc}") from exc


def load_adapter(model: torch.nn.Module, directory: Path) -> None:
    """Load the adapter saved in ``directory`` into the LoRA ``model`` (same layers, same
    rank). Raises ValueError when it does not fit (the message says what differs)."""
    import safetensors.torch
    from peft import set_peft_model_state_dict

    device = next(model.parameters()).device
    state = safetensors.torch.load_file(str(directory / ADAPTER_WEIGHTS_FILE), device=str(device))
    expected = adapter_state(model)
    missing = sorted(set(expected) - set(state))
    extra = sorted(set(state) - set(expected))
    wrong = sorted(k for k in expected if k in state and state[k].shape != expected[k].shape)
    if missing or extra or wrong:
        detail = "; ".join(
            f"{label}: {', '.join(keys[:3])}{' ...' if len(keys) > 3 else ''}"
            for label, keys in (("missing", missing), ("unexpected", extra), ("shape", wrong))
            if keys
        )
        raise ValueError(f"the adapter in {str(directory)!r} does not fit this model ({detail})")
    with torch.no_grad():
        set_peft_model_state_dict(model, state)
