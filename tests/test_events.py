"""The event bus: publish never blocks, slow subscribers are dropped and told."""

from __future__ import annotations

import asyncio

import pytest

from arena.eventbus import EventBus, SubscriberDropped
from arena.events import MatchAborted
from tests.conftest import HANG_GUARD_S, no_hang, spin


def event(i: int) -> MatchAborted:
    return MatchAborted(match_id=str(i), reason="test")


async def test_subscribers_get_events_in_order() -> None:
    bus = EventBus()
    a, b = bus.subscribe(), bus.subscribe()
    for i in range(5):
        bus.publish(event(i))
    assert [(await a.get()).match_id for _ in range(5)] == ["0", "1", "2", "3", "4"]
    assert [(await b.get()).match_id for _ in range(5)] == ["0", "1", "2", "3", "4"]


async def test_slow_subscriber_is_dropped_and_told_publisher_never_blocks() -> None:
    bus = EventBus()
    slow = bus.subscribe(max_queue=3, name="slow")
    fast = bus.subscribe(max_queue=100)
    for i in range(10):
        bus.publish(event(i))  # returns at once although nobody reads
    assert slow.dropped and not fast.dropped
    assert bus.has_subscribers  # the fast one is still there
    got = [(await slow.get()).match_id for _ in range(3)]
    assert got == ["0", "1", "2"]  # what it had queued is still delivered
    with pytest.raises(SubscriberDropped, match="slow"):
        await slow.get()
    assert fast.pending() == 10


async def test_waiting_consumer_wakes_on_publish_and_on_close() -> None:
    bus = EventBus()
    sub = bus.subscribe()
    waiter = asyncio.create_task(sub.get())
    await asyncio.sleep(0)
    bus.publish(event(1))
    assert (await no_hang(waiter, "the consumer's wait")).match_id == "1"
    collected = []

    async def consume() -> None:
        async for e in sub:
            collected.append(e)

    task = asyncio.create_task(consume())
    bus.publish(event(2))
    await asyncio.sleep(0)
    sub.close()
    await no_hang(task, "the consumer's loop")
    assert [e.match_id for e in collected] == ["2"]
    assert not bus.has_subscribers
    bus.publish(event(3))  # nobody listens: fine


def test_bad_queue_size_is_refused() -> None:
    with pytest.raises(ValueError):
        EventBus().subscribe(max_queue=0)


async def test_a_back_pressure_subscriber_congests_the_bus_until_it_catches_up() -> None:
    bus = EventBus()
    slow = bus.subscribe(max_queue=100, name="recorder", pressure=10)
    fast = bus.subscribe(max_queue=5, name="web")  # others may still be dropped
    for i in range(10):
        assert not bus.congested
        bus.publish(MatchAborted(f"m{i}", "x"))
    assert bus.congested and fast.dropped and not slow.dropped
    waiter = asyncio.create_task(bus.wait_for_room(HANG_GUARD_S))
    await spin()
    assert not waiter.done()  # it waits for the recorder, not for a timer
    for _ in range(4):
        assert slow.get_nowait() is not None
    assert bus.congested  # 6 queued: more than half of the pressure
    assert slow.get_nowait() is not None
    assert await no_hang(waiter, "the wait for room") is True and not bus.congested
    assert await bus.wait_for_room(0.01) is True  # at once when not congested
    for i in range(10):
        bus.publish(MatchAborted(f"n{i}", "x"))
    assert await bus.wait_for_room(0.05) is False  # bounded: gives up, play goes on
    slow.close()
    assert not bus.congested  # a closed subscriber never holds the bus


def test_a_congested_bus_can_be_waited_on_from_one_event_loop_after_another() -> None:
    # The process's bus outlives event loops (asyncio.run after asyncio.run): a wait for
    # room in the second loop must not trip over the first loop's event.
    bus = EventBus()
    slow = bus.subscribe(max_queue=100, name="recorder", pressure=2)

    async def congest_then_wait() -> bool:
        for i in range(2):
            bus.publish(MatchAborted(f"m{i}", "x"))
        waiter = asyncio.create_task(bus.wait_for_room(HANG_GUARD_S))
        await spin()
        while slow.get_nowait() is not None:
            pass
        return await no_hang(waiter, "the wait for room")

    assert asyncio.run(congest_then_wait()) is True
    assert asyncio.run(congest_then_wait()) is True
