"""The game registry: every game id, what it needs, and ``make()``.

Two sources of games:

* native games, registered in code with ``register_game`` (see ``games.native``);
* TextArena games, listed in ``textarena_catalogue.json``, which ``python -m tools.probe
  --write`` regenerates by probing every TextArena id (player counts, requirements,
  whether random play finishes, whether seats get private messages).

A game that cannot run here (nltk data missing, an API key unset, Python 3.12 syntax on
3.11, a known bug) stays in the catalogue, marked unavailable with the reason, so users
learn why instead of meeting a traceback later.
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from games.api import Game, GameSpec
from games.legal import has_reader
from games.session import GameSession, SessionLimits


class UnknownGame(ValueError):
    """No game has this id."""


class GameUnavailable(RuntimeError):
    """The game exists but cannot run here; the message says why."""


@dataclass(frozen=True)
class _Entry:
    spec: GameSpec
    factory: Callable[[], Game]


_NATIVE: dict[str, _Entry] = {}


def register_game(
    game_id: str,
    *,
    min_players: int,
    max_players: int,
    hidden_information: bool = False,
    legal_moves: bool = True,
    description: str = "",
) -> Callable[[Callable[[], Game]], Callable[[], Game]]:
    """Register a native game factory under ``game_id`` (``Name-vN``).

    Raises ValueError when the id is taken or malformed.
    """
    if "-v" not in game_id:
        raise ValueError(f"game ids carry a version, like 'MyGame-v0'; got {game_id!r}")
    if not 1 <= min_players <= max_players <= 15:
        raise ValueError(f"{game_id}: player counts must satisfy 1 <= min <= max <= 15")

    def decorator(factory: Callable[[], Game]) -> Callable[[], Game]:
        if game_id in _NATIVE:
            raise ValueError(f"game id {game_id!r} is already registered")
        spec = GameSpec(
            game_id=game_id,
            min_players=min_players,
            max_players=max_players,
            source="native",
            available=True,
            hidden_information=hidden_information,
            legal_moves=legal_moves,
            description=description,
        )
        _NATIVE[game_id] = _Entry(spec=spec, factory=factory)
        _catalogue.cache_clear()
        return factory

    return decorator


def _nltk_missing(corpora: list[str]) -> list[str]:
    try:
        import nltk
    except ImportError:
        return corpora
    missing = []
    for name in corpora:
        found = False
        for prefix in ("corpora", "tokenizers", "taggers", ""):
            try:
                nltk.data.find(f"{prefix}/{name}" if prefix else name)
                found = True
                break
            except LookupError:
                continue
        if not found:
            missing.append(name)
    return missing


def _availability(record: dict[str, Any]) -> tuple[bool, str | None]:
    if record.get("broken"):
        return False, f"known problem: {record['broken']}"
    if record.get("step_error") and not record.get("requires"):
        return False, f"known problem: raised during play: {record['step_error']}"
    requires = record.get("requires") or {}
    python = requires.get("python")
    if python:
        major, minor = (int(x) for x in str(python).split(".")[:2])
        if sys.version_info < (major, minor):
            here = f"{sys.version_info.major}.{sys.version_info.minor}"
            return False, f"needs Python {python}+ syntax (this is Python {here})"
    keys = [k for k in requires.get("env", []) if not os.environ.get(k)]
    if keys:
        return False, f"needs the environment variable(s) {', '.join(keys)}"
    corpora = requires.get("nltk", [])
    if corpora:
        missing = _nltk_missing(list(corpora))
        if missing:
            return False, (
                f"needs nltk data: {', '.join(missing)} "
                f"(python -m nltk.downloader {' '.join(missing)})"
            )
    packages = requires.get("packages") or ([requires["package"]] if "package" in requires else [])
    missing_packages = [p for p in packages if importlib.util.find_spec(p) is None]
    if missing_packages:
        return False, f"needs the Python package(s) {', '.join(missing_packages)}"
    return True, None


def _load_textarena() -> dict[str, tuple[GameSpec, str]]:
    try:
        text = resources.files("games").joinpath("textarena_catalogue.json").read_text()
    except FileNotFoundError:
        return {}
    data = json.loads(text)
    out: dict[str, tuple[GameSpec, str]] = {}
    for record in data.get("games", []):
        available, reason = _availability(record)
        if available and not record.get("min_players"):
            available, reason = False, "no player count works"
        counts = tuple(record.get("player_counts") or ())
        spec = GameSpec(
            game_id=record["id"],
            min_players=int(record.get("min_players") or 0),
            max_players=int(record.get("max_players") or 0),
            source="textarena",
            available=available,
            reason=reason,
            hidden_information=bool(record.get("private_messages")),
            legal_moves=bool(record.get("legal_moves")) or has_reader(record["id"]),
            description=record.get("description") or "",
            player_counts=counts,
        )
        out[spec.game_id] = (spec, record.get("ta_id") or record["id"])
    return out


@functools.cache
def _catalogue() -> dict[str, tuple[GameSpec, Callable[[], Game]]]:
    import games.native  # noqa: F401 - registers the native games
    from games.textarena_game import TextArenaGame

    table: dict[str, tuple[GameSpec, Callable[[], Game]]] = {}
    for game_id, (spec, ta_id) in _load_textarena().items():
        table[game_id] = (spec, functools.partial(TextArenaGame, ta_id, game_id))
    for game_id, entry in _NATIVE.items():
        table[game_id] = (entry.spec, entry.factory)
    return dict(sorted(table.items(), key=lambda kv: kv[0].lower()))


def catalogue(*, available_only: bool = False) -> list[GameSpec]:
    """Every game id with its player counts and availability, sorted by id."""
    specs = [spec for spec, _ in _catalogue().values()]
    return [s for s in specs if s.available] if available_only else specs


def get_spec(game_id: str) -> GameSpec:
    """The catalogue entry of ``game_id``.

    Raises UnknownGame with the closest ids and the list of available ones.
    """
    table = _catalogue()
    if game_id in table:
        return table[game_id][0]
    available = [g for g, (s, _) in table.items() if s.available]
    close = difflib.get_close_matches(game_id, list(table), n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    shown = ", ".join(available[:12]) + (", ..." if len(available) > 12 else "")
    raise UnknownGame(
        f"unknown game {game_id!r}.{hint} Available: {shown} (see `arena games` for all)"
    )


def check_players(spec: GameSpec, num_players: int) -> None:
    """Raise ValueError naming the supported counts when ``num_players`` is not one."""
    if not spec.supports(num_players):
        raise ValueError(f"{spec.game_id} takes {spec.players_text} players, not {num_players}")


def make(
    game_id: str,
    num_players: int | None = None,
    seed: int = 0,
    limits: SessionLimits | None = None,
) -> GameSession:
    """A started, guarded session of a fresh game.

    ``num_players`` defaults to the game's minimum. Raises UnknownGame, GameUnavailable,
    ValueError (player count), or ``games.session.GameError`` when the game fails to start.
    """
    spec = get_spec(game_id)
    if not spec.available:
        raise GameUnavailable(f"{game_id} is not available here: {spec.reason}")
    players = spec.min_players if num_players is None else num_players
    check_players(spec, players)
    factory = _catalogue()[game_id][1]
    session = GameSession(factory(), game_id, players, seed, limits)
    session.start()
    return session
