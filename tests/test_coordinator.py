"""The coordinator: turn order, aborts, timeouts and wake-ups (scripted games)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest

from arena.coordinator import SeatTurn
from arena.events import MatchAborted, MatchEnded, MatchStarted, TurnPlayed
from arena.rollouts import do_single_rollout
from arena.types import TokensWithLogprobs
from games.api import PublicBoard
from games.session import SessionLimits, Status
from tests.conftest import (
    CountingGame,
    ScriptedAgent,
    counting_session,
    decode_ob,
    encode,
    make_match,
)


def right_answer(turn) -> str:  # type: ignore[no-untyped-def]
    return turn.legal_moves[0]


async def play_env(env, log: list[int]) -> None:  # type: ignore[no-untyped-def]
    """Drive a PlayerEnv with right answers, logging its seat at every move."""
    initial = await env.initial_observation()
    if env.done_before_first_move:
        return
    ob, _ = initial
    while True:
        text = decode_ob(ob)
        move = text[text.rindex("Available moves: ") + len("Available moves: ") :].split()[0]
        log.append(env.seat)
        result = await env.step(encode(move))
        ob = result.next_observation
        if result.episode_done:
            return


@pytest.mark.parametrize("num_players", [2, 3, 5])
async def test_learner_seats_move_in_turn_order(num_players: int) -> None:
    coordinator, envs = make_match(counting_session(num_players, rounds=3))
    log: list[int] = []
    await asyncio.gather(*(play_env(env, log) for env in reversed(envs)))
    assert log == [i % num_players for i in range(3 * num_players)]
    assert coordinator.outcome is not None and coordinator.outcome.status is Status.FINISHED


async def test_bots_and_learners_interleave_in_turn_order(bus) -> None:  # type: ignore[no-untyped-def]
    sub = bus.subscribe()
    agents = {1: ScriptedAgent(right_answer, "bot")}
    _coordinator, envs = make_match(counting_session(3, rounds=2), agents, bus=bus)
    assert [e.seat for e in envs] == [0, 2]
    log: list[int] = []
    await asyncio.gather(*(play_env(env, log) for env in envs))
    assert log == [0, 2, 0, 2]
    events = []
    while (event := sub.get_nowait()) is not None:
        events.append(event)
    assert isinstance(events[0], MatchStarted)
    assert events[0].players == ("learner", "bot", "learner")
    turns = [e for e in events if isinstance(e, TurnPlayed)]
    assert [t.seat for t in turns] == [0, 1, 2, 0, 1, 2]
    assert [t.index for t in turns] == list(range(6))
    assert isinstance(events[-1], MatchEnded)


async def test_observation_is_the_seats_own() -> None:
    _, envs = make_match(counting_session(3))
    obs = await asyncio.gather(*(env.initial_observation() for env in envs[:1]))
    text = decode_ob(obs[0][0])
    assert "secret-0" in text
    assert "secret-1" not in text and "secret-2" not in text
    envs[0].abort("test over")


async def assert_partner_wakes(partner_task: asyncio.Task, started: float) -> None:  # type: ignore[type-arg]
    await asyncio.wait_for(partner_task, timeout=1.0)
    assert time.monotonic() - started < 1.0


async def test_seat_that_raises_aborts_match_and_partner_wakes() -> None:
    coordinator, (env0, env1) = make_match(counting_session(2))

    class Boom(Exception):
        pass

    async def failing_policy(ob, stop):  # type: ignore[no-untyped-def]
        raise Boom("policy crashed")

    async def good_policy(ob, stop):  # type: ignore[no-untyped-def]
        return TokensWithLogprobs(encode("[1]"), None)

    partner = asyncio.create_task(do_single_rollout(good_policy, env1))
    await asyncio.sleep(0)
    started = time.monotonic()
    with pytest.raises(Boom):
        await do_single_rollout(failing_policy, env0)
    await assert_partner_wakes(partner, started)
    trajectory = partner.result()
    # Seat 1 never got to move: the cookbook's shape, one empty terminal transition.
    assert [t.ac.tokens for t in trajectory.transitions] == [[]]
    assert trajectory.stop_reason == "aborted"
    assert env1.done_before_first_move
    assert coordinator.outcome.status is Status.ABORTED
    assert "Boom" in coordinator.outcome.reason


async def test_cancelled_seat_aborts_match_and_partner_wakes() -> None:
    coordinator, (env0, env1) = make_match(counting_session(2))
    thinking = asyncio.Event()

    async def slow_policy(ob, stop):  # type: ignore[no-untyped-def]
        thinking.set()
        await asyncio.sleep(3600)

    seat0 = asyncio.create_task(do_single_rollout(slow_policy, env0))
    await thinking.wait()  # seat 0 holds the turn, "sampling"
    seat1 = asyncio.create_task(env1.initial_observation())
    await asyncio.sleep(0.05)
    assert not seat1.done()
    started = time.monotonic()
    seat0.cancel()
    with pytest.raises(asyncio.CancelledError):
        await seat0
    await asyncio.wait_for(seat1, timeout=1.0)
    assert time.monotonic() - started < 1.0
    assert env1.done_before_first_move
    assert coordinator.outcome.status is Status.ABORTED


async def test_cancelled_waiting_seat_aborts_match() -> None:
    coordinator, (env0, env1) = make_match(counting_session(2))
    await env0.initial_observation()
    waiting = asyncio.create_task(env0.step(encode("[0]")))  # moves, then waits for seat 1
    _ob, _ = await env1.initial_observation()
    await asyncio.sleep(0.01)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    result = await asyncio.wait_for(env1.step(encode("[1]")), timeout=1.0)
    assert result.episode_done and result.metrics["aborted"] == 1
    assert coordinator.outcome.status is Status.ABORTED


async def test_seat_that_times_out_aborts_match_and_partner_wakes(bus) -> None:  # type: ignore[no-untyped-def]
    sub = bus.subscribe()
    coordinator, (env0, env1) = make_match(counting_session(2), bus=bus, move_timeout_s=0.2)
    await env0.initial_observation()  # seat 0 never answers
    started = time.monotonic()
    await asyncio.wait_for(env1.initial_observation(), timeout=1.0)
    assert time.monotonic() - started < 1.0
    assert env1.done_before_first_move
    assert coordinator.outcome.status is Status.ABORTED
    assert "timed out" in coordinator.outcome.reason
    # The late answer gets a defined outcome, not a hang or a crash.
    late = await asyncio.wait_for(env0.step(encode("[0]")), timeout=1.0)
    assert late.episode_done and late.metrics["aborted"] == 1
    events = []
    while (event := sub.get_nowait()) is not None:
        events.append(event)
    assert isinstance(events[-1], MatchAborted)


async def test_the_move_clock_is_per_move_and_keeps_ticking_across_moves() -> None:
    """The clock restarts at every move: moves that each take most of the limit never time
    out, however long the match runs in all (the clock's one timer re-arms), and the first
    move over the limit aborts the match, naming the seat; nothing is left scheduled."""
    delays = iter([0.2, 0.2, 0.2, 0.9])

    async def slow(turn):  # type: ignore[no-untyped-def]
        await asyncio.sleep(next(delays))
        return turn.legal_moves[0]

    agents = {0: ScriptedAgent(slow, "slow0"), 1: ScriptedAgent(slow, "slow1")}
    coordinator, _ = make_match(counting_session(2, rounds=2), agents, move_timeout_s=0.5)
    started = time.monotonic()
    outcome = await asyncio.wait_for(coordinator.wait_done(), timeout=5.0)
    assert outcome.status is Status.ABORTED
    assert "seat 1 (slow1) timed out after 0.5 s" in outcome.reason
    assert len(coordinator.session.turns) == 3  # 0.6 s of moves before it, all in time
    assert time.monotonic() - started < 3.0
    assert coordinator._clock is None  # the timer went with the match

    quick = iter([0.2] * 4)

    async def in_time(turn):  # type: ignore[no-untyped-def]
        await asyncio.sleep(next(quick))
        return turn.legal_moves[0]

    agents = {0: ScriptedAgent(in_time), 1: ScriptedAgent(in_time)}
    coordinator, _ = make_match(counting_session(2, rounds=2), agents, move_timeout_s=0.5)
    outcome = await asyncio.wait_for(coordinator.wait_done(), timeout=5.0)
    assert outcome.status is Status.FINISHED and len(coordinator.session.turns) == 4

    # A limit made shorter between moves takes effect at the next move (seat 0 answers
    # without waiting, so its clock cannot run out).
    async def shortened(turn):  # type: ignore[no-untyped-def]
        coordinator.move_timeout_s = 0.05
        await asyncio.sleep(0.2)
        return turn.legal_moves[0]

    agents = {0: ScriptedAgent(right_answer), 1: ScriptedAgent(shortened)}
    coordinator, _ = make_match(counting_session(2, rounds=3), agents, move_timeout_s=60.0)
    started = time.monotonic()
    outcome = await asyncio.wait_for(coordinator.wait_done(), timeout=5.0)
    assert outcome.status is Status.ABORTED and "timed out after 0.05 s" in outcome.reason
    assert len(coordinator.session.turns) == 3 and time.monotonic() - started < 2.0


async def test_a_seat_that_absorbs_the_clocks_cancel_leaves_the_clock_working() -> None:
    """A seat's code may absorb the cancellation the move clock sends (``asyncio.wait_for``
    can) and still answer: the move counts, and the next move over the limit is still a
    timeout, not an unexplained cancellation."""
    calls = 0

    async def absorbing(turn):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        if calls == 1:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(1)
            return turn.legal_moves[0]
        await asyncio.sleep(10)
        return turn.legal_moves[0]

    agents = {0: ScriptedAgent(absorbing), 1: ScriptedAgent(absorbing)}
    coordinator, _ = make_match(counting_session(2), agents, move_timeout_s=0.1)
    coordinator.start()
    driver = coordinator._task
    outcome = await asyncio.wait_for(coordinator.wait_done(), timeout=5.0)
    assert outcome.status is Status.ABORTED
    assert "seat 1 (scripted) timed out after 0.1 s" in outcome.reason
    assert len(coordinator.session.turns) == 1
    await asyncio.sleep(0)
    assert driver is not None and driver.done() and not driver.cancelled()


async def test_every_wait_of_a_seat_wakes_and_a_turn_left_waiting_is_answered() -> None:
    """Two waits on one seat: one takes the turn, both return at the end (None). A turn
    whose waiter was cancelled after being woken can still be answered."""
    agents = {1: ScriptedAgent(right_answer)}
    coordinator, _ = make_match(counting_session(2), agents, move_timeout_s=None)
    first = asyncio.create_task(coordinator.wait_turn(0))
    second = asyncio.create_task(coordinator.wait_turn(0))
    await asyncio.sleep(0.05)
    assert [first.done(), second.done()].count(True) == 1
    coordinator.abort("operator stop")
    await asyncio.sleep(0.01)
    assert first.done() and second.done()
    assert {type(first.result()), type(second.result())} == {type(None), SeatTurn}

    coordinator, _ = make_match(counting_session(2), agents, move_timeout_s=None)
    waiting = asyncio.create_task(coordinator.wait_turn(0))
    await asyncio.sleep(0)
    await asyncio.sleep(0)  # the driver has put seat 0's turn and woken the waiter...
    waiting.cancel()  # ...which is cancelled before it runs: the turn stays in the inbox
    await asyncio.sleep(0)
    record, turn = await asyncio.wait_for(coordinator.submit_and_wait(0, "[0]"), 1.0)
    assert record.valid and record.index == 0
    assert turn is not None and turn.turn_index == 2  # the next turn, not the old one
    coordinator.abort("done")


async def test_bot_that_raises_aborts_match() -> None:
    def broken(turn):  # type: ignore[no-untyped-def]
        raise ValueError("bot bug")

    coordinator, (env0,) = make_match(counting_session(2), {1: ScriptedAgent(broken)})
    await env0.initial_observation()
    result = await asyncio.wait_for(env0.step(encode("[0]")), timeout=1.0)
    assert result.episode_done and result.metrics["aborted"] == 1
    assert "bot bug" in coordinator.outcome.reason


async def test_game_that_raises_aborts_match_and_partner_wakes() -> None:
    coordinator, (env0, env1) = make_match(counting_session(2, raise_on_move=1))
    await env0.initial_observation()
    seat0 = asyncio.create_task(env0.step(encode("[0]")))  # then waits for its next turn
    await env1.initial_observation()
    started = time.monotonic()
    r1 = await asyncio.wait_for(env1.step(encode("[1]")), timeout=1.0)  # the game raises
    r0 = await asyncio.wait_for(seat0, timeout=1.0)
    assert time.monotonic() - started < 1.0
    assert r0.episode_done and r0.metrics["aborted"] == 1
    assert r1.episode_done and r1.metrics["aborted"] == 1
    assert coordinator.outcome.status is Status.ABORTED
    assert "the game broke" in coordinator.outcome.reason


async def test_game_that_hangs_is_interrupted_and_aborted() -> None:
    limits = SessionLimits(step_timeout_s=0.2)
    coordinator, (env0, env1) = make_match(counting_session(2, limits, hang_on_move=0))
    partner = asyncio.create_task(env1.initial_observation())
    await env0.initial_observation()
    started = time.monotonic()
    result = await asyncio.wait_for(env0.step(encode("[0]")), timeout=2.0)
    await asyncio.wait_for(partner, timeout=1.0)
    assert time.monotonic() - started < 1.5
    assert result.episode_done and result.metrics["aborted"] == 1
    assert "timed out" in coordinator.outcome.reason


async def test_abort_before_start_wakes_everyone() -> None:
    coordinator, envs = make_match(counting_session(3))
    coordinator.abort("operator stop")
    for env in envs:
        await asyncio.wait_for(env.initial_observation(), timeout=1.0)
        assert env.done_before_first_move
    assert coordinator.outcome.status is Status.ABORTED


async def test_stepping_a_finished_env_raises() -> None:
    _, (env0, env1) = make_match(counting_session(2, rounds=1))
    log: list[int] = []
    await asyncio.gather(play_env(env0, log), play_env(env1, log))
    with pytest.raises(RuntimeError, match="single-use"):
        await env0.step(encode("[5]"))
    with pytest.raises(RuntimeError, match="single-use"):
        await env0.initial_observation()


async def test_submit_out_of_turn_is_refused() -> None:
    coordinator, (env0, _env1) = make_match(counting_session(2))
    await env0.initial_observation()
    with pytest.raises(RuntimeError, match="not its turn"):
        await coordinator.submit(1, "[0]")
    coordinator.abort("done")


class _BrokenViewGame(CountingGame):
    """A game whose spectator view raises (a buggy plugin)."""

    def public_state(self) -> str:
        raise RuntimeError("the renderer broke")


async def _unrecorded_then_recorded(
    game: type[CountingGame], game_id: str
) -> tuple[list[tuple[Any, Any, int]], list[TurnPlayed]]:
    """Play ``game`` twice, with nobody listening to the bus and then with a subscriber:
    each run's (status, rewards, turns played), and the turns the subscriber got (the
    last event it got must be the end)."""
    from arena.events import EventBus
    from games.session import GameSession

    outcomes = []
    turns: list[TurnPlayed] = []
    for listening in (False, True):
        bus = EventBus()
        sub = bus.subscribe() if listening else None
        session = GameSession(game(rounds=2), game_id, 2, 0)
        session.start()
        agents = {s: ScriptedAgent(right_answer, "bot") for s in range(2)}
        coordinator, _ = make_match(session, agents, bus=bus)
        outcome = await coordinator.wait_done()
        outcomes.append((outcome.status, outcome.rewards, len(session.turns)))
        if sub is not None:
            events = []
            while (event := sub.get_nowait()) is not None:
                events.append(event)
            assert isinstance(events[-1], MatchEnded)
            turns = [e for e in events if isinstance(e, TurnPlayed)]
    return outcomes, turns


async def test_a_failing_public_state_changes_nothing_whether_recorded_or_not(
    caplog: pytest.LogCaptureFixture,
) -> None:

    outcomes, turns = await _unrecorded_then_recorded(_BrokenViewGame, "BrokenView-v0")
    # The plain-text fallback: the newest public board message.
    assert turns[0].public_state == "Say [1]. Available moves: [1]"
    assert all((t.public_state or "").startswith("Say [") for t in turns)
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0] is Status.FINISHED
    assert sum("public_state" in r.getMessage() for r in caplog.records) == 1  # logged once


# -- forfeits: a decided end, never an abort ---------------------------------------------------


async def test_seat_agent_that_forfeits_loses_and_the_match_is_finished(bus) -> None:  # type: ignore[no-untyped-def]
    from arena.coordinator import SeatForfeit

    def gives_up(turn):  # type: ignore[no-untyped-def]
        raise SeatForfeit("seat 1 lost on time")

    sub = bus.subscribe()
    agents = {0: ScriptedAgent(right_answer), 1: ScriptedAgent(gives_up)}
    coordinator, _ = make_match(counting_session(2), agents, bus=bus)
    outcome = await asyncio.wait_for(coordinator.wait_done(), timeout=2.0)
    assert outcome.status is Status.FINISHED
    assert outcome.rewards == {0: 1.0, 1: -1.0}
    assert outcome.forfeited == {1} and outcome.reason == "seat 1 lost on time"
    events = []
    while (event := sub.get_nowait()) is not None:
        events.append(event)
    ended = events[-1]
    assert isinstance(ended, MatchEnded)
    assert ended.forfeited == (1,) and ended.rewards == (1.0, -1.0) and ended.num_turns == 1


async def test_forfeit_while_another_seat_thinks_ends_the_match_at_once() -> None:
    never = asyncio.Event()

    async def thinks_forever(turn):  # type: ignore[no-untyped-def]
        await never.wait()
        return turn.legal_moves[0]

    agents = {
        0: ScriptedAgent(thinks_forever),
        1: ScriptedAgent(right_answer),
        2: ScriptedAgent(right_answer),
    }
    coordinator, _ = make_match(counting_session(3), agents, move_timeout_s=30.0)
    coordinator.start()
    await asyncio.sleep(0.05)  # seat 0 is thinking
    started = time.monotonic()
    coordinator.forfeit(2, "seat 2 left")
    outcome = await asyncio.wait_for(coordinator.wait_done(), timeout=1.0)
    assert time.monotonic() - started < 0.5
    assert outcome.status is Status.FINISHED and outcome.forfeited == {2}
    assert outcome.rewards == {0: 0.5, 1: 0.5, 2: -1.0}  # the others share the loss
    coordinator.forfeit(0, "too late")  # over: changes nothing
    assert coordinator.outcome.forfeited == {2}


async def test_forfeit_before_the_driver_runs_applies_before_the_first_move() -> None:
    agents = {0: ScriptedAgent(right_answer), 1: ScriptedAgent(right_answer)}
    coordinator, _ = make_match(counting_session(2, rounds=50), agents)
    coordinator.start()  # the driver task has not run yet: not waiting for any seat
    coordinator.forfeit(0, "resigned")
    outcome = await asyncio.wait_for(coordinator.wait_done(), timeout=1.0)
    assert outcome.status is Status.FINISHED and outcome.forfeited == {0}
    assert coordinator.session.turns == []
    with pytest.raises(ValueError):
        coordinator.forfeit(5, "no such seat")


async def test_abort_still_wins_over_a_pending_forfeit() -> None:
    never = asyncio.Event()

    async def thinks_forever(turn):  # type: ignore[no-untyped-def]
        await never.wait()
        return "[0]"

    coordinator, _ = make_match(
        counting_session(2), {0: ScriptedAgent(thinks_forever), 1: ScriptedAgent(right_answer)}
    )
    coordinator.start()
    await asyncio.sleep(0.01)
    coordinator.abort("server stopped")
    coordinator.forfeit(0, "left")
    outcome = await asyncio.wait_for(coordinator.wait_done(), timeout=1.0)
    assert outcome.status is Status.ABORTED and outcome.reason == "server stopped"


class _BrokenBoardGame(CountingGame):
    """A game whose browser board raises (a buggy plugin)."""

    def public_board(self) -> PublicBoard:
        raise RuntimeError("the board broke")


class _BoardGame(CountingGame):
    """A game with a public board and an all-seeing one (the move count, and the
    secrets)."""

    def public_board(self) -> PublicBoard:
        return PublicBoard(kind="scores", round=self.move)

    def full_board(self) -> PublicBoard:
        return PublicBoard(kind="scores", round=self.move, extra={"secret": "secret-0"})


async def test_a_failing_public_board_changes_nothing_whether_recorded_or_not(
    caplog: pytest.LogCaptureFixture,
) -> None:

    outcomes, turns = await _unrecorded_then_recorded(_BrokenBoardGame, "BrokenBoard-v0")
    assert turns and all(t.board is None and t.full_board is None for t in turns)
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0] is Status.FINISHED
    assert sum("public_board" in r.getMessage() for r in caplog.records) == 1  # logged once


async def test_events_carry_the_board_and_the_full_board_only_where_it_differs() -> None:
    from arena.events import EventBus
    from games.session import GameSession

    bus = EventBus()
    sub = bus.subscribe()
    session = GameSession(_BoardGame(rounds=1), "Board-v0", 2, 0)
    session.start()
    agents = {s: ScriptedAgent(right_answer, "bot") for s in range(2)}
    coordinator, _ = make_match(session, agents, bus=bus)
    await coordinator.wait_done()
    events = []
    while (event := sub.get_nowait()) is not None:
        events.append(event)
    started = events[0]
    assert isinstance(started, MatchStarted)
    assert started.board == {"kind": "scores", "round": 0}
    assert started.full_board == {"kind": "scores", "round": 0, "extra": {"secret": "secret-0"}}
    turns = [e for e in events if isinstance(e, TurnPlayed)]
    assert [t.board for t in turns] == [{"kind": "scores", "round": n} for n in (1, 2)]
    assert all(t.full_board and t.full_board["extra"] == {"secret": "secret-0"} for t in turns)
    # A game with nothing hidden beyond its board gets no second copy of it.
    plain = GameSession(CountingGame(rounds=1), "Counting-v0", 2, 0)
    plain.start()
    assert plain.views().full_board is None
