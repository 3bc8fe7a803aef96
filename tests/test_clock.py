"""The clocks: the event loop as the default, and the manual clock tests drive."""

from __future__ import annotations

import asyncio

import pytest

from arena.clock import Clock, ManualClock, loop_clock
from tests.conftest import no_hang, spin


def test_timers_fire_in_due_order_each_at_its_own_time() -> None:
    clock = ManualClock(start=100.0)
    fired: list[tuple[str, float]] = []
    clock.call_at(103.0, lambda: fired.append(("c", clock.time())))
    clock.call_at(101.0, lambda: fired.append(("a", clock.time())))
    clock.call_at(102.0, lambda: fired.append(("b1", clock.time())))
    clock.call_at(102.0, lambda: fired.append(("b2", clock.time())))  # same time: armed order
    clock.advance(2.5)
    assert fired == [("a", 101.0), ("b1", 102.0), ("b2", 102.0)]
    assert clock.time() == 102.5 and clock.pending == 1 and clock.next_due() == 103.0
    clock.advance(0.5)  # due exactly at the end of the advance: it runs
    assert fired[-1] == ("c", 103.0) and clock.pending == 0 and clock.next_due() is None


def test_a_cancelled_timer_never_fires_and_a_timer_armed_by_a_timer_fires_in_the_same_advance() -> (
    None
):
    clock = ManualClock()
    fired: list[float] = []
    cancelled = clock.call_later(1.0, lambda: fired.append(-1.0))
    cancelled.cancel()
    cancelled.cancel()  # twice: still one timer less
    assert clock.pending == 0

    def rearm() -> None:
        fired.append(clock.time())
        if len(fired) < 3:
            clock.call_later(1.0, rearm)

    clock.call_later(1.0, rearm)
    clock.advance(10.0)
    assert fired == [1.0, 2.0, 3.0] and clock.time() == 10.0
    ran = clock.call_later(1.0, lambda: None)
    clock.advance(1.0)
    ran.cancel()  # after it ran: changes nothing
    assert clock.pending == 0 and ran.when() == 11.0


def test_a_timer_already_due_runs_at_the_next_advance_and_time_never_goes_back() -> None:
    clock = ManualClock(start=5.0)
    fired: list[float] = []
    clock.call_at(4.0, lambda: fired.append(clock.time()))
    assert fired == []  # never inside call_at
    clock.advance(0)
    assert fired == [5.0]  # a timer is never run before the time it was armed at
    with pytest.raises(ValueError, match="does not go back"):
        clock.advance(-1.0)


async def test_sleep_on_a_manual_clock_wakes_when_the_clock_gets_there() -> None:
    clock = ManualClock()
    sleeper = asyncio.create_task(clock.sleep(2.0))
    await spin()
    clock.advance(1.9)
    await spin()
    assert not sleeper.done()
    clock.advance(0.1)
    await no_hang(sleeper, "the sleep")
    cancelled = asyncio.create_task(clock.sleep(5.0))
    await spin()
    cancelled.cancel()
    await spin()
    assert cancelled.cancelled() and clock.pending == 0  # its timer went with it


async def test_the_running_loop_is_a_clock() -> None:
    """The default clock is the loop itself (no wrapper on the hot path): its time is the
    loop's, and its timers are the loop's timers."""
    clock: Clock = loop_clock()
    loop = asyncio.get_running_loop()
    assert clock is loop
    fired = asyncio.Event()
    handle = clock.call_at(clock.time(), fired.set)
    await no_hang(fired.wait(), "a loop timer")
    assert handle.when() <= loop.time()
