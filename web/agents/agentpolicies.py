"""Ready-made policies for ``AgentClient``: a ``games.bots`` bot (``bot_policy``), a
sampling client prompted exactly as in training (``model_policy``), or any player the
server's own seats can be (``seat_policy``: a spec from ``matchmaking.players.player_spec``),
one ``SeatPolicy`` per seat of each match."""

from __future__ import annotations

import itertools
from typing import Any

from web.agents.agenttypes import AgentTurn, MatchInfo, PolicyFactory, SeatPolicy


class BotSeat:
    """A ``games.bots`` bot playing one seat."""

    def __init__(self, name: str, game_id: str, seed: int) -> None:
        from games.bots import make_bot

        self.bot = make_bot(name, seed=seed)
        self.game_id = game_id

    async def act(self, turn: AgentTurn) -> str:
        """The bot's move (bots are cheap: answered at once)."""
        from games.bots import BotView

        view = BotView(self.game_id, turn.seat, turn.messages, turn.legal_moves)
        return self.bot.act(view)


def bot_policy(name: str, seed: int = 0) -> PolicyFactory:
    """A bot by name (``random``, ``optimal``...) for every seat. Raises UnknownBot for an
    unknown bot."""
    from games.bots import make_bot

    make_bot(name, seed=seed)  # fail now, not on the first move
    counter = itertools.count()

    def factory(match: MatchInfo) -> SeatPolicy:
        return BotSeat(name, match.game_id, seed + next(counter))

    return factory


class SpecSeat:
    """A seat agent built from a player spec (``arena.seats.AgentSpec``), answering the
    agent's turns as the server's own seats answer theirs."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent

    async def act(self, turn: AgentTurn) -> str:
        """The agent's move for the turn."""
        return str(await self.agent.act(turn.seat_turn))


def seat_policy(spec: Any, seed: int = 0) -> PolicyFactory:
    """Any player spec (``arena.seats.AgentSpec``: a bot, a checkpoint, a language model,
    a served model) for every seat: each seat's agent is built from it, seeded ``seed``,
    ``seed + 1``, ..."""
    counter = itertools.count()

    def factory(match: MatchInfo) -> SeatPolicy:
        return SpecSeat(spec.build(match.seat, match.game_id, seed + next(counter)))

    return factory


class ModelSeatPolicy:
    """A sampling client playing one seat: prompted exactly as in training (a
    ``SeatView`` with the model's renderer and observation format)."""

    def __init__(
        self,
        client: Any,
        seat: int,
        game_id: str,
        renderer: Any,
        observation_format: Any,
        max_tokens: int,
        temperature: float,
        timeout_s: float | None,
    ) -> None:
        from arena.policies import SamplerPolicy
        from arena.seatview import SeatView

        self.view = SeatView(seat, game_id, renderer, observation_format)
        self.sampler = SamplerPolicy(client, max_tokens, temperature, timeout_s=timeout_s)

    async def act(self, turn: AgentTurn) -> str:
        """Sample the move (within the sampler's time limit)."""
        prompt = self.view.prompt(turn.messages, turn.new_from, turn.legal_moves)
        sample = await self.sampler(prompt, self.view.stop_condition)
        return self.view.move(sample.tokens)


def model_policy(
    client: Any,
    renderer: Any,
    observation_format: str,
    *,
    max_tokens: int = 8,
    temperature: float = 1.0,
    timeout_s: float | None = None,
) -> PolicyFactory:
    """A sampling client (``tinker.SamplingClient`` or the local backend's) for every
    seat; ``renderer`` is an ``arena.renderers.RendererConfig``. Each seat's sampling call
    is limited to ``timeout_s`` (None: the seat's move clock, less a margin)."""
    built = renderer.build()

    def factory(match: MatchInfo) -> SeatPolicy:
        limit = timeout_s
        if limit is None and match.move_timeout_s > 0:
            limit = max(0.5, match.move_timeout_s * 0.9)
        return ModelSeatPolicy(
            client,
            match.seat,
            match.game_id,
            built,
            observation_format,
            max_tokens,
            temperature,
            limit,
        )

    return factory
