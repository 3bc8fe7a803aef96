"""Who watches what, without I/O: subscriptions to the lobby and to match streams.

A match subscription is answered with a ``snapshot`` (the match as that client may see
it), or, for a client that comes back with ``since`` and the same ``epoch``, with
``resume`` and the event frames it missed; then the client gets the stream's events for
its audience (the public one, or its seat's, for a client holding a seat's token).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from web.connections import Client
from web.limits import ServerLimits
from web.live.livematches import LiveMatches, check_match_id
from web.live.streams import PUBLIC, MatchStream
from web.needs import Need
from web.outbox import Outbox
from web.protocol import ClientRequest, ProtocolError


class Spectators:
    """The lobby's and the match streams' watchers (``HubCore`` owns one).
    ``seat_for_token(match_id, token)`` is the seat a token holds (None: no seat)."""

    def __init__(
        self,
        limits: ServerLimits,
        outbox: Outbox,
        matches: LiveMatches,
        *,
        epoch: str,
        seat_for_token: Callable[[str, str], int | None],
    ) -> None:
        self.limits = limits
        self.outbox = outbox
        self.matches = matches
        self.epoch = epoch
        self.seat_for_token = seat_for_token

    def subscribe_lobby(self, client: Client, request: ClientRequest) -> None:
        """``subscribe`` to the lobby: its snapshot, then its updates."""
        lobby = self.matches.lobby
        lobby.watchers.add(client)
        self.outbox.send(client, {**lobby.snapshot(), "ref": request.id})

    def unsubscribe_lobby(self, client: Client) -> None:
        """No more lobby updates for ``client``."""
        self.matches.lobby.watchers.discard(client)

    def subscribe_match(self, client: Client, request: ClientRequest) -> Need | None:
        """``subscribe`` to a match: ``snapshot`` or ``resume``, then its events. Raises
        ProtocolError (``too_many_subscriptions``, ``forbidden``, ``unknown_match``)."""
        match_id = check_match_id(request.text("match_id"))
        token = request.text("token", required=False)
        since = request.integer("since")
        if match_id not in client.matches and client.subscriptions >= self.limits.max_subscriptions:
            raise ProtocolError(
                "too_many_subscriptions",
                f"at most {self.limits.max_subscriptions} streams per connection: "
                "unsubscribe from one first",
            )
        audience = PUBLIC
        if token:
            seat = self.seat_for_token(match_id, token)
            if seat is None:
                raise ProtocolError("forbidden", "this token holds no seat of this match")
            audience = seat

        def subscribe(stream: MatchStream) -> None:
            if client.closed:
                return
            self.unwatch(client, stream.match_id)
            frames = None
            if since is not None and request.data.get("epoch") == self.epoch:
                frames = stream.missed(since, audience)
            if frames is not None:
                self._resume(client, request.id, stream, since, frames)
            else:
                snapshot = stream.snapshot(audience, self.epoch, resync=since is not None)
                self.outbox.send(client, {**snapshot, "ref": request.id})
            stream.watchers.setdefault(audience, set()).add(client)
            client.matches[stream.match_id] = audience

        return self.matches.find_stream(match_id, subscribe)

    def _resume(
        self, client: Client, ref: Any, stream: MatchStream, since: int | None, frames: list[str]
    ) -> None:
        self.outbox.send(
            client,
            {
                "type": "resume",
                "ref": ref,
                "match": stream.match_id,
                "from": since,
                "v": stream.version,
                "epoch": self.epoch,
            },
        )
        for frame in frames:
            self.outbox.out((client,), frame)

    def unwatch(self, client: Client, match_id: str) -> bool:
        """No more events of ``match_id`` for ``client``; False when it watched none."""
        audience = client.matches.pop(match_id, None)
        if audience is None:
            return False
        stream = self.matches.stream(match_id)
        if stream is not None:
            stream.watchers.get(audience, set()).discard(client)
        return True

    def forget(self, client: Client) -> None:
        """``client`` is gone: it watches nothing any more."""
        self.unsubscribe_lobby(client)
        for match_id in list(client.matches):
            self.unwatch(client, match_id)
