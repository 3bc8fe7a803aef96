"""Registering a game: the table of games registered in code (native and plugin games).

A game's module calls ``register_game`` when it is imported (``games.register_game`` is the
same function). This module imports no game and no catalogue: the catalogue
(``games.registry``) imports the game modules and plugins, which register here, and reads
this table when it builds itself again (``generation`` says when it changed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from games.api import NO_KIT, Game, GameKit, GameSpec, SimultaneousGame
from games.textarena_specs import textarena_specs

DEFAULT_REWARD_RANGE = (-1.0, 1.0)
"""The rewards a game is held to unless it declares its own."""


@dataclass(frozen=True)
class Entry:
    """One registered game: its catalogue entry, how to build it, and its module's kit."""

    spec: GameSpec
    factory: Callable[[], Game]
    kit: GameKit = NO_KIT
    module: str = ""
    """The module that registered it (plugins are told apart by it)."""
    digest: str | None = None
    """A plugin's source digest (``games.verdicts.source_digest``): its verdict's key."""


_REGISTERED: dict[str, Entry] = {}
_generation = 0


def registered() -> Mapping[str, Entry]:
    """The games registered with ``register_game``, by id (a live view: do not keep it
    across registrations)."""
    return _REGISTERED


def generation() -> int:
    """How many times a game was registered or withdrawn: the catalogue is built again
    when this changes."""
    return _generation


def register_game(
    game_id: str,
    *,
    min_players: int,
    max_players: int,
    hidden_information: bool = False,
    legal_moves: bool = True,
    description: str = "",
    kit: GameKit = NO_KIT,
    reward_range: tuple[float, float] = DEFAULT_REWARD_RANGE,
    reward_sum: float | None = None,
    simultaneous: bool | None = None,
) -> Callable[[Callable[[], Game]], Callable[[], Game]]:
    """Register a game factory under ``game_id`` (``Name-vN``): a ``Game`` class, or any
    picklable callable that returns a fresh game.

    ``hidden_information``: False (the default) says that spectators of a live match may
    see every move as it is played (a ``SimultaneousGame``'s once its round is over);
    True hides the moves from them ("(hidden move)") until the match has ended, for a game
    whose seats get private messages or make secret moves. The conformance kit fails a
    game registered False whose moves it sees sent to single seats, or shown to no other
    seat. ``kit`` is what the game's module offers beyond the rules (compact view, bots,
    ...); ``reward_range`` and ``reward_sum`` (0.0 for a zero-sum game, None when the sum
    varies) are what the conformance kit holds the game to. ``simultaneous``: whether its
    seats move at once (``SimultaneousGame``); None reads it from a class factory.

    Raises ValueError when the id is taken or malformed, or a limit is inconsistent.
    """
    if "-v" not in game_id:
        raise ValueError(f"game ids carry a version, like 'MyGame-v0'; got {game_id!r}")
    if not 1 <= min_players <= max_players <= 15:
        raise ValueError(f"{game_id}: player counts must satisfy 1 <= min <= max <= 15")
    low, high = reward_range
    if not low <= high:
        raise ValueError(f"{game_id}: reward_range must be (low, high) with low <= high")

    def decorator(factory: Callable[[], Game]) -> Callable[[], Game]:
        global _generation
        if game_id in _REGISTERED or game_id in textarena_specs():
            raise ValueError(f"game id {game_id!r} is already registered")
        together = simultaneous
        if together is None:
            together = isinstance(factory, type) and issubclass(factory, SimultaneousGame)
        spec = GameSpec(
            game_id=game_id,
            min_players=min_players,
            max_players=max_players,
            source="native",
            available=True,
            hidden_information=hidden_information,
            legal_moves=legal_moves,
            description=description,
            public_moves=kit.public_moves,
            reward_range=(float(low), float(high)),
            reward_sum=reward_sum,
            simultaneous=bool(together),
        )
        module = str(getattr(factory, "__module__", "") or "")
        _REGISTERED[game_id] = Entry(spec=spec, factory=factory, kit=kit, module=module)
        _generation += 1
        return factory

    return decorator


def unregister_game(game_id: str) -> None:
    """Remove a game registered with ``register_game`` (tests and plugin loading use it).
    Does nothing for an unknown id."""
    global _generation
    if _REGISTERED.pop(game_id, None) is not None:
        _generation += 1
