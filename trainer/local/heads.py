"""The output layer where the loss needs it: a training pass's logits, with a gradient, at
the positions the loss weighs; every other position's logprob without one.

A language model's output layer and its log-softmax over the vocabulary cost a training
pass most of its memory and a fifth or more of its work (SmolLM2: a 49,152-row output
layer over a 576-wide body), yet a policy-gradient datum weighs only its sampled tokens
(a few in a prompt of hundreds). ``split_logprobs`` runs the model's body once, then the
output layer twice: with autograd on the positions with a non-zero weight or advantage,
and under ``no_grad`` (in slices) on the rest, so the output's logprobs still cover every
position, as Tinker's do, while the gradient is the same.

Only for models whose logits are the output layer applied to the body's last hidden
state and nothing else (``SPLIT_MODEL_TYPES``); others run whole (``output_split`` says
None).
"""

from __future__ import annotations

from typing import Any

import torch

from trainer.local import lora

SPLIT_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3"})
"""Model types whose logits are ``lm_head(body(ids).last_hidden_state)``, unscaled and
uncapped."""
REST_ROWS = 1024
"""Positions scored at once without a gradient (bounds that slice's logits' memory)."""


def output_split(model: Any) -> tuple[Any, Any] | None:
    """``(body, output layer)`` of ``model`` (through a ``peft`` wrapper: the adapted
    layers), or None when its logits are not plainly the output layer over the body."""
    base = model.get_base_model() if lora.is_lora(model) else model
    config = getattr(base, "config", None)
    if getattr(config, "model_type", None) not in SPLIT_MODEL_TYPES:
        return None
    get_decoder = getattr(base, "get_decoder", None)
    head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    if not callable(get_decoder) or head is None:
        return None
    return get_decoder(), head


def _logprobs(head: Any, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = head(hidden).float()
    return -torch.nn.functional.cross_entropy(logits, targets, reduction="none")


def split_logprobs(
    split: tuple[Any, Any],
    ids: torch.Tensor,
    mask: torch.Tensor,
    targets: torch.Tensor,
    weighed: torch.Tensor,
    compute: Any,
    hidden: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Target logprobs ``[B, T]`` (zero at padding) of a right-padded batch: with a
    gradient where ``weighed`` (``[B, T]`` bool) is set, without one elsewhere; and the
    body's last hidden state ``[B, T, H]`` (for more of the output layer where wanted;
    computed here unless given). ``compute`` is the model's autocast context
    (``LoadedModel.compute``)."""
    body, head = split
    with compute():
        if hidden is None:
            hidden = body(input_ids=ids, attention_mask=mask.long(), use_cache=False)[0]
        live = mask.bool()
        at = weighed & live
        logp_BT = torch.zeros(mask.shape, device=hidden.device).masked_scatter(
            at, _logprobs(head, hidden[at], targets[at])
        )
        rest = live & ~at
        with torch.no_grad():
            flat, goal = hidden.detach()[rest], targets[rest]
            parts = [
                _logprobs(head, flat[i : i + REST_ROWS], goal[i : i + REST_ROWS])
                for i in range(0, flat.shape[0], REST_ROWS)
            ]
        if parts:
            scored = torch.zeros(mask.shape, device=hidden.device)
            logp_BT = logp_BT + scored.masked_scatter(rest, torch.cat(parts))
    return logp_BT, hidden
