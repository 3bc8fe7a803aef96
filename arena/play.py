"""Bot matches: play N games of a game between named bots and tally the results."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from arena.coordinator import GameCoordinator
from arena.eventbus import EventBus
from arena.match import Lineup, build_match
from arena.seats import AgentSpec, SeatAgent, agent_spec
from games.limits import SessionLimits
from games.outcome import Result, as_list, result_of
from games.registry import check_players, get_spec
from games.session import Outcome, Status
from games.sessionerrors import GameError

MAX_ABORT_REASONS = 5
"""Distinct reasons of aborted matches a ``PlayStats`` keeps (with how many matches each
aborted); the matches aborted for others are in ``aborted`` only."""


@dataclass
class SeatStats:
    """Results of one seat over many games."""

    player: str
    wins: int = 0
    draws: int = 0
    losses: int = 0
    invalid_moves: int = 0
    forfeits: int = 0
    reward_total: float = 0.0
    """Sum of the seat's final rewards over the games that were not aborted."""

    @property
    def mean_reward(self) -> float:
        """The seat's mean final reward (chips, points) over its scored games."""
        games = self.wins + self.draws + self.losses
        return self.reward_total / games if games else 0.0


@dataclass
class PlayStats:
    """Results of a batch of matches."""

    game_id: str
    seats: list[SeatStats]
    games: int = 0
    finished: int = 0
    truncated: int = 0
    aborted: int = 0
    turns: int = 0
    seconds: float = 0.0
    abort_reasons: list[str] = field(default_factory=list)
    """The distinct reasons matches were aborted for, in the order first seen (at most
    ``MAX_ABORT_REASONS``)."""
    abort_counts: list[int] = field(default_factory=list)
    """How many matches each of ``abort_reasons`` aborted."""

    @property
    def games_per_s(self) -> float:
        """Games completed per second of wall time."""
        return self.games / self.seconds if self.seconds > 0 else 0.0

    def add(self, outcome: Outcome, invalid_moves: Sequence[int], turns: int) -> None:
        """Count one match."""
        self.games += 1
        self.turns += turns
        if outcome.status is Status.ABORTED:
            self.aborted += 1
            self._count_abort(outcome.reason, 1)
            return
        if outcome.status is Status.TRUNCATED:
            self.truncated += 1
        else:
            self.finished += 1
        rewards = as_list(outcome.rewards, len(self.seats))
        for seat, stats in enumerate(self.seats):
            result = result_of(seat, rewards)
            stats.wins += result is Result.WIN
            stats.draws += result is Result.DRAW
            stats.losses += result is Result.LOSS
            stats.reward_total += rewards[seat]
            stats.invalid_moves += invalid_moves[seat]
            stats.forfeits += seat in outcome.forfeited

    def absorb(self, other: PlayStats) -> None:
        """Add ``other``'s games (same game and seats) to these."""
        for mine, theirs in zip(self.seats, other.seats, strict=True):
            for name in ("wins", "draws", "losses", "invalid_moves", "forfeits", "reward_total"):
                setattr(mine, name, getattr(mine, name) + getattr(theirs, name))
        for name in ("games", "finished", "truncated", "aborted", "turns", "seconds"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for reason, count in zip(other.abort_reasons, other.abort_counts, strict=True):
            self._count_abort(reason, count)

    def abort_summary(self) -> str:
        """The reasons matches were aborted for, each once with how many (``REASON (3
        games); ...``), on one line; just the reason when every aborted match had it."""
        if len(self.abort_reasons) == 1 and self.abort_counts[0] == self.aborted:
            return self.abort_reasons[0]
        counted = zip(self.abort_reasons, self.abort_counts, strict=True)
        parts = [f"{reason} ({games(count)})" for reason, count in counted]
        unnamed = self.aborted - sum(self.abort_counts)
        if unnamed:
            parts.append(f"other reasons ({games(unnamed)})")
        return "; ".join(parts)

    def _count_abort(self, reason: str, count: int) -> None:
        if reason in self.abort_reasons:
            self.abort_counts[self.abort_reasons.index(reason)] += count
        elif len(self.abort_reasons) < MAX_ABORT_REASONS:
            self.abort_reasons.append(reason)
            self.abort_counts.append(count)

    def as_dict(self) -> dict[str, object]:
        """JSON-ready summary."""
        return {
            "game": self.game_id,
            "games": self.games,
            "finished": self.finished,
            "truncated": self.truncated,
            "aborted": self.aborted,
            "turns": self.turns,
            "seconds": round(self.seconds, 3),
            "games_per_s": round(self.games_per_s, 2),
            "seats": [{**s.__dict__, "mean_reward": s.mean_reward} for s in self.seats],
            "abort_reasons": self.abort_reasons,
            "abort_counts": self.abort_counts,
        }


def games(count: int) -> str:
    """``1 game``, ``3 games``."""
    return f"{count} game" if count == 1 else f"{count} games"


def all_aborted(count: int, reasons: str) -> str:
    """The line that says a batch of ``count`` games was all aborted, and why (``reasons``,
    each once: ``PlayStats.abort_summary``): ``all 20 games were aborted: REASON``."""
    which = "the game was" if count == 1 else f"all {count} games were"
    return f"{which} aborted: {reasons}"


def validate_players(game_id: str, players: Sequence[str | AgentSpec]) -> None:
    """Raise UnknownGame, GameUnavailable, ValueError or UnknownBot for a bad line-up.
    ``players`` are bot names or agent specs (a checkpoint: ``matchmaking``)."""
    from games.registry import GameUnavailable

    spec = get_spec(game_id)
    if not spec.available:
        raise GameUnavailable(f"{game_id} is not available here: {spec.reason}")
    check_players(spec, len(players))
    for player in players:
        agent_spec(player).check(game_id)


async def play_matches(
    game_id: str,
    players: Sequence[str | AgentSpec],
    games: int,
    *,
    seed: int = 0,
    limits: SessionLimits | None = None,
    concurrency: int = 32,
    bus: EventBus | None = None,
    on_match_done: Callable[[GameCoordinator], None] | None = None,
    agent_wrapper: Callable[[int, SeatAgent], SeatAgent] | None = None,
) -> PlayStats:
    """Play ``games`` games (game i with seed ``seed + i``), ``concurrency`` at a time, under
    ``limits`` (every clock included; None: the defaults).

    ``concurrency`` workers take the next game as they finish one: memory does not grow
    with ``games`` (no task is created before its game starts). ``agent_wrapper`` may
    wrap each seat's bot (the CLI's live view paces them).

    Raises what ``validate_players`` raises before any game starts; if ``on_match_done``
    raises, the games in progress are cancelled (aborted) and the error propagates.
    """
    validate_players(game_id, players)
    specs = [agent_spec(p) for p in players]
    names = [spec.name for spec in specs]
    if games < 1:
        raise ValueError("games must be at least 1")
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    stats = PlayStats(game_id=game_id, seats=[SeatStats(player=n) for n in names])
    started = time.perf_counter()
    indices = iter(range(games))  # shared by the workers: each takes the next game

    async def one(index: int) -> None:
        lineup = Lineup(game_id, tuple(specs), seed + index)
        try:
            coordinator = build_match(lineup, bus=bus, limits=limits, wrap=agent_wrapper)
        except GameError as exc:  # the game failed to start: count it, go on
            stats.add(Outcome(Status.ABORTED, {}, str(exc)), [0] * len(players), 0)
            return
        session = coordinator.session
        try:
            outcome = await coordinator.wait_done()
        finally:
            coordinator.abort("play stopped")  # (no-op once over) cancelled: end it now
        stats.add(outcome, session.invalid_moves, len(session.turns))
        if on_match_done is not None:
            on_match_done(coordinator)

    async def worker() -> None:
        for index in indices:
            await one(index)

    try:
        async with asyncio.TaskGroup() as group:  # one failure cancels the other workers
            for _ in range(min(concurrency, games)):
                group.create_task(worker())
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None
    stats.seconds = time.perf_counter() - started
    return stats
