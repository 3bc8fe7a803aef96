"""Game plugins: installed packages that add games through the ``arena.games`` entry points.

A plugin declares, in its ``pyproject.toml``::

    [project.entry-points."arena.games"]
    MyGame-v0 = "my_game.game"

Loading the entry point imports the module (or ``module:attribute``; a callable attribute
that is not a class is called with no arguments), which registers its games with
``games.register_game``. The entry point's name is, by convention, the id of the game it
registers. Every game registered by the plugin's package is listed with the package's
name and version (``arena games``).

Which plugins load: every installed one, unless ``ARENA_PLUGINS`` says otherwise: ``off``
loads none (the test suite runs on the built-in catalogue only, whatever the user
installed), a list of folders (``os.pathsep``-separated) loads only the distributions
installed there.

A plugin that fails to load (it raises, even SystemExit, or registers an id that is taken)
is listed as unavailable under its entry point's name with the error, and any game it
registered before failing is withdrawn; nothing else is affected. Plugins are loaded once
per process, the first time the catalogue is read (``games.registry.reload()`` loads them
again). A plugin's import runs in this process: one that hangs, hangs the caller.
"""

from __future__ import annotations

import inspect
import os
import traceback
from dataclasses import dataclass, replace
from importlib import metadata

from games.api import Game, GameSpec
from games.registration import Entry, registered, unregister_game

ENTRY_POINT_GROUP = "arena.games"
"""The entry-point group plugins register under."""
PLUGINS_ENV = "ARENA_PLUGINS"
"""``off``: load no plugins; folders (``os.pathsep``-separated): only the distributions
installed there; unset or empty: every installed distribution."""
MAX_ERROR_CHARS = 300
"""Longest error text kept for a plugin that failed to load."""


@dataclass(frozen=True)
class Plugin:
    """One entry point of the ``arena.games`` group, and what loading it gave."""

    name: str
    """The entry point's name (by convention the game id)."""
    value: str
    """What it points at: ``module`` or ``module:attribute``."""
    package: str | None
    """The distribution that declares it."""
    version: str | None
    games: tuple[str, ...] = ()
    """The game ids it registered."""
    error: str | None = None
    """Why it failed to load (one line), or None."""


_PLUGINS: list[Plugin] | None = None


def loaded_plugins() -> list[Plugin]:
    """The plugin entry points loaded so far (``games.registry.plugins`` loads them)."""
    return list(_PLUGINS or [])


def forget_plugins() -> None:
    """Load the plugins again the next time the catalogue is built."""
    global _PLUGINS
    _PLUGINS = None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    message = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    where = traceback.extract_tb(exc.__traceback__)
    if where:
        frame = where[-1]
        message += f" ({frame.filename.rsplit('/', 1)[-1]}:{frame.lineno})"
    return message[:MAX_ERROR_CHARS]


def _owns(module: str, entry_module: str) -> bool:
    """True when a game whose factory lives in ``module`` belongs to the plugin whose
    entry point imports ``entry_module`` (same top-level package)."""
    top = entry_module.split(".", 1)[0]
    return module == top or module.startswith(top + ".")


def load_plugins(taken: set[str]) -> dict[str, Entry]:
    """The catalogue entries of the plugins' games (``source`` ``plugin``, with package and
    version), and an unavailable entry for each plugin that failed to load. The entry
    points are loaded the first time only; ``taken``: the TextArena ids."""
    global _PLUGINS
    native = registered()
    if _PLUGINS is None:
        _PLUGINS = [_load(point, taken) for point in _entry_points()]
    out: dict[str, Entry] = {}
    for plugin in _PLUGINS:
        if plugin.error is None:
            for game_id in plugin.games:
                entry = native.get(game_id)
                if entry is not None:
                    spec = replace(
                        entry.spec, source="plugin", package=plugin.package, version=plugin.version
                    )
                    out[game_id] = replace(entry, spec=spec)
            continue
        failed_id = plugin.name
        if failed_id in taken or failed_id in native or failed_id in out:
            failed_id = f"plugin:{plugin.name}"
        who = " ".join(x for x in (plugin.package or plugin.value, plugin.version) if x)
        spec = GameSpec(
            game_id=failed_id,
            min_players=0,
            max_players=0,
            source="plugin",
            available=False,
            reason=f"plugin {who} failed to load: {plugin.error}",
            package=plugin.package,
            version=plugin.version,
        )
        out[failed_id] = _failed_entry(spec, plugin.error)
    return out


def _entry_points() -> list[metadata.EntryPoint]:
    chosen = os.environ.get(PLUGINS_ENV, "").strip()
    try:
        if chosen.lower() == "off":
            return []
        if chosen:
            folders = [f for f in chosen.split(os.pathsep) if f]
            found = [
                point
                for dist in metadata.distributions(path=folders)
                for point in dist.entry_points
                if point.group == ENTRY_POINT_GROUP
            ]
        else:
            found = list(metadata.entry_points(group=ENTRY_POINT_GROUP))
        return sorted(found, key=lambda e: e.name)
    except Exception:  # a broken installed distribution must not break the catalogue
        return []


def _load(point: metadata.EntryPoint, taken: set[str]) -> Plugin:
    """Load one entry point; withdraw what it registered if it fails."""
    dist = getattr(point, "dist", None)
    package = dist.metadata["Name"] if dist is not None else None
    version = dist.version if dist is not None else None
    before = set(registered())
    try:
        loaded = point.load()
        if callable(loaded) and not inspect.isclass(loaded) and not inspect.ismodule(loaded):
            loaded()
    except (Exception, SystemExit) as exc:
        for game_id in set(registered()) - before:
            unregister_game(game_id)
        return Plugin(point.name, point.value, package, version, error=_first_line(exc))
    owned = sorted(
        game_id
        for game_id, entry in registered().items()
        if game_id not in taken and _owns(entry.module, point.module)
    )
    return Plugin(point.name, point.value, package, version, games=tuple(owned))


class _Unloadable:
    """The factory of a plugin that failed to load: raises its error (picklable)."""

    def __init__(self, game_id: str, error: str) -> None:
        self.game_id = game_id
        self.error = error

    def __call__(self) -> Game:
        raise RuntimeError(f"{self.game_id} is not available: {self.error}")


def _failed_entry(spec: GameSpec, error: str) -> Entry:
    return Entry(spec=spec, factory=_Unloadable(spec.game_id, error))
