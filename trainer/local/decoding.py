"""The local sampler's model passes: a batch of rows prefilled (prompts of similar length
grouped, their KV caches joined), decoded token by token on the KV cache until every row
stops, and prompts scored (``compute_logprobs``). It all runs on the sampler's worker
thread (``trainer.local.batcher``).
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tinker import types

from trainer.local.config import LoadedModel
from trainer.local.draws import inverse_cdf, truncate, uniform
from trainer.local.prefix_cache import PrefixCache
from trainer.local.sample_requests import Row
from trainer.local.shared_prefix import plan

_GROUP_MIN_FILL = 0.8
_GROUP_MAX_PAD = 32
"""Prefill groups: a prompt joins the group of the next longer prompts when it is at
least ``_GROUP_MIN_FILL`` of the group's longest, or at most ``_GROUP_MAX_PAD`` tokens
shorter (a separate forward pass costs more than a little padding)."""


@dataclass
class SamplerStats:
    """Counters of a sampling client's work (read them to check that requests batch)."""

    forward_passes: int = 0
    """Model calls made (one prefill per batch, then one per decoding step)."""
    batches: int = 0
    """Batches decoded."""
    sequences: int = 0
    """Sequences sampled."""
    sampled_tokens: int = 0
    """Tokens sampled, over all sequences."""
    largest_batch: int = 0
    """Most sequences decoded together."""
    prompt_tokens: int = 0
    """Prompt tokens of the sequences sampled."""
    tokens_computed: int = 0
    """Prompt tokens the model computed (prefill, padding not counted)."""
    tokens_reused: int = 0
    """Prompt tokens taken from the prefix cache instead (``trainer.local.prefix_cache``)."""


class Decoder:
    """Runs a sampler's model (see the module docstring): next tokens as
    ``LocalSamplingClient`` describes them, finished sequences set on their requests'
    futures, its work counted in ``stats``."""

    def __init__(
        self, loaded: LoadedModel, *, name: str, seed: int, prefix_cache_mb: int = 0
    ) -> None:
        """Decode with ``loaded.model``; ``name`` prefixes the sequence ids, ``seed`` seeds
        the draws of unseeded requests; ``prefix_cache_mb`` bounds the prefix cache (0: no
        reuse)."""
        self.prefix = PrefixCache(prefix_cache_mb << 20) if prefix_cache_mb > 0 else None
        """What earlier prompts computed, for the prompts that start the same way."""
        self.loaded = loaded
        self.model: Any = loaded.model
        self.name = name
        self.stats = SamplerStats()
        self.eos_ids = frozenset(loaded.eos_token_ids)
        self.pad_id = loaded.pad_token_id
        self.device = next(self.model.parameters()).device
        self.rng = torch.Generator(device=self.device)
        self.rng.manual_seed(seed)
        self._sequence_ids = itertools.count()
        # A peft model's forward passes these through to its base: ask the base.
        get_base = getattr(self.model, "get_base_model", None)
        base = get_base() if callable(get_base) else self.model
        params = inspect.signature(base.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self._keep_last_logits = "logits_to_keep" in params
        self.joinable_cache = True
        """False once a prefill cache turned out not to be a plain ``DynamicCache``."""

    def _forward(
        self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any
    ) -> tuple[torch.Tensor, Any]:
        kwargs: dict[str, Any] = {
            "input_ids": ids,
            "attention_mask": mask,
            "position_ids": positions,
            "use_cache": True,
        }
        if cache is not None:
            kwargs[self._cache_arg] = cache
        if self._keep_last_logits:
            kwargs["logits_to_keep"] = 1
        with self.loaded.compute():
            out = self.model(**kwargs)
        self.stats.forward_passes += 1
        return out.logits[:, -1, :].float(), getattr(out, self._cache_arg)

    def _prefill_group(
        self, rows: Sequence[Row], reused: Sequence[torch.Tensor | None], width: int
    ) -> tuple[torch.Tensor, Any, torch.Tensor]:
        """Prefill ``rows``: the last ``width`` tokens of each prompt computed (left-padded
        where a prompt is shorter), the tokens before them taken from ``reused`` (each row's
        cached prefix, long enough for that: see ``_prefill``). Last logits, cache, mask."""
        pad = self.pad_id
        lengths = [len(r.request.tokens) for r in rows]
        kept = [max(n - width, 0) for n in lengths]  # tokens taken from the cache
        computed = [n - k for n, k in zip(lengths, kept, strict=True)]
        front = max(kept)
        ids = torch.tensor(
            [
                [pad] * (width - m) + r.request.tokens[k:]
                for r, k, m in zip(rows, kept, computed, strict=True)
            ],
            device=self.device,
        )
        mask = torch.tensor(
            [
                [0] * (front - k) + [1] * k + [0] * (width - m) + [1] * m
                for k, m in zip(kept, computed, strict=True)
            ],
            device=self.device,
        )
        # Left padding: each row's positions count its own tokens from 0.
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, front:]
        cache = None
        if front:
            cache = self._joined_prefix(reused, kept, front)
        self.stats.tokens_computed += sum(computed)
        self.stats.tokens_reused += sum(kept)
        logits, cache = self._forward(ids, mask, positions, cache)
        return logits, cache, mask

    def _joined_prefix(
        self, reused: Sequence[torch.Tensor | None], kept: Sequence[int], front: int
    ) -> Any:
        """A ``DynamicCache`` of each row's first ``kept`` cached tokens, left-padded to
        ``front``."""
        from transformers import DynamicCache

        parts: list[torch.Tensor | None] = []
        for kv, k in zip(reused, kept, strict=True):
            if k == 0 or kv is None:
                parts.append(None)
                continue
            parts.append(torch.nn.functional.pad(kv[:, :, :, :k], (0, 0, front - k, 0)))
        like = next(p for p in parts if p is not None)
        stacked = torch.stack([p if p is not None else torch.zeros_like(like) for p in parts], 2)
        # stacked: [layers, 2, rows, heads, front, head_dim]
        return DynamicCache(ddp_cache_data=[(layer[0], layer[1]) for layer in stacked])

    def _prefill(self, rows: list[Row]) -> tuple[list[Row], torch.Tensor, Any, torch.Tensor]:
        """Prefill a batch: rows (possibly reordered), last logits, cache, attention mask.

        Each prompt reuses the longest prefix the prefix cache holds for it. Rows whose
        tokens left to compute differ a lot are prefilled in groups of similar length (less
        padding to compute), then their caches are left-padded to one width and joined, so
        decoding runs on the whole batch. Caches that cannot be joined safely (not a plain
        ``DynamicCache``) get one padded prefill of whole prompts instead.
        """
        self.stats.prompt_tokens += sum(len(r.request.tokens) for r in rows)
        prefix = self.prefix if self.joinable_cache else None
        if prefix is not None:
            self._compute_shared_starts(rows, prefix)
        found = {id(r): prefix.lookup(r.request.tokens) if prefix else None for r in rows}

        def todo(r: Row) -> int:
            kv = found[id(r)]
            return len(r.request.tokens) - (kv.shape[3] if kv is not None else 0)

        rows = sorted(rows, key=lambda r: -todo(r))
        groups: list[list[Row]] = []
        for row in rows:
            n = todo(row)
            if groups:
                longest = todo(groups[-1][0])
                if n >= _GROUP_MIN_FILL * longest or longest - n <= _GROUP_MAX_PAD:
                    groups[-1].append(row)
                    continue
            groups.append([row])
        if len(groups) == 1 or not self.joinable_cache:  # one pass (found: all None)
            width = todo(rows[0])
            logits, cache, mask = self._prefill_group(rows, [found[id(r)] for r in rows], width)
            return rows, logits, cache, mask
        parts = [self._prefill_group(g, [found[id(r)] for r in g], todo(g[0])) for g in groups]
        rows = [r for g in groups for r in g]
        if not all(is_plain_dynamic_cache(cache) for _, cache, _ in parts):
            self.joinable_cache = False
            rows = sorted(rows, key=lambda r: -len(r.request.tokens))
            width = len(rows[0].request.tokens)
            logits, cache, mask = self._prefill_group(rows, [None] * len(rows), width)
            return rows, logits, cache, mask
        width = max(m.shape[1] for _, _, m in parts)
        base = parts[0][1]
        for i, layer in enumerate(base.layers):
            for name in ("keys", "values"):
                joined = [
                    torch.nn.functional.pad(
                        getattr(cache.layers[i], name), (0, 0, width - m.shape[1], 0)
                    )
                    for _, cache, m in parts
                ]
                setattr(layer, name, torch.cat(joined, dim=0))
        mask = torch.cat(
            [torch.nn.functional.pad(m, (width - m.shape[1], 0)) for _, _, m in parts], dim=0
        )
        logits = torch.cat([lg for lg, _, _ in parts], dim=0)
        return rows, logits, base, mask

    def _compute_shared_starts(self, rows: Sequence[Row], prefix: PrefixCache) -> None:
        """Rows of one batch that start alike (the games of a step begin with the same
        rules) find nothing cached yet: compute each shared start once, whole blocks of
        it, into the prefix cache, so that every row reuses it. Its tokens count as
        computed (and not as reused by the first row)."""
        tokens = [r.request.tokens for r in rows]
        for cluster in plan(tokens, [len(t) - 1 for t in tokens], min_shared=prefix.block):
            shared = tokens[cluster.rows[0]][: cluster.length - cluster.length % prefix.block]
            if prefix.missing_from(shared) >= len(shared):
                continue  # cached already
            ids = torch.tensor([shared], device=self.device)
            mask = torch.ones_like(ids)
            positions = torch.arange(len(shared), device=self.device)[None, :]
            _, cache = self._forward(ids, mask, positions, None)
            if not is_plain_dynamic_cache(cache):
                self.joinable_cache = False
                return
            kv = torch.stack(
                [torch.stack([layer.keys[0], layer.values[0]]) for layer in cache.layers]
            )
            prefix.store(shared, kv)
            self.stats.tokens_computed += len(shared)
            self.stats.tokens_reused -= len(shared)

    def _remember(self, row: Row, cache: Any, mask_row: torch.Tensor, j: int) -> None:
        """Keep the keys and values of a finished row's prompt and answer (all but its last
        token, which was never fed) in the prefix cache, where whole blocks are missing."""
        prefix = self.prefix
        if prefix is None or not self.joinable_cache or not is_plain_dynamic_cache(cache):
            return
        tokens = row.request.tokens + row.tokens[:-1]
        start = prefix.missing_from(tokens)
        whole = len(tokens) - len(tokens) % prefix.block
        if start >= whole:
            return
        columns = mask_row.nonzero().squeeze(1)
        if columns.numel() != len(tokens):  # not this row's layout: keep nothing
            return
        columns = columns[start:whole]
        kv = torch.stack(
            [
                torch.stack([layer.keys[j][:, columns], layer.values[j][:, columns]])
                for layer in cache.layers
            ]
        )
        prefix.store(tokens[:whole], kv, offset=start)

    @torch.inference_mode()
    def generate(self, rows: list[Row]) -> None:
        """Sample ``rows`` together until each one stops; each request's future gets its
        response when its last row is done."""
        stats = self.stats
        stats.batches += 1
        stats.largest_batch = max(stats.largest_batch, len(rows))
        rows, logits, cache, mask = self._prefill(rows)
        next_pos = mask.sum(dim=1, keepdim=True)  # each row's own next position
        can_prune = hasattr(cache, "batch_select_indices")
        batch: list[Row | None] = list(rows)  # None: finished, still in the batch
        while True:
            chosen, logprobs = self._choose(logits, batch)
            chosen_list, logprob_list = chosen.tolist(), logprobs.tolist()
            for j, row in enumerate(batch):
                if row is None:
                    continue
                token = chosen_list[j]
                row.tokens.append(token)
                row.logprobs.append(logprob_list[j])
                reason = self._stop_reason(row, token)
                if reason is not None:
                    self._remember(row, cache, mask[j], j)
                    self._finish(row, reason)
                    batch[j] = None
            alive = [j for j, row in enumerate(batch) if row is not None]
            if not alive:
                return
            if can_prune and len(alive) < len(batch):
                index = torch.tensor(alive, device=self.device)
                cache.batch_select_indices(index)
                mask, next_pos, chosen = mask[index], next_pos[index], chosen[index]
                batch = [batch[j] for j in alive]
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
            logits, cache = self._forward(chosen[:, None], mask, next_pos, cache)
            next_pos = next_pos + 1

    def _choose(
        self, logits: torch.Tensor, batch: Sequence[Row | None]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Next token per row and its logprob (``LocalSamplingClient`` says which)."""
        chosen = logits.argmax(dim=-1)  # greedy rows, and finished rows still in the batch
        sampled = [
            (j, row)
            for j, row in enumerate(batch)
            if row is not None and row.request.params.temperature > 0
        ]
        if not sampled:
            logp = torch.log_softmax(logits, dim=-1)
            return chosen, logp.gather(1, chosen[:, None]).squeeze(1)
        temps = [1.0] * len(batch)
        for j, row in sampled:
            temps[j] = row.request.params.temperature
        scaled = logits / torch.tensor(temps, device=logits.device)[:, None]
        logp = torch.log_softmax(scaled, dim=-1)
        index = torch.tensor([j for j, _ in sampled], device=logits.device)
        candidates = truncate(
            scaled[index],
            [row.request.params.top_k for _, row in sampled],
            [row.request.params.top_p for _, row in sampled],
        )
        # One inverse-CDF draw for the whole batch: each row's uniform comes from its own
        # stream (seeded requests: a hash of seed, sample index and position, so a row
        # draws the same whatever its neighbours) or from the sampler's generator.
        uniforms = torch.rand(len(sampled), generator=self.rng, device=self.device)
        seeded = [(k, row) for k, (_, row) in enumerate(sampled) if row.stream is not None]
        if seeded:
            values = [uniform(row.stream, len(row.tokens)) for _, row in seeded]  # type: ignore[arg-type]
            at = torch.tensor([k for k, _ in seeded], device=self.device)
            uniforms[at] = torch.tensor(values, device=self.device)
        chosen[index] = inverse_cdf(candidates, uniforms)
        return chosen, logp.gather(1, chosen[:, None]).squeeze(1)

    def _stop_reason(self, row: Row, token: int) -> types.StopReason | None:
        params = row.request.params
        if token in self.eos_ids or token in params.stop_ids:
            return "stop"
        if params.stop_strings:
            text = self.loaded.tokenizer.decode(row.tokens)
            if any(s in text for s in params.stop_strings):
                return "stop"
        if len(row.tokens) >= params.max_tokens:
            return "length"
        return None

    def _finish(self, row: Row, reason: types.StopReason) -> None:
        request = row.request
        request.sequences[row.index] = types.SampledSequence(
            stop_reason=reason,
            sequence_id=f"{self.name}-{next(self._sequence_ids)}",
            tokens_np=np.asarray(row.tokens, dtype=np.int32),
            logprobs_np=np.asarray(row.logprobs, dtype=np.float32),
        )
        self.stats.sequences += 1
        self.stats.sampled_tokens += len(row.tokens)
        request.remaining -= 1
        if request.remaining == 0 and not request.future.done():
            sequences = [s for s in request.sequences if s is not None]
            request.future.set_result(types.SampleResponse(sequences=sequences))

    @torch.inference_mode()
    def score(
        self, requests: list[tuple[list[int], Future[list[float | None]]]], batch_size: int
    ) -> None:
        """Prompt logprobs for ``compute_logprobs`` requests, up to ``batch_size`` prompts
        a forward pass."""
        live = [(t, f) for t, f in requests if f.set_running_or_notify_cancel()]
        live.sort(key=lambda r: len(r[0]))
        for start in range(0, len(live), batch_size):
            chunk = live[start : start + batch_size]
            try:
                width = max(len(t) for t, _ in chunk)
                ids = torch.tensor(
                    [t + [self.pad_id] * (width - len(t)) for t, _ in chunk], device=self.device
                )
                mask = torch.tensor(
                    [[1] * len(t) + [0] * (width - len(t)) for t, _ in chunk],
                    device=self.device,
                )
                with self.loaded.compute():
                    out = self.model(input_ids=ids, attention_mask=mask, use_cache=False)
                logits = out.logits.float()
                self.stats.forward_passes += 1
                logp = torch.log_softmax(logits[:, :-1], dim=-1)
                picked = logp.gather(2, ids[:, 1:, None]).squeeze(2).tolist()
                for (tokens, future), row in zip(chunk, picked, strict=True):
                    values: list[float | None] = [None, *row[: len(tokens) - 1]]
                    future.set_result(values)
            except Exception as exc:
                for _, future in chunk:
                    if not future.done():
                        future.set_exception(exc)


def is_plain_dynamic_cache(cache: Any) -> bool:
    """True for a ``DynamicCache`` whose layers all hold ``[batch, heads, time, dim]``
    ``keys``/``values`` tensors (safe to pad and join along batch)."""
    if type(cache).__name__ != "DynamicCache":
        return False
    layers = getattr(cache, "layers", None)
    if not layers:
        return False
    for layer in layers:
        if type(layer).__name__ != "DynamicLayer":
            return False
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if not isinstance(keys, torch.Tensor) or not isinstance(values, torch.Tensor):
            return False
        if keys.dim() != 4 or values.dim() != 4:
            return False
    return True
