"""Haggle-v0, the free-text negotiation: its rules, its views and its bot."""

from __future__ import annotations

import pytest

import games
from arena.play import play_matches
from arena.renderers import compact_observation
from games.bots import bots_for
from games.native.haggle import MAX_MESSAGES, SCALE, HaggleGame


def started(seed: int = 3) -> HaggleGame:
    game = HaggleGame()
    game.reset(2, seed)
    game.set_invalid_move_allowance(1)
    return game


def test_a_deal_pays_each_side_its_gain_from_its_own_value() -> None:
    game = started()
    cost, worth = game._values
    assert 10 <= cost <= 50 <= worth <= 95  # a deal always exists
    said = "It is a fine item, in perfect shape. [offer 70] Take it or leave it."
    assert game.step(said).valid  # free text around the one action
    everyone = [m for m in game.drain_messages() if m.to is None]
    assert [m.text for m in everyone] == [said]  # both seats hear what was said
    assert game.step("Deal. [accept]").valid
    assert game.is_done()
    rewards = game.rewards()
    assert rewards[0] == pytest.approx(max(-1.0, min(1.0, (70 - cost) / SCALE)))
    assert rewards[1] == pytest.approx(max(-1.0, min(1.0, (worth - 70) / SCALE)))


def test_what_is_not_one_action_on_the_price_list_is_refused() -> None:
    for text, why in (
        ("I accept. [accept]", "no offer"),
        ("How about [offer 40] or [offer 45]", "more than one"),
        ("[offer 42]", "not a price"),
        ("Let us talk first.", "no action"),
    ):
        game = started()
        result = game.step(text)
        assert not result.valid and why in (result.reason or ""), (text, result.reason)
        assert not game.is_done()  # one retry allowed
    game = started()
    game.step("[accept]")
    game.step("[accept]")  # the second in a row: the seat forfeits
    assert game.is_done() and game.forfeited() == {0} and game.rewards() == {0: -1.0, 1: 0.0}


def test_without_a_deal_when_the_messages_run_out_nobody_gets_anything() -> None:
    game = started()
    for i in range(MAX_MESSAGES):
        assert not game.is_done()
        assert game.current_player() == i % 2  # the seller first, then in turn
        assert game.step(f"[offer {50 + 5 * (i % 2)}]").valid
    assert game.is_done() and game.rewards() == {0: 0.0, 1: 0.0}


def test_each_seat_sees_its_own_value_only_and_a_compact_view_of_the_table() -> None:
    session = games.make("Haggle-v0", 2, seed=5)
    twin = started(5)  # the same seed draws the same values
    cost, worth = twin._values
    seller = " ".join(m.text for m in session.seat_messages(0))
    buyer = " ".join(m.text for m in session.seat_messages(1))
    assert f"cost is {cost}" in seller and f"worth is {worth}" not in seller
    assert f"worth is {worth}" in buyer and f"cost is {cost}" not in buyer
    session.step(0, "[offer 80]")
    view = compact_observation("Haggle-v0", session.seat_messages(1), 1, None)
    assert view == f"buyer {worth} | theirs 80 | mine - | left {MAX_MESSAGES - 1}"
    assert "[accept]" in (session.legal_moves(1) or [])
    assert session.legal_moves(0) is None  # not its turn


async def test_the_haggler_beats_random_from_either_seat() -> None:
    spec = games.get_spec("Haggle-v0")
    assert spec.available and {"random", "haggler"} <= set(bots_for(spec))
    for players, seat in ((["haggler", "random"], 0), (["random", "haggler"], 1)):
        stats = await play_matches("Haggle-v0", players, 200, seed=1)
        assert stats.aborted == 0
        me = stats.seats[seat]
        assert (me.wins + me.draws / 2) / 200 >= 0.7, (players, me)
