"""The training client's forward pass: datums checked and turned into examples, examples
right-padded into micro-batches, the targets' logprobs and the loss over each (and its
gradient); and gradient checkpointing (activations recomputed in the backward pass)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from tinker import types

from trainer.local import lora, shared_prefix
from trainer.local.config import LoadedModel
from trainer.local.heads import output_split, split_logprobs
from trainer.local.losses import REQUIRED_INPUTS, token_losses
from trainer.local.magnet import Regularizer

T = TypeVar("T")


@dataclass
class Example:
    """One checked datum, as tensors."""

    tokens: list[int]
    targets: torch.Tensor
    """The target token at each position (position t predicts target t)."""
    inputs: dict[str, torch.Tensor]
    """The loss's other inputs (``weights``, ``logprobs``, ``advantages``; ``mask``, the
    answer tokens, where the datum carries it), one value a position, as floats."""


def examples(
    data: Sequence[types.Datum], loss_fn: str, *, context_length: int, vocab_size: int
) -> list[Example]:
    """``data`` checked for ``loss_fn`` and turned into examples. Raises ValueError for no
    data, an empty or too long datum, a missing loss input, inputs that do not align with
    the tokens, or token ids outside ``[0, vocab_size)``."""
    if not data:
        raise ValueError("data is empty: pass at least one Datum")
    required = REQUIRED_INPUTS[loss_fn]
    found = []
    for i, datum in enumerate(data):
        tokens = datum.model_input.to_ints()
        n = len(tokens)
        if n == 0:
            raise ValueError(f"datum {i}: model_input is empty")
        if n > context_length:
            raise ValueError(
                f"datum {i}: {n} tokens exceed the model's context_length ({context_length})"
            )
        missing = [k for k in required if k not in datum.loss_fn_inputs]
        if missing:
            raise ValueError(
                f"datum {i}: loss {loss_fn!r} needs loss_fn_inputs "
                f"{', '.join(required)}; missing {', '.join(missing)}"
            )
        tensors: dict[str, torch.Tensor] = {}
        for key in ("target_tokens", "weights", "logprobs", "advantages", "mask"):
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
        if int(targets.min()) < 0 or int(targets.max()) >= vocab_size:
            raise ValueError(f"datum {i}: target_tokens must be in [0, {vocab_size})")
        if min(tokens) < 0 or max(tokens) >= vocab_size:
            raise ValueError(f"datum {i}: model_input ids must be in [0, {vocab_size})")
        if loss_fn == "cross_entropy" and "weights" not in tensors:
            tensors["weights"] = torch.ones(n)
        inputs = {k: v.float() for k, v in tensors.items()}
        found.append(Example(tokens, targets, inputs))
    return found


def padded(
    rows: Sequence[list[int]], pad: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token rows right-padded into ids ``[B, T]`` and their attention mask (floats)."""
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
    mask = torch.zeros(len(rows), width)
    for i, r in enumerate(rows):
        mask[i, : len(r)] = 1.0
    return ids.to(device), mask.to(device)


def position_logits(
    loaded: LoadedModel, ids: torch.Tensor, mask: torch.Tensor, at: torch.Tensor
) -> torch.Tensor:
    """The logits ``[N, V]`` at the ``at`` positions (``[B, T]`` bool) of a padded batch
    (the output layer only there, where the model allows it)."""
    split = output_split(loaded.model)
    with loaded.compute():
        if split is not None:
            body, head = split
            hidden = body(input_ids=ids, attention_mask=mask.long(), use_cache=False)[0]
            return head(hidden[at]).float()
        out = loaded.model(input_ids=ids, attention_mask=mask.long(), use_cache=False)
        return out.logits[at].float()


def score_positions(
    loaded: LoadedModel,
    tokens: Sequence[list[int]],
    positions: Sequence[torch.Tensor],
    device: torch.device,
) -> list[torch.Tensor]:
    """Without a gradient: each datum's log-probabilities ``[N_i, V]`` at its marked
    positions (``positions[i]``, ``[T_i]`` bool)."""
    ids, mask = padded(tokens, loaded.pad_token_id, device)
    at = torch.zeros(mask.shape, dtype=torch.bool, device=device)
    for i, row in enumerate(positions):
        at[i, : row.numel()] = row.to(device)
    with torch.no_grad():
        logp = torch.log_softmax(position_logits(loaded, ids, mask, at), dim=-1)
    return list(torch.split(logp, at.sum(1).tolist()))


def batch_loss(
    loaded: LoadedModel,
    chunk: list[Example],
    loss_fn: str,
    settings: Mapping[str, float],
    device: torch.device,
    regularizer: Regularizer | None = None,
    counts: dict[str, float] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Target logprobs ``[B, T]`` and the summed loss of ``chunk``, right-padded into one
    batch and run through ``loaded.model``. With a ``regularizer`` and datums that mark
    their answer tokens (``mask``), the loss adds its exact KL terms there. With
    ``counts`` (a model whose output layer splits off, with a gradient), datums that start
    alike share one pass over their common prefix (``trainer.local.shared_prefix``), and
    ``counts`` gets the tokens computed and reused."""
    ids, mask = padded([e.tokens for e in chunk], loaded.pad_token_id, device)
    width = ids.shape[1]
    targets = torch.zeros(len(chunk), width, dtype=torch.long)
    keys = set().union(*(e.inputs for e in chunk))
    inputs = {k: torch.zeros(len(chunk), width) for k in keys}
    for i, e in enumerate(chunk):
        n = len(e.tokens)
        targets[i, :n] = e.targets
        for k, v in e.inputs.items():
            inputs[k][i, :n] = v
    targets = targets.to(device)
    inputs = {k: v.to(device) for k, v in inputs.items()}
    answers = None
    if regularizer is not None and "mask" in inputs:
        answers = (inputs["mask"] > 0) & mask.bool()
        # Before the pass that keeps a graph: autograd holds the parameters themselves.
        with regularizer.magnet.swapped(), torch.no_grad():
            magnet_logits = position_logits(loaded, ids, mask, answers)
    split = output_split(loaded.model) if torch.is_grad_enabled() else None
    if split is not None:  # the output layer's gradient only where the loss weighs
        weighed = inputs["weights" if loss_fn == "cross_entropy" else "advantages"] != 0
        if answers is not None:
            weighed = weighed | answers
        hidden = None
        if counts is not None:
            hidden = _shared_hidden(loaded, split[0], chunk, weighed, device, counts)
        logp_BT, hidden = split_logprobs(split, ids, mask, targets, weighed, loaded.compute, hidden)
        logits_at = (lambda at: split[1](hidden[at]).float()) if answers is not None else None
    else:
        with loaded.compute():
            out = loaded.model(input_ids=ids, attention_mask=mask.long(), use_cache=False)
        logits = out.logits.float()
        logp_BT = -torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), targets.flatten(), reduction="none"
        ).view(len(chunk), width)
        logits_at = lambda at: logits[at]  # noqa: E731
    loss = (token_losses(loss_fn, logp_BT, inputs, settings) * mask).sum()
    if regularizer is not None and answers is not None and logits_at is not None:
        with loaded.compute():
            policy_logits = logits_at(answers)
        loss = loss + regularizer.penalty(
            [e.tokens for e in chunk], answers, policy_logits, magnet_logits
        )
    return logp_BT * mask, loss


def _shared_hidden(
    loaded: LoadedModel,
    body: Any,
    chunk: list[Example],
    weighed: torch.Tensor,
    device: torch.device,
    counts: dict[str, float],
) -> torch.Tensor | None:
    """The body's hidden states of ``chunk`` with shared prefixes computed once, or None
    when no datums share one; counts the tokens either way."""
    rows = [e.tokens for e in chunk]
    first = [_first_true(weighed[i, : len(r)]) for i, r in enumerate(rows)]
    clusters = shared_prefix.plan(rows, first)
    total = sum(len(r) for r in rows)
    saved = shared_prefix.saved_tokens(clusters)
    counts["tokens_computed:sum"] = counts.get("tokens_computed:sum", 0.0) + total - saved
    counts["tokens_reused:sum"] = counts.get("tokens_reused:sum", 0.0) + saved
    if not clusters:
        return None
    return shared_prefix.shared_hidden(
        body, loaded.compute, rows, clusters, loaded.pad_token_id, device
    )


def shares_prefix(model: Any, checkpointed: Sequence[torch.nn.Module], config: Any) -> bool:
    """Whether a training pass of ``model`` computes the datums' shared prefixes once: asked
    for (``config.train_shared_prefix``), its output layer splits off
    (``trainer.local.heads``) and no layer is checkpointed (those keep no cache)."""
    return bool(config.train_shared_prefix) and not checkpointed and output_split(model) is not None


def _first_true(row: torch.Tensor) -> int:
    hits = row.nonzero()
    return int(hits[0, 0]) if hits.numel() else int(row.numel())


def micro_batch_tokens(model: Any, budget_mb: int) -> int:
    """How many padded tokens one forward/backward pass of ``model`` may hold within about
    ``budget_mb`` MiB: per token, its logits, their log-softmax and gradients (4 x
    vocabulary x 4 bytes) and its activations (32 x layers x hidden size x 4 bytes); see
    ``LocalModelConfig.train_micro_batch_mb``."""
    config = getattr(model, "config", None)
    text = (
        config.get_text_config()
        if config is not None and hasattr(config, "get_text_config")
        else config
    )
    vocab = int(model.get_output_embeddings().weight.shape[0])
    layers = _first_int(text, ("num_hidden_layers", "n_layer", "num_layers"), 1)
    hidden = _first_int(text, ("hidden_size", "n_embd", "d_model"), 1)
    per_token = 4 * (4 * vocab + 32 * layers * hidden)
    return max(1, budget_mb * 2**20 // per_token)


def _first_int(config: Any, names: Sequence[str], default: int) -> int:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return default


def micro_batches(
    items: Sequence[T], size: int, tokens: int | None, length: Callable[[T], int] | None = None
) -> list[list[T]]:
    """``items`` in order, cut into micro-batches of at most ``size`` items and (when
    given) at most ``tokens`` padded tokens (items x the longest; an item's length is
    ``length(item)``, by default ``len(item.tokens)``, as an ``Example``'s); an item longer
    than ``tokens`` is a micro-batch of its own."""
    measure = length if length is not None else (lambda item: len(item.tokens))
    batches: list[list[T]] = []
    current: list[T] = []
    width = 0
    for item in items:
        wider = max(width, measure(item))
        full = len(current) >= size or (tokens is not None and wider * (len(current) + 1) > tokens)
        if current and full:
            batches.append(current)
            current, wider = [], measure(item)
        current.append(item)
        width = wider
    if current:
        batches.append(current)
    return batches


def run_batches(
    examples: list[Example],
    chunk_loss: Callable[
        [list[Example], dict[str, float] | None], tuple[torch.Tensor, torch.Tensor]
    ],
    *,
    micro_batch_size: int,
    backward: bool,
    checkpointed: list[torch.nn.Module],
    micro_batch_tokens: int | None = None,
    share_prefix: bool = False,
) -> types.ForwardBackwardOutput:
    """``examples`` through ``chunk_loss`` (a micro-batch's target logprobs ``[B, T]`` and
    summed loss, as ``batch_loss``) in micro-batches (``micro_batches``: at most
    ``micro_batch_size`` examples and ``micro_batch_tokens`` padded tokens each); with
    ``backward`` each loss's gradient adds to the accumulated gradients (through the
    ``checkpointed`` layers). With ``share_prefix`` the micro-batches gather examples that
    start alike and ``chunk_loss`` gets a dict to count the tokens computed and reused in
    (``shared_prefix.micro_batches``). The output holds each example's target logprobs (in
    the order given) and ``metrics["loss:sum"]`` (and the counts)."""
    if share_prefix:
        first = [_first_weighed(e) for e in examples]
        rows = [e.tokens for e in examples]
        index = shared_prefix.micro_batches(rows, first, micro_batch_size, micro_batch_tokens)
    else:
        numbered = list(enumerate(examples))
        cut = micro_batches(
            numbered, micro_batch_size, micro_batch_tokens, lambda item: len(item[1].tokens)
        )
        index = [[i for i, _ in chunk] for chunk in cut]
    counts: dict[str, float] | None = {} if share_prefix else None
    outputs: list[dict[str, types.TensorData] | None] = [None] * len(examples)
    total = 0.0
    for positions in index:
        chunk = [examples[i] for i in positions]
        with torch.set_grad_enabled(backward), checkpointing(checkpointed, backward):
            logp_BT, loss = chunk_loss(chunk, counts)
            if backward:
                loss.backward()
        total += float(loss.detach())
        logp_BT = logp_BT.detach().cpu()
        for row, (i, example) in enumerate(zip(positions, chunk, strict=True)):
            logprobs = logp_BT[row, : len(example.tokens)].clone()
            outputs[i] = {"logprobs": types.TensorData.from_torch(logprobs)}
    return types.ForwardBackwardOutput(
        loss_fn_output_type="ArrayRecord",
        loss_fn_outputs=[o for o in outputs if o is not None],
        metrics={"loss:sum": total, **(counts or {})},
    )


def _first_weighed(example: Example) -> int:
    """The first position where any of the example's loss inputs is non-zero."""
    n = len(example.tokens)
    live = torch.zeros(n, dtype=torch.bool)
    for key in ("weights", "advantages", "mask"):
        if key in example.inputs:
            live |= example.inputs[key] != 0
    return _first_true(live)


def enable_gradient_checkpointing(model: Any) -> list[torch.nn.Module]:
    """Turn on transformers' gradient checkpointing; the layers it applies to. Raises
    ValueError for a model that does not support it."""
    base = model.get_base_model() if lora.is_lora(model) else model
    if not getattr(base, "supports_gradient_checkpointing", False):
        raise ValueError(f"{type(base).__name__} does not support gradient checkpointing")
    base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return [m for m in base.modules() if getattr(m, "gradient_checkpointing", False) is True]


class checkpointing:
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
