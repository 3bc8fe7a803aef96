"""What failed the conformance kit stays out: the verdicts of plugin games, and the games a
user chose to play anyway.

Built-in games carry their verdicts in ``conformance_results.json`` (``make games-table``).
A plugin game's verdict is kept in this user's cache (``plugin_verdicts.json`` in
``$ARENA_CACHE_DIR``, else ``$XDG_CACHE_HOME/arena``, else ``~/.cache/arena``), keyed by a
digest of the plugin package's source files, so that editing the game asks for a new one.
``arena check-game`` records it; ``arena play``, ``arena train`` and ``arena tournament``
check a plugin game that has none for its current source before they play it
(``games.conformance.vouch``). A game whose verdict failed is unavailable, with the failed
check and the reason, unless it is allowed with ``--allow-failing``
(``ARENA_ALLOW_FAILING``: game ids, comma-separated, which child processes inherit).

The catalogue (``games.registry``) reads what is kept here; nothing here reads the
catalogue.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import time
from pathlib import Path
from typing import Any

CACHE_ENV = "ARENA_CACHE_DIR"
"""The folder of the verdict cache (default: ``$XDG_CACHE_HOME/arena``, ``~/.cache/arena``)."""
ALLOW_ENV = "ARENA_ALLOW_FAILING"
"""Game ids (comma-separated) to play even though they fail the conformance kit."""
VERDICTS_FILE = "plugin_verdicts.json"
MAX_SOURCE_FILES = 500
"""Files of a plugin package read for its digest (a larger package is digested by its
first files, in name order)."""


def cache_dir() -> Path:
    """Where the verdicts are kept."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "arena"


def source_digest(module: str) -> str | None:
    """A digest of the source files of ``module``'s top-level package (the plugin's code),
    or None when they cannot be found."""
    top = module.split(".", 1)[0]
    if not top:
        return None
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    roots = list(spec.submodule_search_locations or [])
    files = (
        sorted(p for root in roots for p in Path(root).rglob("*.py"))
        if roots
        else [Path(spec.origin)]
        if spec.origin
        else []
    )
    digest = hashlib.sha256()
    for path in files[:MAX_SOURCE_FILES]:
        try:
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
        except OSError:
            continue
    return digest.hexdigest()[:16]


def _load() -> dict[str, Any]:
    try:
        data = json.loads((cache_dir() / VERDICTS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def recorded(game_id: str, digest: str | None) -> dict[str, Any] | None:
    """The stored verdict of ``game_id`` for the source ``digest`` (``checks``, ``failed``:
    check -> why, ``players``), or None when there is none for this source."""
    if digest is None:
        return None
    record = _load().get(game_id)
    if not isinstance(record, dict) or record.get("source") != digest:
        return None
    return record


def record(game_id: str, digest: str | None, verdict: dict[str, Any]) -> None:
    """Keep ``verdict`` (a conformance record) for ``game_id`` at source ``digest``. A
    cache that cannot be written is skipped: the game is checked again next time."""
    if digest is None:
        return
    data = _load()
    data[game_id] = {**verdict, "source": digest, "time": time.time()}
    folder = cache_dir()
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
        scratch = folder / f".{VERDICTS_FILE}.{os.getpid()}"
        scratch.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
        scratch.replace(folder / VERDICTS_FILE)


def allowed_failing() -> set[str]:
    """The game ids allowed to play although they fail the kit."""
    return {g.strip() for g in os.environ.get(ALLOW_ENV, "").split(",") if g.strip()}
