"""``games.rng``: a game's ``random`` draws are its own, whatever other threads draw."""

from __future__ import annotations

import random
import threading

import games  # noqa: F401 - installs the routing
from games import rng as game_rng
from tests.conftest import HANG_GUARD_S


def test_draws_inside_use_come_from_the_games_generator_on_that_thread_only() -> None:
    expected = random.Random(5)
    want = [expected.random() for _ in range(1000)]
    got: list[float] = []
    started = threading.Event()

    def game_thread() -> None:
        with game_rng.use(random.Random(5)):
            random.seed(5)  # what TextArena's reset does: it reseeds the game's generator
            started.set()
            got.extend(random.random() for _ in range(1000))

    random.seed(123)
    shared = random.Random(123)
    thread = threading.Thread(target=game_thread)
    thread.start()
    started.wait(HANG_GUARD_S)
    outside = [random.random() for _ in range(1000)]  # drawn meanwhile, on another thread
    thread.join(HANG_GUARD_S)
    assert not thread.is_alive(), "the game thread hangs"
    assert got == want
    assert outside == [shared.random() for _ in range(1000)]
    assert game_rng.current() is None


def test_every_module_function_is_routed() -> None:
    rng = random.Random(1)
    twin = random.Random(1)
    with game_rng.use(rng):
        values = (random.choice("abcdef"), random.randint(0, 99), random.sample(range(50), 3))
    assert values == (twin.choice("abcdef"), twin.randint(0, 99), twin.sample(range(50), 3))
    routed = [name for name in game_rng.ROUTED if hasattr(random.Random, name)]
    assert len(routed) >= 20
    for name in routed:
        assert getattr(random, name).__module__ == "games.rng", name
