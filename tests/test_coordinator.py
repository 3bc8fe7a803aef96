"""The coordinator: turn order, aborts, timeouts and wake-ups (scripted games)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from arena.clock import ManualClock
from arena.events import MatchAborted, MatchEnded, MatchStarted, TurnPlayed
from arena.moveclock import off_clock
from arena.rollouts import do_single_rollout
from arena.seats import SeatTurn
from arena.types import TokensWithLogprobs
from games.api import PublicBoard
from games.limits import SessionLimits
from games.session import Status
from tests.conftest import (
    CountingGame,
    ScriptedAgent,
    counting_session,
    decode_ob,
    encode,
    make_match,
    no_hang,
    spin,
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


# -- no deadlock: a seat that fails wakes its partners by the end, not by a timer --------------
# These matches run on a ManualClock that is never advanced: no move clock or join timeout
# can fire, so a partner that wakes was woken by the match's end itself, at once.


async def test_seat_that_raises_aborts_match_and_partner_wakes() -> None:
    clock = ManualClock()
    coordinator, (env0, env1) = make_match(counting_session(2), clock=clock)

    class Boom(Exception):
        pass

    async def failing_policy(ob, stop):  # type: ignore[no-untyped-def]
        raise Boom("policy crashed")

    async def good_policy(ob, stop):  # type: ignore[no-untyped-def]
        return TokensWithLogprobs(encode("[1]"), None)

    partner = asyncio.create_task(do_single_rollout(good_policy, env1))
    await asyncio.sleep(0)
    with pytest.raises(Boom):
        await do_single_rollout(failing_policy, env0)
    trajectory = await no_hang(partner, "the partner's rollout")
    assert clock.time() == 0.0 and clock.pending == 0  # no timer woke it; none is left
    # Seat 1 never got to move: the cookbook's shape, one empty terminal transition.
    assert [t.ac.tokens for t in trajectory.transitions] == [[]]
    assert trajectory.stop_reason == "aborted"
    assert env1.done_before_first_move
    assert coordinator.outcome.status is Status.ABORTED
    assert "Boom" in coordinator.outcome.reason


async def test_cancelled_seat_aborts_match_and_partner_wakes() -> None:
    clock = ManualClock()
    coordinator, (env0, env1) = make_match(counting_session(2), clock=clock)
    thinking = asyncio.Event()

    async def slow_policy(ob, stop):  # type: ignore[no-untyped-def]
        thinking.set()
        await asyncio.Event().wait()  # samples for ever

    seat0 = asyncio.create_task(do_single_rollout(slow_policy, env0))
    await thinking.wait()  # seat 0 holds the turn, "sampling"
    seat1 = asyncio.create_task(env1.initial_observation())
    await spin()
    assert not seat1.done()  # it waits for its turn
    seat0.cancel()
    with pytest.raises(asyncio.CancelledError):
        await seat0
    await no_hang(seat1, "the partner's wait")
    assert clock.time() == 0.0 and clock.pending == 0
    assert env1.done_before_first_move
    assert coordinator.outcome.status is Status.ABORTED


async def test_cancelled_waiting_seat_aborts_match() -> None:
    coordinator, (env0, env1) = make_match(counting_session(2), clock=ManualClock())
    await env0.initial_observation()
    waiting = asyncio.create_task(env0.step(encode("[0]")))  # moves, then waits for seat 1
    _ob, _ = await env1.initial_observation()
    await spin()
    assert not waiting.done()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    result = await no_hang(env1.step(encode("[1]")), "seat 1's step")
    assert result.episode_done and result.metrics["aborted"] == 1
    assert coordinator.outcome.status is Status.ABORTED


# -- the move clock ------------------------------------------------------------------------------


def takes(clock: ManualClock, seconds: float):  # type: ignore[no-untyped-def]
    """A seat agent's move that takes ``seconds`` of ``clock`` time, then answers: the time
    passes while the agent waits (the move clock's cancel reaches it there, as it would
    reach a seat waiting for its model)."""

    async def act(turn):  # type: ignore[no-untyped-def]
        clock.advance(seconds)
        await asyncio.sleep(0)
        return turn.legal_moves[0]

    return act


async def test_seat_that_times_out_aborts_match_and_partner_wakes(bus) -> None:  # type: ignore[no-untyped-def]
    sub = bus.subscribe()
    clock = ManualClock()
    coordinator, (env0, env1) = make_match(
        counting_session(2), bus=bus, move_timeout_s=5.0, clock=clock
    )
    await env0.initial_observation()  # seat 0 never answers
    partner = asyncio.create_task(env1.initial_observation())
    clock.advance(4.9)
    await spin()
    assert not partner.done() and not coordinator.done  # in time so far
    clock.advance(0.1)  # seat 0's 5 s are up
    await no_hang(partner, "the partner's wait")
    assert env1.done_before_first_move
    assert coordinator.outcome.status is Status.ABORTED
    assert "seat 0 (learner) timed out after 5 s" in coordinator.outcome.reason
    assert clock.pending == 0
    # The late answer gets a defined outcome, not a hang or a crash.
    late = await no_hang(env0.step(encode("[0]")), "the late answer")
    assert late.episode_done and late.metrics["aborted"] == 1
    events = []
    while (event := sub.get_nowait()) is not None:
        events.append(event)
    assert isinstance(events[-1], MatchAborted)


async def test_the_event_loop_is_the_default_clock() -> None:
    """Without a clock given, the move clock runs on the event loop's own timers: a seat
    that never answers is timed out for real (a short limit; nothing here bounds how long
    the machine takes to get there)."""
    never = asyncio.Event()

    async def stuck(turn):  # type: ignore[no-untyped-def]
        await never.wait()
        return turn.legal_moves[0]

    agents = {0: ScriptedAgent(stuck, "stuck"), 1: ScriptedAgent(right_answer)}
    coordinator, _ = make_match(counting_session(2), agents, move_timeout_s=0.05)
    outcome = await no_hang(coordinator.wait_done(), "the timeout on the loop's clock")
    assert coordinator.clock is None
    assert outcome.status is Status.ABORTED
    assert "seat 0 (stuck) timed out after 0.05 s" in outcome.reason
    assert coordinator._move_clock.timer is None  # the timer went with the match


async def test_the_move_clock_is_per_move_and_keeps_ticking_across_moves() -> None:
    """The clock restarts at every move: moves that each take most of the limit never time
    out, however long the match runs in all (the clock's one timer re-arms), and the first
    move over the limit aborts the match, naming the seat; nothing is left scheduled."""
    clock = ManualClock()
    delays = iter([0.2, 0.2, 0.2, 0.9])

    async def slow(turn):  # type: ignore[no-untyped-def]
        return await takes(clock, next(delays))(turn)

    agents = {0: ScriptedAgent(slow, "slow0"), 1: ScriptedAgent(slow, "slow1")}
    coordinator, _ = make_match(
        counting_session(2, rounds=2), agents, move_timeout_s=0.5, clock=clock
    )
    outcome = await no_hang(coordinator.wait_done(), "the match")
    assert outcome.status is Status.ABORTED
    assert "seat 1 (slow1) timed out after 0.5 s" in outcome.reason
    assert len(coordinator.session.turns) == 3  # 0.6 s of moves before it, all in time
    assert clock.time() == pytest.approx(1.5)
    assert clock.pending == 0 and coordinator._move_clock.timer is None  # the timer went with it

    clock = ManualClock()
    agents = {0: ScriptedAgent(takes(clock, 0.45)), 1: ScriptedAgent(takes(clock, 0.45))}
    coordinator, _ = make_match(
        counting_session(2, rounds=2), agents, move_timeout_s=0.5, clock=clock
    )
    outcome = await no_hang(coordinator.wait_done(), "the match")
    assert outcome.status is Status.FINISHED and len(coordinator.session.turns) == 4
    assert clock.pending == 0

    # A limit made shorter between moves takes effect at the next move (seat 0 answers
    # without waiting, so its clock cannot run out).
    clock = ManualClock()

    async def shortened(turn):  # type: ignore[no-untyped-def]
        coordinator.move_timeout_s = 0.05
        return await takes(clock, 0.2)(turn)

    agents = {0: ScriptedAgent(right_answer), 1: ScriptedAgent(shortened)}
    coordinator, _ = make_match(
        counting_session(2, rounds=3), agents, move_timeout_s=60.0, clock=clock
    )
    outcome = await no_hang(coordinator.wait_done(), "the match")
    assert outcome.status is Status.ABORTED and "timed out after 0.05 s" in outcome.reason
    assert len(coordinator.session.turns) == 3 and clock.time() == pytest.approx(0.4)
    assert clock.pending == 0  # the 60 s timer was replaced, not left behind


class _EarlyClock(ManualClock):
    """A clock whose first timer fires ``early`` seconds before it is due (asyncio may
    run a timer early, within its resolution; this one is far earlier)."""

    def __init__(self, early: float) -> None:
        super().__init__()
        self.early = early

    def call_at(self, when, callback, /):  # type: ignore[no-untyped-def]
        early, self.early = self.early, 0.0
        return super().call_at(when - early, callback)


async def test_a_timer_that_fires_early_does_not_time_a_seat_out() -> None:
    """The move clock's timer may run before the deadline: it re-arms for the deadline
    instead of ending a move that is still in time, and the seat times out at the
    deadline itself."""
    clock = _EarlyClock(early=1.0)
    never = asyncio.Event()

    async def thinks(turn):  # type: ignore[no-untyped-def]
        await never.wait()
        return turn.legal_moves[0]

    coordinator, _ = make_match(
        counting_session(2), {0: ScriptedAgent(thinks), 1: ScriptedAgent(thinks)}, clock=clock
    )
    coordinator.start()
    await spin()
    assert clock.next_due() == 4.0  # a 5 s limit, its timer armed 1 s early
    clock.advance(4.5)  # the early timer ran
    await spin()
    assert not coordinator.done and clock.next_due() == 5.0  # re-armed for the deadline
    clock.advance(0.5)
    outcome = await no_hang(coordinator.wait_done(), "the timeout")
    assert outcome.status is Status.ABORTED and "timed out after 5 s" in outcome.reason


async def test_a_seat_that_absorbs_the_clocks_cancel_leaves_the_clock_working() -> None:
    """A seat's code may absorb the cancellation the move clock sends (``asyncio.wait_for``
    can) and still answer: the move counts, and the next move over the limit is still a
    timeout, not an unexplained cancellation."""
    clock = ManualClock()
    calls = 0

    async def absorbing(turn):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        clock.advance(1.0)  # over the limit: the clock cancels the driver...
        if calls == 1:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0)  # ...and this seat swallows it
            return turn.legal_moves[0]
        await asyncio.Event().wait()
        return turn.legal_moves[0]

    agents = {0: ScriptedAgent(absorbing), 1: ScriptedAgent(absorbing)}
    coordinator, _ = make_match(counting_session(2), agents, move_timeout_s=0.1, clock=clock)
    coordinator.start()
    driver = coordinator._task
    outcome = await no_hang(coordinator.wait_done(), "the match")
    assert outcome.status is Status.ABORTED
    assert "seat 1 (scripted) timed out after 0.1 s" in outcome.reason
    assert len(coordinator.session.turns) == 1
    await spin()
    assert driver is not None and driver.done() and not driver.cancelled()


# -- the join timeout ----------------------------------------------------------------------------


@pytest.mark.parametrize(("after", "status"), [(0.15, Status.FINISHED), (0.25, Status.ABORTED)])
async def test_a_seat_waiting_off_the_clock_keeps_the_time_it_had_left(
    after: float, status: Status
) -> None:
    """A seat that waits inside off_clock() (its turn at something other matches share)
    stops the move clock: a minute there costs nothing, and the clock runs on with the
    0.2 s the seat had left (0.3 s used before, ``after`` s after)."""
    clock = ManualClock()

    async def queued(turn):  # type: ignore[no-untyped-def]
        clock.advance(0.3)
        await asyncio.sleep(0)
        with off_clock():
            clock.advance(60.0)
            await asyncio.sleep(0)
        return await takes(clock, after)(turn)

    agents = {0: ScriptedAgent(queued, "queued"), 1: ScriptedAgent(right_answer)}
    coordinator, _ = make_match(counting_session(2), agents, move_timeout_s=0.5, clock=clock)
    outcome = await no_hang(coordinator.wait_done(), "the match")
    assert outcome.status is status
    if status is Status.ABORTED:
        assert "seat 0 (queued) timed out after 0.5 s" in outcome.reason
    assert clock.pending == 0


def test_off_clock_outside_a_match_does_nothing() -> None:
    with off_clock():
        pass


async def test_a_seat_that_never_joins_aborts_the_match_at_the_join_timeout() -> None:
    """A learner seat nobody drives ends the match once the join timeout has passed since
    the match started, and the seat that did join wakes."""
    clock = ManualClock()
    agents = {0: ScriptedAgent(right_answer)}
    coordinator, (_never_driven, env2) = make_match(
        counting_session(3), agents, move_timeout_s=None, join_timeout_s=10.0, clock=clock
    )
    joined = asyncio.create_task(env2.initial_observation())  # seat 1 is never driven
    await spin()
    assert len(coordinator.session.turns) == 1 and not joined.done()  # waits on seat 1
    clock.advance(9.9)
    await spin()
    assert not coordinator.done
    clock.advance(0.1)
    outcome = await no_hang(coordinator.wait_done(), "the join timeout")
    await no_hang(joined, "the joined seat's wait")
    assert outcome.status is Status.ABORTED
    assert "seat 1 (learner) never joined within 10 s" in outcome.reason
    assert env2.done_before_first_move and clock.pending == 0


async def test_a_seat_that_joins_in_time_plays_on() -> None:
    """Joining before the join timeout cancels its timer: the match plays on as long as it
    takes (no move clock here), and no join timer is left behind."""
    clock = ManualClock()
    coordinator, (env0, env1) = make_match(
        counting_session(2, rounds=1), move_timeout_s=None, join_timeout_s=10.0, clock=clock
    )
    await env0.initial_observation()
    first = asyncio.create_task(env0.step(encode("[0]")))
    await spin()
    assert clock.pending == 1  # seat 1's join timer
    clock.advance(9.0)
    await env1.initial_observation()
    await spin()  # the driver wakes from the join
    assert clock.pending == 0
    clock.advance(3600.0)
    result = await no_hang(env1.step(encode("[1]")), "seat 1's move")
    assert (await no_hang(first, "seat 0's step")).episode_done
    assert result.episode_done and coordinator.outcome.status is Status.FINISHED


async def test_every_wait_of_a_seat_wakes_and_a_turn_left_waiting_is_answered() -> None:
    """Two waits on one seat: one takes the turn, both return at the end (None). A turn
    whose waiter was cancelled after being woken can still be answered."""
    agents = {1: ScriptedAgent(right_answer)}
    coordinator, _ = make_match(counting_session(2), agents, move_timeout_s=None)
    first = asyncio.create_task(coordinator.wait_turn(0))
    second = asyncio.create_task(coordinator.wait_turn(0))
    await spin()
    assert [first.done(), second.done()].count(True) == 1
    coordinator.abort("operator stop")
    await spin()
    assert first.done() and second.done()
    assert {type(first.result()), type(second.result())} == {type(None), SeatTurn}

    coordinator, _ = make_match(counting_session(2), agents, move_timeout_s=None)
    waiting = asyncio.create_task(coordinator.wait_turn(0))
    await asyncio.sleep(0)
    await asyncio.sleep(0)  # the driver has put seat 0's turn and woken the waiter...
    waiting.cancel()  # ...which is cancelled before it runs: the turn stays in the inbox
    await asyncio.sleep(0)
    record, turn = await no_hang(coordinator.submit_and_wait(0, "[0]"), "submit_and_wait")
    assert record.valid and record.index == 0
    assert turn is not None and turn.turn_index == 2  # the next turn, not the old one
    coordinator.abort("done")


async def test_bot_that_raises_aborts_match() -> None:
    def broken(turn):  # type: ignore[no-untyped-def]
        raise ValueError("bot bug")

    coordinator, (env0,) = make_match(counting_session(2), {1: ScriptedAgent(broken)})
    await env0.initial_observation()
    result = await no_hang(env0.step(encode("[0]")), "seat 0's step")
    assert result.episode_done and result.metrics["aborted"] == 1
    assert "bot bug" in coordinator.outcome.reason


async def test_game_that_raises_aborts_match_and_partner_wakes() -> None:
    clock = ManualClock()
    coordinator, (env0, env1) = make_match(counting_session(2, raise_on_move=1), clock=clock)
    await env0.initial_observation()
    seat0 = asyncio.create_task(env0.step(encode("[0]")))  # then waits for its next turn
    await env1.initial_observation()
    r1 = await no_hang(env1.step(encode("[1]")), "the step the game raises on")
    r0 = await no_hang(seat0, "the partner's wait")
    assert clock.time() == 0.0 and clock.pending == 0  # woken by the end, not a timer
    assert r0.episode_done and r0.metrics["aborted"] == 1
    assert r1.episode_done and r1.metrics["aborted"] == 1
    assert coordinator.outcome.status is Status.ABORTED
    assert "the game broke" in coordinator.outcome.reason


async def test_game_that_hangs_is_interrupted_and_aborted() -> None:
    """The game's own watchdog (``SessionLimits.step_timeout_s``, real time: it interrupts
    a game looping on the CPU) ends the move; the match is aborted and the partner wakes.
    Nothing bounds how long a busy machine takes to get there."""
    limits = SessionLimits(step_timeout_s=0.2)
    clock = ManualClock()
    coordinator, (env0, env1) = make_match(counting_session(2, limits, hang_on_move=0), clock=clock)
    partner = asyncio.create_task(env1.initial_observation())
    await env0.initial_observation()
    result = await no_hang(env0.step(encode("[0]")), "the hanging step")
    await no_hang(partner, "the partner's wait")
    assert clock.time() == 0.0  # the move clock had no part in it
    assert result.episode_done and result.metrics["aborted"] == 1
    assert "timed out" in coordinator.outcome.reason


async def test_abort_before_start_wakes_everyone() -> None:
    coordinator, envs = make_match(counting_session(3), clock=ManualClock())
    coordinator.abort("operator stop")
    for env in envs:
        await no_hang(env.initial_observation(), f"seat {env.seat}'s wait")
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
    from arena.eventbus import EventBus
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
    from arena.seats import SeatForfeit

    def gives_up(turn):  # type: ignore[no-untyped-def]
        raise SeatForfeit("seat 1 lost on time")

    sub = bus.subscribe()
    agents = {0: ScriptedAgent(right_answer), 1: ScriptedAgent(gives_up)}
    coordinator, _ = make_match(counting_session(2), agents, bus=bus)
    outcome = await no_hang(coordinator.wait_done(), "the match")
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
    clock = ManualClock()
    coordinator, _ = make_match(counting_session(3), agents, move_timeout_s=30.0, clock=clock)
    coordinator.start()
    await spin()  # seat 0 is thinking
    assert coordinator._asking and not coordinator.done
    coordinator.forfeit(2, "seat 2 left")
    outcome = await no_hang(coordinator.wait_done(), "the forfeit")
    assert clock.time() == 0.0 and clock.pending == 0  # at once: no timer ended it
    assert outcome.status is Status.FINISHED and outcome.forfeited == {2}
    assert outcome.rewards == {0: 0.5, 1: 0.5, 2: -1.0}  # the others share the loss
    coordinator.forfeit(0, "too late")  # over: changes nothing
    assert coordinator.outcome.forfeited == {2}


async def test_forfeit_before_the_driver_runs_applies_before_the_first_move() -> None:
    agents = {0: ScriptedAgent(right_answer), 1: ScriptedAgent(right_answer)}
    coordinator, _ = make_match(counting_session(2, rounds=50), agents)
    coordinator.start()  # the driver task has not run yet: not waiting for any seat
    coordinator.forfeit(0, "resigned")
    outcome = await no_hang(coordinator.wait_done(), "the forfeit")
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
    await spin()
    assert coordinator._asking  # seat 0 is thinking
    coordinator.abort("server stopped")
    coordinator.forfeit(0, "left")
    outcome = await no_hang(coordinator.wait_done(), "the abort")
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
    from arena.eventbus import EventBus
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
