"""Reading matches back: named queries with typed results.

Every function takes a ``Database`` (it opens a read session) or an ``AsyncSession`` (to
compose queries in one transaction) and returns frozen dataclasses, never ORM objects.
Times are Unix seconds.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, exists, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from arena.events import Turn
from games.api import GameMessage
from games.outcome import Result, result_of
from storage.db import Database
from storage.errors import AmbiguousMatchId, MatchNotFound, StorageError
from storage.models import BlockDictionary, Match, MatchStatus, Policy, Seat, TurnBlock
from storage.turnlog import (
    BlockError,
    MatchLog,
    SeatView,
    observations,
    read_blocks,
    seat_views,
)

MAX_PAGE = 1_000
"""Most matches one ``list_matches`` call returns."""
MIN_PREFIX = 8
"""Shortest match id prefix ``get_match`` accepts."""

Source = Database | AsyncSession


@dataclass(frozen=True)
class SeatSummary:
    """One seat of a stored match."""

    seat: int
    policy: str
    """The player's name ("random", "learner", ...)."""
    kind: str
    """The policy's kind: bot, checkpoint, human or learner."""
    reward: float | None
    """Final reward; None while live and for aborted matches."""
    moves: int
    invalid_moves: int
    forfeited: bool


@dataclass(frozen=True)
class MatchSummary:
    """A stored match, without its turns."""

    id: str
    game_id: str
    status: str
    """live, finished, truncated or aborted."""
    reason: str
    """How it ended, in words."""
    seed: int
    num_players: int
    num_turns: int
    started_at: float
    ended_at: float | None
    run_id: str | None
    group_id: str | None
    seats: tuple[SeatSummary, ...]

    @property
    def players(self) -> tuple[str, ...]:
        """Who played each seat."""
        return tuple(s.policy for s in self.seats)

    @property
    def rewards(self) -> tuple[float | None, ...]:
        """Final reward of each seat."""
        return tuple(s.reward for s in self.seats)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready copy."""
        return asdict(self)


@dataclass(frozen=True)
class MatchDetail:
    """A stored match with every turn, in order."""

    match: MatchSummary
    turns: tuple[Turn, ...]
    """Every move, as its seat saw the game: the one turn record (``arena.events.Turn``),
    its ``observation`` rebuilt from the stored messages. What a block does not keep reads
    as its default (``round``, ``private``); ``done`` is set on the last turn of a match
    that ended by its game."""
    start_state: str | None
    full_state: str | None
    """The all-seeing final state, once the match ended."""
    start_board: dict[str, Any] | None = None
    """The public board at the start, if any."""
    start_full_board: dict[str, Any] | None = None
    """The all-seeing board at the start, when it differs from ``start_board``."""
    start_messages: tuple[GameMessage, ...] | None = None
    """The messages the game sent as it started (None when they were not stored)."""
    log: MatchLog | None = field(default=None, repr=False, compare=False)
    """The stored log the turns were read from (``seat_views``)."""

    def seat_views(self) -> list[SeatView | None]:
        """What each turn's seat was given when it had to move: its whole transcript then
        and where the messages since its previous move begin (what prompts, the agent
        protocol's ``messages`` and the trainer's observations are made from), rebuilt
        from the stored messages; None for a turn stored as text only."""
        if self.log is None:
            return [None] * len(self.turns)
        return seat_views(self.log, self.match.num_players)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready copy (each message as ``{sender, text, kind, to}``)."""
        start = self.start_messages
        return {
            "match": asdict(self.match),
            "turns": [asdict(t) for t in self.turns],
            "start_state": self.start_state,
            "full_state": self.full_state,
            "start_board": self.start_board,
            "start_full_board": self.start_full_board,
            "start_messages": None if start is None else [asdict(m) for m in start],
        }


@dataclass(frozen=True)
class PolicyResults:
    """How one policy did over the finished and truncated matches (aborted ones carry no
    result). ``games`` counts seats played: a self-play match counts once per seat."""

    policy: str
    kind: str
    run_id: str | None
    games: int
    wins: int
    draws: int
    losses: int
    moves: int
    invalid_moves: int
    forfeits: int
    reward_total: float = 0.0
    """Sum of the final rewards (chips, points) over those games."""

    @property
    def mean_reward(self) -> float:
        """Mean final reward per game (0.0 with no games)."""
        return self.reward_total / self.games if self.games else 0.0

    @property
    def invalid_rate(self) -> float:
        """Invalid moves per move made (0.0 with no moves)."""
        return self.invalid_moves / self.moves if self.moves else 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready copy, with ``invalid_rate`` and ``mean_reward``."""
        return {
            **asdict(self),
            "invalid_rate": round(self.invalid_rate, 4),
            "mean_reward": round(self.mean_reward, 4),
        }


@asynccontextmanager
async def _reading(source: Source) -> AsyncIterator[AsyncSession]:
    if isinstance(source, AsyncSession):
        yield source
    else:
        async with source.sessions() as session:
            yield session


def check_status(status: str | None) -> None:
    """Raise ValueError naming the valid statuses when ``status`` is not one."""
    if status is not None and status not in set(MatchStatus):
        valid = ", ".join(s.value for s in MatchStatus)
        raise ValueError(f"unknown status {status!r}; choose from: {valid}")


def _filtered(
    query: Select[Any],
    game: str | None,
    run: str | None,
    policy: str | None,
    status: str | None,
) -> Select[Any]:
    check_status(status)
    if game is not None:
        query = query.where(Match.game_id == game)
    if run is not None:
        query = query.where(Match.run_id == run)
    if status is not None:
        query = query.where(Match.status == status)
    if policy is not None:
        played = (
            exists()
            .where(Seat.match_id == Match.id)
            .where(Seat.policy_id.in_(select(Policy.id).where(Policy.name == policy)))
        )
        query = query.where(played)
    return query


async def _seats(session: AsyncSession, match_ids: Sequence[str]) -> dict[str, list[SeatSummary]]:
    out: dict[str, list[SeatSummary]] = {m: [] for m in match_ids}
    for start in range(0, len(match_ids), 500):  # stay under bound-parameter limits
        rows = await session.execute(
            select(Seat, Policy.name, Policy.kind)
            .join(Policy, Policy.id == Seat.policy_id)
            .where(Seat.match_id.in_(match_ids[start : start + 500]))
            .order_by(Seat.match_id, Seat.seat)
        )
        for seat, name, kind in rows:
            out[seat.match_id].append(
                SeatSummary(
                    seat=seat.seat,
                    policy=name,
                    kind=kind,
                    reward=seat.reward,
                    moves=seat.moves,
                    invalid_moves=seat.invalid_moves,
                    forfeited=seat.forfeited,
                )
            )
    return out


async def _live_turns(session: AsyncSession, matches: Sequence[Match]) -> dict[str, int]:
    """The turns stored so far of each live match among ``matches`` (a live match's
    ``num_turns`` is only written at its end)."""
    live = [m.id for m in matches if m.status == MatchStatus.LIVE]
    if not live:
        return {}
    rows = await session.execute(
        select(TurnBlock.match_id, func.sum(TurnBlock.count))
        .where(TurnBlock.match_id.in_(live))
        .group_by(TurnBlock.match_id)
    )
    return {match_id: int(count) for match_id, count in rows.all()}


def _summary(
    match: Match, seats: list[SeatSummary], live_turns: Mapping[str, int] | None = None
) -> MatchSummary:
    if match.status == MatchStatus.LIVE and live_turns is not None:
        num_turns = live_turns.get(match.id, 0)
    else:
        num_turns = match.num_turns
    return MatchSummary(
        id=match.id,
        game_id=match.game_id,
        status=match.status,
        reason=match.reason,
        seed=match.seed,
        num_players=match.num_players,
        num_turns=num_turns,
        started_at=match.started_at,
        ended_at=match.ended_at,
        run_id=match.run_id,
        group_id=match.group_id,
        seats=tuple(seats),
    )


async def list_matches(
    source: Source,
    *,
    game: str | None = None,
    run: str | None = None,
    policy: str | None = None,
    status: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> list[MatchSummary]:
    """Stored matches, newest first, filtered by game id, run id, a player's policy name
    and status; ``limit`` (1 to ``MAX_PAGE``) of them from ``offset``.

    Raises ValueError for an unknown status or a bad page, SQLAlchemy errors when the
    database cannot be read.
    """
    if not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be between 1 and {MAX_PAGE}, not {limit}")
    if offset < 0:
        raise ValueError(f"offset must be 0 or more, not {offset}")
    query = _filtered(select(Match), game, run, policy, status)
    query = query.order_by(Match.started_at.desc(), Match.id.desc()).limit(limit).offset(offset)
    async with _reading(source) as session:
        matches = list((await session.scalars(query)).all())
        seats = await _seats(session, [m.id for m in matches])
        live_turns = await _live_turns(session, matches)
    return [_summary(m, seats[m.id], live_turns) for m in matches]


async def count_matches(
    source: Source,
    *,
    game: str | None = None,
    run: str | None = None,
    policy: str | None = None,
    status: str | None = None,
) -> int:
    """How many stored matches pass the filters of ``list_matches``.

    Raises ValueError for an unknown status.
    """
    query = _filtered(select(func.count()).select_from(Match), game, run, policy, status)
    async with _reading(source) as session:
        return int(await session.scalar(query) or 0)


async def resolve_match_id(source: Source, match_id: str) -> str:
    """The full id of the match whose id is ``match_id`` or starts with it (at least
    ``MIN_PREFIX`` characters).

    Raises MatchNotFound, AmbiguousMatchId.
    """
    async with _reading(source) as session:
        if await session.scalar(select(Match.id).where(Match.id == match_id)) is not None:
            return match_id
        if len(match_id) >= MIN_PREFIX:
            prefixed: ColumnElement[bool]
            if session.get_bind().dialect.name == "sqlite":
                # A range on the primary key (not LIKE) so that the index is used.
                prefixed = (Match.id >= match_id) & (Match.id < match_id + "\U0010ffff")
            else:  # a range is only right under a bytewise collation; LIKE under any
                prefixed = Match.id.startswith(match_id, autoescape=True)
            found = list(
                (
                    await session.scalars(
                        select(Match.id).where(prefixed).order_by(Match.id).limit(3)
                    )
                ).all()
            )
            if len(found) == 1:
                return found[0]
            if found:
                raise AmbiguousMatchId(
                    f"match id {match_id!r} is ambiguous: it starts {', '.join(found[:2])}"
                    f"{', ...' if len(found) > 2 else ''}; give more characters"
                )
    hint = "" if len(match_id) >= MIN_PREFIX else f" (give at least {MIN_PREFIX} characters)"
    raise MatchNotFound(
        f"no stored match has id {match_id!r}{hint}; list them with `arena matches`"
    )


def _data(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    value: dict[str, Any] = json.loads(text)
    return value


async def load_log(session: AsyncSession, match_id: str, since: int = 0) -> MatchLog:
    """The stored log of one match (``storage.turnlog``), its turns from index ``since``
    (the start and the end too when ``since`` is 0). Raises StorageError for a block that
    cannot be read, SQLAlchemy errors."""
    query = select(TurnBlock.first, TurnBlock.data, TurnBlock.dictionary_id).where(
        TurnBlock.match_id == match_id
    )
    if since > 0:
        query = query.where(TurnBlock.first + TurnBlock.count > since)
    rows = (await session.execute(query.order_by(TurnBlock.seq))).all()
    dictionaries = await _dictionaries(session, {d for _, _, d in rows if d is not None})
    try:
        return read_blocks(
            (
                (first, bytes(data), None if d is None else dictionaries.get(d))
                for first, data, d in rows
            ),
            since,
        )
    except BlockError as exc:
        raise StorageError(f"match {match_id}: {exc}") from exc


async def _dictionaries(session: AsyncSession, ids: set[int]) -> dict[int, bytes]:
    """The block dictionaries with these ids (``storage.models.BlockDictionary``)."""
    if not ids:
        return {}
    rows = await session.execute(
        select(BlockDictionary.id, BlockDictionary.data).where(BlockDictionary.id.in_(ids))
    )
    return {i: bytes(data) for i, data in rows}


async def get_match(source: Source, match_id: str) -> MatchDetail:
    """One match with its seats and every turn in order, each seat's observation rebuilt
    from the stored messages (``storage.turnlog``); ``match_id`` may be a prefix of
    ``MIN_PREFIX`` or more characters.

    Raises MatchNotFound, AmbiguousMatchId, StorageError (a damaged block), SQLAlchemy
    errors.
    """
    async with _reading(source) as session:
        full_id = await resolve_match_id(session, match_id)
        match = await session.get(Match, full_id)
        if match is None:  # deleted in between
            raise MatchNotFound(f"no stored match has id {match_id!r}")
        seats = await _seats(session, [full_id])
        log = await load_log(session, full_id)
    seen = observations(log, match.num_players)
    last = len(log.turns) - 1 if match.status == MatchStatus.FINISHED else -1
    return MatchDetail(
        match=_summary(match, seats[full_id], {full_id: len(log.turns)}),
        turns=tuple(
            replace(t, observation=o, done=i == last)
            for i, (t, o) in enumerate(zip(log.turns, seen, strict=True))
        ),
        start_state=log.start_state,
        full_state=log.full_state,
        start_board=_data(log.start_board),
        start_full_board=_data(log.start_full_board),
        start_messages=log.start_messages,
        log=log,
    )


async def policy_results(
    source: Source, *, game: str | None = None, run: str | None = None
) -> list[PolicyResults]:
    """Games, wins, draws, losses (``games.outcome``: each seat against the best other
    seat of its match), mean reward and invalid moves per policy over the finished and
    truncated matches, for one game (or all) and one run (or all); most games first.

    Raises SQLAlchemy errors when the database cannot be read.
    """
    query = (
        select(
            Seat.match_id,
            Seat.reward,
            Seat.moves,
            Seat.invalid_moves,
            Seat.forfeited,
            Policy.name,
            Policy.kind,
            Policy.run_id,
        )
        .join(Policy, Seat.policy_id == Policy.id)
        .join(Match, Match.id == Seat.match_id)
        .where(Match.status.in_([MatchStatus.FINISHED, MatchStatus.TRUNCATED]))
        .order_by(Seat.match_id, Seat.seat)
        .execution_options(yield_per=RESULTS_BATCH)
    )
    if game is not None:
        query = query.where(Match.game_id == game)
    if run is not None:
        query = query.where(Match.run_id == run)
    totals: dict[tuple[str, str, str | None], list[float]] = {}

    def count(seats: list[Any]) -> None:
        # Each seat's result from the whole match's rewards: games.outcome decides.
        rewards = [float(s.reward or 0.0) for s in seats]
        for index, s in enumerate(seats):
            row = totals.setdefault((s.name, s.kind, s.run_id), [0.0] * 8)
            result = result_of(index, rewards)
            row[0] += 1
            row[1] += result is Result.WIN
            row[2] += result is Result.DRAW
            row[3] += result is Result.LOSS
            row[4] += s.moves or 0
            row[5] += s.invalid_moves or 0
            row[6] += bool(s.forfeited)
            row[7] += rewards[index]

    async with _reading(source) as session:
        match: list[Any] = []
        async for seat in await session.stream(query):
            if match and seat.match_id != match[0].match_id:
                count(match)
                match = []
            match.append(seat)
        if match:
            count(match)
    results = [
        PolicyResults(
            policy=name,
            kind=kind,
            run_id=run_id,
            games=int(row[0]),
            wins=int(row[1]),
            draws=int(row[2]),
            losses=int(row[3]),
            moves=int(row[4]),
            invalid_moves=int(row[5]),
            forfeits=int(row[6]),
            reward_total=row[7],
        )
        for (name, kind, run_id), row in totals.items()
    ]
    return sorted(results, key=lambda r: (-r.games, r.policy))


RESULTS_BATCH = 10_000
"""Seats read per batch by ``policy_results`` (its memory is one batch and the totals)."""


TURNS_AFTER_CHUNK = 200
"""Matches per query in ``public_turns_after`` (each adds bound parameters)."""


async def public_turns_after(source: Source, after: Mapping[str, int]) -> dict[str, list[Turn]]:
    """For each match id in ``after``, its stored turns whose index is at least the given
    one, in order, as spectators of a live match may be shown them: without what the seat
    saw or wrote (``observation`` and ``action`` are empty, no tokens, no messages, no
    ``full_board``), with the parsed ``move`` and the public ``board``. Raises
    StorageError (a damaged block), SQLAlchemy errors."""
    out: dict[str, list[Turn]] = {}
    items = list(after.items())
    async with _reading(source) as session:
        for start in range(0, len(items), TURNS_AFTER_CHUNK):
            chunk = items[start : start + TURNS_AFTER_CHUNK]
            where = or_(
                *(
                    and_(TurnBlock.match_id == m, TurnBlock.first + TurnBlock.count > k)
                    for m, k in chunk
                )
            )
            rows = await session.execute(
                select(TurnBlock.match_id, TurnBlock.first, TurnBlock.data, TurnBlock.dictionary_id)
                .where(where)
                .order_by(TurnBlock.match_id, TurnBlock.seq)
            )
            found = rows.all()
            dictionaries = await _dictionaries(session, {d for *_, d in found if d is not None})
            by_match: dict[str, list[tuple[int, bytes, bytes | None]]] = {}
            for match_id, first, data, d in found:
                dictionary = None if d is None else dictionaries.get(d)
                by_match.setdefault(match_id, []).append((first, bytes(data), dictionary))
            for match_id, blocks in by_match.items():
                try:
                    log = read_blocks(blocks, after[match_id])
                except BlockError as exc:
                    raise StorageError(f"match {match_id}: {exc}") from exc
                out[match_id] = [
                    replace(
                        t,
                        observation="",
                        action="",
                        tokens=None,
                        logprobs=None,
                        full_board=None,
                        messages=None,
                        legal_moves=None,
                    )
                    for t in log.turns
                ]
    return out
