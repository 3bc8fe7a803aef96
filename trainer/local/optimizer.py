"""AdamW for the local training client: Tinker's Adam parameters checked, the optimizer
built from them, one step (the gradients' global norm, clipping, the update), and what the
weights, gradients and optimizer state hold in memory."""

from __future__ import annotations

import torch
from tinker import types

OPTIMIZER_STATE_KEYS = ("exp_avg", "exp_avg_sq")
"""AdamW's per-parameter state tensors (``LocalTrainingClient.memory()`` counts their
bytes)."""


def check_adam(
    optim_params: types.OptimParams | None, adam_params: types.AdamParams | None
) -> types.AdamParams:
    """The Adam parameters of ``optim_step``, given as ``optim_params`` or ``adam_params``
    (Tinker's two spellings). Raises ValueError for both or neither given, an optimizer
    other than Adam, or a negative learning rate, eps or clip norm."""
    if (optim_params is None) == (adam_params is None):
        raise ValueError("give the optimizer parameters once: optim_params or adam_params")
    params = optim_params if optim_params is not None else adam_params
    if not isinstance(params, types.AdamParams):
        raise ValueError(f"the local backend runs AdamW; got {type(params).__name__}")
    if params.learning_rate < 0 or params.eps < 0:
        raise ValueError("learning_rate and eps must not be negative")
    if params.grad_clip_norm < 0:
        raise ValueError("grad_clip_norm must not be negative (0 turns clipping off)")
    return params


def new_optimizer(
    parameters: list[torch.nn.Parameter], adam: types.AdamParams
) -> torch.optim.AdamW:
    """AdamW over ``parameters`` with ``adam``'s settings."""
    return torch.optim.AdamW(
        parameters,
        lr=adam.learning_rate,
        betas=(adam.beta1, adam.beta2),
        eps=adam.eps,
        weight_decay=adam.weight_decay,
    )


def adam_step(
    optimizer: torch.optim.AdamW, parameters: list[torch.nn.Parameter], adam: types.AdamParams
) -> float:
    """Apply the gradients of ``parameters`` with ``adam``'s settings (they may change from
    step to step), clipped to ``adam.grad_clip_norm`` when it is above 0, then zero them;
    the gradients' global norm before clipping (0 without gradients)."""
    for group in optimizer.param_groups:
        group["lr"] = adam.learning_rate
        group["betas"] = (adam.beta1, adam.beta2)
        group["eps"] = adam.eps
        group["weight_decay"] = adam.weight_decay
    grads = [p.grad for p in parameters if p.grad is not None]
    grad_norm = (
        float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))
        if grads
        else 0.0
    )
    if adam.grad_clip_norm > 0 and grads:
        torch.nn.utils.clip_grad_norm_(parameters, adam.grad_clip_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return grad_norm


def state_bytes(optimizer: torch.optim.Optimizer | None) -> int:
    """Bytes of the tensors in ``optimizer``'s state (its moments and step counters)."""
    total = 0
    if optimizer is not None:
        for state in optimizer.state.values():
            for value in state.values():
                if isinstance(value, torch.Tensor):
                    total += value.numel() * value.element_size()
    return total


def memory_counts(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer | None
) -> dict[str, int]:
    """What ``model`` and its training state hold (``LocalTrainingClient.memory``): every
    weight (a tied weight once) and the trainable ones, in numbers and bytes, the gradients
    held now and ``optimizer``'s state, in bytes."""
    params = list({id(p): p for p in model.parameters()}.values())
    trainable = [p for p in params if p.requires_grad]
    return {
        "parameters": sum(p.numel() for p in params),
        "parameter_bytes": sum(p.numel() * p.element_size() for p in params),
        "trainable_parameters": sum(p.numel() for p in trainable),
        "trainable_bytes": sum(p.numel() * p.element_size() for p in trainable),
        "gradient_bytes": sum(
            p.grad.numel() * p.grad.element_size() for p in trainable if p.grad is not None
        ),
        "optimizer_state_bytes": state_bytes(optimizer),
    }
