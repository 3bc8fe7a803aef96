"""Bots: scripted players that see exactly what their seat sees and answer with text.

* ``random``: a uniformly random legal move, for any game whose legal moves can be read.
* every other bot belongs to a game and lives in that game's module, listed in its
  ``GameKit.bots``: ``optimal`` (perfect tic-tac-toe), ``alphabeta-1`` ...
  ``alphabeta-5`` (Connect Four search of that depth), ``nash`` (Kuhn poker equilibrium).

Bots are cheap, picklable configuration until ``make_bot`` builds one for a match. What a
bot is (``Bot``) and what it is shown (``BotView``) are part of the game API
(``games.api``), so that a game's module defines its bots without importing this one.
"""

from __future__ import annotations

import random

from games.api import Bot, BotView, GameSpec

__all__ = [
    "RANDOM",
    "Bot",
    "BotView",
    "GameBot",
    "RandomBot",
    "UnknownBot",
    "bot_names",
    "bots_for",
    "check_bot",
    "make_bot",
]

RANDOM = "random"
"""The one bot that plays every game that lists its legal moves."""


class UnknownBot(ValueError):
    """No bot has this name, or it cannot play this game."""


class RandomBot(Bot):
    """Plays a uniformly random legal move."""

    name = RANDOM

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def act(self, view: BotView) -> str:
        if not view.legal_moves:
            # The game listed no moves this turn: answer something well-formed rather than
            # nothing, and let the game judge it.
            return "[0]"
        return self._rng.choice(view.legal_moves)


class GameBot(Bot):
    """A game's own bot, built on its first move from the module of the game it is shown
    (``make_bot`` does not know the game; the view does)."""

    def __init__(self, name: str, seed: int) -> None:
        self.name = name
        self.seed = seed
        self._inner: Bot | None = None
        self._game_id = ""

    def act(self, view: BotView) -> str:
        if self._inner is None or view.game_id != self._game_id:
            self._inner = _game_bot(self.name, view.game_id, self.seed)
            self._game_id = view.game_id
        return self._inner.act(view)


def _game_bot(name: str, game_id: str, seed: int) -> Bot:
    from games.registry import game_kit

    factory = game_kit(game_id).bots.get(name)
    if factory is None:
        raise UnknownBot(_not_for(name, game_id))
    return factory(seed)


def _all_game_bots() -> dict[str, list[str]]:
    """Bot name -> the games whose module offers it."""
    from games.registry import game_kits

    out: dict[str, list[str]] = {}
    for game_id, kit in game_kits().items():
        for name in kit.bots:
            out.setdefault(name, []).append(game_id)
    return out


def bot_names() -> list[str]:
    """Names accepted by ``make_bot``: ``random`` and every game's own bots."""
    return sorted({RANDOM, *_all_game_bots()})


def bots_for(spec: GameSpec) -> list[str]:
    """The bots that can play ``spec``'s game: ``random`` when its legal moves can be read,
    then the game's own bots."""
    from games.registry import game_kit

    own = list(game_kit(spec.game_id).bots)
    return ([RANDOM] if spec.legal_moves else []) + own


def _not_for(name: str, game_id: str) -> str:
    games = _all_game_bots().get(name, [])
    plays = f"'{name}' plays only {', '.join(games)}" if games else f"'{name}' cannot play it"
    from games.registry import get_spec

    try:
        choices = ", ".join(bots_for(get_spec(game_id))) or "none"
    except ValueError:
        choices = "none"
    return f"{plays}, not {game_id}; bots for {game_id}: {choices}"


def check_bot(name: str, spec: GameSpec) -> None:
    """Raise UnknownBot when ``name`` is not a bot or cannot play ``spec``'s game."""
    if name == RANDOM:
        if not spec.legal_moves:
            raise UnknownBot(
                f"{spec.game_id} does not list its legal moves, so 'random' cannot play it"
            )
        return
    if name not in _all_game_bots():
        raise UnknownBot(f"unknown bot {name!r}; choose from: {', '.join(bot_names())}")
    if name not in bots_for(spec):
        raise UnknownBot(_not_for(name, spec.game_id))


def make_bot(name: str, seed: int, game_id: str | None = None) -> Bot:
    """Build the bot called ``name``; with ``game_id``, that game's bot at once (else it
    is found from the first view it is shown). Raises UnknownBot."""
    if name == RANDOM:
        return RandomBot(seed)
    if name not in _all_game_bots():
        raise UnknownBot(f"unknown bot {name!r}; choose from: {', '.join(bot_names())}")
    if game_id is not None:
        return _game_bot(name, game_id, seed)
    return GameBot(name, seed)
