"""Kuhn-v0: one hand of Kuhn poker as defined (a called bet doubles the stakes), its
probes for the exploitability yardstick, and why TextArena's KuhnPoker-v0 cannot be
trained to a low exploitability."""

from __future__ import annotations

import random

import pytest

from arena.play import play_matches
from games.native.kuhn import KuhnGame, compact_view, probes
from games.textarena_games.kuhn_solver import INFOSETS, exploitability, nash_policy
from games.textarena_games.kuhn_text import move_text
from games.textarena_games.kuhn_yardstick import yardstick_figures


def dealt(cards: tuple[str, str]) -> KuhnGame:
    """A hand with ``cards`` dealt (the first seed that deals them)."""
    for seed in range(100):
        game = KuhnGame()
        game.reset(2, seed)
        if game._cards == cards:
            game.set_invalid_move_allowance(0)
            return game
    raise AssertionError(f"no seed deals {cards}")


@pytest.mark.parametrize(
    ("cards", "moves", "rewards"),
    [
        (("K", "J"), ["[check]", "[check]"], {0: 1.0, 1: -1.0}),  # showdown for the antes
        (("J", "K"), ["[bet]", "[call]"], {0: -2.0, 1: 2.0}),  # a called bet doubles it
        (("J", "K"), ["[bet]", "[fold]"], {0: 1.0, 1: -1.0}),  # the bettor takes the antes
        (("Q", "K"), ["[check]", "[bet]", "[call]"], {0: -2.0, 1: 2.0}),
        (("Q", "J"), ["[check]", "[bet]", "[fold]"], {0: -1.0, 1: 1.0}),
    ],
)
def test_a_hand_pays_what_kuhn_poker_pays(
    cards: tuple[str, str], moves: list[str], rewards: dict[int, float]
) -> None:
    game = dealt(cards)
    for move in moves:
        assert not game.is_done()
        assert game.step(f"I will {move} now").valid
    assert game.is_done() and game.rewards() == rewards


def test_a_move_not_legal_now_is_refused_and_forfeits_past_the_allowance() -> None:
    game = dealt(("K", "J"))
    result = game.step("[call]")  # nothing to call
    assert not result.valid and "not legal" in (result.reason or "")
    assert game.is_done() and game.forfeited() == {0} and game.rewards() == {0: -1.0, 1: 1.0}


def test_the_probes_reach_every_information_set_as_its_seat_sees_it() -> None:
    found = probes()
    assert sorted(found) == sorted(INFOSETS)
    for infoset, probe in found.items():
        assert probe.seat == len(infoset[1:]) % 2  # the first player acts at even lengths
        assert compact_view(probe.messages, probe.seat) == (
            f"{infoset} {'fold/call' if infoset.endswith('b') else 'check/bet'}"
        )


def test_the_yardstick_finds_the_equilibrium_unexploitable_and_always_betting_exploitable() -> None:
    rng = random.Random(0)
    nash = nash_policy(1 / 6)
    answers = {
        infoset: [
            move_text(infoset[1:], "b" if rng.random() < nash[infoset]["b"] else "p")
            for _ in range(4096)
        ]
        for infoset in probes()
    }
    assert yardstick_figures(answers)["exploitability"] < 0.01  # sampled: near 0
    always = {infoset: [probe.legal_moves[-1]] for infoset, probe in probes().items()}
    assert yardstick_figures(always)["exploitability"] == pytest.approx(1 / 3)


async def test_textarena_kuhn_poker_pays_nothing_for_a_bet_so_always_betting_is_its_best_play() -> (
    None
):
    # In TextArena 0.7.4 a bet or a call never reaches the pot: a called bet wins the
    # antes only, as a check would, so always betting and calling costs nothing there; in
    # Kuhn poker as defined (Kuhn-v0) that policy is exploitable by 1/3.
    import contextlib
    import io

    import textarena as ta

    env = ta.make("KuhnPoker-v0")
    with contextlib.redirect_stdout(io.StringIO()):
        env.reset(num_players=2, seed=0)
        env.step("[bet]")
        assert env.state.game_state["pot"] == 2  # the bet was not added
        env.step("[call]")
    chips = env.state.game_state["player_chips"]  # (the next hand's antes already paid)
    assert abs(chips[0] - chips[1]) == 2  # the antes changed hands; Kuhn poker: 4
    assert exploitability({i: {"b": 1.0, "p": 0.0} for i in INFOSETS}) == pytest.approx(1 / 3)
    stats = await play_matches("Kuhn-v0", ["nash", "random"], 400, seed=2)
    assert stats.aborted == 0 and stats.seats[0].mean_reward > 0  # Nash beats random
