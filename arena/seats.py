"""The seats of a match: what a seat is given when it must move (``SeatTurn``), who
plays the seats the learner does not (``SeatAgent``, described by a picklable
``AgentSpec``; ``BotSpec`` and ``BotAgent`` for the game's bots), and how such a seat
forfeits (``SeatForfeit``). ``arena.coordinator`` asks them (and exports these names too).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from games.api import GameMessage
from games.bots import Bot, BotView, check_bot, make_bot


@dataclass(frozen=True)
class SeatTurn:
    """What a seat is given when it must move."""

    seat: int
    messages: Sequence[GameMessage]
    """Every message this seat has received, in order (only its own, never another's)."""
    new_from: int
    """Index in ``messages`` where the messages since its previous move begin."""
    legal_moves: list[str] | None
    """The moves the game lists now, when it lists them."""
    turn_index: int
    """The match's move number this turn will have."""
    movers: tuple[int, ...] = ()
    """In a simultaneous round, every seat asked at once (this one included); empty for a
    move in turn."""


class SeatAgent(Protocol):
    """Plays a seat the learner does not: a bot, a past checkpoint, a person.

    ``act`` runs under the match's move clock (``games.limits.SessionLimits.
    move_timeout_s``). An agent that must first wait for its turn at something shared
    beyond its match (a served model's request slots, which other matches' seats hold)
    waits inside ``arena.moveclock.off_clock()``: the clock stops meanwhile, so waiting in
    that queue never times the seat out; what it waits for must end on its own. Nothing
    else is asked of an agent: one that never waits so runs as it always did.
    """

    name: str

    async def act(self, turn: SeatTurn) -> str:
        """The move for ``turn``, as text."""
        ...


class AgentSpec(Protocol):
    """Plain, picklable description of who plays a seat the learner does not (a bot, a
    checkpoint, ...); ``build`` makes the live agent for one match."""

    @property
    def name(self) -> str:
        """What matches record for this seat."""
        ...

    def check(self, game_id: str) -> None:
        """Raise ValueError when this player cannot play ``game_id``."""
        ...

    def build(self, seat: int, game_id: str, seed: int) -> SeatAgent:
        """The agent for ``seat`` of one match (``seed`` seeds its randomness)."""
        ...


@dataclass(frozen=True)
class BotSpec:
    """A bot by name (``games.bots``), as a seat."""

    bot: str

    @property
    def name(self) -> str:
        """The bot's name."""
        return self.bot

    def check(self, game_id: str) -> None:
        """Raise UnknownBot when the bot cannot play ``game_id``."""
        from games.registry import get_spec

        check_bot(self.bot, get_spec(game_id))

    def build(self, seat: int, game_id: str, seed: int) -> SeatAgent:
        """A fresh bot for ``seat``."""
        return BotAgent(make_bot(self.bot, seed=seed), game_id)


def agent_spec(player: str | AgentSpec) -> AgentSpec:
    """A bot name as a ``BotSpec``; specs pass through."""
    return BotSpec(player) if isinstance(player, str) else player


class BotAgent:
    """A ``games.bots.Bot`` as a seat agent."""

    def __init__(self, bot: Bot, game_id: str) -> None:
        self.bot = bot
        self.name = bot.name
        self._game_id = game_id

    async def act(self, turn: SeatTurn) -> str:
        """Ask the bot (synchronously: bots are cheap)."""
        view = BotView(
            game_id=self._game_id,
            seat=turn.seat,
            messages=turn.messages,
            legal_moves=turn.legal_moves,
        )
        return self.bot.act(view)


class SeatForfeit(Exception):
    """Raised by a seat agent's ``act`` to forfeit its seat (it lost on time, its player
    left or resigned): the match ends decided (``finished``), that seat losing
    (``GameSession.forfeit``), never aborted. The message says why."""
