"""The game registry: every game id, what it needs, and ``make()``.

Three sources of games:

* native games, registered in code with ``games.registration.register_game`` (see
  ``games.native``), which this module imports to load them;
* TextArena games, listed in ``textarena_catalogue.json`` (``games.textarena_specs``);
  what arena knows about particular ones lives in ``games.textarena_games``;
* plugins: installed packages that register games through the ``arena.games`` entry-point
  group (``games.plugins``).

A game that cannot run here (nltk data missing, an API key unset, Python 3.12 syntax on
3.11, a known bug, a failed conformance check in ``conformance_results.json`` or, for a
plugin, in the verdicts ``games.verdicts`` keeps for its source, a plugin that fails to
import) stays in the catalogue, marked unavailable with the reason, so users learn why
instead of meeting a traceback later. A game that fails the kit can still be played when
the user allows it (``--allow-failing``, ``games.conformance.vouch.allow_failing``).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib.metadata
import json
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any

from games import registration, verdicts
from games.api import NO_KIT, Game, GameKit, GameMessage, GameSpec
from games.legal import extract_legal_moves
from games.limits import SessionLimits
from games.plugins import Plugin, forget_plugins, load_plugins, loaded_plugins
from games.registration import DEFAULT_REWARD_RANGE, Entry
from games.session import GameSession
from games.textarena_specs import textarena_specs

BUILTIN_PACKAGE = "arena-selfplay"
"""The distribution name of arena itself (the package of its built-in games)."""
CONFORMANCE_RESULTS = "conformance_results.json"
"""The file in ``games/`` that ``python -m games.conformance --write`` writes; a built-in
game that failed a check there is unavailable, with the check and the reason."""
CONFORMANCE_REASON = "fails the conformance check"
"""How the reason of a game made unavailable by its stored conformance run begins."""


class UnknownGame(ValueError):
    """No game has this id."""


class GameUnavailable(RuntimeError):
    """The game exists but cannot run here; the message says why."""


def _load_conformance() -> dict[str, dict[str, Any]]:
    """Game id -> its stored conformance record (see ``games.conformance``)."""
    try:
        text = resources.files("games").joinpath(CONFORMANCE_RESULTS).read_text()
    except FileNotFoundError:
        return {}
    return dict(json.loads(text).get("games", {}))


def _with_conformance(spec: GameSpec, record: dict[str, Any] | None) -> GameSpec:
    """``spec`` marked unavailable when its stored conformance run failed a check, and
    with ``legal_moves`` as that run measured it."""
    if record is None or not spec.available:
        return spec
    failed = record.get("failed") or {}
    if failed:
        check, why = next(iter(sorted(failed.items())))
        more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
        reason = f"{CONFORMANCE_REASON} {check}: {why}{more}"
        return dataclasses.replace(spec, available=False, reason=reason)
    return dataclasses.replace(spec, legal_moves=bool(record.get("legal_moves", spec.legal_moves)))


_built: tuple[int, dict[str, Entry]] | None = None
"""The catalogue as last built, with the registrations' generation it saw."""


def _catalogue() -> dict[str, Entry]:
    """The catalogue, built again after a game was registered or withdrawn, or after
    ``reload_catalogue``."""
    global _built
    if _built is None or _built[0] != registration.generation():
        table = _build_catalogue()  # registers the native games and plugins the first time
        _built = (registration.generation(), table)
    return _built[1]


def _build_catalogue() -> dict[str, Entry]:
    import games.native  # noqa: F401 - registers the native games
    from games.textarena_game import NO_EXTRAS, TextArenaGame
    from games.textarena_games import EXTRAS_BY_ID

    conformance = _load_conformance()
    table: dict[str, Entry] = {}
    for game_id, (spec, ta_id) in textarena_specs().items():
        extras = EXTRAS_BY_ID.get(game_id, NO_EXTRAS)
        # TextArena scores every ending of a two-seat game +1/-1 or 0/0 (TwoPlayerState):
        # declared zero-sum, which the conformance kit then holds it to.
        two_seats = spec.min_players == spec.max_players == 2 and not spec.player_counts
        declared = extras.reward_sum
        spec = dataclasses.replace(
            spec,
            public_moves=extras.public_moves,
            reward_range=extras.reward_range or DEFAULT_REWARD_RANGE,
            reward_sum=declared if declared is not None else (0.0 if two_seats else None),
            legal_moves=not extras.free_text
            and (
                spec.legal_moves
                or extras.legal_moves is not None
                or extras.read_legal_moves is not None
            ),
        )
        factory = functools.partial(TextArenaGame, ta_id, game_id, extras)
        table[game_id] = Entry(spec, factory, extras, "games.textarena_game")
    plugged = load_plugins(set(table))
    for game_id, entry in registration.registered().items():
        if game_id not in plugged:
            if entry.module.startswith("games."):
                spec = dataclasses.replace(
                    entry.spec, package=BUILTIN_PACKAGE, version=_builtin_version()
                )
                entry = dataclasses.replace(entry, spec=spec)
            table[game_id] = entry
    for game_id, entry in table.items():
        if entry.spec.package in (BUILTIN_PACKAGE, "textarena"):
            spec = _with_conformance(entry.spec, conformance.get(game_id))
            table[game_id] = dataclasses.replace(entry, spec=spec)
    for game_id, entry in plugged.items():
        if entry.spec.available:
            digest = verdicts.source_digest(entry.module)
            verdict = verdicts.recorded(game_id, digest)
            spec = _with_conformance(entry.spec, verdict) if verdict else entry.spec
            plugged[game_id] = dataclasses.replace(entry, spec=spec, digest=digest)
    table.update(plugged)
    allowed = verdicts.allowed_failing()
    for game_id in allowed & set(table):
        spec = table[game_id].spec
        if not spec.available and (spec.reason or "").startswith(CONFORMANCE_REASON):
            spec = dataclasses.replace(spec, available=True, reason=f"{spec.reason}; allowed")
            table[game_id] = dataclasses.replace(table[game_id], spec=spec)
    return dict(sorted(table.items(), key=lambda kv: kv[0].lower()))


def plugin_digest(game_id: str) -> str | None:
    """The source digest of a plugin game (its verdict's key), None for other games.
    Raises UnknownGame."""
    get_spec(game_id)
    return _catalogue()[game_id].digest


def reload_catalogue() -> None:
    """Read the catalogue again (verdicts and allowed games), keeping the loaded plugins."""
    global _built
    _built = None


def _builtin_version() -> str | None:
    try:
        return importlib.metadata.version(BUILTIN_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return None


def reload() -> None:
    """Forget the cached catalogue (after installing a plugin, or in tests)."""
    reload_catalogue()
    forget_plugins()


def plugins() -> list[Plugin]:
    """Every plugin entry point found, loaded (once per process, while the catalogue is
    built)."""
    _catalogue()
    return loaded_plugins()


def catalogue(*, available_only: bool = False) -> list[GameSpec]:
    """Every game id with its player counts and availability, sorted by id."""
    specs = [entry.spec for entry in _catalogue().values()]
    return [s for s in specs if s.available] if available_only else specs


def game_kit(game_id: str) -> GameKit:
    """What ``game_id``'s module offers beyond the rules; ``NO_KIT`` for unknown ids."""
    entry = _catalogue().get(game_id)
    return entry.kit if entry is not None else NO_KIT


def game_kits() -> dict[str, GameKit]:
    """Every game's kit (what its module offers beyond the rules), by game id."""
    return {game_id: entry.kit for game_id, entry in _catalogue().items()}


def read_legal_moves(text: str, game_id: str | None = None) -> list[str] | None:
    """Legal moves shown in ``text``: the game's own reader when its module has one and it
    finds moves, else the generic reader (``games.legal.extract_legal_moves``). Unknown
    game ids use the generic reader."""
    reader = game_kit(game_id).read_legal_moves if game_id else None
    return extract_legal_moves(text, reader)


def compact_view(game_id: str, messages: Sequence[GameMessage], seat: int) -> str | None:
    """The compact observation of ``seat`` from its messages, when ``game_id``'s module has
    its own (tic-tac-toe's ``O:X1O3456X8``); None otherwise, and for unknown ids."""
    view = game_kit(game_id).compact_view
    return view(messages, seat) if view is not None else None


def moves_are_public(game_id: str) -> bool:
    """True when spectators may see ``game_id``'s moves while a match is live: games
    without hidden information, and those whose moves every seat receives (Kuhn poker's
    bets). Raises UnknownGame."""
    spec = get_spec(game_id)
    return spec.public_moves or not spec.hidden_information


def factory(game_id: str) -> Callable[[], Game]:
    """The factory of ``game_id``, even when the game is marked unavailable (the
    conformance kit re-checks games that failed). Raises UnknownGame."""
    get_spec(game_id)
    return _catalogue()[game_id].factory


def get_spec(game_id: str) -> GameSpec:
    """The catalogue entry of ``game_id``.

    Raises UnknownGame with the closest ids and the list of available ones.
    """
    table = _catalogue()
    if game_id in table:
        return table[game_id].spec
    available = [g for g, entry in table.items() if entry.spec.available]
    # Case and the version suffix are the usual slips: "tictactoe" means TicTacToe-v0.
    folded = {g.lower(): g for g in table}
    stems = {g.lower().rsplit("-v", 1)[0]: g for g in sorted(table, reverse=True)}
    key = game_id.lower()
    exact = folded.get(key) or stems.get(key.rsplit("-v", 1)[0]) or stems.get(key)
    close = [exact] if exact else []
    close += [folded[c] for c in difflib.get_close_matches(key, list(folded), n=3, cutoff=0.6)]
    close = list(dict.fromkeys(close))[:3]
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
    ValueError (player count), or ``games.sessionerrors.GameError`` when the game fails to start.
    """
    spec = get_spec(game_id)
    if not spec.available:
        raise GameUnavailable(f"{game_id} is not available here: {spec.reason}")
    players = spec.min_players if num_players is None else num_players
    check_players(spec, players)
    session = GameSession(_catalogue()[game_id].factory(), game_id, players, seed, limits)
    session.start()
    return session
