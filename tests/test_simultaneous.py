"""Simultaneous moves in the guarded session: every seat of a round moves, the moves are
applied together, retries keep the round open, and the native games (rock-paper-scissors,
Goofspiel) play by their rules."""

from __future__ import annotations

import pytest

import games
from games.bots import BotView, RandomBot, make_bot
from games.native.goofspiel import compact_view
from games.session import NotYourTurn, RoundError, SessionLimits


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
    from games.registry import unregister_game

    load_doc_game("docs_mini_goofspiel", '"""MiniGoofspiel-v0')
    try:
        report = assert_conforms("MiniGoofspiel-v0", episodes=3)
        assert report.legal_moves and games.get_spec("MiniGoofspiel-v0").simultaneous
    finally:
        unregister_game("MiniGoofspiel-v0")
