"""Stored matches as dataset rows: which matches (``ExportQuery``, or its text form
``ExportQuery.parse``), and one ``ExportRow`` per seat that moved, read in bounded memory
(``export_rows``; ``export_matches`` gives each match's decoded turns with its rows).

Matches are read in pages of ``PAGE_MATCHES``, game by game, each game's ordered by start
time (its id breaking ties), each page found from where the last one ended (keyset
pagination: every page costs the same, however far in, where an OFFSET would read every
row before it again). Start time rather than the id alone because the schema's indexes
(game, status or run, then start time) hand the pages over in that order: a match id is
random, and ordering a game's matches by id made SQLite sort all of them for every page.
A page's seats and turn blocks come in one query each, and its matches are decoded one at
a time (``storage.turnlog``), their rows yielded as they are made: memory holds a page,
whatever the number of matches. The rows' schema is ``storage.exportschema``;
``storage.exportwrite`` writes them as JSON Lines or Parquet.

    query = ExportQuery(games=("TicTacToe-v0",), players=("random",), limit=1000)
    async for row in export_rows(db, query):
        ...
"""

from __future__ import annotations

import datetime
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy import Select, exists, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from arena.eventformat import format_messages
from arena.identity import policy_key
from games.api import GameMessage, MessageKind
from games.outcome import result_of
from games.registry import UnknownGame, get_spec
from storage.db import Database
from storage.errors import StorageError
from storage.exportschema import EXPORT_STATUSES, RESULTS, ChatMessage, ExportRow
from storage.models import BlockDictionary, Match, MatchStatus, Policy, Run, Seat, TurnBlock
from storage.turnlog import BlockError, MatchLog, read_blocks, shown_messages

PAGE_MATCHES = 500
"""Matches read per page (one query for them, one for their seats, one for their turn
blocks): what an export holds at once, besides the rows being written."""

Source = Database | AsyncSession
_Statement = TypeVar("_Statement", bound="Select[*tuple[Any, ...]]")


@asynccontextmanager
async def _reading(source: Source) -> AsyncIterator[AsyncSession]:
    """A read session of a ``Database``, or the caller's own ``AsyncSession``."""
    if isinstance(source, AsyncSession):
        yield source
    else:
        async with source.sessions() as session:
            yield session


class BadQuery(ValueError):
    """An export's query cannot be run: the message says what was wrong."""


QUERY_KEYS: tuple[str, ...] = (
    "game",
    "player",
    "run",
    "since",
    "until",
    "status",
    "result",
    "limit",
)
"""The keys of a query written as text (``ExportQuery.parse``), one per option of ``arena
export`` that selects matches or seats."""
_REPEATED = frozenset({"game", "player", "status", "result"})
"""The keys that may be given more than once."""


@dataclass(frozen=True)
class ExportQuery:
    """Which stored matches, and which of their seats, an export writes."""

    games: tuple[str, ...]
    """Game ids (at least one); a match of any of them is selected."""
    players: tuple[str, ...] = ()
    """Only matches where one of these played a seat: a recorded name (``random``,
    ``learner``) or a policy key (``bot:random@1``, ``checkpoint:run@120``)."""
    seat_player: bool = False
    """Keep only the seats that ``players`` played (else every seat of the match)."""
    run: str | None = None
    """Only matches of this training run (its name or id)."""
    since: float | None = None
    """Only matches started at or after this time (Unix seconds)."""
    until: float | None = None
    """Only matches started before this time (Unix seconds)."""
    statuses: tuple[str, ...] = ("finished",)
    """Only matches that ended so (``EXPORT_STATUSES``)."""
    results: tuple[str, ...] = ()
    """Only the seats with one of these results (``RESULTS``; empty: any); an aborted
    match has none."""
    limit: int | None = None
    """At most this many matches (those that give at least one row), the first in the
    order ``export_rows`` reads them."""

    @classmethod
    def parse(cls, text: str, *, games: Sequence[str] = ()) -> ExportQuery:
        """The query written ``KEY=VALUE,...`` with the keys of ``QUERY_KEYS`` (``arena
        export``'s options: ``game=TicTacToe-v0,player=optimal,since=2025-01-31,limit=500``);
        ``game``, ``player``, ``status`` and ``result`` may be given more than once
        (``game=A,game=B``). ``player`` selects the matches, not the seats (``seat_player``
        stays off). ``games``: the games when the text names none. Raises BadQuery."""
        values: dict[str, list[str]] = {}
        for part in text.split(","):
            key, sep, value = (s.strip() for s in part.partition("="))
            if not part.strip():
                continue
            if key not in QUERY_KEYS:
                keys = ", ".join(QUERY_KEYS)
                raise BadQuery(f"unknown key {key!r} in {text!r}; the keys: {keys}")
            if not sep or not value:
                raise BadQuery(f"{key!r} without a value in {text!r}: write {key}=VALUE")
            if key not in _REPEATED and key in values:
                raise BadQuery(f"{key!r} is given twice in {text!r}")
            values.setdefault(key, []).append(value)
        if not values:
            keys = ", ".join(QUERY_KEYS)
            raise BadQuery(f"an empty query {text!r}: write KEY=VALUE,... ({keys})")
        one = {key: found[0] for key, found in values.items()}
        limit = one.get("limit")
        if limit is not None and not limit.isdigit():
            raise BadQuery(f"limit {limit!r} is not a whole number")
        query = cls(
            games=tuple(values.get("game", games)),
            players=tuple(values.get("player", ())),
            run=one.get("run"),
            since=None if "since" not in one else parse_time(one["since"], "since"),
            until=None if "until" not in one else parse_time(one["until"], "until"),
            statuses=tuple(values.get("status", ("finished",))),
            results=tuple(values.get("result", ())),
            limit=None if limit is None else int(limit),
        )
        query.check()
        return query

    def check(self) -> None:
        """Raise BadQuery when the query is not one that can be run."""
        if not self.games:
            raise BadQuery("name at least one game (--game ID)")
        wrong = [s for s in self.statuses if s not in EXPORT_STATUSES]
        if wrong or not self.statuses:
            raise BadQuery(
                f"unknown status {(wrong or [''])[0]!r}; choose from: {', '.join(EXPORT_STATUSES)}"
            )
        wrong = [r for r in self.results if r not in RESULTS]
        if wrong:
            raise BadQuery(f"unknown result {wrong[0]!r}; choose from: {', '.join(RESULTS)}")
        if self.limit is not None and self.limit < 1:
            raise BadQuery(f"the limit must be 1 or more, not {self.limit}")
        if self.seat_player and not self.players:
            raise BadQuery("keeping the players' seats needs a player (--player POLICY)")
        if self.since is not None and self.until is not None and self.since >= self.until:
            raise BadQuery("the start of the time range must come before its end")


def parse_time(text: str, what: str = "time") -> float:
    """An ISO 8601 date or time (``2025-01-31``, ``2025-01-31T12:00``,
    ``2025-01-31T12:00:00+02:00``) as Unix seconds; one without a time zone is UTC.
    Raises BadQuery."""
    try:
        when = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise BadQuery(
            f"{what} {text!r} is not an ISO date or time "
            "(2025-01-31, 2025-01-31T12:00, 2025-01-31T12:00+02:00)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return when.timestamp()


@dataclass(frozen=True)
class _Selection:
    """A checked query with what it names found in the database."""

    query: ExportQuery
    policy_ids: frozenset[int] = frozenset()
    run_ids: tuple[str, ...] = ()

    def where(self, statement: _Statement, game: str | None = None) -> _Statement:
        """``statement`` (over ``matches``) restricted to the selected matches (of
        ``game`` alone, if given)."""
        q = self.query
        games = Match.game_id.in_(q.games) if game is None else Match.game_id == game
        statement = statement.where(games, Match.status.in_(q.statuses))
        if q.run is not None:
            statement = statement.where(Match.run_id.in_(self.run_ids))
        if q.since is not None:
            statement = statement.where(Match.started_at >= q.since)
        if q.until is not None:
            statement = statement.where(Match.started_at < q.until)
        if q.players:
            played = exists().where(
                Seat.match_id == Match.id, Seat.policy_id.in_(sorted(self.policy_ids))
            )
            statement = statement.where(played)
        return statement


async def _select(session: AsyncSession, query: ExportQuery) -> _Selection:
    """Check ``query`` against the database: its games, players and run must be known.
    Raises BadQuery."""
    query.check()
    for game in query.games:
        stored = select(Match.id).where(Match.game_id == game).limit(1)
        if await session.scalar(stored) is None:
            try:
                get_spec(game)  # a game that could be played, of which none is stored: fine
            except UnknownGame as exc:
                raise BadQuery(str(exc)) from None
    policy_ids: set[int] = set()
    if query.players:
        rows = (await session.execute(select(Policy.id, Policy.name, Policy.kind))).all()
        for player in query.players:
            wanted = {player, policy_key(player)}
            found = {
                i for i, name, kind in rows if name in wanted or policy_key(name, kind) in wanted
            }
            if not found:
                raise BadQuery(
                    f"no stored player is named or keyed {player!r}; "
                    "`arena results` lists the players"
                )
            policy_ids |= found
    run_ids: tuple[str, ...] = ()
    if query.run is not None:
        named = select(Run.id).where(or_(Run.id == query.run, Run.name == query.run))
        run_ids = tuple((await session.scalars(named)).all())
        if not run_ids:
            raise BadQuery(f"no stored run has the name or id {query.run!r}")
    return _Selection(query, frozenset(policy_ids), run_ids)


async def count_selected(source: Source, query: ExportQuery) -> int:
    """How many stored matches pass ``query``'s filters on matches (its result filter and
    limit aside: what an export reads at most). Raises BadQuery, SQLAlchemy errors."""
    async with _reading(source) as session:
        selection = await _select(session, query)
        statement = selection.where(select(func.count()).select_from(Match))
        return int(await session.scalar(statement) or 0)


@dataclass
class _SeatRows:
    """One seat's row being built, turn by turn."""

    messages: list[ChatMessage] = field(default_factory=list)
    legal_moves: list[list[str] | None] = field(default_factory=list)
    invalid: list[bool] = field(default_factory=list)


def _shown_text(seat: int, shown: Sequence[GameMessage], first: bool, rows: _SeatRows) -> None:
    """Add what ``seat`` was shown before a move to its chat: the rules leading its first
    observation as a system message, the rest (less its own moves' echoes) as a user one."""
    lines = [m for m in shown if not (m.sender == seat and m.kind is MessageKind.ACTION)]
    if first:
        rules = 0
        while rules < len(lines) and lines[rules].kind is MessageKind.PROMPT:
            rules += 1
        if rules:
            rows.messages.append({"role": "system", "content": format_messages(lines[:rules])})
            lines = lines[rules:]
    if lines:
        rows.messages.append({"role": "user", "content": format_messages(lines)})


@dataclass(frozen=True)
class _StoredMatch:
    """What a page query reads of one match."""

    id: str
    game_id: str
    num_players: int
    status: str
    started_at: float
    ended_at: float | None
    run_id: str | None
    rated: bool


@dataclass(frozen=True)
class _StoredSeat:
    """What a page query reads of one seat."""

    seat: int
    reward: float | None
    policy_id: int
    name: str
    key: str


def match_rows(
    match: _StoredMatch,
    seats: Sequence[_StoredSeat],
    log: MatchLog,
    keep: Callable[[_StoredSeat, str | None], bool],
) -> list[ExportRow]:
    """The rows of one match: each seat that moved and that ``keep`` (given the seat and
    its result) accepts, in seat order."""
    built: dict[int, _SeatRows] = {}
    for turn, shown in shown_messages(log, match.num_players):
        rows = built.get(turn.seat)
        if rows is None:
            rows = built[turn.seat] = _SeatRows()
        if shown is not None:
            _shown_text(turn.seat, shown, not rows.invalid, rows)
        elif turn.observation:
            rows.messages.append({"role": "user", "content": turn.observation})
        rows.messages.append({"role": "assistant", "content": turn.action})
        rows.legal_moves.append(None if turn.legal_moves is None else list(turn.legal_moves))
        rows.invalid.append(not turn.valid)
    aborted = match.status == MatchStatus.ABORTED
    rewards = [0.0 if s.reward is None else s.reward for s in seats]
    players = [s.name for s in seats]
    out = []
    for index, seat in enumerate(seats):
        rows = built.get(seat.seat)
        result = None if aborted else str(result_of(index, rewards))
        if rows is None or not keep(seat, result):
            continue
        out.append(
            ExportRow(
                messages=rows.messages,
                reward=None if aborted else seat.reward,
                result=result,
                status=match.status,
                legal_moves=rows.legal_moves,
                invalid=rows.invalid,
                game_id=match.game_id,
                match_id=match.id,
                seat=seat.seat,
                num_players=match.num_players,
                player=seat.name,
                policy=seat.key,
                players=players,
                run_id=match.run_id,
                started_at=match.started_at,
                ended_at=match.ended_at,
                rated=match.rated,
            )
        )
    return out


class _Reader:
    """Reads the selected matches page by page, and the dictionaries their blocks need."""

    def __init__(self, session: AsyncSession, selection: _Selection, page: int) -> None:
        self.session = session
        self.selection = selection
        self.page = page
        self.dictionaries: dict[int, bytes] = {}
        """The block dictionaries met so far (one per game)."""
        self.keys: dict[tuple[str, str], str] = {}
        """Policy keys by (name, kind) (``policy_key`` parses each name once)."""

    async def matches(self, game: str, after: tuple[float, str] | None) -> list[_StoredMatch]:
        """The next page of ``game``'s selected matches: those that follow ``after``
        (``(started_at, id)`` of the last one read), in that order."""
        statement = self.selection.where(
            select(
                Match.id,
                Match.game_id,
                Match.num_players,
                Match.status,
                Match.started_at,
                Match.ended_at,
                Match.run_id,
                Match.rated,
            ),
            game,
        )
        if after is not None:
            started, match_id = after
            # A range on started_at (which an index serves), then the ties by id.
            statement = statement.where(
                Match.started_at >= started,
                or_(Match.started_at > started, Match.id > match_id),
            )
        statement = statement.order_by(Match.started_at, Match.id).limit(self.page)
        return [_StoredMatch(*row) for row in await self.session.execute(statement)]

    async def pages(self) -> AsyncGenerator[list[_StoredMatch], None]:
        """Every page of selected matches: game by game (in the query's order), each
        game's by start time (see the module's docstring)."""
        for game in dict.fromkeys(self.selection.query.games):
            after: tuple[float, str] | None = None
            while page := await self.matches(game, after):
                yield page
                after = page[-1].started_at, page[-1].id

    async def seats(self, ids: Sequence[str]) -> dict[str, list[_StoredSeat]]:
        """The seats of these matches, in seat order."""
        out: dict[str, list[_StoredSeat]] = {i: [] for i in ids}
        rows = await self.session.execute(
            select(Seat.match_id, Seat.seat, Seat.reward, Seat.policy_id, Policy.name, Policy.kind)
            .join(Policy, Policy.id == Seat.policy_id)
            .where(Seat.match_id.in_(ids))
            .order_by(Seat.match_id, Seat.seat)
        )
        for match_id, seat, reward, policy_id, name, kind in rows:
            key = self.keys.get((name, kind))
            if key is None:
                key = self.keys[(name, kind)] = policy_key(name, kind)
            out[match_id].append(_StoredSeat(seat, reward, policy_id, name, key))
        return out

    async def blocks(self, ids: Sequence[str]) -> dict[str, list[tuple[int, bytes, int | None]]]:
        """The turn blocks of these matches, in order."""
        out: dict[str, list[tuple[int, bytes, int | None]]] = {i: [] for i in ids}
        rows = await self.session.execute(
            select(TurnBlock.match_id, TurnBlock.first, TurnBlock.data, TurnBlock.dictionary_id)
            .where(TurnBlock.match_id.in_(ids))
            .order_by(TurnBlock.match_id, TurnBlock.seq)
        )
        for match_id, first, data, dictionary in rows:
            out[match_id].append((first, bytes(data), dictionary))
        missing = {d for blocks in out.values() for *_, d in blocks if d is not None}
        missing -= set(self.dictionaries)
        if missing:
            found = await self.session.execute(
                select(BlockDictionary.id, BlockDictionary.data).where(
                    BlockDictionary.id.in_(missing)
                )
            )
            self.dictionaries.update((i, bytes(data)) for i, data in found)
        return out

    def log(self, match_id: str, blocks: Sequence[tuple[int, bytes, int | None]]) -> MatchLog:
        """One match's decoded log (its boards are not read: no row holds them). Raises
        StorageError for a block that cannot be read."""
        try:
            stored = [
                (first, data, None if d is None else self.dictionaries.get(d))
                for first, data, d in blocks
            ]
            return read_blocks(stored, boards=False)
        except BlockError as exc:
            raise StorageError(f"match {match_id}: {exc}") from exc


def _keeper(selection: _Selection) -> Callable[[_StoredSeat, str | None], bool]:
    """Which seats of a selected match give rows (``seat_player``, ``results``)."""
    q = selection.query
    ids = selection.policy_ids if q.seat_player else None
    results = frozenset(q.results)

    def keep(seat: _StoredSeat, result: str | None) -> bool:
        if ids is not None and seat.policy_id not in ids:
            return False
        return not results or result in results

    return keep


@dataclass(frozen=True)
class ExportedMatch:
    """One selected match that gives rows: its rows and its decoded turns."""

    rows: list[ExportRow]
    """The rows of the seats kept (``ExportQuery.seat_player``, ``results``), in seat
    order."""
    log: MatchLog
    """The match's turns as stored (boards not read): what each seat was shown at each of
    its turns is rebuilt from it (``storage.turnlog.seat_views``)."""


async def export_matches(
    source: Source,
    query: ExportQuery,
    *,
    page_matches: int = PAGE_MATCHES,
    on_match: Callable[[int], None] | None = None,
) -> AsyncGenerator[ExportedMatch, None]:
    """The matches ``query`` selects that give at least one row, in ``export_rows``'s
    order, each with its rows and its decoded log; ``on_match(turns)`` is called as each
    match read is done (for progress). Raises what ``export_rows`` raises."""
    if page_matches < 1:
        raise BadQuery(f"page_matches must be 1 or more, not {page_matches}")
    async with _reading(source) as session:
        selection = await _select(session, query)
        reader = _Reader(session, selection, page_matches)
        keep = _keeper(selection)
        limit = query.limit
        exported = 0
        async with aclosing(reader.pages()) as pages:
            async for page in pages:
                ids = [m.id for m in page]
                seats = await reader.seats(ids)
                blocks = await reader.blocks(ids)
                for match in page:
                    log = reader.log(match.id, blocks.pop(match.id))
                    rows = match_rows(match, seats[match.id], log, keep)
                    if on_match is not None:
                        on_match(len(log.turns))
                    if not rows:
                        continue
                    yield ExportedMatch(rows, log)
                    exported += 1
                    if limit is not None and exported >= limit:
                        return


async def export_rows(
    source: Source,
    query: ExportQuery,
    *,
    page_matches: int = PAGE_MATCHES,
    on_match: Callable[[int], None] | None = None,
) -> AsyncIterator[ExportRow]:
    """The rows of the matches ``query`` selects, match by match (game by game in the
    query's order, each game's by start time), each match's in seat order;
    ``on_match(turns)`` is called as each match read is done (for progress). Reads
    ``page_matches`` matches at a time (see the module's docstring).

    Raises BadQuery (before any row: an unknown game, player or run, a bad filter),
    StorageError (a damaged block), SQLAlchemy errors.
    """
    matches = export_matches(source, query, page_matches=page_matches, on_match=on_match)
    async with aclosing(matches) as each:
        async for match in each:
            for row in match.rows:
                yield row
