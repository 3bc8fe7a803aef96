"""The in-process event bus: fan-out of the match events (``arena.events``) from the
coordinators that publish them to the subscribers (the storage recorder, the web hub).

Publishing never blocks and never raises: each subscriber has a bounded queue, and a
subscriber that falls ``max_queue`` events behind is dropped and told so
(``SubscriberDropped``), so a slow subscriber can never slow a game.

Back-pressure. A subscriber that must not lose events (the recorder: nothing acknowledged
may be lost) subscribes with ``pressure``: once that many of its events are queued, the
bus is ``congested`` and the coordinators wait (``wait_for_room``, bounded in time) before
their next move, until it has worked its queue down to half. Games slow down to what the
database can store instead of losing matches. Other subscribers (the web hub) never slow a
game: they are dropped when they fall behind.

The bus belongs to one event loop thread: publish and consume from that thread.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator

from arena.events import MatchEvent


class SubscriberDropped(Exception):
    """This subscriber fell too far behind and was disconnected from the bus."""


class Subscription:
    """A subscriber's bounded queue. Iterate it with ``async for``.

    ``pressure``: queued events at which the bus becomes congested (None: never; see the
    module's docstring).
    """

    def __init__(
        self, bus: EventBus, max_queue: int, name: str, pressure: int | None = None
    ) -> None:
        self._bus = bus
        self.max_queue = max_queue
        self.name = name
        self.pressure = pressure
        self._queue: deque[MatchEvent] = deque()
        self._wakeup = asyncio.Event()
        self.dropped = False
        """True once the bus dropped this subscriber for falling behind."""
        self.closed = False
        self.pressing = False
        """True while this subscriber holds the bus congested."""

    def _offer(self, event: MatchEvent) -> bool:
        if len(self._queue) >= self.max_queue:
            self.dropped = True
            self._release()
            self._wakeup.set()
            return False
        self._queue.append(event)
        if self.pressure is not None and not self.pressing and len(self._queue) >= self.pressure:
            self.pressing = True
            self._bus._press()
        self._wakeup.set()
        return True

    def _taken(self) -> None:
        if self.pressing and len(self._queue) * 2 <= (self.pressure or 0):
            self._release()

    def _release(self) -> None:
        if self.pressing:
            self.pressing = False
            self._bus._unpress()

    def pending(self) -> int:
        """Events queued and not yet consumed."""
        return len(self._queue)

    def get_nowait(self) -> MatchEvent | None:
        """The next queued event, or None when the queue is empty."""
        if not self._queue:
            return None
        event = self._queue.popleft()
        if self.pressing:
            self._taken()
        return event

    async def get(self) -> MatchEvent:
        """The next event. Raises SubscriberDropped (after the queued events are consumed)
        when the bus dropped this subscriber, StopAsyncIteration once it is closed."""
        while not self._queue:
            if self.dropped:
                raise SubscriberDropped(
                    f"subscriber {self.name or id(self)} fell {self.max_queue} events behind "
                    "and was dropped"
                )
            if self.closed:
                raise StopAsyncIteration
            self._wakeup.clear()
            await self._wakeup.wait()
        event = self._queue.popleft()
        if self.pressing:
            self._taken()
        return event

    def close(self) -> None:
        """Unsubscribe; a consumer waiting in ``get`` stops after the queued events."""
        self.closed = True
        self._release()
        self._bus._remove(self)
        self._wakeup.set()

    def __aiter__(self) -> AsyncIterator[MatchEvent]:
        return self

    async def __anext__(self) -> MatchEvent:
        return await self.get()


class EventBus:
    """Fan-out of match events to subscribers, without ever blocking the publisher."""

    DEFAULT_MAX_QUEUE = 10_000
    """Events a subscriber may fall behind before it is dropped."""

    def __init__(self) -> None:
        self._subscribers: list[Subscription] = []
        self.published = 0
        """Events published so far."""
        self._pressing = 0
        self._room: asyncio.Event | None = None
        self._room_loop: asyncio.AbstractEventLoop | None = None
        self.waits = 0
        """Times a publisher waited for a congested subscriber (back-pressure)."""

    def subscribe(
        self, max_queue: int = DEFAULT_MAX_QUEUE, name: str = "", pressure: int | None = None
    ) -> Subscription:
        """A new subscription that receives every event published from now on.

        ``pressure`` (at most ``max_queue``): with that many of its events queued, the bus
        is congested until it has taken half of them (see the module's docstring).
        """
        if max_queue < 1:
            raise ValueError("max_queue must be at least 1")
        if pressure is not None and not 1 <= pressure <= max_queue:
            raise ValueError("pressure must be between 1 and max_queue")
        sub = Subscription(self, max_queue, name, pressure)
        self._subscribers.append(sub)
        return sub

    @property
    def congested(self) -> bool:
        """True while a back-pressure subscriber has ``pressure`` events or more queued."""
        return self._pressing > 0

    async def wait_for_room(self, timeout_s: float) -> bool:
        """Wait until the bus is not congested, at most ``timeout_s``; True when it is not.
        Publishers call it between moves, never while publishing."""
        if not self._pressing:
            return True
        self.waits += 1
        loop = asyncio.get_running_loop()
        if self._room is None or self._room_loop is not loop:
            # An event binds to the loop that first waits on it; the process's bus outlives
            # loops (one asyncio.run after another), so each loop gets its own.
            self._room, self._room_loop = asyncio.Event(), loop
        try:
            async with asyncio.timeout(timeout_s):
                await self._room.wait()
        except TimeoutError:
            return False
        return True

    def _press(self) -> None:
        self._pressing += 1
        if self._room is not None:
            self._room.clear()

    def _unpress(self) -> None:
        self._pressing -= 1
        if not self._pressing and self._room is not None:
            self._room.set()

    @property
    def has_subscribers(self) -> bool:
        """True when anyone listens (publishers may skip building costly fields if not)."""
        return bool(self._subscribers)

    def publish(self, event: MatchEvent) -> None:
        """Deliver ``event`` to every subscriber's queue; never blocks or raises."""
        self.published += 1
        dropped = [sub for sub in self._subscribers if not sub._offer(event)]
        for sub in dropped:
            self._remove(sub)

    def _remove(self, sub: Subscription) -> None:
        if sub in self._subscribers:
            self._subscribers.remove(sub)


_default_bus: EventBus | None = None


def default_bus() -> EventBus:
    """The process's shared bus, which envs built by ``make_envs()`` publish to."""
    global _default_bus
    if _default_bus is None:
        _default_bus = EventBus()
    return _default_bus
