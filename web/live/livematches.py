"""The matches the web server shows, without I/O: their streams in memory (live, and the
last ``ended_cache`` that ended), fed by bus events and by the database, and the lobby's
lines of them.

``LiveMatches`` is the part of the sans-I/O core (``web.core.HubCore``) that turns match
events into stream entries and sends each entry to the audiences watching it. Who watches
is decided elsewhere (``web.live.spectators``); a match not in memory is read from the
database through a ``get_match`` need (``find_stream``).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from arena.eventformat import format_messages
from arena.events import (
    MatchAborted,
    MatchEnded,
    MatchEvent,
    MatchStarted,
    RoundProgress,
    Turn,
    TurnPlayed,
)
from arena.seats import SeatTurn
from storage import MatchDetail, MatchSummary
from storage.errors import AmbiguousMatchId, MatchNotFound
from web.hubstats import HubStats
from web.limits import ServerLimits
from web.live.convert import (
    aborted_result,
    ended_result,
    info_from_summary,
    result_from_summary,
    summary_line,
    turns_of,
)
from web.live.streams import Lobby, MatchStream, Prompt
from web.needs import Need
from web.outbox import Outbox
from web.protocol import MatchInfo, MovesArePublic, ProtocolError, dumps

_MATCH_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


def is_match_id(match_id: str) -> bool:
    """True when ``match_id`` looks like a match id (anything else is refused at once)."""
    return bool(_MATCH_ID.match(match_id))


def check_match_id(match_id: str) -> str:
    """``match_id``, when it looks like one. Raises ProtocolError ``unknown_match``."""
    if not is_match_id(match_id):
        raise ProtocolError("unknown_match", f"{match_id[:40]!r} is not a match id")
    return match_id


def _turn_data(event: TurnPlayed) -> Turn:
    return event.turn()


class LiveMatches:
    """The match streams in memory and the lobby (see the module's docstring).

    ``following``: whether matches are followed from the database (a live match read from
    it is then kept and followed). ``has_db``: whether a database stands behind the core
    (else a match not in memory is unknown). ``evicted(match_id)`` is called when an ended
    match leaves memory. ``wall_clock`` (Unix time) stamps what has no time of its own."""

    def __init__(
        self,
        limits: ServerLimits,
        outbox: Outbox,
        stats: HubStats,
        *,
        moves_public: MovesArePublic,
        has_db: bool,
        following: bool,
        evicted: Callable[[str], None],
        wall_clock: Callable[[], float],
    ) -> None:
        self.limits = limits
        self.outbox = outbox
        self.stats = stats
        self.moves_public = moves_public
        self.has_db = has_db
        self.following = following
        self.evicted = evicted
        self.wall_clock = wall_clock
        self.lobby = Lobby(limits.lobby_live_limit, limits.recent_limit)
        self.live: dict[str, MatchStream] = {}
        self.ended: OrderedDict[str, MatchStream] = OrderedDict()
        self._pending_human: dict[str, tuple[int, ...]] = {}
        """Browser matches being started: match id -> browser seats."""

    # -- views -------------------------------------------------------------------------------
    def stream(self, match_id: str) -> MatchStream | None:
        """The match's stream, if in memory."""
        return self.live.get(match_id) or self.ended.get(match_id)

    def live_match_ids(self) -> list[str]:
        """Ids of the live matches shown."""
        return [m for m, s in self.live.items() if s.live]

    def is_known(self, match_id: str) -> bool:
        """True when the hub already has this match."""
        return self.stream(match_id) is not None

    def find_stream(self, match_id: str, then: Callable[[MatchStream], Any]) -> Any:
        """``then(stream)`` for the match, at once when it is in memory, else after it is
        read from the database (a ``get_match`` need). Raises ProtocolError
        ``unknown_match``; the need's continuation also ``unavailable``."""
        stream = self.stream(match_id)
        if stream is not None:
            if match_id in self.ended:
                self.ended.move_to_end(match_id)
            return then(stream)
        if not self.has_db:
            raise ProtocolError("unknown_match", f"no match {match_id!r} is known here")

        def loaded(result: Any) -> Any:
            if isinstance(result, MatchNotFound | AmbiguousMatchId):
                raise ProtocolError("unknown_match", str(result))
            if isinstance(result, BaseException):
                raise ProtocolError("unavailable", f"cannot read the database: {result}") from None
            assert isinstance(result, MatchDetail)
            existing = self.stream(result.match.id)
            return then(existing if existing is not None else self._stream_from_detail(result))

        return Need("get_match", {"match_id": match_id}, loaded)

    def _stream_from_detail(self, detail: MatchDetail) -> MatchStream:
        summary = detail.match
        info = info_from_summary(
            summary, detail.start_state, detail.start_board, detail.start_full_board
        )
        ended = summary.status != "live"
        stream = MatchStream(
            info,
            moves_public=self.moves_public(info.game_id),
            history_limit=self.limits.history_limit,
            source="db",
            resumable=not ended,  # its versions are new: they mean nothing to old clients
        )
        turns = turns_of(detail)
        if not ended:
            for turn in turns:
                stream.add_turn(turn)
            if self.following:  # else: a one-off view, not followed
                self.live[summary.id] = stream
                self.lobby.started(stream.summary())
        else:
            stream.end(
                result_from_summary(summary),
                detail.full_state,
                summary.ended_at or summary.started_at,
                turns,
            )
            self._keep_ended(stream)
        return stream

    # -- browser seats' part in a stream ---------------------------------------------------
    def human_match_starting(self, match_id: str, human_seats: Sequence[int]) -> None:
        """A browser match is about to be announced: its seats are browser seats (they get
        an audience of their own)."""
        self._pending_human[match_id] = tuple(human_seats)

    def add_human_seat(self, match_id: str, seat: int) -> None:
        """One more browser seat of a match about to be announced."""
        seats = {*self._pending_human.get(match_id, ()), seat}
        self._pending_human[match_id] = tuple(sorted(seats))

    def prompt(self, match_id: str, seat: int, turn: SeatTurn, deadline: float) -> None:
        """A browser seat must move: the ``waiting`` event (its prompt only for itself)."""
        stream = self.live.get(match_id)
        if stream is None:
            return
        prompt = Prompt(
            seat=seat,
            deadline=deadline,
            new_text=format_messages(turn.messages[turn.new_from :]),
            full_text=format_messages(turn.messages),
            legal_moves=turn.legal_moves,
        )
        entry = stream.add_prompt(prompt, self.wall_clock())
        if stream.watchers:
            self.outbox.fanout(stream, entry.frame)

    # -- events: the bus ---------------------------------------------------------------------
    def event(self, event: MatchEvent) -> None:
        """A bus event of a match played in this process (the core counts it)."""
        if isinstance(event, TurnPlayed):
            stream = self.live.get(event.match_id)
            if stream is None or stream.source != "bus":
                return
            self._add_turn(stream, _turn_data(event))
        elif isinstance(event, RoundProgress):
            stream = self.live.get(event.match_id)
            if stream is None or stream.source != "bus":
                return
            entry = stream.add_round(event.round, list(event.movers), list(event.moved), event.time)
            if stream.watchers:
                self.outbox.fanout(stream, entry.frame)
        elif isinstance(event, MatchStarted):
            self._started(event)
        elif isinstance(event, MatchEnded | MatchAborted):
            self._ended(event)

    def _started(self, event: MatchStarted) -> None:
        if self.stream(event.match_id) is not None:
            return
        info = MatchInfo(
            match_id=event.match_id,
            game_id=event.game_id,
            seed=event.seed,
            num_players=event.num_players,
            players=tuple(event.players),
            run_id=event.run_id,
            group_id=event.group_id,
            started_at=event.time,
            start_state=event.public_state,
            human_seats=self._pending_human.pop(event.match_id, ()),
            start_board=event.board,
            start_full_board=event.full_board,
        )
        self._add_stream(info, "bus")

    def _ended(self, event: MatchEnded | MatchAborted) -> None:
        stream = self.live.get(event.match_id)
        if stream is None or stream.source != "bus":
            return
        if isinstance(event, MatchEnded):
            result = ended_result(
                event.status,
                event.reason,
                event.rewards,
                event.invalid_moves,
                event.forfeited,
                event.num_turns,
            )
            self._end(stream, result, event.full_state, event.time)
        else:
            self._end(stream, aborted_result(event.reason, event.num_turns), None, event.time)

    def bus_dropped(self) -> None:
        """The bus dropped the hub: its live matches are followed from the database (or
        ended as lost when there is none)."""
        for stream in list(self.live.values()):
            if stream.source != "bus":
                continue
            if self.following:
                stream.source = "db"
            else:
                reason = "the web server fell behind and lost this match's events"
                self._end(stream, aborted_result(reason, 0), None, self.wall_clock())

    # -- events: shared by every source ------------------------------------------------------
    def _add_stream(self, info: MatchInfo, source: str) -> MatchStream:
        stream = MatchStream(
            info,
            moves_public=self.moves_public(info.game_id),
            history_limit=self.limits.history_limit,
            source=source,
        )
        self.live[info.match_id] = stream
        self.lobby.started(stream.summary())
        return stream

    def _add_turn(self, stream: MatchStream, turn: Turn) -> None:
        entry = stream.add_turn(turn)
        self.lobby.moved(stream.match_id, len(stream.turns))
        if stream.watchers:
            self.outbox.fanout(stream, entry.frame)

    def _end(
        self,
        stream: MatchStream,
        result: dict[str, Any],
        full_state: str | None,
        when: float,
        turns: Iterable[Turn] | None = None,
    ) -> None:
        entry = stream.end(result, full_state, when, turns)
        if stream.watchers:
            self.outbox.fanout(stream, entry.frame)
        self.lobby.ended(stream.summary())
        self.live.pop(stream.match_id, None)
        self._keep_ended(stream)

    def _keep_ended(self, stream: MatchStream) -> None:
        self.ended[stream.match_id] = stream
        self.ended.move_to_end(stream.match_id)
        while len(self.ended) > self.limits.ended_cache:
            old_id, old = self.ended.popitem(last=False)
            for clients in old.watchers.values():
                for client in clients:
                    client.matches.pop(old_id, None)
            self.evicted(old_id)

    # -- events: the database (web.live.follow.FollowTarget) --------------------------------------
    def followed_live(self) -> dict[str, int]:
        """Live matches followed from the database: id -> turns known."""
        return {m: len(s.turns) for m, s in self.live.items() if s.source == "db"}

    def db_started(self, summary: MatchSummary) -> None:
        """A live match found in the database."""
        self.stats.events += 1
        self._add_stream(info_from_summary(summary, None), "db")

    def db_turns(self, match_id: str, turns: list[Turn]) -> None:
        """New turns of a match followed from the database."""
        stream = self.live.get(match_id)
        if stream is None or stream.source != "db":
            return
        for turn in turns:
            if turn.index < len(stream.turns):
                continue
            self.stats.events += 1
            self._add_turn(stream, turn)

    def db_ended(self, detail: MatchDetail) -> None:
        """A followed match ended: its last turns, then its end with the full reveal."""
        stream = self.live.get(detail.match.id)
        if stream is None or stream.source != "db":
            return
        turns = turns_of(detail)
        self.db_turns(stream.match_id, [*turns[len(stream.turns) :]])
        # The poll that found it live read no start views: the end's reveal has them.
        stream.info.start_state = detail.start_state
        stream.info.start_board = detail.start_board
        stream.info.start_full_board = detail.start_full_board
        summary = detail.match
        self.stats.events += 1
        self._end(
            stream,
            result_from_summary(summary),
            detail.full_state,
            summary.ended_at or self.wall_clock(),
            turns,
        )

    def db_gone(self, match_id: str) -> None:
        """A followed match was deleted from the database."""
        stream = self.live.get(match_id)
        if stream is not None:
            reason = "the match was deleted from the database"
            self._end(stream, aborted_result(reason, len(stream.turns)), None, self.wall_clock())

    def db_recent(self, summaries: list[MatchSummary]) -> None:
        """The newest stored matches: ended ones the hub never saw join the lobby."""
        fresh = [
            summary_line(s) for s in summaries if s.status != "live" and not self.is_known(s.id)
        ]
        if fresh:
            self.lobby.add_recent(fresh)

    # -- periodic work -----------------------------------------------------------------------
    def tick_lobby(self) -> None:
        """Send the lobby's batched changes (every ``lobby_interval_s``)."""
        update = self.lobby.take_update()
        if update is not None and self.lobby.watchers:
            self.outbox.out(list(self.lobby.watchers), dumps(update))
