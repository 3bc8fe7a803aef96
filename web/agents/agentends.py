"""How agents learn the ends of their matches, without I/O: each agent seat of a match
from the seek queue gets ``match_ended``, then ``rating`` once the match is rated; the
ends of the last ``ENDED_MATCHES`` such matches are kept, so that an agent that was away
gets them when it is back (``replay``; older ones are read from the database)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from arena.events import RatingsChanged
from arena.identity import PolicyRef
from games.outcome import result_of
from web.agents.agentseats import AgentSeat
from web.agents.agentsessions import AgentConn
from web.connections import Client
from web.live.convert import rating_json
from web.needs import Need
from web.protocol import ProtocolError

ENDED_MATCHES = 4_096
"""Ended matches from the seek queue whose ends are kept (for ``match_over`` and for the
agents that were away when they ended); older ones are read back from the database."""


@dataclass
class EndedSeat:
    """An agent seat of a match that ended: its ``match_ended`` frame, the connections it
    was sent to, and the ``rating`` frame once the match is rated."""

    account: str
    """The account's name."""
    frame: dict[str, Any]
    told: set[Client] = field(default_factory=set)
    rating: dict[str, Any] | None = None


def result_for(seat: int, status: str, rewards: Sequence[float] | None) -> str:
    """``win``, ``loss`` or ``draw`` for ``seat`` (``games.outcome``), or ``aborted``."""
    if status == "aborted" or rewards is None:
        return "aborted"
    return result_of(seat, rewards).value


def match_ended_frame(
    match_id: str,
    seat: int,
    status: str,
    reason: str,
    rewards: Sequence[float] | None,
    forfeited: Sequence[int],
    rated: bool,
) -> dict[str, Any]:
    """The ``match_ended`` frame of one seat (``replayed`` is added when it is sent)."""
    return {
        "type": "match_ended",
        "match": match_id,
        "seat": seat,
        "status": status,
        "reason": reason,
        "rewards": list(rewards) if rewards is not None else None,
        "forfeited": list(forfeited),
        "result": result_for(seat, status, rewards),
        "rated": rated,
    }


class AgentEnds:
    """The kept ends of agent seats (the agent desk owns one). ``send(client, message)``
    queues a frame."""

    def __init__(self, send: Callable[[Client, dict[str, Any]], None]) -> None:
        self.send = send
        self.ended: OrderedDict[str, list[EndedSeat]] = OrderedDict()
        """The last ``ENDED_MATCHES`` matches from the seek queue that ended: their agent
        seats."""

    def ended_for(self, match_id: str, account: str) -> bool:
        """True when ``match_id`` ended (and is kept) with a seat of ``account``."""
        return any(e.account == account for e in self.ended.get(match_id, ()))

    def seats_ended(
        self,
        match_id: str,
        seats: Sequence[AgentSeat],
        status: str,
        reason: str,
        rewards: Sequence[float] | None,
        forfeited: Sequence[int],
    ) -> None:
        """A match's agent ``seats`` ended: each connection holding one is told
        (``match_ended``); the others are told when their agent is back."""
        ended: list[EndedSeat] = []
        for seat in seats:
            rated = bool(seat.header.get("rated"))
            frame = match_ended_frame(
                match_id, seat.seat, status, reason, rewards, forfeited, rated
            )
            record = EndedSeat(seat.account.name, frame)
            ended.append(record)
            if seat.conn is not None:  # else: replayed when the agent is back (``replay``)
                self._tell(seat.conn, record, replayed=False)
        if ended:
            self.ended[match_id] = ended
            while len(self.ended) > ENDED_MATCHES:
                self.ended.popitem(last=False)

    def _tell(self, client: Client, ended: EndedSeat, replayed: bool) -> None:
        """Send a seat's ``match_ended`` (then its ``rating``, once rated) to ``client``."""
        ended.told.add(client)
        self.send(client, {**ended.frame, "replayed": replayed})
        if ended.rating is not None:
            self.send(client, ended.rating)

    def replay(
        self, conn: AgentConn, ref: Any, listed: Sequence[str], live: set[str]
    ) -> Need | None:
        """After ``authenticated`` (with ``resume``): the end of each match of the account
        that ended while no connection held its seat, and of each match ``listed`` that is
        over (read from the database when it is not in memory); ``unknown_match`` for a
        listed match the account holds no seat of. ``live``: the ids of the live matches
        where the account holds a seat."""
        name = conn.account.name
        held = {m for m, _s in conn.seats}
        replayed: set[str] = set()
        wanted = set(listed) - held
        for match_id, seats in self.ended.items():
            for ended in seats:
                if ended.account == name and (not ended.told or match_id in wanted):
                    self._tell(conn.client, ended, replayed=True)
                    replayed.add(match_id)
        missing = [m for m in dict.fromkeys(listed) if m not in replayed and m not in live]
        if not missing:
            return None

        def found(result: Any) -> None:
            if isinstance(result, BaseException):
                raise ProtocolError("unavailable", f"cannot read those matches now: {result}")
            frames: Mapping[str, list[dict[str, Any]]] = result
            for match_id in missing:
                mine = frames.get(match_id) or []
                if not mine:
                    self.send(
                        conn.client,
                        {
                            "type": "error",
                            "code": "unknown_match",
                            "ref": ref,
                            "match": match_id,
                            "message": f"{conn.account.key} held no seat of an ended match "
                            f"{match_id[:40]!r} here",
                        },
                    )
                for frame in mine:
                    self.send(conn.client, {**frame, "replayed": True})

        return Need("ended_matches", {"account": conn.account.key, "ids": missing}, found)

    def ratings_changed(self, event: RatingsChanged) -> None:
        """New ratings after a rated match: ``rating`` to the connections that were told
        the end of that match's agent seats, right after it (an agent away when it ended
        gets both when it is back)."""
        games: tuple[int | None, ...] = event.games or (None,) * len(event.ratings)
        rows = {}
        for (key, mu, sigma, _ordinal), count in zip(event.ratings, games, strict=True):
            rows[key] = rating_json(key, mu, sigma, count)
        for ended in self.ended.get(event.match_id, ()):
            key = PolicyRef.agent(ended.account).key
            row = rows.get(key)
            if row is None or not ended.frame.get("rated"):
                continue
            fields = {k: v for k, v in row.items() if k != "policy"}
            ended.rating = {
                "type": "rating",
                "game_id": event.game_id,
                "match": event.match_id,
                "agent": key,
                **fields,
            }
            for client in ended.told:
                if not client.closed:
                    self.send(client, ended.rating)
