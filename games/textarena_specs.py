"""The TextArena games listed in ``textarena_catalogue.json``, as specs.

``python -m tools.probe --write`` regenerates that file by probing every TextArena id
(player counts, requirements, whether random play finishes, whether seats get private
messages). Whether a game can run here is read from it and from this machine (Python
version, environment variables, nltk data, packages); the catalogue (``games.registry``)
adds what arena knows about each game and its stored conformance run.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import sys
from importlib import resources
from typing import Any

from games.api import GameSpec

CATALOGUE_FILE = "textarena_catalogue.json"
"""The file in ``games/`` that lists the TextArena games."""


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


@functools.cache
def textarena_specs() -> dict[str, tuple[GameSpec, str]]:
    """Game id -> its spec (availability from the probe and this machine only) and the id
    TextArena makes it by (``ta.make``)."""
    try:
        text = resources.files("games").joinpath(CATALOGUE_FILE).read_text()
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
            legal_moves=bool(record.get("legal_moves")),
            description=record.get("description") or "",
            player_counts=counts,
            package="textarena",
            version=str(data.get("textarena_version") or "") or None,
        )
        out[spec.game_id] = (spec, record.get("ta_id") or record["id"])
    return out


def textarena_id(game_id: str) -> str:
    """The id TextArena makes ``game_id`` by. Raises ValueError when it is not listed."""
    listed = textarena_specs().get(game_id)
    if listed is None:
        raise ValueError(f"{game_id!r} is not a TextArena game listed in {CATALOGUE_FILE}")
    return listed[1]
