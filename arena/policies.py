"""Simple token policies: baselines for benchmarks and tests, no model involved."""

from __future__ import annotations

import random

from arena.renderers import ByteTokenizer, Tokenizer, prompt_tokens
from arena.types import Observation, StopCondition, TokensWithLogprobs
from games.legal import MAX_SCAN_CHARS, read_legal_moves


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

    async def __call__(self, ob: Observation, stop: StopCondition) -> TokensWithLogprobs:
        # The moves are listed at the end of the prompt: decode only its tail.
        text = self.tokenizer.decode(prompt_tokens(ob)[-MAX_SCAN_CHARS:])
        moves = read_legal_moves(text, self.game_id)
        move = self._rng.choice(moves) if moves else self.fallback
        tokens = [*self.tokenizer.encode(move), self.stop_token]
        return TokensWithLogprobs(tokens=tokens, maybe_logprobs=None)


class FixedTextPolicy:
    """Always answers ``text`` (tests use it for garbage, huge or empty moves)."""

    def __init__(self, text: str, tokenizer: Tokenizer | None = None) -> None:
        self.tokenizer = tokenizer or ByteTokenizer()
        self.tokens = [*self.tokenizer.encode(text), ByteTokenizer.EOS]

    async def __call__(self, ob: Observation, stop: StopCondition) -> TokensWithLogprobs:
        return TokensWithLogprobs(tokens=list(self.tokens), maybe_logprobs=None)
