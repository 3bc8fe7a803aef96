"""Probe every TextArena game and write the static catalogue that the game registry loads.

Usage::

    python -m tools.probe                         # probe every game, print a summary
    python -m tools.probe --write                 # ... and rewrite textarena_catalogue.json
    python -m tools.probe --only Poker-v0 --write # refresh some entries, keep the others
    python -m tools.probe --jobs 4 --verbose      # more workers, one stats line per game

For each user-facing id of ``textarena.envs.registration.ENV_REGISTRY`` (every id that is
not a ``-raw`` or ``-train`` variant) the probe instantiates the unwrapped variant
(``<id>-raw`` where it exists) and finds out:

1. whether it can be built here at all, and if not why: missing nltk corpora, an API key
   environment variable, a newer Python (syntax errors on this one), a missing package, or
   some other error;
2. which player counts ``reset(num_players=n)`` accepts, for n in 1..15;
3. how a few short games go under a random policy that picks from the legal moves printed
   in the observation (``games.legal.extract_legal_moves``, the reader arena uses):
   whether the moves were found and accepted, whether play finished, how many steps it
   took, whether any message was sent to a single player (our proxy for hidden
   information), and whether stepping raised;
4. a one-line description.

Every game runs in its own spawned child process (``tools.probe_child``) with a time limit
per phase; a game that hangs is killed and recorded as ``broken: "timed out during
<phase>"``. Network access is refused inside the child, and the game's prints go to
/dev/null (``tools.probe_sandbox``).

Games that need nltk data or an API key are probed a second time with stand-ins (a word
list built from TextArena's own dictionary files, a part-of-speech tagger that calls every
word a noun, a dummy key) so that their player counts are known; their ``requires`` record
still says what a real run needs (``tools.probe_entry`` makes each game's entry from what
its children report). This module is the command: it probes the games in parallel and
writes the catalogue.

Catalogue fields of each game: ``id``, ``ta_id`` (the id to instantiate), ``min_players``,
``max_players``, ``player_counts`` (only when the supported counts have gaps), ``requires``
(``{}``, or any of ``{"python": "3.12"}``, ``{"nltk": [corpora]}``, ``{"env": [variables]}``,
``{"packages": [modules]}``), ``broken`` (null or the reason), ``legal_moves`` (moves were
listed on at least half the turns and at most a tenth of them were refused), ``finished``
(every random game ended within MAX_STEPS and GAME_WALL_S of ``tools.probe_child``),
``typical_turns`` (median steps of the finished games), ``private_messages`` (some message
other than a prompt or an invalid-move notice went to a single player of a multi-player
game; secrets given only in the prompts are not seen), ``step_error`` (null or the first
error raised by reset or step during play) and ``description``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tools.probe_entry import probe_game, textarena_registry

CATALOGUE_PATH = Path(__file__).resolve().parents[1] / "games" / "textarena_catalogue.json"
"""The catalogue the registry reads (through ``games.textarena_specs``)."""

VARIANT_SUFFIXES = ("-raw", "-train")


def user_facing_ids(registry: dict[str, Any]) -> dict[str, str]:
    """Map each user-facing id of ``registry`` to the id of its unwrapped variant."""
    ids: dict[str, str] = {}
    for env_id in registry:
        if env_id.endswith(VARIANT_SUFFIXES):
            continue
        ids[env_id] = f"{env_id}-raw" if f"{env_id}-raw" in registry else env_id
    return ids


def probe_all(
    ids: dict[str, str], jobs: int, verbose: bool = False, progress: bool = True
) -> list[dict[str, Any]]:
    """Probe ``ids`` (user-facing id -> id to instantiate) with ``jobs`` parallel children."""
    entries: list[dict[str, Any]] = []
    lock = threading.Lock()
    started = time.monotonic()

    def one(item: tuple[str, str]) -> None:
        entry = probe_game(*item, verbose=verbose)
        with lock:
            entries.append(entry)
            if progress:
                print(
                    f"[{len(entries)}/{len(ids)} {time.monotonic() - started:.0f}s] "
                    f"{entry['id']}: {_status(entry)}",
                    file=sys.stderr,
                )

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(one, sorted(ids.items())))
    return sorted(entries, key=lambda entry: entry["id"])


def _status(entry: dict[str, Any]) -> str:
    if entry["broken"]:
        return f"broken ({entry['broken']})"
    parts = [f"{entry['min_players']}-{entry['max_players']}p"]
    if entry["requires"]:
        parts.append(f"requires {json.dumps(entry['requires'])}")
    parts.append(f"legal_moves={entry['legal_moves']} finished={entry['finished']}")
    if entry["step_error"]:
        parts.append(f"step_error={entry['step_error']}")
    return " ".join(parts)


def render_catalogue(games: list[dict[str, Any]], textarena_version: str, python: str) -> str:
    """The catalogue as JSON text, one game per line so that diffs stay readable."""
    lines = [
        "{",
        f'"textarena_version": {json.dumps(textarena_version)},',
        f'"python": {json.dumps(python)},',
        '"games": [',
    ]
    body = [json.dumps(game, ensure_ascii=False) for game in games]
    lines.append(",\n".join(body))
    lines.append("]}")
    return "\n".join(lines) + "\n"


def _existing_games(path: Path, textarena_version: str) -> list[dict[str, Any]]:
    """Entries of the catalogue at ``path`` when it was made for ``textarena_version``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if data.get("textarena_version") != textarena_version:
        return []
    return list(data.get("games", []))


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m tools.probe",
        description="Probe every TextArena game and write the catalogue the registry loads.",
    )
    parser.add_argument("--write", action="store_true", help=f"write {CATALOGUE_PATH.name}")
    parser.add_argument("--only", nargs="+", metavar="ID", help="probe only these game ids")
    parser.add_argument("--jobs", type=int, default=2, help="parallel children (default 2)")
    parser.add_argument("--verbose", action="store_true", help="print per-game play statistics")
    parser.add_argument("--output", type=Path, default=CATALOGUE_PATH, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    ids = user_facing_ids(textarena_registry())
    if args.only:
        unknown = [game_id for game_id in args.only if game_id not in ids]
        if unknown:
            parser.error(f"unknown game ids: {', '.join(unknown)}")
        ids = {game_id: ids[game_id] for game_id in args.only}

    started = time.monotonic()
    games = probe_all(ids, args.jobs, verbose=args.verbose)
    elapsed = time.monotonic() - started
    textarena_version = importlib.metadata.version("textarena")
    python = f"{sys.version_info.major}.{sys.version_info.minor}"

    if args.write:
        if args.only:
            kept = [
                g for g in _existing_games(args.output, textarena_version) if g["id"] not in ids
            ]
            games = sorted(kept + games, key=lambda game: game["id"])
        args.output.write_text(render_catalogue(games, textarena_version, python), encoding="utf-8")
        print(f"wrote {len(games)} games to {args.output}", file=sys.stderr)
    else:
        for game in games:
            print(json.dumps(game, ensure_ascii=False))
    usable = sum(1 for game in games if not game["broken"] and not game["requires"])
    print(f"probed {len(ids)} games in {elapsed:.0f} s; {usable} usable here", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
