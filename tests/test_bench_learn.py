"""bench.learn's bookkeeping: variant names, the figures it keeps, the tables over seeds."""

from __future__ import annotations

import pytest

from bench.learn import aggregate, figures, game_table, markdown, variant_settings


def test_variant_names_stand_for_config_overrides() -> None:
    assert variant_settings("league", 0.05) == {"opponents": "league"}
    assert variant_settings("self+role+kl", 0.05) == {
        "opponents": "self",
        "baseline": "role",
        "kl_penalty_coef": 0.05,
    }
    settings = variant_settings("league+nokl+learning_rate=1e-4+league_bots=random", 0.05)
    assert settings["kl_penalty_coef"] == 0.0 and settings["learning_rate"] == 1e-4
    assert settings["league_bots"] == ("random",)
    with pytest.raises(SystemExit, match="starts with league or self"):
        variant_settings("bots", 0.05)
    with pytest.raises(SystemExit, match="unknown modifier"):
        variant_settings("league+fast", 0.05)
    with pytest.raises(SystemExit, match="unknown TrainConfig field"):
        variant_settings("league+speed=3", 0.05)


def test_figures_keep_the_yardstick_and_the_per_bot_rates() -> None:
    metrics = {
        "test/yardstick/exploitability": 0.31234,
        "test/random/win": 0.5,
        "test/random/games": 100.0,
        "optim/loss": 1.0,
    }
    assert figures("KuhnPoker-v0", metrics) == {
        "test/yardstick/exploitability": 0.3123,
        "test/random/win": 0.5,
    }


def _run(seed: int, end: float, best: float) -> dict[str, object]:
    key = "test/yardstick/non_loss_vs_optimal"
    return {
        "game": "TicTacToe-v0",
        "variant": "league",
        "seed": seed,
        "headline": key,
        "rl_steps": 100 + seed,
        "start": {key: 0.1, "test/random/win": 0.4},
        "end": {key: end, "test/random/win": 0.7, "test/random/invalid_move_rate": 0.01},
        "best": {key: best},
    }


def test_tables_give_mean_and_spread_over_seeds_and_the_gap_to_the_best() -> None:
    summary = aggregate([_run(0, 0.5, 0.6), _run(1, 0.7, 0.7)])
    slot = summary["TicTacToe-v0"]["league"]
    mean, sd = slot["end"]["test/yardstick/non_loss_vs_optimal"]
    assert mean == pytest.approx(0.6) and sd == pytest.approx(0.1414, abs=1e-3)
    table = markdown(summary, [0, 1], "100 steps")
    row = next(line for line in table.splitlines() if line.startswith("| TicTacToe-v0"))
    assert "0.600 ± 0.141" in row  # end
    assert "0.650 ± 0.071" in row  # best, re-measured
    assert "-0.050 ± 0.071" in row  # end - best: one seed gave back 0.1, the other nothing
    assert "0.400 → 0.700" in row
    assert "non_loss_vs_optimal" in game_table("TicTacToe-v0", summary["TicTacToe-v0"])


def test_the_multi_game_table_sets_each_game_of_one_model_beside_its_own_model() -> None:
    from bench.learn import multi_game_table

    key = "test/yardstick/exploitability"
    single = {
        "game": "KuhnPoker-v0",
        "start": {key: 0.40, "test/random/win": 0.5},
        "end": {key: 0.30, "test/random/win": 0.7},
    }
    multi = {
        "game": "KuhnPoker-v0,TicTacToe-v0",
        "start": {},
        "end": {"test/KuhnPoker-v0/yardstick/exploitability": 0.35,
                "test/KuhnPoker-v0/random/win": 0.6},
    }  # fmt: skip
    assert figures("KuhnPoker-v0,TicTacToe-v0", multi["end"]) == multi["end"]  # both kept
    table = multi_game_table([single, multi], ["KuhnPoker-v0", "TicTacToe-v0"], "100 steps")
    row = next(line for line in table.splitlines() if line.startswith("| KuhnPoker-v0"))
    assert row.split(" | ")[1:] == [
        "yardstick/exploitability", "0.400", "0.300", "0.350", "0.700", "0.600 |"
    ]  # fmt: skip
    row = next(line for line in table.splitlines() if line.startswith("| TicTacToe-v0"))
    assert "| - | - | - |" in row  # no run of it: nothing made up


def test_time_to_target_is_when_the_target_was_reached_and_then_held() -> None:
    """The first evaluation from which every later one meets the target; its minutes are
    the steps' time before it. A target reached then lost is not reached."""
    from bench.learn import meets, time_to_target

    key = "test/yardstick/exploitability"
    rows = [
        {"step": -1, "warmup/loss_final": 0.1},
        {"step": 0, key: 0.5, "time/total": 30.0},
        {"step": 1, "time/total": 30.0},
        {"step": 2, key: 0.08, "time/total": 30.0},  # reached, then lost
        {"step": 3, key: 0.2, "time/total": 30.0},
        {"step": 4, key: 0.09, "time/total": 30.0},
        {"step": 5, key: 0.05},
    ]
    assert meets("Kuhn-v0", rows[1]) is False and meets("Kuhn-v0", rows[3]) is True
    assert meets("Kuhn-v0", rows[2]) is None  # no evaluation at that step
    assert time_to_target("Kuhn-v0", rows) == {"reached": True, "step": 4, "minutes": 2.0}
    assert time_to_target("Kuhn-v0", rows[:5])["reached"] is False
    tic = {"test/yardstick/non_loss_vs_optimal": 0.7, "test/random/win": 0.7, "step": 0}
    assert meets("TicTacToe-v0", tic) is False  # both figures count
    assert meets("Haggle-v0", tic) is None  # no target


def test_the_method_shorthands_stand_for_their_settings() -> None:
    settings = variant_settings("league+branch+nashpg", 0.05)
    assert settings["branches"] == 4 and settings["kl_reference_every"] == 100
    assert variant_settings("league+avg", 0.05)["league_average"] is True


def test_the_opponents_played_leave_out_the_greedy_yardstick() -> None:
    from bench.learn import played_opponents

    metrics = {
        "test/random/win": 0.5,
        "test/optimal/win": 0.0,
        "test/greedy/optimal/win": 0.0,
        "test/greedy/yardstick/non_loss_vs_optimal": 0.2,
        "test/yardstick/non_loss_vs_optimal": 0.1,
    }
    assert played_opponents(metrics) == ["optimal", "random"]
