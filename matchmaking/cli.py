"""``arena leaderboard`` and ``arena tournament``: how players rate, and a round robin that
rates them; ``register`` adds these and ``arena play`` (``matchmaking.playcli``) to the
``arena`` command.

Bad input (an unknown game, player or checkpoint, an unusable database) prints one line
and returns 2; nothing else is raised.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from arena.identity import BadPolicyRef, PolicyRef
from games.bots import UnknownBot
from games.cli import add_allow_failing, vouch
from games.console import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from games.registry import GameUnavailable, UnknownGame
from matchmaking.leaderboard import METHODS, Method, leaderboard
from matchmaking.playcli import register_play
from matchmaking.players import player_specs
from storage.cli import add_db_option
from storage.errors import StorageError
from storage.rundir import UnknownCheckpoint

if TYPE_CHECKING:
    from arena.seats import AgentSpec
    from matchmaking.tournament import TournamentResult


_BAD_INPUT = (UnknownGame, GameUnavailable, UnknownBot, UnknownCheckpoint, BadPolicyRef, ValueError)


def _label(key: str) -> str:
    try:
        return PolicyRef.parse(key).label
    except ValueError:
        return key


MAX_BOOTSTRAP = 10_000
"""Most bootstrap refits ``arena leaderboard --bootstrap`` takes."""


def _bootstrap_count(text: str) -> int:
    """``--bootstrap``: an integer from 0 to ``MAX_BOOTSTRAP``."""
    if not text.isdigit() or int(text) > MAX_BOOTSTRAP:
        raise argparse.ArgumentTypeError(f"an integer from 0 to {MAX_BOOTSTRAP}, not {text!r}")
    return int(text)


def format_leaderboard(board: dict[str, object]) -> str:
    """The leaderboard as an aligned text table, best first."""
    rows = board["rows"]
    assert isinstance(rows, list)
    lines = [f"{board['game']}: {board['matches']} rated matches ({board['method']})"]
    if board["method"] == "openskill":
        lines.append(
            f"{'rank':>4}  {'policy':<32} {'ordinal':>8} {'mu':>7} {'sigma':>6} {'games':>6}"
        )
        for r in rows:
            lines.append(
                f"{r['rank']:>4}  {r['label']:<32} {r['ordinal']:>8.2f} {r['mu']:>7.2f} "
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
    method: Method = "bt",
    bootstrap: int = 0,
    rebuild: bool = False,
    as_json: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Print the leaderboard of ``game_id`` from database ``db``; returns the exit code.
    ``bootstrap``: resampled refits behind the intervals (0: the fit's standard errors).
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
            board = await leaderboard(database, game_id, method, bootstrap=bootstrap)
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
    """The cross-table (players as letters, named in a legend, so it fits 100 columns for
    up to 12 players) and the ratings, as text."""
    rows = result.cross_table()
    names = [_label(p) for p in rows[0][1:-1]]
    letters = [chr(ord("A") + i) if i < 26 else f"P{i}" for i in range(len(names))]
    lines = [f"{result.game_id}: score of row against column (win 1, draw 1/2, loss 0)"]
    lines.append(" " * 4 + "".join(f"{c:>6}" for c in letters) + f"{'total':>7}")
    for letter, row in zip(letters, rows[1:], strict=True):
        lines.append(f"{letter:<4}" + "".join(f"{c:>6}" for c in row[1:-1]) + f"{row[-1]:>7}")
    for letter, name in zip(letters, names, strict=True):
        lines.append(f"  {letter} = {name}")
    lines.append("")
    lines.append(
        f"{'rank':>4}  {'policy':<32} {'BT':>6} {'95% interval':>14}  {'openskill':>9} {'mu':>7}"
    )
    bt = result.bradley_terry
    order = bt.order() if bt is not None else []
    order += sorted((k for k in result.ratings if k not in order),
                    key=lambda k: -result.ratings[k].ordinal)  # fmt: skip
    for key in order:
        rank = bt.rank[key] if bt is not None and key in bt.rank else ""
        line = f"{rank:>4}  {_label(key)[:32]:<32}"
        if bt is not None and key in bt.ratings:
            line += f" {bt.ratings[key]:>6.0f} {bt.lower[key]:>6.0f}..{bt.upper[key]:<6.0f}"
        else:
            line += f" {'':>6} {'':>14}"
        r = result.ratings.get(key)
        if r is not None:
            line += f"  {r.ordinal:>9.2f} {r.mu:>7.2f}"
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
    """Play a round robin between ``players`` (any player text: bots, ``run:NAME@STEP``,
    ``model:NAME``, ``openai:BASE_URL#MODEL``), record it in ``db`` unless ``record`` is
    False, and print the cross-table and ratings (and the served models' token usage).
    When every game was aborted (a served model's server down, its key refused) there is
    no table: one line on ``err`` says why, and it returns EXIT_FAILED."""
    out = out or sys.stdout
    err = err or sys.stderr

    async def run() -> TournamentResult:
        from matchmaking.agents import move_clock, preload
        from matchmaking.served import close_clients

        specs = player_specs(players, runs_dir=runs_dir)
        await preload(specs)  # a model's weights load before the move clocks run
        clock = move_clock(specs, 60.0)
        try:
            return await play(specs, clock)
        finally:
            await close_clients()

    async def play(specs: Sequence[AgentSpec], clock: float) -> TournamentResult:
        from tqdm import tqdm

        total = games_per_pair * len(specs) * (len(specs) - 1) // 2
        bar = tqdm(total=total, desc="tournament", unit="game", disable=quiet or None, file=err)
        try:
            return await _recorded_round_robin(
                game_id, specs, games_per_pair, db if record else None,
                seed=seed, concurrency=concurrency, on_game=lambda: bar.update(1), clock=clock,
            )  # fmt: skip
        finally:
            bar.close()

    from matchmaking.tokenusage import token_usage, usage_dict, usage_lines, usage_since

    before = token_usage()
    try:
        result = asyncio.run(run())
    except (*_BAD_INPUT, StorageError) as exc:
        print(f"arena tournament: error: {exc}", file=err)
        return EXIT_USAGE
    usage = usage_since(before)
    aborted = sum(s.aborted for s in result.table.values()) // 2
    if aborted and not result.results:  # every game aborted: say why, once
        from arena.play import all_aborted

        if as_json:
            print(json.dumps({**result.as_dict(), **usage_dict(usage)}), file=out)
        reasons = "; ".join(dict.fromkeys(result.aborted_reasons))
        print(f"arena tournament: error: {all_aborted(aborted, reasons)}", file=err)
        return EXIT_FAILED
    if as_json:
        print(json.dumps({**result.as_dict(), **usage_dict(usage)}), file=out)
    else:
        print("\n".join([format_tournament(result), *usage_lines(usage)]), file=out)
    return EXIT_OK


async def _recorded_round_robin(
    game_id: str,
    specs: Sequence[AgentSpec],
    games_per_pair: int,
    db: str | None,
    *,
    seed: int,
    concurrency: int,
    on_game: Callable[[], None],
    clock: float,
) -> TournamentResult:
    """The round robin, recorded and rated in ``db`` (None: not recorded). Raises
    StorageError when a match could not be stored."""
    from arena.eventbus import EventBus
    from games.limits import SessionLimits
    from matchmaking.live import RatingKeeper
    from matchmaking.tournament import round_robin
    from storage import Recorder, open_database

    bus = EventBus()
    if db is None:
        return await round_robin(
            game_id, specs, games_per_pair, seed=seed, concurrency=concurrency,
            bus=bus, on_game=on_game, limits=SessionLimits(move_timeout_s=clock),
        )  # fmt: skip
    database = await open_database(db)
    try:
        async with Recorder(database, bus) as recorder, RatingKeeper(database, bus):
            result = await round_robin(
                game_id, specs, games_per_pair, seed=seed, concurrency=concurrency,
                bus=bus, on_game=on_game, limits=SessionLimits(move_timeout_s=clock),
            )  # fmt: skip
            await recorder.flush()
        if recorder.stats.lost_matches:
            raise StorageError(f"{recorder.stats.lost_matches} match(es) could not be stored")
    finally:
        await database.close()
    return result


def cmd_leaderboard(args: argparse.Namespace) -> int:
    """``arena leaderboard``."""
    from matchmaking.cli import leaderboard_command

    return leaderboard_command(
        args.game,
        args.db,
        method=args.method,
        bootstrap=args.bootstrap,
        rebuild=args.rebuild,
        as_json=args.json,
    )


def cmd_tournament(args: argparse.Namespace) -> int:
    """``arena tournament``."""
    from matchmaking.cli import tournament_command

    players = [p.strip() for p in args.players.split(",") if p.strip()]
    vouch("arena tournament", args.game, args.allow_failing)
    return tournament_command(
        args.game,
        players,
        args.games_per_pair,
        args.db,
        seed=args.seed,
        concurrency=args.concurrency,
        runs_dir=args.runs_dir,
        record=not args.no_record,
        as_json=args.json,
        quiet=args.quiet,
    )


def register(sub: Any) -> None:
    """Add ``play``, ``leaderboard`` and ``tournament`` to the ``arena`` command."""
    register_play(sub)
    _register_leaderboard(sub)
    _register_tournament(sub)


def _register_leaderboard(sub: Any) -> None:
    """``arena leaderboard``'s options."""
    board = sub.add_parser(
        "leaderboard",
        help="ratings of bots, checkpoints, people and agents on a game",
        description="The leaderboard of a game, best first: Bradley-Terry fitted to every "
        "stored rated result (the default, bt: the live ratings are this fit kept current; "
        "Elo scale, the random bot anchored at 1000, 95%% intervals from the fit's standard "
        "errors or --bootstrap refits), or openskill (Plackett-Luce replayed over the "
        "results in the order they ended, for comparison). Learner seats and self-play are "
        "not rated.",
    )
    board.add_argument("--game", required=True, help="game id, e.g. TicTacToe-v0")
    board.add_argument("--method", choices=list(METHODS), default=METHODS[0])
    board.add_argument(
        "--bootstrap",
        type=_bootstrap_count,
        default=0,
        help="bt: 95%% intervals from this many resampled refits (default: 0, the fit's "
        "standard errors)",
    )
    board.add_argument(
        "--rebuild", action="store_true", help="recompute the live ratings from the stored results"
    )
    board.add_argument("--json", action="store_true", help="print JSON")
    add_db_option(board)
    board.set_defaults(func=cmd_leaderboard)


def _register_tournament(sub: Any) -> None:
    """``arena tournament``'s options."""
    tour = sub.add_parser(
        "tournament",
        help="round robin between bots and checkpoints, recorded, with ratings",
        description="Every pair of players plays --games-per-pair games (seats swapped, "
        "concurrently, recorded); prints the cross-table and the ratings.",
    )
    tour.add_argument("--game", required=True, help="game id (two seats), e.g. TicTacToe-v0")
    tour.add_argument(
        "--players",
        required=True,
        help="comma-separated: bot names (random, optimal), checkpoints run:NAME@STEP, "
        "models model:NAME and served models openai:BASE_URL#MODEL",
    )
    tour.add_argument("--games-per-pair", type=int, default=20, help="(default: 20)")
    tour.add_argument("--seed", type=int, default=0, help="seed of the first game")
    tour.add_argument("--concurrency", type=int, default=32, help="games at once (default: 32)")
    tour.add_argument("--runs-dir", default="runs", help="where run:NAME looks (default: runs)")
    tour.add_argument("--no-record", action="store_true", help="do not store the matches")
    tour.add_argument("--json", action="store_true", help="print JSON")
    tour.add_argument("--quiet", action="store_true", help="no progress bar")
    add_allow_failing(tour)
    add_db_option(tour)
    tour.set_defaults(func=cmd_tournament)
