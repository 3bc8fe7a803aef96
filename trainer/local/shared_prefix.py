"""A training pass that computes once the prefix several datums of a micro-batch share.

The datums of a self-play step start alike: the same system prompt and rules for every
game of a seat, often the same opening. A causal model's hidden states at the shared
positions are the same for each such datum, so the body runs them once per cluster of
datums that share them, and each datum's own tokens run after them on their keys and
values (expanded to the datums, so the gradient of every datum flows back through the one
prefix pass). The result is the body's last hidden state ``[B, T, H]`` the plain pass
would give (to float rounding), and the loss reads it as before.

A prefix is shared only where no datum of the cluster weighs a position in it (the loss
reads the hidden states of a shared position once, without a per-datum gradient there):
in a policy-gradient datum that is everything before the first answer. Clusters are found
on the datums sorted by their tokens; a shared prefix is at least ``min_shared`` tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

MIN_SHARED_TOKENS = 16
"""The shortest prefix worth a pass of its own."""


@dataclass(frozen=True)
class Cluster:
    """Datums (indices into the micro-batch) that share their first ``length`` tokens."""

    length: int
    rows: tuple[int, ...]


def _common(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    n = min(len(a), len(b), limit)
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def plan(
    rows: Sequence[Sequence[int]], first_weighed: Sequence[int], min_shared: int = MIN_SHARED_TOKENS
) -> list[Cluster]:
    """Clusters of at least two datums sharing at least ``min_shared`` tokens, none of them
    weighed (``first_weighed[i]``: datum i's first weighed position); every shared prefix
    leaves each datum at least one token of its own."""
    order = sorted(range(len(rows)), key=lambda i: list(rows[i]))
    clusters: list[Cluster] = []
    members: list[int] = []
    length = 0

    def close() -> None:
        if len(members) > 1 and length >= min_shared:
            clusters.append(Cluster(length, tuple(members)))

    for i in order:
        own = min(first_weighed[i], len(rows[i]) - 1)
        if own < min_shared:
            continue  # a datum weighed early shares nothing, and splits no cluster
        if members:
            joined = min(length, own, _common(rows[members[0]], rows[i], length))
            if joined >= min_shared:
                members.append(i)
                length = joined
                continue
            close()
        members, length = [i], own
    close()
    return clusters


def shared_hidden(
    body: Any,
    compute: Callable[[], Any],
    rows: Sequence[list[int]],
    clusters: Sequence[Cluster],
    pad: int,
    device: torch.device,
) -> torch.Tensor:
    """The body's last hidden state ``[B, T, H]`` of ``rows`` (right-padded to the longest;
    zeros at padding), each cluster's prefix computed once (see the module docstring)."""
    from transformers import DynamicCache

    cluster_of = [-1] * len(rows)
    own_start = [0] * len(rows)
    for c, cluster in enumerate(clusters):
        for i in cluster.rows:
            cluster_of[i], own_start[i] = c, cluster.length
    width = max(c.length for c in clusters)
    pre_ids = torch.full((len(clusters), width), pad, dtype=torch.long)
    pre_mask = torch.zeros(len(clusters) + 1, width, dtype=torch.long)  # last row: no prefix
    for c, cluster in enumerate(clusters):
        pre_ids[c, : cluster.length] = torch.tensor(rows[cluster.rows[0]][: cluster.length])
        pre_mask[c, : cluster.length] = 1
    pre_ids, pre_mask = pre_ids.to(device), pre_mask.to(device)
    with compute():
        out = body(input_ids=pre_ids, attention_mask=pre_mask[:-1], use_cache=True)
    pre_hidden, cache = out[0], out.past_key_values
    pick = torch.tensor([c if c >= 0 else len(clusters) for c in cluster_of], device=device)
    layers = []
    for layer in cache.layers:
        kv = []
        for t in (layer.keys, layer.values):
            padded = torch.cat([t, t.new_zeros((1, *t.shape[1:]))])  # a row of no prefix
            kv.append(padded.index_select(0, pick))
        layers.append((kv[0], kv[1]))
    tails = [r[s:] for r, s in zip(rows, own_start, strict=True)]
    tail_width = max(len(t) for t in tails)
    ids = torch.tensor([t + [pad] * (tail_width - len(t)) for t in tails], device=device)
    tail_mask = torch.tensor(
        [[1] * len(t) + [0] * (tail_width - len(t)) for t in tails], device=device
    )
    mask = torch.cat([pre_mask.index_select(0, pick), tail_mask], dim=1)
    starts = torch.tensor(own_start, device=device)[:, None]
    positions = starts + torch.arange(tail_width, device=device)[None, :]
    with compute():
        tail_hidden = body(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=DynamicCache(ddp_cache_data=layers),
            use_cache=True,
        )[0]
    full = max(len(r) for r in rows)
    pieces = []
    for i, row in enumerate(rows):
        parts = [tail_hidden[i, : len(row) - own_start[i]]]
        if cluster_of[i] >= 0:
            parts.insert(0, pre_hidden[cluster_of[i], : own_start[i]])
        hidden = torch.cat(parts)
        pieces.append(torch.nn.functional.pad(hidden, (0, 0, 0, full - len(row))))
    return torch.stack(pieces)


def saved_tokens(clusters: Sequence[Cluster]) -> int:
    """Tokens a plan computes fewer than the plain pass (each shared prefix once)."""
    return sum(c.length * (len(c.rows) - 1) for c in clusters)


def pass_tokens(
    rows: Sequence[Sequence[int]], first_weighed: Sequence[int], min_shared: int = MIN_SHARED_TOKENS
) -> int:
    """Padded tokens the two passes of ``shared_hidden`` hold for ``rows`` (the plain pass
    holds rows x the longest): the prefixes, then every row's own tokens."""
    clusters = plan(rows, first_weighed, min_shared)
    own = dict.fromkeys(range(len(rows)), 0)
    for c in clusters:
        for i in c.rows:
            own[i] = c.length
    tails = max(len(r) - own[i] for i, r in enumerate(rows))
    prefixes = len(clusters) * max((c.length for c in clusters), default=0)
    return len(rows) * tails + prefixes


def micro_batches(
    rows: Sequence[Sequence[int]], first_weighed: Sequence[int], size: int, tokens: int | None
) -> list[list[int]]:
    """Indices of ``rows`` in micro-batches of at most ``size`` rows and (when given)
    ``tokens`` padded tokens as ``shared_hidden`` runs them (``pass_tokens``): the rows
    sorted by their tokens, so that rows which start alike share a micro-batch. A row over
    the bound alone is a micro-batch of its own."""
    order = sorted(range(len(rows)), key=lambda i: list(rows[i]))
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        trial = [*current, i]
        cost = pass_tokens([rows[j] for j in trial], [first_weighed[j] for j in trial])
        if current and (len(trial) > size or (tokens is not None and cost > tokens)):
            batches.append(current)
            trial = [i]
        current = trial
    if current:
        batches.append(current)
    return batches
