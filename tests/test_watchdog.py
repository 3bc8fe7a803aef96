"""The per-call deadline that interrupts runaway game code.

The watchdog measures real time by nature (it interrupts a game looping on the CPU), so
these tests run on the real clock; none bounds how long a busy machine takes: a deadline
that must not fire is long next to what it guards, and a wait is a hang guard."""

from __future__ import annotations

import random
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from games.watchdog import REFIRE_SECONDS, StepTimeout, call_with_deadline
from tests.conftest import HANG_GUARD_S


def spin_forever() -> None:
    while True:
        pass


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_runaway_loop_is_interrupted() -> None:
    outcome: list[BaseException] = []

    def guarded() -> None:
        try:
            call_with_deadline(spin_forever, 0.1)
        except BaseException as exc:  # what ended the loop is the verdict
            outcome.append(exc)

    thread = threading.Thread(target=guarded, daemon=True)
    thread.start()
    thread.join(timeout=HANG_GUARD_S)
    assert not thread.is_alive(), "the runaway loop was never interrupted"
    assert len(outcome) == 1 and isinstance(outcome[0], StepTimeout)


def test_code_that_swallows_the_timeout_is_interrupted_again() -> None:
    def stubborn() -> None:
        for _ in range(3):
            try:
                spin_forever()
            except Exception:
                continue
        spin_forever()

    with pytest.raises(StepTimeout):
        call_with_deadline(stubborn, 0.05)


def test_fast_calls_are_not_interrupted_later() -> None:
    # A deadline long next to the call (a busy machine may pause this thread a while),
    # short next to the wait after, which outlasts it and a refire.
    for i in range(1000):
        assert call_with_deadline(lambda i=i: i, 0.25) == i
    time.sleep(0.25 + REFIRE_SECONDS)  # a stray timeout would be raised here


def test_no_limit_means_no_watchdog() -> None:
    assert call_with_deadline(lambda: time.sleep(0.01) or 5, None) == 5


def test_a_nested_call_is_refused() -> None:
    with pytest.raises(RuntimeError, match="reentrant"):
        call_with_deadline(lambda: call_with_deadline(lambda: 1, 60.0), 60.0)
    assert call_with_deadline(lambda: 2, 60.0) == 2  # and the guard still works after


@pytest.fixture
def tiny_switch_interval() -> Iterator[None]:
    # Threads switch every microsecond: the timeout lands anywhere, bookkeeping included.
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def test_deadlines_at_the_end_of_calls_never_leak_or_deadlock_under_load(
    tiny_switch_interval: None,
) -> None:
    """Deadlines that pass just as calls end, on several threads at once: every timeout
    surfaces from its own call, none later in other code, and no thread hangs."""
    leaks: list[int] = []
    timeouts: list[int] = []

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        leaked = timed_out = 0
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            try:
                try:
                    work = rng.choice((0.0, 1e-6, 1e-5, 1e-4))
                    call_with_deadline(lambda w=work: spin(w), rng.choice((0.0, 1e-6, 1e-5, 1e-4)))
                except StepTimeout:
                    timed_out += 1
                spin(1e-5)  # unrelated code
            except StepTimeout:
                leaked += 1
        quiet = time.monotonic() + 0.8  # longer than REFIRE_SECONDS: a stale deadline fires
        while time.monotonic() < quiet:
            try:
                spin(0.01)
            except StepTimeout:
                leaked += 1
        leaks.append(leaked)
        timeouts.append(timed_out)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=2 * HANG_GUARD_S)
    assert not any(t.is_alive() for t in threads), "a guarded thread hung (deadlock)"
    assert leaks == [0, 0, 0, 0]
    assert sum(timeouts) > 0  # the deadlines did fire
