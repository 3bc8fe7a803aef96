"""The benchmarks' loops play what they say (a figure from a loop that skipped its games
would be meaningless); the timings themselves are for ``make bench``, never asserted."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.coordinator import arena_loop, floor_loop, raw_loop


@pytest.mark.parametrize("game_id", ["TicTacToe-v0", "ConnectFour-v0"])
def test_the_coordinator_benchmark_loops_play_every_game(game_id: str) -> None:
    assert raw_loop(game_id, 5, 0) == 5
    assert arena_loop(game_id, 16, 0, group_size=8, batch_size=2) == 16
    assert floor_loop(game_id, 20, 0, batch=8) == 20  # every game finished, none aborted


@pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="checks the skip of a machine without a GPU"
)
def test_the_gpu_benchmark_skips_with_its_reason_where_there_is_no_gpu(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import json

    from bench.gpu import main

    assert main(["--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("bench.gpu: skipped: no CUDA GPU here")
    assert json.loads(lines[-1])["skipped"] is True


@pytest.mark.slow
def test_the_gpu_benchmark_measures_both_sides_on_the_cpu(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The same code as on a GPU, on a tiny model: both loops sample and train tokens, and
    the memory figures compare a LoRA client with a full fine-tuning one."""
    import json

    from bench.gpu import main

    args = ["--device", "cpu", "--size", "tiny", "--dtype", "float32", "--batch", "4",
            "--prompt-tokens", "16", "--max-tokens", "8", "--train-batch", "4",
            "--train-tokens", "32", "--micro-batch", "2", "--train-steps", "1",
            "--rounds", "1", "--json"]  # fmt: skip
    assert main(args) == 0
    results = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for kind in ("sample", "train"):
        assert results[f"{kind}_tokens_per_s_arena"] > 0
        assert results[f"{kind}_tokens_per_s_plain"] > 0
    lora, full = results["memory"]["lora"], results["memory"]["full"]
    assert full["trainable_parameters"] == full["parameters"] == results["parameters"]
    assert 0 < lora["trainable_parameters"] < full["trainable_parameters"]
    assert 0 < lora["optimizer_state_bytes"] < full["optimizer_state_bytes"]


@pytest.mark.parametrize("game_id", ["TicTacToe-v0", "ConnectFour-v0"])
def test_the_cookbook_builder_benchmark_plays_the_same_games_both_ways(game_id: str) -> None:
    from bench.cookbook import BATCH, arena_loop, byte_tokenizer, cookbook_loop

    tokenizer = byte_tokenizer()
    text = "Available Moves: '[3]', é"
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text
    assert cookbook_loop(game_id, BATCH, 0, tokenizer) == BATCH
    assert arena_loop(game_id, BATCH, 0, tokenizer) == BATCH  # none aborted


@pytest.mark.slow
def test_the_real_model_benchmark_measures_both_sides(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``bench.realmodel``'s code on a tiny model directory with the chat tokenizer (the
    figures are SmolLM2's, from ``make bench``): both sides sample and train tokens."""
    import json

    from bench.realmodel import main
    from tests.tiny_models import write_tiny_model_dir

    path = write_tiny_model_dir(tmp_path / "tiny-llama", "llama")
    args = ["--model", str(path), "--prompts", "3", "--max-tokens", "3", "--rounds", "1",
            "--json"]  # fmt: skip
    assert main(args) == 0
    results = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("sampling_tokens_per_s", "generate_tokens_per_s", "training_tokens_per_s",
                "peft_tokens_per_s"):  # fmt: skip
        assert results[key] > 0, key
    assert results["prompts"] == 3


@pytest.mark.slow
def test_the_reuse_benchmark_counts_what_the_prefix_cache_saved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``bench.reuse``'s code on a tiny model directory: games played to the end, later
    turns reuse earlier ones, every side samples and trains."""
    import json

    from bench.reuse import main
    from tests.tiny_models import write_tiny_model_dir

    path = write_tiny_model_dir(tmp_path / "tiny-llama", "llama")
    assert main(["--model", str(path), "--games", "3", "--rounds", "1", "--json"]) == 0
    results = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert results["rounds"] >= 2 and results["answers"] >= 6
    assert results["sampler_tokens_reused"] > 0
    computed, reused = results["sampler_tokens_computed"], results["sampler_tokens_reused"]
    assert computed + reused == results["prompt_tokens"]
    assert results["train_tokens_computed"] < results["train_tokens"]
    for key in ("sampling_s", "sampling_no_cache_s", "generate_s", "train_shared_s",
                "train_plain_s", "train_peft_s"):  # fmt: skip
        assert results[key] > 0, key


def test_the_curves_of_hand_made_runs_are_read_from_their_metrics(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``bench.curves`` on two run directories: the evaluations' figures by step and minute,
    each run's speed from its steps and config; a half-written last line is skipped."""
    import json

    from bench.curves import main

    runs = []
    for name, wins in (("s0", (0.1, 0.6)), ("s1", (0.2, 0.7))):
        run = tmp_path / name
        run.mkdir()
        (run / "config.json").write_text(json.dumps({"batch_size": 4, "group_size": 4}))
        rows = [
            {"step": 0, "test/random/win": wins[0], "time/total": 90.0, "time/eval": 30.0,
             "sampler/tokens_computed": 100.0, "sampler/tokens_reused": 300.0},
            {"step": 1, "time/total": 60.0, "sampler/tokens_computed": 50.0},
            {"step": 2, "test/random/win": wins[1]},
        ]  # fmt: skip
        text = "\n".join(json.dumps(r) for r in rows) + '\n{"step": 3, "te'
        (run / "metrics.jsonl").write_text(text)
        runs.append(str(run))
    assert main([*runs, "--metrics", "test/random/win,test/nothing"]) == 0
    out = capsys.readouterr().out
    assert "| 0 | 0.100 (step 0, 0 min) | 0.200 (step 0, 0 min) |" in out
    assert "| 1 | 0.600 (step 2, 2 min) | 0.700 (step 2, 2 min) |" in out
    assert "test/nothing" not in out
    assert "s0: steps 2.0, minutes 2.5, eval_minutes 0.5, games 32.0" in out
    assert (
        "games_per_rl_minute 16.0, sampler/tokens_computed 150.0, sampler/tokens_reused 300.0"
        in out
    )
