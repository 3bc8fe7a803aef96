"""Token policies: a model's sampling client, and baselines with no model involved."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable
from typing import Protocol

from tinker import types

from arena.renderers import ByteTokenizer, Tokenizer
from arena.types import Observation, StopCondition, TokensWithLogprobs
from games.legal import MAX_SCAN_CHARS
from games.registry import read_legal_moves

DEFAULT_SAMPLE_TIMEOUT_S = 120.0
"""How long one sampling call may take before it fails (the default move clock)."""


class SampleTimeoutError(TimeoutError):
    """A policy call took longer than its time limit."""


class SamplingClientLike(Protocol):
    """What a policy, and the trainer, need of a sampling client (``tinker.SamplingClient``,
    or the local backend's); the one definition (``trainer.backend`` re-exports it)."""

    def sample(
        self, prompt: types.ModelInput, num_samples: int, sampling_params: types.SamplingParams
    ) -> Awaitable[types.SampleResponse]:
        """A future of ``num_samples`` continuations of ``prompt``."""
        ...


class SamplerPolicy:
    """A token policy (the cookbook's ``TokenCompleter`` shape) over a sampling client.

    Every call has a time limit (``timeout_s``; SampleTimeoutError when it passes), so a
    hung sampling call can never stall a rollout. Concurrent calls reach the client
    concurrently, so a batching sampler (the local backend's) serves all envs of a batch
    in shared forward passes.
    """

    def __init__(
        self,
        client: SamplingClientLike,
        max_tokens: int,
        temperature: float = 1.0,
        seed: int | None = None,
        timeout_s: float | None = DEFAULT_SAMPLE_TIMEOUT_S,
    ) -> None:
        if max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        if timeout_s is not None and timeout_s <= 0:
            raise ValueError("timeout_s must be positive (or None)")
        self.client = client
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.seed = seed
        self.timeout_s = timeout_s
        self._params: dict[tuple[int, tuple[object, ...]], types.SamplingParams] = {}

    def at(self, temperature: float) -> SamplerPolicy:
        """The same policy sampling at ``temperature`` (0: greedy, the likeliest token)."""
        return SamplerPolicy(self.client, self.max_tokens, temperature, self.seed, self.timeout_s)

    def _sampling_params(self, limit: int, stop: StopCondition) -> types.SamplingParams:
        # One validated SamplingParams per (limit, stop): building one per call costs more
        # than the rest of a move's bookkeeping.
        key = (limit, tuple(stop))
        params = self._params.get(key)
        if params is None:
            if len(self._params) > 64:
                self._params.clear()
            params = self._params[key] = types.SamplingParams(
                max_tokens=limit, temperature=self.temperature, stop=stop or None, seed=self.seed
            )
        return params

    async def __call__(
        self, ob: Observation, stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        limit = self.max_tokens if max_tokens is None else min(max_tokens, self.max_tokens)
        params = self._sampling_params(limit, stop)
        try:
            async with asyncio.timeout(self.timeout_s):
                response = await self.client.sample(
                    prompt=ob, num_samples=1, sampling_params=params
                )
        except TimeoutError as exc:
            raise SampleTimeoutError(
                f"the sampler did not answer within {self.timeout_s:g} s"
            ) from exc
        sequence = response.sequences[0]
        return TokensWithLogprobs(
            tokens=list(sequence.tokens),
            maybe_logprobs=sequence.logprobs,
            stop_reason=sequence.stop_reason,
        )


class RandomMovePolicy:
    """Answers with a random legal move read from the prompt text (for byte-level
    prompts), then the stop token. Falls back to ``fallback`` when the prompt lists none.
    ``game_id`` selects a game-specific reader (Connect Four's moves are read off the board).
    """

    def __init__(
        self,
        seed: int = 0,
        game_id: str | None = None,
        tokenizer: Tokenizer | None = None,
        stop_token: int = ByteTokenizer.EOS,
        fallback: str = "[0]",
    ) -> None:
        self._rng = random.Random(seed)
        self.game_id = game_id
        self.tokenizer = tokenizer or ByteTokenizer()
        self.stop_token = stop_token
        self.fallback = fallback

    def _news(self, ob: Observation) -> list[int]:
        """The prompt's tail from the last stop token on (what came after the seat's
        previous move, where the moves are listed), at most ``MAX_SCAN_CHARS`` tokens; read
        chunk by chunk from the end (prompts share their leading chunks)."""
        parts: list[list[int]] = []
        left = MAX_SCAN_CHARS
        for chunk in reversed(ob.chunks):
            if not isinstance(chunk, types.EncodedTextChunk):
                break
            tokens = list(chunk.tokens) if not isinstance(chunk.tokens, list) else chunk.tokens
            tail, found = _after_last(tokens, self.stop_token, left)
            parts.append(tail)
            left -= len(tail)
            if found or left <= 0:
                break
        news: list[int] = []
        for part in reversed(parts):
            news += part
        return news

    async def __call__(self, ob: Observation, stop: StopCondition) -> TokensWithLogprobs:
        text = self.tokenizer.decode(self._news(ob))
        moves = read_legal_moves(text, self.game_id)
        move = self._rng.choice(moves) if moves else self.fallback
        tokens = [*self.tokenizer.encode(move), self.stop_token]
        return TokensWithLogprobs(tokens=tokens, maybe_logprobs=None)


def _after_last(tokens: list[int], stop: int, limit: int) -> tuple[list[int], bool]:
    """The tokens after the last ``stop`` in ``tokens`` (at most ``limit``), and whether a
    ``stop`` was found (C-speed list operations only)."""
    tail = tokens[-limit:] if 0 < limit < len(tokens) else tokens if limit > 0 else []
    if tail and tail[-1] == stop:  # the common case: a chunk that ends with a move
        return [], True
    if stop > 255:  # a byte-level chunk with no special id cannot hold ``stop``
        try:
            bytes(tail)
        except ValueError:
            pass
        else:
            return tail, False
    try:
        back = tail[::-1].index(stop)
    except ValueError:
        return tail, False
    return tail[len(tail) - back :], True


class FixedTextPolicy:
    """Always answers ``text`` (tests use it for garbage, huge or empty moves)."""

    def __init__(self, text: str, tokenizer: Tokenizer | None = None) -> None:
        self.tokenizer = tokenizer or ByteTokenizer()
        self.tokens = [*self.tokenizer.encode(text), ByteTokenizer.EOS]

    async def __call__(self, ob: Observation, stop: StopCondition) -> TokensWithLogprobs:
        return TokensWithLogprobs(tokens=list(self.tokens), maybe_logprobs=None)
