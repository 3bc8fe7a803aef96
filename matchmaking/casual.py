"""Casual matches kept away from the live ratings.

A ``RatingKeeper`` rates every match between fixed policies it sees start on its bus. A
server also plays casual matches (an agent's seek that says ``rated: false``), which must
not move anyone's rating. ``RatedFeed`` stands between the server's bus and the keeper:
it forwards every event to a bus of its own except the starts of casual matches (so the
keeper never rates them), and forwards the keeper's ``RatingsChanged`` back to the
server's bus (so leaderboards and agents hear of them).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from arena.events import EventBus, MatchStarted, RatingsChanged, SubscriberDropped

FEED_QUEUE = 100_000
"""Events the feed may fall behind on either bus before that bus drops it."""


class RatedFeed:
    """The events of ``source`` a ``RatingKeeper`` should see, on ``self.bus`` (see the
    module's docstring). ``is_casual(match_id)``: True for a match not to rate."""

    def __init__(self, source: EventBus, is_casual: Callable[[str], bool]) -> None:
        self.source = source
        self.is_casual = is_casual
        self.bus = EventBus()
        """Subscribe the keeper here."""
        self.skipped = 0
        """Casual matches kept from the keeper."""
        self._tasks: list[asyncio.Task[None]] = []
        self._in = source.subscribe(max_queue=FEED_QUEUE, name="rated-feed")
        self._back = self.bus.subscribe(max_queue=FEED_QUEUE, name="rated-feed-back")

    def start(self) -> None:
        """Start forwarding (needs a running loop)."""
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._forward(), name="rated-feed"),
            loop.create_task(self._forward_back(), name="rated-feed-back"),
        ]

    async def _forward(self) -> None:
        while True:
            try:
                event = await self._in.get()
            except SubscriberDropped:
                self._in = self.source.subscribe(max_queue=FEED_QUEUE, name="rated-feed")
                continue
            except StopAsyncIteration:
                return
            if isinstance(event, RatingsChanged):
                continue  # the keeper's own, coming back: not again
            if isinstance(event, MatchStarted) and self.is_casual(event.match_id):
                self.skipped += 1
                continue
            self.bus.publish(event)

    async def _forward_back(self) -> None:
        while True:
            try:
                event = await self._back.get()
            except SubscriberDropped:
                self._back = self.bus.subscribe(max_queue=FEED_QUEUE, name="rated-feed-back")
                continue
            except StopAsyncIteration:
                return
            if isinstance(event, RatingsChanged):
                self.source.publish(event)

    async def flush(self) -> None:
        """Wait until every event published on the source so far was forwarded."""
        while self._in.pending():
            await asyncio.sleep(0.01)
        await asyncio.sleep(0)

    async def close(self) -> None:
        """Forward what is queued, then stop."""
        self._in.close()
        if self._tasks:
            with contextlib.suppress(Exception):
                await self._tasks[0]
        self._back.close()
        for task in self._tasks[1:]:
            with contextlib.suppress(Exception):
                await task
