"""``arena leaderboard`` and ``arena tournament``: plain functions returning exit codes.

Bad input (an unknown game, player or checkpoint, an unusable database) prints one line
and returns 2; nothing else is raised.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from typing import TextIO

from games.bots import UnknownBot
from games.registry import GameUnavailable, UnknownGame
from matchmaking.agents import UnknownCheckpoint
from matchmaking.identity import BadPolicyRef, PolicyRef
from matchmaking.leaderboard import Method, leaderboard
from matchmaking.live import RatingKeeper
from matchmaking.match import player_specs
from matchmaking.tournament import TournamentResult, round_robin
from storage.errors import StorageError

EXIT_OK = 0
EXIT_USAGE = 2

_BAD_INPUT = (UnknownGame, GameUnavailable, UnknownBot, UnknownCheckpoint, BadPolicyRef, ValueError)


def _label(key: str) -> str:
    try:
        return PolicyRef.parse(key).label
    except ValueError:
        return key


def format_leaderboard(board: dict[str, object]) -> str:
    """The leaderboard as an aligned text table."""
    rows = board["rows"]
    assert isinstance(rows, list)
    lines = [f"{board['game']}: {board['matches']} rated matches ({board['method']})"]
    if board["method"] == "openskill":
        lines.append(f"{'#':>3}  {'policy':<32} {'ordinal':>8} {'mu':>7} {'sigma':>6} {'games':>6}")
        for i, r in enumerate(rows, 1):
            lines.append(
                f"{i:>3}  {r['label']:<32} {r['ordinal']:>8.2f} {r['mu']:>7.2f} "
                f"{r['sigma']:>6.2f} {r['games']:>6}"
            )
    else:
        lines.append(f"{'rank':>4}  {'policy':<32} {'rating':>7} {'95% interval':>16} {'games':>6}")
        for r in rows:
            interval = f"{r['lower']:.0f}..{r['upper']:.0f}"
            lines.append(
                f"{r['rank']:>4}  {r['label']:<32} {r['rating']:>7.0f} {interval:>16} "
                f"{r['games']:>6}"
            )
    seat = board.get("seat0_score")
    if isinstance(seat, dict):
        lines.append(
            f"first-mover advantage: seat 0 scores {seat['score']:.3f} "
            f"(95% {seat['lower']:.3f}..{seat['upper']:.3f}) over {seat['games']} games"
        )
    for note in board.get("notes") or []:  # type: ignore[attr-defined]
        lines.append(f"note: {note}")
    return "\n".join(lines)


def leaderboard_command(
    game_id: str,
    db: str | None = None,
    *,
    method: Method = "openskill",
    rebuild: bool = False,
    as_json: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Print the leaderboard of ``game_id`` from database ``db``; returns the exit code.
    ``rebuild`` first recomputes the game's live ratings from its stored results."""
    out = out or sys.stdout
    err = err or sys.stderr

    async def run() -> dict[str, object]:
        from storage import open_database

        database = await open_database(db, recover=False, must_exist=True, read_only=not rebuild)
        try:
            if rebuild:
                from matchmaking.live import rebuild_ratings

                rated = await rebuild_ratings(database, game_id)
                print(f"rebuilt the ratings from {rated} rated matches", file=err)
            board = await leaderboard(database, game_id, method)
        finally:
            await database.close()
        return board.as_dict()

    try:
        from games.registry import get_spec

        get_spec(game_id)
        board = asyncio.run(run())
    except (*_BAD_INPUT, StorageError) as exc:
        print(f"arena leaderboard: error: {exc}", file=err)
        return EXIT_USAGE
    print(json.dumps(board) if as_json else format_leaderboard(board), file=out)
    return EXIT_OK


def format_tournament(result: TournamentResult) -> str:
    """The cross-table and the ratings as text."""
    rows = result.cross_table()
    labels = [_label(c) if i else c for i, c in enumerate(rows[0])]
    width = max(10, *(len(label) for label in labels)) + 1
    lines = [f"{result.game_id}: score of row against column (win 1, draw 1/2)"]
    lines.append("".join(f"{c:>{width}}" for c in labels))
    for row in rows[1:]:
        lines.append("".join(f"{(_label(c) if i == 0 else c):>{width}}" for i, c in enumerate(row)))
    lines.append("")
    lines.append(f"{'policy':<32} {'ordinal':>8} {'mu':>7}  {'BT':>6} {'95% interval':>14}")
    bt = result.bradley_terry
    for key in sorted(result.ratings, key=lambda k: -result.ratings[k].ordinal):
        r = result.ratings[key]
        line = f"{_label(key):<32} {r.ordinal:>8.2f} {r.mu:>7.2f}"
        if bt is not None and key in bt.ratings:
            line += f"  {bt.ratings[key]:>6.0f} {bt.lower[key]:>6.0f}..{bt.upper[key]:<6.0f}"
        lines.append(line)
    aborted = sum(s.aborted for s in result.table.values()) // 2
    if aborted:
        lines.append(f"aborted games: {aborted} (first reasons: {result.aborted_reasons[:3]})")
    return "\n".join(lines)


def tournament_command(
    game_id: str,
    players: Sequence[str],
    games_per_pair: int,
    db: str | None = None,
    *,
    seed: int = 0,
    concurrency: int = 32,
    runs_dir: str = "runs",
    record: bool = True,
    as_json: bool = False,
    quiet: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Play a round robin between ``players`` (bots or ``run:NAME@STEP``), record it in
    ``db`` unless ``record`` is False, and print the cross-table and ratings."""
    out = out or sys.stdout
    err = err or sys.stderr

    async def run() -> TournamentResult:
        from arena.events import EventBus
        from storage import Recorder, open_database

        specs = player_specs(players, runs_dir=runs_dir)
        bus = EventBus()
        total = games_per_pair * len(specs) * (len(specs) - 1) // 2
        from tqdm import tqdm

        bar = tqdm(total=total, desc="tournament", unit="game", disable=quiet or None, file=err)
        try:
            if not record:
                return await round_robin(
                    game_id, specs, games_per_pair, seed=seed, concurrency=concurrency,
                    bus=bus, on_game=lambda: bar.update(1),
                )  # fmt: skip
            database = await open_database(db)
            try:
                async with Recorder(database, bus) as recorder, RatingKeeper(database, bus):
                    result = await round_robin(
                        game_id, specs, games_per_pair, seed=seed, concurrency=concurrency,
                        bus=bus, on_game=lambda: bar.update(1),
                    )  # fmt: skip
                    await recorder.flush()
                if recorder.stats.lost_matches:
                    raise StorageError(
                        f"{recorder.stats.lost_matches} match(es) could not be stored"
                    )
            finally:
                await database.close()
            return result
        finally:
            bar.close()

    try:
        result = asyncio.run(run())
    except (*_BAD_INPUT, StorageError) as exc:
        print(f"arena tournament: error: {exc}", file=err)
        return EXIT_USAGE
    print(json.dumps(result.as_dict()) if as_json else format_tournament(result), file=out)
    return EXIT_OK
