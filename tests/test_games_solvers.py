"""Solvers as yardsticks: Kuhn poker's exact exploitability, Connect Four's graded
alpha-beta bot (tic-tac-toe's minimax is in test_bots.py)."""

from __future__ import annotations

import math

import pytest

from arena.play import play_matches
from games.bots import check_bot, make_bot
from games.registry import get_spec
from games.textarena_games import kuhn_solver, kuhn_text, kuhn_yardstick
from games.textarena_games.connect_four import MAX_DEPTH, best_columns

EXACT = 1e-12


@pytest.mark.parametrize("alpha", [0.0, 0.1, 1 / 6, 0.25, 1 / 3])
def test_the_nash_family_is_unexploitable_and_worth_minus_one_eighteenth(alpha: float) -> None:
    policy = kuhn_solver.nash_policy(alpha)
    assert abs(kuhn_solver.exploitability(policy)) < EXACT
    assert math.isclose(kuhn_solver.policy_value(policy), -1 / 18, abs_tol=EXACT)
    assert float(kuhn_solver.GAME_VALUE) == pytest.approx(-1 / 18)


def test_always_pass_is_exploitable_by_one_chip() -> None:
    # Against a passer: the second player bets after every check (+1, it folds); the first
    # player bets every card (+1, it folds). (1 + 1) / 2 = 1.
    policy = kuhn_solver.constant_policy(0.0)
    first, value_first = kuhn_solver.best_response(policy, 0)
    second, value_second = kuhn_solver.best_response(policy, 1)
    assert value_first == pytest.approx(1.0, abs=EXACT)
    assert value_second == pytest.approx(1.0, abs=EXACT)
    assert first["J"] == first["Q"] == "b" and second["Jp"] == second["Qp"] == "b"
    assert kuhn_solver.exploitability(policy) == pytest.approx(1.0, abs=EXACT)


def test_always_bet_is_exploitable_by_a_third() -> None:
    # Against a bettor/caller: fold J, call Q (even), call K (+2): (-1 + 0 + 2) / 3 = 1/3
    # in each position, so the exploitability is 1/3.
    policy = kuhn_solver.constant_policy(1.0)
    _, value_first = kuhn_solver.best_response(policy, 0)
    second, value_second = kuhn_solver.best_response(policy, 1)
    assert value_first == pytest.approx(1 / 3, abs=EXACT)
    assert value_second == pytest.approx(1 / 3, abs=EXACT)
    assert second["Jb"] == "p" and second["Kb"] == "b"
    assert kuhn_solver.exploitability(policy) == pytest.approx(1 / 3, abs=EXACT)


def test_uniform_random_matches_openspiel() -> None:
    # OpenSpiel's exploitability of the uniform policy on Kuhn poker: 11/24.
    assert kuhn_solver.exploitability(kuhn_solver.constant_policy(0.5)) == pytest.approx(
        11 / 24, abs=EXACT
    )


def test_the_policy_may_use_textarena_words_and_bad_policies_are_refused() -> None:
    words = {
        infoset: ({"fold": 0.5, "call": 0.5} if infoset.endswith("b") else {"check": 1.0})
        for infoset in kuhn_solver.INFOSETS
    }
    assert kuhn_solver.exploitability(words) > 0
    incomplete = dict(kuhn_solver.nash_policy())
    del incomplete["Kpb"]
    with pytest.raises(ValueError, match="no probabilities at Kpb"):
        kuhn_solver.exploitability(incomplete)
    with pytest.raises(ValueError, match="sum to"):
        kuhn_solver.exploitability({**kuhn_solver.nash_policy(), "J": {"p": 0.5, "b": 0.6}})
    with pytest.raises(ValueError, match="unknown action"):
        kuhn_solver.exploitability({**kuhn_solver.nash_policy(), "J": {"raise": 1.0}})
    with pytest.raises(ValueError, match="unknown information sets 'A'"):
        kuhn_solver.exploitability({**kuhn_solver.nash_policy(), "A": {"p": 1.0}})
    with pytest.raises(ValueError, match="alpha"):
        kuhn_solver.nash_policy(0.5)


def test_a_text_policy_is_measured_on_real_hands() -> None:
    views = kuhn_yardstick.infoset_views()
    assert set(views) == set(kuhn_solver.INFOSETS)
    for infoset, view in views.items():
        # The seat was really dealt the card and faces the history.
        assert kuhn_text.seat_infoset(view.messages) == infoset
        assert (set(view.legal_moves) == {"[fold]", "[call]"}) == infoset.endswith("b")

    def aggressive(view: kuhn_yardstick.InfosetView) -> str:
        return "I call: [call]" if view.infoset.endswith("b") else "[Bet]"

    measured = kuhn_yardstick.measure_policy(aggressive, samples=3, views=views)
    assert measured.probabilities == kuhn_solver.constant_policy(1.0)
    assert set(measured.invalid.values()) == {0.0}
    assert kuhn_solver.exploitability(measured.probabilities) == pytest.approx(1 / 3)

    garbage = kuhn_yardstick.measure_policy(lambda view: "[raise]", samples=2, views=views)
    assert set(garbage.invalid.values()) == {1.0}


def test_the_nash_bot_plays_the_equilibrium_frequencies() -> None:
    views = kuhn_yardstick.infoset_views()
    bot = make_bot("nash", seed=0, game_id="KuhnPoker-v0")
    from games.bots import BotView

    def ask(view: kuhn_yardstick.InfosetView) -> str:
        return bot.act(BotView("KuhnPoker-v0", view.seat, view.messages, list(view.legal_moves)))

    measured = kuhn_yardstick.measure_policy(ask, samples=300, views=views)
    assert set(measured.invalid.values()) == {0.0}
    target = kuhn_solver.nash_policy(1 / 6)
    for infoset in kuhn_solver.INFOSETS:
        assert measured.probabilities[infoset]["b"] == pytest.approx(
            target[infoset]["b"], abs=0.1
        ), infoset
    assert kuhn_solver.exploitability(measured.probabilities) < 0.05


@pytest.mark.parametrize("order", [("alphabeta-2", "random"), ("random", "alphabeta-2")])
async def test_alphabeta_at_depth_two_beats_random(order: tuple[str, str]) -> None:
    stats = await play_matches("ConnectFour-v0", list(order), 20, seed=0)
    bot = order.index("alphabeta-2")
    assert stats.aborted == 0
    assert stats.seats[bot].wins >= 19
    assert stats.seats[bot].invalid_moves == 0


async def test_deeper_alphabeta_beats_shallower() -> None:
    stats = await play_matches("ConnectFour-v0", ["alphabeta-1", "alphabeta-3"], 6, seed=0)
    assert stats.seats[1].wins > stats.seats[0].wins


def test_alphabeta_takes_a_win_and_blocks_a_loss() -> None:
    grid = [list(".......") for _ in range(6)]
    for col in (0, 1, 2):
        grid[5][col] = "X"
    assert best_columns(grid, "X", 1) == [3]  # win now
    assert best_columns(grid, "O", 2) == [3]  # the only move that does not lose
    with pytest.raises(ValueError, match="depth"):
        best_columns(grid, "X", MAX_DEPTH + 1)


def test_alphabeta_bots_play_only_connect_four() -> None:
    check_bot("alphabeta-4", get_spec("ConnectFour-v0"))
    with pytest.raises(ValueError, match="plays only ConnectFour-v0"):
        check_bot("alphabeta-4", get_spec("ConnectFour-v0-blind"))
