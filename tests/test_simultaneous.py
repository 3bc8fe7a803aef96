"""Simultaneous moves in the guarded session: every seat of a round moves, the moves are
applied together, retries keep the round open, and the native games (rock-paper-scissors,
Goofspiel) play by their rules."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import games
from arena import MatchGroupBuilder, do_group_rollout
from arena.clock import ManualClock
from arena.coordinator import GameCoordinator
from arena.eventbus import EventBus, Subscription
from arena.events import RoundProgress, TurnPlayed
from arena.match import MatchSettings
from arena.moveclock import off_clock
from arena.policies import RandomMovePolicy
from arena.seats import BotSpec, SeatForfeit, SeatTurn
from games.bots import BotView, RandomBot, make_bot
from games.limits import SessionLimits
from games.native.goofspiel import compact_view
from games.session import Status
from games.sessionerrors import NotYourTurn, RoundError
from tests.conftest import no_hang, spin


def test_a_round_asks_every_seat_and_applies_the_moves_together() -> None:
    session = games.make("RockPaperScissors-v0", 2, seed=0)
    assert session.simultaneous and session.movers() == (0, 1)
    with pytest.raises(NotYourTurn, match="seats 0, 1 move together"):
        session.step(0, "[rock]")
    with pytest.raises(RoundError, match="seats 0, 1 must move now; got moves for 1"):
        session.step_round({1: "[rock]"})
    records = session.step_round({1: "[paper]", 0: "[rock]"})
    assert [(r.index, r.seat, r.move, r.valid, r.round) for r in records] == [
        (0, 0, "[rock]", True, 1),
        (1, 1, "[paper]", True, 1),
    ]
    assert session.round_over and session.rounds == 1
    # Each seat saw its own move and prompt only; the round's result is public.
    public = [m.text for m in session.public_messages()]
    assert public == ["Round 1: Player 0 chose rock, Player 1 chose paper: Player 1 wins it."]
    assert not any(m.sender == 1 for m in session.seat_messages(0))


def test_a_seat_that_retries_keeps_the_round_open_and_its_moves_unseen() -> None:
    limits = SessionLimits(invalid_move_policy="retry", retry_allowance=1)
    session = games.make("Goofspiel-v0", 3, seed=4, limits=limits)
    records = session.step_round({0: "[5]", 1: "I bid high", 2: "[7]"})
    assert [r.valid for r in records] == [True, False, True]
    assert not session.round_over and session.movers() == (1,)
    # The valid bids are held by the game, shown to nobody else.
    board = session.public_board()
    assert board is not None and "history" not in board
    assert board["scores"] == {"0": 0.0, "1": 0.0, "2": 0.0}
    assert "bid 5" not in " ".join(m.text for m in session.public_messages())
    (again,) = session.step_round({1: "[6]"})
    assert again.valid and again.round == 1 and session.round_over
    assert session.public_messages()[-2].text.startswith("Round 1: Player 0 bid 5, Player 1 bid 6")
    assert session.movers() == (0, 1, 2) and session.rounds == 1


def test_goofspiel_plays_to_the_end_with_two_three_and_four_seats() -> None:
    for players in (2, 3, 4):
        session = games.make("Goofspiel-v0", players, seed=players)
        bots = [make_bot("match", seed=s, game_id="Goofspiel-v0") for s in range(players - 1)]
        bots.append(RandomBot(seed=9))
        while not session.done:
            actions = {}
            for seat in session.movers():
                view = BotView(
                    "Goofspiel-v0", seat, session.seat_messages(seat), session.legal_moves(seat)
                )
                actions[seat] = bots[seat].act(view)
            session.step_round(actions)
        outcome = session.outcome
        assert outcome is not None and outcome.status.value == "finished"
        assert len(session.turns) == 13 * players and session.rounds == 13
        assert all(-1.0 <= r <= 1.0 for r in outcome.rewards.values())
        board = session.public_board()
        assert board is not None and all(board["cards"][f"seat {s}"] == [] for s in range(players))


def test_the_match_bot_beats_random_at_goofspiel() -> None:
    wins = 0
    for seed in range(20):
        session = games.make("Goofspiel-v0", 2, seed=seed)
        bots = [make_bot("match", seed=seed, game_id="Goofspiel-v0"), RandomBot(seed)]
        while not session.done:
            session.step_round(
                {
                    seat: bots[seat].act(
                        BotView(
                            "Goofspiel-v0",
                            seat,
                            session.seat_messages(seat),
                            session.legal_moves(seat),
                        )
                    )
                    for seat in session.movers()
                }
            )
        assert session.outcome is not None
        wins += session.outcome.rewards[0] > 0
    assert wins >= 14


def test_goofspiel_deals_by_the_seed_and_shows_the_deck_only_after() -> None:
    first = games.make("Goofspiel-v0", 2, seed=11)
    second = games.make("Goofspiel-v0", 2, seed=11)
    other = games.make("Goofspiel-v0", 2, seed=12)
    prize = [s.public_board()["cards"]["prize"] for s in (first, second, other)]
    assert prize[0] == prize[1]
    assert "deck" not in first.public_board()["cards"]
    full = first.full_board()
    assert full is not None and len(full["cards"]["deck"]) == 12
    assert full["cards"]["deck"] != other.full_board()["cards"]["deck"]
    line = compact_view(first.seat_messages(0), 0)
    assert line is not None and line.startswith(f"prize {prize[0][0]} | hand 1 2 3")


def test_a_move_echoed_to_its_seat_only_is_marked_private() -> None:
    session = games.make("LowestUnique-v0", 2, seed=0)
    seat = session.current_player()
    record = session.step(seat, "[2]")
    assert record.private and record.round is None
    tic = games.make("TicTacToe-v0", 2, seed=0)
    assert not tic.step(tic.current_player(), "[4]").private


def test_the_goofspiel_of_the_docs_passes_the_kit() -> None:
    from docs_examples import load_doc_game

    from games.conformance import assert_conforms
    from games.registration import unregister_game

    load_doc_game("docs_mini_goofspiel", '"""MiniGoofspiel-v0')
    try:
        report = assert_conforms("MiniGoofspiel-v0", episodes=3)
        assert report.legal_moves and games.get_spec("MiniGoofspiel-v0").simultaneous
    finally:
        unregister_game("MiniGoofspiel-v0")


# -- the coordinator: every seat of a round at once ------------------------------------------------


class _Asked:
    """A seat agent that plays its lowest listed move once every seat of ``movers`` has
    been asked: the coordinator must ask them all before any answers, or it never ends."""

    def __init__(self, seat: int, asked: dict[int, asyncio.Event], seen: list[SeatTurn]) -> None:
        self.name = f"asked-{seat}"
        self.asked = asked
        self.seen = seen

    async def act(self, turn: SeatTurn) -> str:
        self.seen.append(turn)
        self.asked[turn.seat].set()
        for seat in turn.movers:
            await self.asked[seat].wait()
        await asyncio.sleep(0)  # let every other seat record its ask first
        for seat in turn.movers:
            self.asked[seat].clear()
        return (turn.legal_moves or ["[1]"])[0]


def _recorded(bus: EventBus) -> Subscription:
    return bus.subscribe(name="test")


def _events(sub: Subscription) -> list[object]:
    out = []
    while (event := sub.get_nowait()) is not None:
        out.append(event)
    return out


async def test_the_coordinator_asks_every_seat_of_a_round_at_once_and_applies_them_together() -> (
    None
):
    for players in (2, 3, 4):
        asked = {seat: asyncio.Event() for seat in range(players)}
        seen: list[SeatTurn] = []
        bus = EventBus()
        sub = _recorded(bus)
        session = games.make("Goofspiel-v0", players, 3, SessionLimits(move_timeout_s=30.0))
        agents = {seat: _Asked(seat, asked, seen) for seat in range(players)}
        coordinator = GameCoordinator(session, agents, bus=bus)
        outcome = await no_hang(coordinator.wait_done(), "the match")
        assert outcome.status is Status.FINISHED
        assert len(session.turns) == 13 * players
        first_round = seen[:players]
        assert sorted(t.seat for t in first_round) == list(range(players))
        assert {t.movers for t in first_round} == {tuple(range(players))}
        assert sorted(t.turn_index for t in first_round) == list(range(players))
        for turn in seen:  # each seat saw only what was sent to it or to everyone
            assert all(m.to in (None, turn.seat) for m in turn.messages)
        events = _events(sub)
        kinds = [type(e).__name__ for e in events]
        # Round 1: who is asked, then each arrival (who, never what), then its moves at once.
        first_turn = kinds.index("TurnPlayed")
        assert kinds[1:first_turn] == ["RoundProgress"] * (players + 1)
        progress = [e for e in events[1:first_turn] if isinstance(e, RoundProgress)]
        assert progress[0].moved == () and progress[-1].moved == tuple(range(players))
        assert kinds[first_turn : first_turn + players] == ["TurnPlayed"] * players
        turns = [e for e in events if isinstance(e, TurnPlayed)]
        assert [t.round for t in turns[:players]] == [1] * players


class _Forfeits:
    name = "quitter"

    async def act(self, turn: SeatTurn) -> str:
        raise SeatForfeit("left the table")


class _Never:
    """A seat that never answers; ``asked`` is set once it has been asked."""

    name = "silent"

    def __init__(self) -> None:
        self.asked = asyncio.Event()

    async def act(self, turn: SeatTurn) -> str:
        self.asked.set()
        await asyncio.Event().wait()
        return ""


async def test_a_seat_that_forfeits_in_a_round_loses_and_one_that_never_moves_aborts() -> None:
    bot = BotSpec("random")
    session = games.make("Goofspiel-v0", 3, seed=0)
    coordinator = GameCoordinator(
        session,
        {0: bot.build(0, "Goofspiel-v0", 0), 1: _Forfeits(), 2: _Never()},
        clock=ManualClock(),  # never advanced: the forfeit ends the round, not a timer
    )
    outcome = await no_hang(coordinator.wait_done(), "the forfeited match")
    assert outcome.status is Status.FINISHED and outcome.forfeited == {1}
    assert outcome.reason == "left the table" and session.turns == []


async def test_the_move_clock_of_a_round_times_out_the_seat_that_never_moves() -> None:
    clock = ManualClock()
    silent = _Never()
    session = games.make("RockPaperScissors-v0", 2, 0, SessionLimits(move_timeout_s=30.0))
    agents = {0: BotSpec("random").build(0, "RockPaperScissors-v0", 0), 1: silent}
    coordinator = GameCoordinator(session, agents, clock=clock)
    done = asyncio.create_task(coordinator.wait_done())
    await no_hang(silent.asked.wait(), "seat 1's ask")
    await spin()
    clock.advance(29.0)
    await spin()
    assert not done.done()  # seat 0 has moved; seat 1 still has a second
    clock.advance(1.0)
    outcome = await no_hang(done, "the timed-out match")
    assert outcome.status is Status.ABORTED
    assert "seat 1 (silent) timed out after 30 s" in outcome.reason
    assert session.turns == [] and clock.pending == 0  # no move applied, no timer left


class _Queued:
    """Waits off the move clock (``off_clock``) for its turn at something shared (``go``),
    then plays its first listed move; ``waiting`` is set while it waits."""

    name = "queued"

    def __init__(self) -> None:
        self.waiting = asyncio.Event()
        self.go = asyncio.Event()

    async def act(self, turn: SeatTurn) -> str:
        with off_clock():
            self.waiting.set()
            await self.go.wait()
        self.waiting.clear()
        self.go.clear()
        assert turn.legal_moves
        return turn.legal_moves[0]


async def test_a_seat_waiting_off_the_clock_stops_the_rounds_clock() -> None:
    """While one seat of a round waits off the clock, the round's clock stops (for every
    seat): an hour passes, and the round is played once the seat's turn comes."""
    clock = ManualClock()
    queued = _Queued()
    session = games.make("RockPaperScissors-v0", 2, 0, SessionLimits(move_timeout_s=30.0))
    agents = {0: BotSpec("random").build(0, "RockPaperScissors-v0", 0), 1: queued}
    coordinator = GameCoordinator(session, agents, clock=clock)
    done = asyncio.create_task(coordinator.wait_done())
    await no_hang(queued.waiting.wait(), "seat 1's wait")
    clock.advance(3600.0)
    await spin()
    assert not done.done() and session.turns == []
    queued.go.set()
    await spin()
    await no_hang(queued.waiting.wait(), "seat 1's wait in the next round")
    assert len(session.turns) == 2 and not done.done()  # the first round was played
    coordinator.abort("enough")
    assert (await no_hang(done, "the match")).status is Status.ABORTED


class _Garbles:
    """Sends garbage on its first move, then plays its first listed move."""

    name = "garbles"

    def __init__(self) -> None:
        self.moves = 0

    async def act(self, turn: SeatTurn) -> str:
        self.moves += 1
        return "I bid high" if self.moves == 1 else (turn.legal_moves or ["[1]"])[0]


async def test_a_round_with_a_retry_is_published_once_it_is_over() -> None:
    bus = EventBus()
    sub = _recorded(bus)
    limits = SessionLimits(invalid_move_policy="retry", retry_allowance=1)
    session = games.make("Goofspiel-v0", 2, seed=1, limits=limits)
    agents = {0: BotSpec("match").build(0, "Goofspiel-v0", 0), 1: _Garbles()}
    coordinator = GameCoordinator(session, agents, bus=bus)
    outcome = await no_hang(coordinator.wait_done(), "the match")
    assert outcome.status is Status.FINISHED and session.invalid_moves == [0, 1]
    events = _events(sub)
    turns = [(i, e) for i, e in enumerate(events) if isinstance(e, TurnPlayed)]
    # Round 1 took two steps (seat 1 retried): its three moves go out together, after both.
    round_one = [(i, e) for i, e in turns if e.round == 1]
    assert [(e.seat, e.valid) for _, e in round_one] == [(0, True), (1, False), (1, True)]
    retry_asked = [
        i for i, e in enumerate(events) if isinstance(e, RoundProgress) and e.movers == (1,)
    ]
    assert retry_asked and retry_asked[0] < round_one[0][0]
    together = events[round_one[0][0] : round_one[-1][0]]
    assert not any(isinstance(e, RoundProgress) for e in together)


async def test_learner_seats_of_a_simultaneous_game_are_played_together() -> None:
    for players in (2, 3, 4):
        builder = MatchGroupBuilder(MatchSettings("Goofspiel-v0", players), group_size=2, seed=1)
        group = await do_group_rollout(builder, RandomMovePolicy(seed=players))
        assert len(group.trajectories_G) == 2 * players
        assert all(len(t.transitions) == 13 for t in group.trajectories_G)
        assert all(m["aborted"] == 0 and m["turns"] == 13 * players for m in group.metrics_G)


@pytest.mark.slow
@pytest.mark.parametrize("players", [2, 3, 4])
def test_arena_train_on_goofspiel(players: int, tmp_path: Path) -> None:
    from arena_cli import main

    log_dir = tmp_path / "run"
    code = main(
        ["train", "--game", "Goofspiel-v0", "--num-players", str(players), "--num-batches", "2",
         "--batch-size", "1", "--group-size", "2", "--warmup-steps", "0",
         "--eval-every", "0", "--save-every", "0", "--no-serve", "--db", "", "--quiet",
         "--log-dir", str(log_dir)]
    )  # fmt: skip
    assert code == 0
    steps = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
    trained = [m for m in steps if m["step"] >= 0]
    assert [m["step"] for m in trained] == [0, 1]
    assert all(m["env/Goofspiel-v0/aborted"] == 0 for m in trained)
    assert all(m["env/Goofspiel-v0/turns"] >= players for m in trained)  # a round at least


class _Held:
    """Seat 1 waits for ``gate``; seat 0 answers at once."""

    def __init__(self, agent: Any, gate: asyncio.Event | None) -> None:
        self.agent = agent
        self.name = agent.name
        self.gate = gate

    async def act(self, turn: SeatTurn) -> str:
        if self.gate is not None:
            await self.gate.wait()
        return str(await self.agent.act(turn))


async def test_the_docs_goofspiel_never_shows_a_pending_bid_to_a_live_spectator() -> None:
    from docs_examples import load_doc_game
    from websockets.asyncio.client import connect

    from arena.play import play_matches
    from games.registration import unregister_game
    from tests.test_web import http_get, recv
    from web import serve

    load_doc_game("live_mini_goofspiel", '"""MiniGoofspiel-v0')
    bus = EventBus()
    hub = await serve(None, bus, port=0)
    gate = asyncio.Event()
    watch = bus.subscribe(name="watch")
    try:
        games_task = asyncio.create_task(
            play_matches(
                "MiniGoofspiel-v0",
                ["random", "random"],
                1,
                bus=bus,
                agent_wrapper=lambda seat, agent: _Held(agent, gate if seat == 1 else None),
            )
        )
        while True:  # until seat 0's bid is in and seat 1's is not
            event = await no_hang(watch.get(), "the round's progress")
            if isinstance(event, RoundProgress) and event.moved == (0,):
                break
        match_id = event.match_id
        hub.pump()
        async with connect(hub.ws_url) as ws:
            await recv(ws)
            await ws.send(
                json.dumps({"type": "subscribe", "stream": "match", "match_id": match_id})
            )
            snapshot = await recv(ws)
        status, body = await http_get(hub, f"/api/matches/{match_id}")
        assert status == 200
        live = json.loads(body)
        for view in (snapshot, live):
            assert view["status"] == "live" and view["turns"] == []
            assert view["round"] == {"round": 1, "movers": [0, 1], "moved": [0]}
            assert view["board"] == view["match_info"]["start_board"]  # the prize, no bid
        gate.set()
        stats = await no_hang(games_task, "the match")
        assert stats.finished == 1
    finally:
        watch.close()
        await hub.close()
        unregister_game("MiniGoofspiel-v0")
