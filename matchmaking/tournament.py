"""Round-robin tournaments: every pair plays N games, seats swapped, concurrently.

For each pair of players (A, B), ``games_per_pair`` games: half with A in seat 0, half with
B there (an odd game goes to A first). Games run ``concurrency`` at a time; each is a real
match, published on the bus (and so recorded). The result is a cross-table (row's score
against column: win 1, draw 1/2) and ratings: openskill from the tournament's matches in
the order they ended, and Bradley-Terry with bootstrap intervals.

Two-seat games only: a round robin of pairs is what the cross-table means.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from arena.eventbus import EventBus
from arena.identity import policy_key
from arena.match import Lineup, build_match
from arena.seats import AgentSpec
from games.limits import SessionLimits
from games.outcome import Result, as_list, result_of
from games.session import Outcome, Status
from games.sessionerrors import GameError
from matchmaking.bttable import BTTable, bradley_terry
from matchmaking.openskill_ratings import LiveRatings
from matchmaking.paircounts import MatchResult
from matchmaking.ratings import Rating

MAX_GAMES_PER_PAIR = 100_000
DEFAULT_CONCURRENCY = 32


@dataclass
class PairScore:
    """One ordered pair's results, from the row player's side."""

    games: int = 0
    wins: int = 0
    draws: int = 0
    losses: int = 0
    aborted: int = 0

    @property
    def score(self) -> float:
        """Win 1, draw 1/2, loss 0, over the decided games (0.5 when none)."""
        decided = self.wins + self.draws + self.losses
        return (self.wins + 0.5 * self.draws) / decided if decided else 0.5


@dataclass
class TournamentResult:
    """A finished tournament."""

    game_id: str
    players: list[str]
    """Each player's policy key, in the order given."""
    table: dict[tuple[str, str], PairScore] = field(default_factory=dict)
    results: list[MatchResult] = field(default_factory=list)
    ratings: dict[str, Rating] = field(default_factory=dict)
    bradley_terry: BTTable | None = None
    aborted_reasons: list[str] = field(default_factory=list)

    def cross_table(self) -> list[list[str]]:
        """Rows of text: the header, then each player's score against each column."""
        head = ["", *self.players, "total"]
        rows = [head]
        for a in self.players:
            cells = [a]
            total = PairScore()
            for b in self.players:
                if a == b:
                    cells.append("-")
                    continue
                s = self.table[(a, b)]
                total.wins += s.wins
                total.draws += s.draws
                total.losses += s.losses
                cells.append(f"{s.score:.2f}")
            cells.append(f"{total.score:.2f}")
            rows.append(cells)
        return rows

    def as_dict(self) -> dict[str, object]:
        """JSON-ready summary."""
        return {
            "game": self.game_id,
            "players": self.players,
            "pairs": [
                {"player": a, "opponent": b, **vars(s), "score": round(s.score, 4)}
                for (a, b), s in self.table.items()
            ],
            "openskill": {
                p: {
                    "mu": round(r.mu, 3),
                    "sigma": round(r.sigma, 3),
                    "ordinal": round(r.ordinal, 3),
                }
                for p, r in self.ratings.items()
            },
            "bradley_terry": self.bradley_terry.rows() if self.bradley_terry else [],
        }


def _check_entries(
    game_id: str,
    players: Sequence[AgentSpec],
    names: Sequence[str],
    games_per_pair: int,
    concurrency: int,
) -> None:
    """Raise ValueError unless the round robin can be played (see ``round_robin``)."""
    if len(players) < 2:
        raise ValueError("a tournament needs at least two players")
    if len(set(names)) != len(names):
        raise ValueError(f"each player once: {names}")
    if not 1 <= games_per_pair <= MAX_GAMES_PER_PAIR:
        raise ValueError(f"games_per_pair must be in 1..{MAX_GAMES_PER_PAIR}")
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    for player in players:
        Lineup(game_id, (player, player)).check()


def _schedule(
    players: Sequence[AgentSpec], games_per_pair: int, seed: int
) -> list[tuple[AgentSpec, AgentSpec, int]]:
    """Every game to play: (seat 0, seat 1, seed), seats swapped every other game of a pair."""
    jobs: list[tuple[AgentSpec, AgentSpec, int]] = []
    for i, (pa, pb) in enumerate(itertools.combinations(players, 2)):
        for g in range(games_per_pair):
            first, second = (pa, pb) if g % 2 == 0 else (pb, pa)
            jobs.append((first, second, seed + i * MAX_GAMES_PER_PAIR + g))
    return jobs


def _tally(result: TournamentResult, live: LiveRatings, x: str, y: str, outcome: Outcome) -> None:
    """Count one played game (``x`` in seat 0, ``y`` in seat 1) in the table and ratings."""
    result.table[(x, y)].games += 1
    result.table[(y, x)].games += 1
    if outcome.status is Status.ABORTED:
        result.table[(x, y)].aborted += 1
        result.table[(y, x)].aborted += 1
        if len(result.aborted_reasons) < 10:
            result.aborted_reasons.append(outcome.reason)
        return
    rx, ry = as_list(outcome.rewards, 2)
    for seat, (p, q) in enumerate(((x, y), (y, x))):
        cell = result.table[(p, q)]
        seat_result = result_of(seat, (rx, ry))
        cell.wins += seat_result is Result.WIN
        cell.draws += seat_result is Result.DRAW
        cell.losses += seat_result is Result.LOSS
    result.results.append(MatchResult((x, y), (rx, ry)))
    live.update(result.game_id, [x, y], [rx, ry])


async def round_robin(
    game_id: str,
    players: Sequence[AgentSpec],
    games_per_pair: int,
    *,
    seed: int = 0,
    concurrency: int = DEFAULT_CONCURRENCY,
    bus: EventBus | None = None,
    limits: SessionLimits | None = None,
    on_game: Callable[[], None] | None = None,
    bootstrap: int = 200,
) -> TournamentResult:
    """Play the round robin (see the module docstring). Raises ValueError for fewer than
    two players, a repeated player, a game that is not two-seat, or a bad count."""
    names = [policy_key(p.name) for p in players]
    key_of = {id(p): k for p, k in zip(players, names, strict=True)}
    _check_entries(game_id, players, names, games_per_pair, concurrency)
    result = TournamentResult(game_id=game_id, players=names)
    for x, y in itertools.permutations(names, 2):
        result.table[(x, y)] = PairScore()
    live = LiveRatings()
    jobs = _schedule(players, games_per_pair, seed)
    semaphore = asyncio.Semaphore(concurrency)

    async def play(first: AgentSpec, second: AgentSpec, game_seed: int) -> None:
        x, y = key_of[id(first)], key_of[id(second)]
        async with semaphore:
            lineup = Lineup(game_id, (first, second), game_seed)
            try:
                coordinator = build_match(lineup, bus=bus, limits=limits, group_id="tournament")
            except GameError as exc:
                for p, q in ((x, y), (y, x)):
                    result.table[(p, q)].aborted += 1
                result.aborted_reasons.append(str(exc))
                return
            outcome = await coordinator.wait_done()
        _tally(result, live, x, y, outcome)
        if on_game is not None:
            on_game()

    tasks = [asyncio.ensure_future(play(*job)) for job in jobs]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    result.ratings = {p: live.get(game_id, p) for p in names}
    if result.results:
        result.bradley_terry = bradley_terry(result.results, bootstrap=bootstrap, seed=seed)
    return result
