"""Games' live ratings as a feed, without I/O: ``subscribe`` to a game's ratings gets
every rating of the game (``ratings``), then a ``ratings_changed`` after each of its rated
matches. No versions, no resume: a client that comes back subscribes again."""

from __future__ import annotations

from typing import Any

from arena.events import RatingsChanged
from web.agents.seeks import GameCheck
from web.connections import Client
from web.limits import ServerLimits
from web.live.convert import rating_json
from web.needs import Need
from web.outbox import Outbox
from web.protocol import ClientRequest, ProtocolError, dumps


class RatingsFeed:
    """Who follows which game's ratings (``HubCore`` owns one). ``check_game`` refuses a
    game this server cannot run (None: every game is taken); ``has_db``: whether ratings
    can be read (else a game has none)."""

    def __init__(
        self,
        limits: ServerLimits,
        outbox: Outbox,
        *,
        check_game: GameCheck | None,
        has_db: bool,
    ) -> None:
        self.limits = limits
        self.outbox = outbox
        self.check_game = check_game
        self.has_db = has_db
        self._watchers: dict[str, set[Client]] = {}

    def subscribe(self, client: Client, request: ClientRequest) -> Need | None:
        """``subscribe`` to a game's ratings (a ``load_ratings`` need with a database).
        Raises ProtocolError (``bad_game``, ``too_many_subscriptions``; the need's
        continuation ``unavailable``)."""
        game_id = request.text("game")
        if self.check_game is not None:
            try:
                self.check_game(game_id, None, False)
            except ValueError as exc:
                raise ProtocolError("bad_game", str(exc)) from None
        if (
            game_id not in client.rating_games
            and client.subscriptions >= self.limits.max_subscriptions
        ):
            raise ProtocolError(
                "too_many_subscriptions",
                f"at most {self.limits.max_subscriptions} streams per connection",
            )

        def answer(result: Any) -> None:
            if isinstance(result, BaseException):
                raise ProtocolError("unavailable", f"cannot read the ratings: {result}")
            rows = sorted(
                (rating_json(k, mu, sg, games) for k, (mu, sg, games) in dict(result).items()),
                key=lambda r: (-r["rating"], r["policy"]),
            )
            self._watchers.setdefault(game_id, set()).add(client)
            client.rating_games.add(game_id)
            self.outbox.send(
                client, {"type": "ratings", "ref": request.id, "game_id": game_id, "rows": rows}
            )

        if not self.has_db:
            answer({})
            return None
        return Need("load_ratings", {"game": game_id}, answer)

    def unsubscribe(self, client: Client, game_id: str) -> None:
        """No more ratings of ``game_id`` for ``client``."""
        self._watchers.get(game_id, set()).discard(client)
        client.rating_games.discard(game_id)

    def forget(self, client: Client) -> None:
        """``client`` is gone: it follows no game's ratings any more."""
        for watchers in self._watchers.values():
            watchers.discard(client)

    def changed(self, event: RatingsChanged) -> None:
        """New ratings after a rated match: ``ratings_changed`` to the game's followers."""
        watchers = self._watchers.get(event.game_id)
        if watchers:
            games: tuple[int | None, ...] = event.games or (None,) * len(event.ratings)
            rows = [
                rating_json(k, mu, sg, n)
                for (k, mu, sg, _o), n in zip(event.ratings, games, strict=True)
            ]
            message = {
                "type": "ratings_changed",
                "game_id": event.game_id,
                "match": event.match_id,
                "rows": rows,
            }
            self.outbox.out(list(watchers), dumps(message))
