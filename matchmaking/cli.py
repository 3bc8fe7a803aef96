"""``arena play``, ``arena leaderboard`` and ``arena tournament``: who plays whom, and how
they rate.

Bad input (an unknown game, player or checkpoint, an unusable database) prints one line
and returns 2; nothing else is raised.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import typing
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from arena.identity import BadPolicyRef, PolicyRef
from games.bots import UnknownBot
from games.cli import add_allow_failing, vouch
from games.console import EXIT_FAILED, EXIT_OK, EXIT_USAGE, UsageError, fail
from games.registry import GameUnavailable, UnknownGame
from matchmaking.leaderboard import METHODS, Method, leaderboard
from matchmaking.players import player_specs
from storage.cli import add_db_option
from storage.errors import StorageError
from storage.rundir import UnknownCheckpoint

if TYPE_CHECKING:
    from arena.eventbus import EventBus
    from arena.play import PlayStats
    from arena.seats import AgentSpec, SeatAgent, SeatTurn
    from games.limits import SessionLimits
    from matchmaking.served import TokenUsage
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
    False, and print the cross-table and ratings (and the served models' token usage)."""
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

    from matchmaking.served import token_usage, usage_dict, usage_lines, usage_since

    before = token_usage()
    try:
        result = asyncio.run(run())
    except (*_BAD_INPUT, StorageError) as exc:
        print(f"arena tournament: error: {exc}", file=err)
        return EXIT_USAGE
    usage = usage_since(before)
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


# -- arena play ----------------------------------------------------------------------------
def _players(args: argparse.Namespace) -> list[str]:
    from games.registry import get_spec

    names = [p.strip() for p in args.players.split(",") if p.strip()]
    if not names:
        raise UsageError("--players needs at least one bot name, e.g. random,optimal")
    spec = get_spec(args.game)
    if len(names) == 1:
        count = args.num_players if args.num_players is not None else spec.min_players
        return names * count
    if args.num_players is not None and args.num_players != len(names):
        raise UsageError(
            f"--num-players {args.num_players} but --players names {len(names)} bots; "
            "give one name per seat, or one name for all seats"
        )
    return names


class _PacedAgent:
    """Slows a bot down so a person can follow the live view."""

    def __init__(self, agent: SeatAgent, delay: float) -> None:
        self.agent = agent
        self.name = agent.name
        self.delay = delay

    async def act(self, turn: SeatTurn) -> str:
        await asyncio.sleep(self.delay)
        return await self.agent.act(turn)


async def _watch_one(
    args: argparse.Namespace, players: Sequence[typing.Any], limits: SessionLimits, bus: EventBus
) -> PlayStats:
    """Play the first game (seed SEED) alone, printing each move as it happens."""
    from arena.events import MatchAborted, MatchEnded, MatchStarted, TurnPlayed
    from arena.play import play_matches

    sub = bus.subscribe(name="terminal")

    async def printer() -> None:
        held: tuple[int, str | None] | None = None
        """(round, public state after it): a simultaneous round's state is printed once,
        after its last move."""

        def flush() -> None:
            nonlocal held
            if held is not None and held[1]:
                print(held[1])
            held = None

        async for event in sub:
            if held is not None and not (isinstance(event, TurnPlayed) and event.round == held[0]):
                flush()
            if isinstance(event, MatchStarted):
                line = ", ".join(f"seat {i}: {p}" for i, p in enumerate(event.players))
                print(f"== game 1 of {args.games}: {event.game_id} (seed {event.seed}) {line}")
                if event.public_state:
                    print(event.public_state)
            elif isinstance(event, TurnPlayed):
                mark = "" if event.valid else f"  INVALID ({event.reason})"
                where = f"round {event.round}, move" if event.round is not None else "move"
                if held is None:
                    print()
                print(
                    f"-- {where} {event.index + 1}: seat {event.seat} plays {event.action!r}{mark}"
                )
                if event.round is not None:
                    held = (event.round, event.public_state)
                elif event.public_state:
                    print(event.public_state)
            elif isinstance(event, MatchEnded):
                print(f"\n== {event.status}: rewards {list(event.rewards)} {event.reason}".rstrip())
                sub.close()
            elif isinstance(event, MatchAborted):
                print(f"\n== aborted: {event.reason}")
                sub.close()

    task = asyncio.create_task(printer())
    try:
        stats = await play_matches(
            args.game,
            players,
            1,
            seed=args.seed,
            limits=limits,
            bus=bus,
            agent_wrapper=lambda seat, agent: _PacedAgent(agent, args.watch_delay),
        )
        await task
        return stats
    finally:  # play raised or was cancelled: the printer must not outlive it
        sub.close()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def cmd_play(args: argparse.Namespace) -> int:
    """Play bot matches and print a summary."""
    vouch("arena play", args.game, args.allow_failing)
    from matchmaking.served import token_usage, usage_since

    players, limits = _play_setup(args)
    before = token_usage()
    stats, not_stored = _play_recorded(args, players, limits)
    code = _report_play(args, stats, usage_since(before))
    if not_stored:  # the results above stand, but the database does not hold them all
        print(f"arena play: error: {not_stored[0]}", file=sys.stderr)
        return EXIT_FAILED
    if stats.truncated:  # scored as draws, but the game never ended by its rules
        print(
            f"arena play: error: {stats.truncated} of {stats.games} games reached the move cap "
            f"(--max-turns {args.max_turns}) and were stopped as draws: the game does not end "
            "on this play (raise --max-turns, or fix the game)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    return code


def _play_setup(args: argparse.Namespace) -> tuple[tuple[AgentSpec, ...], SessionLimits]:
    """``arena play``'s players and limits, checked; bad input fails with one line."""
    from arena.play import validate_players
    from games.limits import SessionLimits
    from matchmaking.agents import move_clock

    try:
        # Bot names, or stored checkpoints as run:NAME@STEP (loaded on their first move).
        players = player_specs(_players(args), runs_dir=args.runs_dir)
        validate_players(args.game, players)
        limits = SessionLimits(
            invalid_move_policy=args.invalid_move_policy,
            max_turns=args.max_turns,
            max_action_chars=args.max_action_chars,
            move_timeout_s=move_clock(players, 30.0),
        )
    except (
        UnknownGame,
        GameUnavailable,
        UnknownBot,
        UnknownCheckpoint,
        BadPolicyRef,
        UsageError,
        ValueError,
    ) as exc:
        fail("arena play", str(exc))
    if args.games < 1:
        fail("arena play", "--games must be at least 1")
    return players, limits


def _play_recorded(
    args: argparse.Namespace, players: tuple[AgentSpec, ...], limits: SessionLimits
) -> tuple[PlayStats, list[str]]:
    """Play ``arena play``'s games (the watched one first), recorded unless --no-record:
    the stats, and the line saying what was not stored (empty when all was)."""
    from tqdm import tqdm

    from arena.eventbus import EventBus
    from arena.play import play_matches
    from matchmaking.recording import NotStored, recording

    async def play(bus: EventBus) -> PlayStats:
        from matchmaking.agents import preload

        await preload(players)  # a model's weights load before the move clocks run
        watched = await _watch_one(args, players, limits, bus) if args.watch else None
        rest = args.games - (watched.games if watched else 0)  # the watched game is game 1
        if not rest and watched is not None:
            return watched
        bar = tqdm(total=rest, desc=args.game, unit="game", disable=args.quiet or None)
        stats = await play_matches(
            args.game,
            players,
            rest,
            seed=args.seed + (args.games - rest),
            limits=limits,
            concurrency=args.concurrency,
            bus=bus,
            on_match_done=lambda _c: bar.update(1),
        )
        bar.close()
        if watched is not None:
            stats.absorb(watched)
        return stats

    not_stored: list[str] = []

    async def run() -> PlayStats:
        from matchmaking.served import close_clients

        bus = EventBus()
        stats: PlayStats | None = None
        try:
            async with recording("" if args.no_record else args.db, bus):
                try:
                    stats = await play(bus)
                finally:
                    await close_clients()
        except NotStored as exc:
            assert stats is not None
            not_stored.append(f"{exc} (of {stats.games} played)")
        assert stats is not None
        return stats

    from storage.errors import StorageError

    try:
        stats = asyncio.run(run())
    except StorageError as exc:
        fail("arena play", str(exc))
    return stats, not_stored


def _report_play(
    args: argparse.Namespace, stats: PlayStats, usage: dict[str, TokenUsage] | None = None
) -> int:
    """Print the summary of ``arena play`` (and the served models' token ``usage``)."""
    from matchmaking.served import usage_dict, usage_lines

    if args.json:
        print(json.dumps({**stats.as_dict(), **usage_dict(usage or {})}))
        return 0
    print(
        f"{stats.game_id}: {stats.games} games in {stats.seconds:.2f} s "
        f"({stats.games_per_s:.1f} games/s), {stats.turns} moves; "
        f"finished {stats.finished}, truncated {stats.truncated}, aborted {stats.aborted}"
    )
    head = ("SEAT", "PLAYER", "WIN", "DRAW", "LOSS", "REWARD", "INVALID", "FORFEIT")
    width = max(10, *(len(s.player) for s in stats.seats))
    print(
        f"{head[0]:<5} {head[1]:<{width}} "
        + "{:>6} {:>6} {:>6} {:>7} {:>8} {:>8}".format(*head[2:])
    )
    for i, s in enumerate(stats.seats):
        print(
            f"{i:<5} {s.player:<{width}} {s.wins:>6} {s.draws:>6} {s.losses:>6} "
            f"{s.mean_reward:>+7.3f} {s.invalid_moves:>8} {s.forfeits:>8}"
        )
    print("REWARD: mean final reward per game (chips or points where the game has them)")
    for reason in stats.abort_reasons:
        print(f"aborted: {reason}")
    for line in usage_lines(usage or {}):
        print(line)
    return 0


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
    _register_play(sub)
    _register_leaderboard(sub)
    _register_tournament(sub)


def _register_play(sub: Any) -> None:
    """``arena play``'s options."""
    play = sub.add_parser(
        "play",
        help="play bot matches and print the results",
        description="Play bot matches (game i uses seed SEED+i) and print wins, draws, losses.",
    )
    play.add_argument(
        "--game", required=True, help="game id, e.g. TicTacToe-v0 (see `arena games`)"
    )
    play.add_argument(
        "--players",
        default="random",
        help="comma-separated player per seat: a bot (random, optimal, ...), a stored "
        "checkpoint run:NAME@STEP, a model model:NAME or a served model openai:BASE_URL#MODEL; "
        "one name fills every seat (default: random)",
    )
    play.add_argument("--runs-dir", default="runs", help="where run:NAME looks (default: runs)")
    play.add_argument("--num-players", type=int, help="seats, when --players gives one name")
    play.add_argument("--games", type=int, default=100, help="number of games (default: 100)")
    play.add_argument("--seed", type=int, default=0, help="seed of the first game (default: 0)")
    play.add_argument(
        "--concurrency", type=int, default=32, help="games played at once (default: 32)"
    )
    play.add_argument(
        "--invalid-move-policy",
        choices=["forfeit", "retry"],
        default="forfeit",
        help="forfeit: the first invalid move loses (default); retry: TextArena's one retry",
    )
    play.add_argument(
        "--max-turns", type=int, default=1_000, help="moves before a game is stopped as a draw"
    )
    play.add_argument(
        "--max-action-chars",
        type=int,
        default=2_000,
        help="longer moves are cut to this many characters (default: 2000)",
    )
    play.add_argument("--watch", action="store_true", help="show game 0 move by move first")
    play.add_argument(
        "--watch-delay", type=float, default=0.4, help="seconds between moves in --watch"
    )
    play.add_argument("--json", action="store_true", help="print the summary as JSON")
    play.add_argument("--quiet", action="store_true", help="no progress bar")
    add_db_option(play)
    play.add_argument(
        "--no-record", action="store_true", help="do not store the matches in the database"
    )
    add_allow_failing(play)
    play.set_defaults(func=cmd_play)


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
