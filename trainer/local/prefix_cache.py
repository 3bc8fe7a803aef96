"""What the sampler computed for a prompt, kept for the prompts that start the same way.

The keys and values a causal model computes at position ``t`` depend only on the tokens
``0..t``, so they can be reused by any later prompt that shares those tokens: a seat's next
turn (its prompt extends the previous prompt and answer), and the games of a group (their
system prompt and rules are the same). ``PrefixCache`` keeps them in blocks of ``block``
tokens, each keyed by its tokens and the block before it (so a block is found only by a
prompt that matches it from the first token: exact, no hashing collisions), the least
recently used dropped first once the cache holds more than ``max_bytes``. A prompt reuses
its longest run of whole cached blocks from the start, minus at least one token (the last
prompt token is always computed: its logits start the answer).

Touching a path marks its deepest block first and its first block last, so a block is
always at least as recent as the blocks after it and eviction takes leaves before the
blocks they hang from.

One cache belongs to one set of weights (a sampler snapshot); it is used on the sampler's
worker thread only.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

BLOCK_TOKENS = 16
"""Tokens per cached block (a prompt reuses whole blocks only)."""


@dataclass
class _Block:
    id: int
    kv: torch.Tensor
    """``[layers, 2 (keys, values), heads, block, head_dim]``."""


class PrefixCache:
    """Key/value tensors of token prefixes (see the module docstring), bounded in bytes."""

    def __init__(self, max_bytes: int, block: int = BLOCK_TOKENS) -> None:
        """Hold at most ``max_bytes`` of tensors in blocks of ``block`` tokens. Raises
        ValueError for a negative size or a block below 1."""
        if max_bytes < 0:
            raise ValueError("a prefix cache's size must not be negative")
        if block < 1:
            raise ValueError("a prefix cache's block must be at least 1 token")
        self.max_bytes = max_bytes
        self.block = block
        self.bytes = 0
        """Bytes held now."""
        self.evicted_blocks = 0
        """Blocks dropped to stay within ``max_bytes``."""
        self._blocks: OrderedDict[tuple[int, tuple[int, ...]], _Block] = OrderedDict()
        self._next_id = 1  # 0: the root, before the first block

    def __len__(self) -> int:
        return len(self._blocks)

    def _path(self, tokens: Sequence[int], limit: int) -> list[tuple[int, tuple[int, ...]]]:
        """The keys of the cached blocks that ``tokens[:limit]`` starts with, in order."""
        keys: list[tuple[int, tuple[int, ...]]] = []
        parent, b = 0, self.block
        for start in range(0, limit - b + 1, b):
            key = (parent, tuple(tokens[start : start + b]))
            found = self._blocks.get(key)
            if found is None:
                break
            keys.append(key)
            parent = found.id
        return keys

    def _touch(self, keys: Sequence[tuple[int, tuple[int, ...]]]) -> None:
        for key in reversed(keys):
            self._blocks.move_to_end(key)

    def lookup(self, tokens: Sequence[int]) -> torch.Tensor | None:
        """The cached tensors of the longest whole-block prefix of ``tokens`` that leaves at
        least one token to compute (``[layers, 2, heads, n, head_dim]``), or None."""
        if self.max_bytes == 0:
            return None
        keys = self._path(tokens, len(tokens) - 1)
        if not keys:
            return None
        self._touch(keys)
        return torch.cat([self._blocks[k].kv for k in keys], dim=3)

    def missing_from(self, tokens: Sequence[int]) -> int:
        """The first token not covered by a cached block (a multiple of the block), or
        ``len(tokens)`` when every whole block is cached already."""
        whole = len(tokens) - len(tokens) % self.block
        covered = len(self._path(tokens, whole)) * self.block
        return covered if covered < whole else len(tokens)

    def store(self, tokens: Sequence[int], kv: torch.Tensor, offset: int = 0) -> None:
        """Keep the whole blocks of ``tokens`` that are not cached yet. ``kv`` holds the
        tensors of ``tokens[offset:]`` (``[layers, 2, heads, len - offset, head_dim]``);
        ``offset`` must be a multiple of the block, and the blocks before it cached."""
        if self.max_bytes == 0:
            return
        b = self.block
        whole = len(tokens) - len(tokens) % b
        keys = self._path(tokens, whole)
        parent = self._blocks[keys[-1]].id if keys else 0
        for start in range(len(keys) * b, whole, b):
            if start < offset:
                return  # the blocks before offset were evicted meanwhile: nothing to hang on
            key = (parent, tuple(tokens[start : start + b]))
            piece = kv[:, :, :, start - offset : start - offset + b].clone()
            self._blocks[key] = _Block(self._next_id, piece)
            self.bytes += piece.numel() * piece.element_size()
            parent = self._next_id
            self._next_id += 1
            keys.append(key)
        self._touch(keys)
        self._evict()

    def _evict(self) -> None:
        while self.bytes > self.max_bytes and self._blocks:
            _, block = self._blocks.popitem(last=False)
            self.bytes -= block.kv.numel() * block.kv.element_size()
            self.evicted_blocks += 1

    def clear(self) -> None:
        """Drop every block."""
        self._blocks.clear()
        self.bytes = 0
