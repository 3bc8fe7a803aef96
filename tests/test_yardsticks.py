"""Each game's yardstick through the game API (``GameKit.yardstick``): what it plays or
asks, the figures it reads off, and evaluation reporting them for any game by its id."""

from __future__ import annotations

import random

import pytest

from arena.match import MatchSettings
from arena.policies import RandomMovePolicy
from arena.renderers import ByteTokenizer, RendererConfig, prompt_tokens
from arena.types import TokensWithLogprobs
from games.api import MatchRecord, Probe, Yardstick
from games.registry import game_kit
from games.textarena_games import kuhn_solver, kuhn_text, kuhn_yardstick
from trainer.evaluate import (
    MEAN_SCORE_KEY,
    Headline,
    default_opponents,
    evaluate_policy,
    headline,
    measure_yardstick,
    yardstick_key,
)


def test_each_solved_or_graded_game_declares_its_yardstick() -> None:
    keys = {g: yardstick_key(g) for g in ("TicTacToe-v0", "KuhnPoker-v0", "ConnectFour-v0")}
    assert keys == {
        "TicTacToe-v0": "test/yardstick/non_loss_vs_optimal",
        "KuhnPoker-v0": "test/yardstick/exploitability",
        "ConnectFour-v0": "test/yardstick/score_vs_alphabeta",
    }
    kuhn = game_kit("KuhnPoker-v0").yardstick
    assert kuhn is not None and not kuhn.higher_is_better and kuhn.samples >= 1000
    assert yardstick_key("LowestUnique-v0") is None  # no yardstick: judged by mean score
    # Evaluation plays what the yardstick reads: Connect Four's depths 1 and 2.
    assert default_opponents("ConnectFour-v0") == ["random", "alphabeta-1", "alphabeta-2"]
    assert default_opponents("TicTacToe-v0") == ["random", "optimal"]


def test_match_yardsticks_read_their_records() -> None:
    ttt = game_kit("TicTacToe-v0").yardstick
    c4 = game_kit("ConnectFour-v0").yardstick
    assert ttt is not None and ttt.from_matches is not None
    assert c4 is not None and c4.from_matches is not None
    figures = ttt.from_matches({"optimal": MatchRecord(wins=0, draws=30, losses=70)})
    assert figures == pytest.approx(
        {"non_loss_vs_optimal": 0.3, "draw_vs_optimal": 0.3, "loss_vs_optimal": 0.7}
    )
    figures = c4.from_matches(
        {
            "alphabeta-1": MatchRecord(wins=6, draws=2, losses=2),  # score 0.7
            "alphabeta-2": MatchRecord(wins=1, draws=2, losses=7),  # score 0.2
        }
    )
    assert figures["score_vs_alphabeta"] == pytest.approx(0.45)
    assert figures["score_vs_alphabeta-1"] == pytest.approx(0.7)


def test_a_yardstick_needs_something_to_measure() -> None:
    with pytest.raises(ValueError, match="needs from_matches"):
        Yardstick(figure="x")
    with pytest.raises(ValueError, match="opponents"):
        Yardstick(figure="x", from_matches=lambda records: {})
    with pytest.raises(ValueError, match="probes"):
        Yardstick(figure="x", from_answers=lambda answers: {})
    lower = Yardstick(
        figure="x",
        higher_is_better=False,
        probes=lambda game_id: {},
        from_answers=lambda answers: {},
        samples=1,
    )
    assert lower.better(0.1, 0.2) and not lower.better(0.3, 0.2) and lower.better(9.0, None)


def test_headlines_compare_in_the_yardsticks_direction() -> None:
    low = Headline("test/yardstick/exploitability", 0.2, higher_is_better=False)
    assert low.better_than(Headline(low.key, 0.3, False)) and low.better_than(None)
    assert not low.better_than(Headline(low.key, 0.1, False))
    figure = headline("LowestUnique-v0", {MEAN_SCORE_KEY: 0.4, "test/random/win": 0.5})
    assert figure == Headline(MEAN_SCORE_KEY, 0.4, True)
    assert headline("TicTacToe-v0", {"test/random/win": 0.5}) is None


def test_kuhn_probes_are_the_twelve_information_sets_of_real_hands() -> None:
    probes = kuhn_yardstick.probes("KuhnPoker-v0")
    assert set(probes) == set(kuhn_solver.INFOSETS)
    for infoset, probe in probes.items():
        assert isinstance(probe, Probe)
        assert kuhn_text.seat_infoset(probe.messages) == infoset
        facing_bet = infoset.endswith("b")
        assert set(probe.legal_moves) == (
            {"[fold]", "[call]"} if facing_bet else {"[check]", "[bet]"}
        )


async def test_kuhn_yardstick_of_an_equilibrium_player_is_near_zero() -> None:
    """A policy sampling Kuhn's Nash equilibrium through the prompts: exploitability within
    the sampling noise of 0 (1,024 samples per information set), no invalid answers."""
    tokenizer = ByteTokenizer()
    nash = kuhn_solver.nash_policy(1 / 6)
    probes = kuhn_yardstick.probes("KuhnPoker-v0")
    prompts = {}
    rng = random.Random(3)
    renderer = RendererConfig().build()
    from arena.seatview import SeatView

    for infoset, probe in probes.items():
        view = SeatView(probe.seat, "KuhnPoker-v0", renderer, "full")
        ob = view.prompt(probe.messages, 0, list(probe.legal_moves))
        prompts[tokenizer.decode(prompt_tokens(ob))] = infoset

    async def policy(ob: object, stop: object) -> TokensWithLogprobs:
        infoset = prompts[tokenizer.decode(prompt_tokens(ob))]  # type: ignore[arg-type]
        action = "b" if rng.random() < nash[infoset]["b"] else "p"
        move = kuhn_text.move_text(infoset[1:], action)
        return TokensWithLogprobs([*tokenizer.encode(move), ByteTokenizer.EOS], None)

    figures = await measure_yardstick(policy, MatchSettings("KuhnPoker-v0"), [])
    assert 0.0 <= figures["test/yardstick/exploitability"] < 0.03
    assert figures["test/yardstick/invalid_rate"] == 0.0
    # the measured policy is reported too: the king always calls, the jack never does
    assert figures["test/yardstick/bet/Kb"] == 1.0 and figures["test/yardstick/bet/Jb"] == 0.0
    assert abs(figures["test/yardstick/bet/J"] - nash["J"]["b"]) < 0.1


async def test_evaluation_reports_the_yardstick_of_any_game_by_its_id() -> None:
    """Random play against tic-tac-toe's perfect bot: the yardstick's figures come from the
    same games as the per-bot rates (and it loses most of them)."""
    figures = await evaluate_policy(RandomMovePolicy(seed=1), "TicTacToe-v0", ["random"], 40)
    assert figures["test/optimal/games"] == 40  # played for the yardstick, though not asked
    non_loss = figures["test/yardstick/non_loss_vs_optimal"]
    assert non_loss == pytest.approx(1.0 - figures["test/optimal/loss"])
    assert figures["test/yardstick/draw_vs_optimal"] == pytest.approx(figures["test/optimal/draw"])
    assert non_loss < 0.5
    assert MEAN_SCORE_KEY not in figures  # a game with a yardstick is judged by it
