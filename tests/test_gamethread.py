"""Game calls on a game thread keep every guarantee of the guard."""

from __future__ import annotations

import asyncio
import random
import threading

import pytest

import games
from arena.coordinator import GameCoordinator
from arena.gamethread import GameThread
from arena.seats import BotAgent
from games.api import GAME, GameMessage, MessageKind, MoveResult
from games.bots import make_bot
from tests.conftest import HANG_GUARD_S, CountingGame, spin


async def _play(session: games.GameSession, thread: GameThread | None) -> list[str]:
    agents = {s: BotAgent(make_bot("random", seed=5 + s), session.game_id) for s in range(2)}
    coordinator = GameCoordinator(session, agents, game_thread=thread)
    await coordinator.wait_done()
    return [m.text for m in session.seat_messages(0)]


async def test_same_seed_same_game_on_the_game_thread_and_inline_at_once() -> None:
    thread = GameThread("test-game")
    try:
        alone = await _play(games.make("KuhnPoker-v0", seed=21), None)

        async def noise() -> None:
            for _ in range(200):
                random.random()  # other code drawing from the global RNG meanwhile
                await asyncio.sleep(0)

        threaded, inline, _ = await asyncio.gather(
            _play(games.make("KuhnPoker-v0", seed=21), thread),
            _play(games.make("KuhnPoker-v0", seed=21), None),
            noise(),
        )
        assert threaded == alone and inline == alone
    finally:
        thread.shutdown()


class _Chatty(CountingGame):
    """Prints on every step, and waits inside it until another thread has printed."""

    in_step = threading.Event()
    printed = threading.Event()

    def step(self, action: str) -> MoveResult:
        print("GAME NOISE")
        self.in_step.set()
        self.printed.wait(HANG_GUARD_S)
        self.printed.clear()
        self._messages.append(GameMessage(GAME, "noted", MessageKind.INFO))
        return super().step(action)


async def test_a_game_threads_prints_are_swallowed_and_other_threads_are_not(
    capsys: pytest.CaptureFixture[str],
) -> None:
    thread = GameThread("test-game")
    try:
        session = games.GameSession(_Chatty(rounds=3), "Chatty-v0", 2, 0)
        session.start()
        done = threading.Event()

        def ours() -> None:  # prints while the game is inside its step
            count = 0
            while not done.is_set():
                if _Chatty.in_step.wait(0.05):
                    _Chatty.in_step.clear()
                    count += 1
                    print(f"OUR LINE {count}")
                    _Chatty.printed.set()

        printer = threading.Thread(target=ours)
        printer.start()
        while not session.done:
            seat = session.current_player()
            moves = session.legal_moves(seat) or ["[0]"]
            await thread.run(lambda s=seat, m=moves: session.step(s, m[0]))
        done.set()
        printer.join()
        out = capsys.readouterr().out
        assert "GAME NOISE" not in out
        assert out.count("OUR LINE") == len(session.turns) == 6
    finally:
        thread.shutdown()


async def test_a_cancelled_call_finishes_before_the_cancellation_propagates() -> None:
    thread = GameThread("test-game")
    gate = threading.Event()
    started = threading.Event()
    finished = threading.Event()

    def slow() -> None:
        started.set()
        gate.wait(HANG_GUARD_S)
        finished.set()

    try:
        task = asyncio.create_task(thread.run(slow))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, HANG_GUARD_S)
        assert started.is_set()  # the game call is running on the game thread
        task.cancel()
        await spin()
        assert not task.done()  # still waiting for the game call to end
        gate.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert finished.is_set()
    finally:
        thread.shutdown()
