"""The per-call deadline that interrupts runaway game code."""

from __future__ import annotations

import time

import pytest

from games.watchdog import StepTimeout, deadline


def spin_forever() -> None:
    while True:
        pass


def test_runaway_loop_is_interrupted() -> None:
    started = time.monotonic()
    with pytest.raises(StepTimeout), deadline(0.1):
        spin_forever()
    assert time.monotonic() - started < 1.0


def test_code_that_swallows_the_timeout_is_interrupted_again() -> None:
    def stubborn() -> None:
        for _ in range(3):
            try:
                spin_forever()
            except Exception:
                continue
        spin_forever()

    with pytest.raises(StepTimeout), deadline(0.05):
        stubborn()


def test_fast_calls_are_not_interrupted_later() -> None:
    for _ in range(1000):
        with deadline(0.05):
            pass
    time.sleep(0.3)  # a stray timeout would be raised here


def test_no_limit_means_no_watchdog() -> None:
    with deadline(None):
        time.sleep(0.01)
