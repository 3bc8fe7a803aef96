"""``arena train --model NAME``: the settings that fit a real model, where the command line
leaves them at their defaults."""

from __future__ import annotations

import dataclasses

from trainer.config import TrainConfig
from trainer.modelsettings import (
    COMPACT_WARMUP,
    DEVICE_SETTINGS,
    REAL_MODEL_SETTINGS,
    fit_to_model,
    settings_line,
)

DEFAULTS = {f.name: f.default for f in dataclasses.fields(TrainConfig)}


def test_a_real_model_on_the_cpu_gets_the_real_model_settings() -> None:
    values, chosen = fit_to_model({**DEFAULTS, "model": "smollm2", "device": "cpu"})
    kl = {"kl_reverse_coef": 0.02, "kl_forward_coef": 0.02, "magnet_rate": 0.002}  # perfect
    assert chosen == {**REAL_MODEL_SETTINGS, **DEVICE_SETTINGS["cpu"], **kl, **COMPACT_WARMUP}
    config = TrainConfig(**values)  # a valid configuration
    assert config.opponents == "league" and config.group_size * config.batch_size == 16
    assert config.resolved_lora_rank() == 16 and config.resolved_learning_rate() == 2e-4
    assert config.decision_kl() is not None  # the exact KL toward a magnet
    line = settings_line("smollm2", "cpu", chosen)
    assert line.startswith("settings for smollm2 on cpu: --lora-rank 16, --learning-rate 0.0002")
    assert "--sample-timeout-s 1800," in line


def test_a_gpu_gets_more_games_a_step() -> None:
    _, chosen = fit_to_model({**DEFAULTS, "model": "smollm2", "device": "cuda:0"})
    assert chosen["group_size"] * chosen["batch_size"] == 64


def test_what_the_command_line_gives_is_kept() -> None:
    given = {
        **DEFAULTS,
        "model": "smollm2",
        "device": "cpu",
        "group_size": 2,
        "opponents": "league",
    }
    values, chosen = fit_to_model(given, {"group_size", "opponents"})
    assert values["group_size"] == 2 and values["opponents"] == "league"
    assert "group_size" not in chosen and "opponents" not in chosen
    assert values["batch_size"] == DEVICE_SETTINGS["cpu"]["batch_size"]


def test_the_built_in_model_and_the_hosted_backend_keep_their_defaults() -> None:
    assert fit_to_model(dict(DEFAULTS)) == (DEFAULTS, {})
    hosted = {**DEFAULTS, "backend": "tinker", "model": "Qwen/Qwen3-4B-Instruct-2507"}
    assert fit_to_model(hosted) == (hosted, {})


def test_the_compact_view_warms_a_real_model_up_on_its_format() -> None:
    values, chosen = fit_to_model(
        {**DEFAULTS, "model": "smollm2", "device": "cpu", "observation_format": "compact"}
    )
    assert values["observation_format"] == "compact"
    for name, value in COMPACT_WARMUP.items():
        assert chosen[name] == value


def test_the_command_line_notes_which_settings_it_was_given() -> None:
    import argparse

    from trainer.cli import add_train_options, given_options

    parser = argparse.ArgumentParser()
    add_train_options(parser)
    args = parser.parse_args(["--opponents", "league", "--no-greedy-eval", "--group-size", "8"])
    assert given_options(args) == {"opponents", "greedy_eval", "group_size"}
    assert given_options(parser.parse_args([])) == set()


def test_a_format_given_other_than_compact_needs_no_warm_up() -> None:
    values, chosen = fit_to_model(
        {**DEFAULTS, "model": "smollm2", "device": "cpu", "observation_format": "full"},
        {"observation_format"},
    )
    assert values["observation_format"] == "full"
    assert "warmup_steps" not in chosen and values["warmup_steps"] == DEFAULTS["warmup_steps"]


def test_a_game_with_hidden_cards_gets_its_familys_stronger_pull() -> None:
    _, chosen = fit_to_model(
        {**DEFAULTS, "model": "smollm2", "device": "cpu", "game_id": "Kuhn-v0"}
    )
    assert (chosen["kl_reverse_coef"], chosen["kl_forward_coef"]) == (0.2, 0.1)
