"""``arena play``: bot, checkpoint and model matches, the first one watched move by move
(``--watch``), recorded unless ``--no-record``, and a summary of wins, draws and losses.

Bad input (an unknown game, player or checkpoint, an unusable database) prints one line
and exits with 2; a game stopped at the move cap, or a match the database did not store,
returns 1 after the summary; when every game was aborted (a served model's server down,
its key refused) there is no summary: one line says why, and the exit is 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import typing
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from arena.identity import BadPolicyRef
from games.bots import UnknownBot
from games.cli import add_allow_failing, vouch
from games.console import EXIT_FAILED, UsageError, fail
from games.registry import GameUnavailable, UnknownGame
from matchmaking.players import player_specs
from storage.cli import add_db_option
from storage.rundir import UnknownCheckpoint

if TYPE_CHECKING:
    from arena.eventbus import EventBus
    from arena.play import PlayStats
    from arena.seats import AgentSpec, SeatAgent, SeatTurn
    from games.limits import SessionLimits
    from matchmaking.tokenusage import TokenUsage


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
    from matchmaking.tokenusage import token_usage, usage_since

    players, limits = _play_setup(args)
    before = token_usage()
    stats, not_stored = _play_recorded(args, players, limits)
    if stats.games and stats.aborted == stats.games:  # nothing to sum up: say why, once
        from arena.play import all_aborted

        if args.json:
            _report_play(args, stats, usage_since(before))
        line = all_aborted(stats.games, stats.abort_summary())
        print(f"arena play: error: {line}", file=sys.stderr)
        return EXIT_FAILED
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
    from matchmaking.tokenusage import usage_dict, usage_lines

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
    from arena.play import games

    for reason, count in zip(stats.abort_reasons, stats.abort_counts, strict=True):
        print(f"aborted ({games(count)}): {reason}")
    for line in usage_lines(usage or {}):
        print(line)
    return 0


def register_play(sub: Any) -> None:
    """Add ``play`` and its options to the ``arena`` command."""
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
