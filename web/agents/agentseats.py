"""Agent seats, without I/O: the seats of live matches from the seek queue that remote
agents play.

A paired match's seats are made when it is built (``started``) and told (``paired``,
a browser seat's ``match_created``) once the core has seen it start (``announced``). A
seat's prompts (``your_turn``: exactly the seat's own new messages and its legal moves)
go to the one connection that holds it; ``move`` and ``resign`` are accepted only from
that connection. A dropped connection leaves its seats orphaned: the account's next
connection takes them over (``resumed``, and the pending prompt with the seat's whole
transcript); past ``agent_reconnect_grace_s`` each forfeits (``overdue``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from arena.eventformat import format_messages
from arena.identity import PolicyKind, PolicyRef
from arena.seats import SeatTurn
from games.api import GameMessage
from web.agents.agentsessions import Account, AgentConn, AgentSessions
from web.agents.seeks import PendingMatch, SeatPlan
from web.connections import Client
from web.limits import ServerLimits
from web.live.human import SeatNotWaiting
from web.needs import Need
from web.protocol import ClientRequest, ProtocolError


class PromptedSeat(Protocol):
    """A live seat that waits for moves from outside (``web.agents.remote.RemoteSeat``,
    ``web.live.human.HumanSeat``)."""

    @property
    def waiting(self) -> bool:
        """True while it waits for a move."""
        ...

    turn: SeatTurn | None
    deadline: float | None

    def submit(self, text: str) -> int:
        """Hand over the move; the turn index. Raises SeatNotWaiting."""
        ...


@dataclass(frozen=True)
class Forfeit:
    """A seat to forfeit now (``GameCoordinator.forfeit``)."""

    match_id: str
    seat: int
    reason: str


@dataclass
class AgentSeat:
    """A seat of a live match played by a remote agent."""

    match_id: str
    seat: int
    account: Account
    header: dict[str, Any]
    """What ``paired`` and ``resumed`` say about the match."""
    handle: PromptedSeat
    conn: Client | None
    orphaned_at: float | None = None
    forfeiting: bool = False
    resend_all: bool = False
    """Taken over by a new connection: its next prompt carries the whole transcript."""


HumanSeatSink = Callable[[PendingMatch, SeatPlan, PromptedSeat], str]
"""Registers a browser seat of a started match with the core; returns its token."""
EndedFor = Callable[[str, str], bool]
"""``(match id, account name) -> True`` when that match ended with a seat of the account."""


def message_json(message: GameMessage) -> dict[str, Any]:
    """One transcript message as the agent protocol sends it."""
    return {
        "from": message.sender,
        "to": message.to,
        "kind": message.kind.value,
        "text": message.text,
    }


class AgentSeats:
    """Agent seats of live matches (see the module's docstring; the agent desk owns one).

    ``send(client, message)`` queues a frame; ``human_seat`` registers a browser seat of a
    started match (and returns its token); ``ended_for`` says which ended matches an
    account played (for ``match_over`` answers). ``clock`` (monotonic) dates orphaned
    seats; ``wall_clock`` (Unix time) is what agents are shown."""

    def __init__(
        self,
        limits: ServerLimits,
        sessions: AgentSessions,
        *,
        send: Callable[[Client, dict[str, Any]], None],
        human_seat: HumanSeatSink | None,
        ended_for: EndedFor,
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
    ) -> None:
        self.limits = limits
        self.sessions = sessions
        self.send = send
        self.human_seat = human_seat
        self.ended_for = ended_for
        self.clock = clock
        self.wall_clock = wall_clock
        self.seats: dict[tuple[str, int], AgentSeat] = {}
        self.matches: dict[str, dict[str, Any]] = {}
        """Live matches started from seeks: match id -> header."""
        self._unannounced: dict[str, list[tuple[Client, dict[str, Any]]]] = {}
        """Frames for matches whose start the core has not seen yet (``announced``)."""

    # -- views ---------------------------------------------------------------------------
    def count(self, account: str | None, client: Client | None) -> int:
        """Seats of ``account`` (by name) held on ``client`` (None: any)."""
        return sum(
            1
            for s in self.seats.values()
            if (account is None or s.account.name == account)
            and (client is None or s.conn is client)
        )

    def live_matches(self, account: str) -> set[str]:
        """Ids of the live matches where ``account`` (by name) holds a seat."""
        return {k[0] for k, s in self.seats.items() if s.account.name == account}

    # -- holding seats -------------------------------------------------------------------
    def orphans(self, account: Account) -> list[AgentSeat]:
        """The account's seats that no connection holds (and that do not forfeit)."""
        return [
            s
            for s in self.seats.values()
            if s.account.name == account.name and s.conn is None and not s.forfeiting
        ]

    def take_orphans(self, conn: AgentConn) -> None:
        """Bind the account's orphaned seats to ``conn`` (already authenticated):
        ``resumed``, then each pending prompt with the seat's whole transcript."""
        mine = self.orphans(conn.account)
        if mine:
            self.send(conn.client, {"type": "resumed", "matches": [s.header for s in mine]})
            self.bind(conn, mine)

    def bind(self, conn: AgentConn, mine: list[AgentSeat]) -> None:
        """``conn`` holds the seats ``mine`` now: each one waiting gets its prompt, with
        the whole transcript."""
        for seat in mine:
            seat.conn = conn.client
            seat.orphaned_at = None
            conn.seats.add((seat.match_id, seat.seat))
        for seat in mine:
            handle = seat.handle
            if handle.waiting and handle.turn is not None and handle.deadline is not None:
                self._prompt_frame(seat, handle.turn, handle.deadline, full=True)
            else:  # not to move now: its next prompt tells it everything
                seat.resend_all = True

    def orphan(self, conn: AgentConn, now: float) -> None:
        """``conn`` is gone: the seats it held are orphaned from ``now``."""
        for key in conn.seats:
            seat = self.seats.get(key)
            if seat is not None and seat.conn is conn.client:
                seat.conn = None
                seat.orphaned_at = now

    def _held_seat(self, client: Client, match_id: str) -> AgentSeat:
        """The seat of ``match_id`` that ``client`` holds. Raises ProtocolError."""
        conn = self.sessions.conns.get(client)
        if conn is None:
            raise ProtocolError("forbidden", "authenticate first (auth): this is an agent's seat")
        held = [s for s in self.seats.values() if s.match_id == match_id]
        mine = [s for s in held if s.conn is client]
        if mine:
            return mine[0]
        ours = [s for s in held if s.account.name == conn.account.name]
        if any(s.conn is not None for s in ours):
            raise ProtocolError(
                "forbidden", f"this seat of {conn.account.key} is held by another connection"
            )
        if ours:
            raise ProtocolError(
                "forbidden",
                f"this seat of {conn.account.key} is held by no connection now: a connection "
                "that authenticates with resume true takes it over",
            )
        if match_id in self.matches or held:
            raise ProtocolError("forbidden", f"{conn.account.key} holds no seat of this match")
        if self.ended_for(match_id, conn.account.name):
            raise ProtocolError("match_over", f"match {match_id[:40]!r} is over")
        raise ProtocolError("unknown_match", f"no live match {match_id[:40]!r} has your seat")

    # -- moves ---------------------------------------------------------------------------
    def move(self, client: Client, request: ClientRequest, text: str) -> dict[str, Any]:
        """An agent's ``move``: hands ``text`` to its seat; returns the ``move_ack``.
        Raises ProtocolError (``forbidden``, ``not_your_turn``, ``unknown_match``)."""
        match_id = request.text("match_id")
        seat = self._held_seat(client, match_id)
        handle = seat.handle
        turn = request.integer("turn")
        if not handle.waiting or handle.turn is None:
            raise ProtocolError("not_your_turn", f"seat {seat.seat} is not to move now")
        if turn is not None and turn != handle.turn.turn_index:
            raise ProtocolError(
                "not_your_turn",
                f"turn {turn} is not the one being played (turn {handle.turn.turn_index})",
            )
        try:
            index = handle.submit(text)
        except SeatNotWaiting:
            raise ProtocolError("not_your_turn", f"seat {seat.seat} is not to move now") from None
        return {
            "type": "move_ack",
            "ref": request.id,
            "match": match_id,
            "seat": seat.seat,
            "index": index,
        }

    def resign(self, client: Client, request: ClientRequest) -> Need:
        """An agent's ``resign``: a ``forfeit`` need, answered ``resigned``. Raises
        ProtocolError (as ``move``; the need's continuation ``match_over``)."""
        match_id = request.text("match_id")
        seat = self._held_seat(client, match_id)
        reason = f"{seat.account.key} resigned"
        forfeit = Forfeit(match_id, seat.seat, reason)

        def done(result: Any) -> None:
            if isinstance(result, BaseException):
                raise ProtocolError("match_over", "this match is over")
            self.send(
                client,
                {"type": "resigned", "ref": request.id, "match": match_id, "seat": seat.seat},
            )

        seat.forfeiting = True
        return Need("forfeit", {"forfeit": forfeit}, done)

    # -- forfeits ------------------------------------------------------------------------
    def forfeit_account(self, name: str) -> list[Forfeit]:
        """Account ``name`` was revoked: its live seats forfeit."""
        forfeits = []
        for seat in self.seats.values():
            if seat.account.name == name and not seat.forfeiting:
                seat.forfeiting = True
                forfeits.append(
                    Forfeit(
                        seat.match_id, seat.seat, f"{PolicyRef.agent(name).key}'s token was revoked"
                    )
                )
        return forfeits

    def overdue(self, now: float) -> list[Forfeit]:
        """The orphaned seats whose grace period is over at ``now``: they forfeit."""
        grace = self.limits.agent_reconnect_grace_s
        forfeits = []
        for seat in self.seats.values():
            orphaned = seat.orphaned_at
            if seat.conn is not None or seat.forfeiting or orphaned is None:
                continue
            if now - orphaned >= grace:
                seat.forfeiting = True
                forfeits.append(
                    Forfeit(
                        seat.match_id,
                        seat.seat,
                        f"{seat.account.key} left and was not back within {grace:g} s",
                    )
                )
        return forfeits

    # -- a match's seats -----------------------------------------------------------------
    def header(self, pending: PendingMatch, players: Sequence[str]) -> dict[str, Any]:
        """What ``paired`` and ``resumed`` say about a match (no seat: added per seat)."""
        return {
            "match": pending.match_id,
            "game_id": pending.game_id,
            "players": list(players),
            "num_players": pending.pairing.num_players,
            "rated": pending.pairing.rated,
            "move_timeout_s": self.limits.agent_move_timeout_s,
            "reconnect_grace_s": self.limits.agent_reconnect_grace_s,
        }

    def started(
        self,
        pending: PendingMatch,
        players: Sequence[str],
        handles: Mapping[int, PromptedSeat],
    ) -> None:
        """A pending match was built (not yet started): its agent seats and browser seats
        are registered; they are told (``paired``, ``match_created``) once the core has
        seen the match start (``announced``), so that a subscription to it finds it."""
        header = self.header(pending, players)
        self.matches[pending.match_id] = header
        self._unannounced[pending.match_id] = []
        now = self.clock()
        for plan in pending.seats:
            handle = handles.get(plan.seat)
            if handle is None or plan.owner is None:
                continue
            if plan.kind is PolicyKind.HUMAN:
                self._seat_person(pending, plan, handle)
            else:
                self._seat_agent(pending, plan, handle, {**header, "seat": plan.seat}, now)

    def _seat_person(self, pending: PendingMatch, plan: SeatPlan, handle: PromptedSeat) -> None:
        owner = plan.owner
        if self.human_seat is None or owner is None:
            return
        token = self.human_seat(pending, plan, handle)
        created = {
            "type": "match_created",
            "ref": owner.ref,
            "seek": owner.seek.seek_id,
            "match": pending.match_id,
            "game_id": pending.game_id,
            "seat": plan.seat,
            "token": token,
            "rated": pending.pairing.rated,
        }
        self._unannounced[pending.match_id].append((owner.client, created))

    def _seat_agent(
        self,
        pending: PendingMatch,
        plan: SeatPlan,
        handle: PromptedSeat,
        seat_header: dict[str, Any],
        now: float,
    ) -> None:
        owner = plan.owner
        assert owner is not None and owner.account is not None
        conn = self.sessions.conns.get(owner.client)
        seat = AgentSeat(
            pending.match_id,
            plan.seat,
            owner.account,
            seat_header,
            handle,
            conn.client if conn is not None else None,
            orphaned_at=None if conn is not None else now,
        )
        self.seats[(pending.match_id, plan.seat)] = seat
        if conn is not None:
            conn.seats.add((pending.match_id, plan.seat))
            paired = {"type": "paired", "ref": owner.ref, "seek": owner.seek.seek_id}
            self._unannounced[pending.match_id].append((conn.client, {**paired, **seat_header}))
            return
        # It left while the match was built: the next connection resumes it.
        other = self.sessions.resuming(owner.account.name)
        if other is not None:
            self.take_orphans(other)

    def announced(self, match_id: str) -> None:
        """The core saw the match start: its seats are told now (``paired``,
        ``match_created``), before any prompt."""
        for client, message in self._unannounced.pop(match_id, ()):
            seat = self.seats.get((match_id, int(message.get("seat", -1))))
            if message["type"] == "paired" and (seat is None or seat.conn is not client):
                continue  # it left meanwhile: the next connection gets ``resumed``
            self.send(client, message)

    def remove_match(self, match_id: str) -> list[AgentSeat]:
        """The match ended: its seats, freed (no connection holds them any more)."""
        self.matches.pop(match_id, None)
        removed = []
        for key in [k for k in self.seats if k[0] == match_id]:
            removed.append(self.seats.pop(key))
            for conn in self.sessions.conns.values():
                conn.seats.discard(key)
        return removed

    # -- prompts -------------------------------------------------------------------------
    def prompt(self, match_id: str, seat: int, turn: SeatTurn, deadline: float) -> None:
        """An agent seat must move: ``your_turn`` to the connection holding it (none while
        it is orphaned: the next connection gets the prompt when it resumes)."""
        self.announced(match_id)  # (the core has seen its start: the hub pumps first)
        agent_seat = self.seats.get((match_id, seat))
        if agent_seat is not None and agent_seat.conn is not None:
            self._prompt_frame(agent_seat, turn, deadline, full=agent_seat.resend_all)

    def _prompt_frame(self, seat: AgentSeat, turn: SeatTurn, deadline: float, full: bool) -> None:
        assert seat.conn is not None
        seat.resend_all = False
        start = 0 if full else turn.new_from
        self.send(
            seat.conn,
            {
                "type": "your_turn",
                "match": seat.match_id,
                "seat": seat.seat,
                "turn": turn.turn_index,
                "deadline": deadline,
                "time_left_s": round(max(0.0, deadline - self.wall_clock()), 3),
                "from": start,
                "new_from": turn.new_from,
                "messages": [message_json(m) for m in turn.messages[start:]],
                "prompt": format_messages(turn.messages[turn.new_from :]),
                "legal_moves": turn.legal_moves,
                # A simultaneous round: every seat asked at once (each gets its own
                # your_turn); absent for a move in turn.
                **({"movers": list(turn.movers)} if turn.movers else {}),
            },
        )
