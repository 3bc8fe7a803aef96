"""The local backend on tiny models of real open architectures (Llama, Qwen2, Qwen3, GPT-2):
device and dtype, LoRA through peft (only the adapter trains, is checkpointed in peft's
layout and read back by peft; the sampler shares the base), full fine-tuning, resume with
the optimizer state, logprobs that agree between sampler and trainer, memory.

The models are built from configs in code (``tests.tiny_models``) and saved as Hugging Face
directories; nothing is downloaded. Everything runs on the CPU.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import tinker
import torch
from tinker import types

from tests.tiny_models import ARCHITECTURES, write_tiny_model_dir
from trainer.local import LocalModelConfig, LocalTrainingClient, create_local_training_client
from trainer.local.config import resolve_device, resolve_dtype
from trainer.local.service import LocalServiceClient

needs_no_gpu = pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the errors of a machine without a GPU"
)


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-models")
    return {arch: write_tiny_model_dir(root / arch, arch) for arch in ARCHITECTURES}


def client_for(path: Path, **settings: object) -> LocalTrainingClient:
    config = LocalModelConfig(model_path=str(path), device="cpu", **settings)  # type: ignore[arg-type]
    return create_local_training_client(config)


def text_datum(tokenizer: object, text: str) -> types.Datum:
    ids = tokenizer.encode(text)  # type: ignore[attr-defined]
    n = len(ids) - 1
    return types.Datum(
        model_input=tinker.ModelInput.from_ints(ids[:-1]),
        loss_fn_inputs={"target_tokens": types.TensorData(data=ids[1:], dtype="int64", shape=[n])},
    )


GAME_TEXT = "[GAME] You are Player 0 in Tic Tac Toe. Submit [4]"
ADAM = types.AdamParams(learning_rate=1e-2)


async def sampled_datums(
    client: LocalTrainingClient, prompts: list[str]
) -> tuple[list[types.Datum], list[tuple[int, list[float]]]]:
    """Sample 4 continuations of each prompt from a snapshot of ``client`` and build
    importance-sampling datums from them; also each datum's first action position and the
    sampler's logprobs."""
    tokenizer = client.get_tokenizer()
    sampler = await client.save_weights_and_get_sampling_client_async()
    encoded = [tokenizer.encode(p) for p in prompts]
    params = types.SamplingParams(max_tokens=12, temperature=1.0)
    responses = await asyncio.gather(
        *[sampler.sample_async(tinker.ModelInput.from_ints(p), 4, params) for p in encoded]
    )
    datums, sampled = [], []
    for prompt, response in zip(encoded, responses, strict=True):
        for seq in response.sequences:
            tokens = prompt + list(seq.tokens)
            n, start = len(tokens) - 1, len(prompt) - 1
            logprobs = [0.0] * start + list(seq.logprobs)
            advantages = [0.0] * start + [1.0] * len(seq.tokens)
            datums.append(
                types.Datum(
                    model_input=tinker.ModelInput.from_ints(tokens[:-1]),
                    loss_fn_inputs={
                        "target_tokens": types.TensorData(
                            data=tokens[1:], dtype="int64", shape=[n]
                        ),
                        "logprobs": types.TensorData(data=logprobs, dtype="float32", shape=[n]),
                        "advantages": types.TensorData(data=advantages, dtype="float32", shape=[n]),
                    },
                )
            )
            sampled.append((start, list(seq.logprobs)))
    return datums, sampled


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("rank", [0, 8])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
async def test_importance_ratio_is_one_on_the_first_step(
    model_dirs: dict[str, Path], arch: str, rank: int, dtype: str
) -> None:
    """The trainer's logprobs of freshly sampled tokens equal the sampler's (ratio 1):
    in float32 to float rounding, in bfloat16 within 1 % (kernels of other shapes round
    differently; measured up to 0.4 %)."""
    client = client_for(model_dirs[arch], lora_rank=rank, dtype=dtype)
    # One step first, so that a LoRA adapter is not still the identity.
    client.forward_backward([text_datum(client.get_tokenizer(), GAME_TEXT)], "cross_entropy")
    await client.optim_step(ADAM)
    prompts = ["[GAME] You are Player 0", "Submit [0], [1], [2], [3], [4], [5] or", "X | O |"]
    datums, sampled = await sampled_datums(client, prompts)
    output = await client.forward_backward(datums, "importance_sampling")
    tolerance = 1e-4 if dtype == "float32" else 1e-2
    for out, (start, logprobs) in zip(output.loss_fn_outputs, sampled, strict=True):
        ratio = torch.exp(out["logprobs"].to_torch()[start:] - torch.tensor(logprobs))
        assert torch.allclose(ratio, torch.ones_like(ratio), atol=tolerance), ratio
    client.close()


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@pytest.mark.parametrize("rank", [0, 8])
async def test_sampler_and_trainer_compute_bfloat16_logprobs_the_same_way(
    model_dirs: dict[str, Path], arch: str, rank: int
) -> None:
    """Scoring a sequence in one pass, the sampler gives the trainer's logprobs to float
    rounding in bfloat16 too: the same dtypes and autocast on both sides (a sampler in
    float32 differs from a bfloat16 trainer by about 1e-3, which the ratio bound above
    cannot tell from bfloat16's own rounding)."""
    client = client_for(model_dirs[arch], lora_rank=rank, dtype="bfloat16")
    datum = text_datum(client.get_tokenizer(), GAME_TEXT)
    client.forward_backward([datum], "cross_entropy")
    await client.optim_step(ADAM)
    sampler = await client.save_weights_and_get_sampling_client_async()
    ids = [*datum.model_input.to_ints(), datum.loss_fn_inputs["target_tokens"].data[-1]]
    scored = await sampler.compute_logprobs(tinker.ModelInput.from_ints(ids))
    trained = (await client.forward([datum], "cross_entropy")).loss_fn_outputs[0]["logprobs"]
    assert torch.allclose(torch.tensor(scored[1:]), trained.to_torch(), atol=1e-5)
    client.close()


@pytest.mark.parametrize("arch", ARCHITECTURES)
async def test_lora_trains_the_adapter_alone_and_peft_reads_its_checkpoint(
    model_dirs: dict[str, Path], arch: str, tmp_path: Path
) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    client = client_for(model_dirs[arch], lora_rank=8, checkpoint_dir=str(tmp_path))
    assert client.is_lora
    frozen = {n: p.detach().clone() for n, p in client.model.named_parameters() if "lora" not in n}
    trainable = {n for n, p in client.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    datum = text_datum(client.get_tokenizer(), GAME_TEXT)
    losses = []
    for _ in range(4):
        out = await client.forward_backward([datum], "cross_entropy")
        losses.append(out.metrics["loss:sum"])
        await client.optim_step(ADAM)
    assert losses[-1] < losses[0]
    for name, param in client.model.named_parameters():
        if name in frozen:
            assert torch.equal(param, frozen[name]), f"{name} changed"

    saved = await client.save_state("step4")
    directory = Path(saved.path)
    files = {p.name for p in directory.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "optimizer.pt"} <= files
    assert "model.safetensors" not in files
    config = json.loads((directory / "adapter_config.json").read_text())
    assert config["r"] == 8 and config["base_model_name_or_path"] == str(model_dirs[arch])

    # peft loads the adapter onto the base model and computes what the client does.
    base = AutoModelForCausalLM.from_pretrained(model_dirs[arch])
    peft_model = PeftModel.from_pretrained(base, str(directory)).eval()
    ids = datum.model_input.to_ints()
    with torch.no_grad():
        logits = peft_model(input_ids=torch.tensor([ids])).logits[0]
    expected = torch.log_softmax(logits, -1).gather(
        1, datum.loss_fn_inputs["target_tokens"].to_torch().long()[:, None]
    )[:, 0]
    mine = (await client.forward([datum], "cross_entropy")).loss_fn_outputs[0]["logprobs"]
    assert torch.allclose(mine.to_torch(), expected, atol=1e-5)
    client.close()


async def test_lora_resume_with_optimizer_state_continues_exactly(
    model_dirs: dict[str, Path], tmp_path: Path
) -> None:
    service = LocalServiceClient(LocalModelConfig(device="cpu"), checkpoint_dir=tmp_path)
    base = str(model_dirs["qwen3"])
    a = await service.create_lora_training_client(base, rank=4, train_unembed=False)
    assert a.config.lora_targets == ("attn", "mlp")
    datum = text_datum(a.get_tokenizer(), GAME_TEXT)
    for _ in range(2):
        a.forward_backward([datum], "cross_entropy")
        await a.optim_step(ADAM)
    saved = await a.save_state("s2")
    resumed = await service.create_training_client_from_state_with_optimizer(saved.path)
    fresh = await service.create_training_client_from_state(saved.path)
    assert resumed.is_lora and resumed.config.lora_rank == 4 and resumed.step == 2
    assert resumed.config.lora_targets == ("attn", "mlp")
    outs = []
    for client in (a, resumed, fresh):
        client.forward_backward([datum], "cross_entropy")
        await client.optim_step(ADAM)
        out = await client.forward([datum], "cross_entropy")
        outs.append(out.loss_fn_outputs[0]["logprobs"].to_torch())
        client.close()
    assert torch.equal(outs[0], outs[1])
    assert not torch.equal(outs[0], outs[2])  # a fresh optimizer takes another step

    # A sampler over the checkpoint (what `arena play` loads) matches the trainer.
    run = await service.create_rest_client().get_training_run_by_tinker_path(saved.path)
    assert run.is_lora and run.lora_rank == 4
    sampler = await LocalServiceClient(LocalModelConfig(device="cpu")).create_sampling_client(
        model_path=saved.path
    )
    ids = [*datum.model_input.to_ints(), datum.loss_fn_inputs["target_tokens"].data[-1]]
    scored = await sampler.compute_logprobs(tinker.ModelInput.from_ints(ids))
    a2 = await service.create_training_client_from_state(saved.path)
    trained = (await a2.forward([datum], "cross_entropy")).loss_fn_outputs[0]["logprobs"]
    assert torch.allclose(torch.tensor(scored[1:]), trained.to_torch(), atol=1e-5)
    a2.close()


async def test_a_lora_sampler_shares_the_base_and_keeps_its_adapter(
    model_dirs: dict[str, Path],
) -> None:
    client = client_for(model_dirs["llama"], lora_rank=4)
    datum = text_datum(client.get_tokenizer(), GAME_TEXT)
    client.forward_backward([datum], "cross_entropy")
    await client.optim_step(ADAM)
    sampler = await client.save_weights_and_get_sampling_client_async()
    trainer_params = {id(p) for p in client.model.parameters()}
    shared = [n for n, p in sampler.model.named_parameters() if id(p) in trainer_params]
    own = [n for n, p in sampler.model.named_parameters() if id(p) not in trainer_params]
    assert shared and all("lora_" not in n for n in shared)
    assert own and all("lora_" in n for n in own)
    prompt = tinker.ModelInput.from_ints(datum.model_input.to_ints())
    before = await sampler.compute_logprobs(prompt)
    for _ in range(2):
        client.forward_backward([datum], "cross_entropy")
        await client.optim_step(ADAM)
    assert await sampler.compute_logprobs(prompt) == before  # the snapshot did not move
    later = await client.save_weights_and_get_sampling_client_async()
    assert await later.compute_logprobs(prompt) != before
    client.close()


def test_rank_0_trains_every_weight_and_checkpoints_them(
    model_dirs: dict[str, Path], tmp_path: Path
) -> None:
    client = client_for(model_dirs["gpt2"], lora_rank=0, checkpoint_dir=str(tmp_path))
    assert not client.is_lora
    memory = client.memory()
    assert memory["trainable_parameters"] == memory["parameters"]
    client.forward_backward([text_datum(client.get_tokenizer(), GAME_TEXT)], "cross_entropy")
    client.optim_step(ADAM).result()
    path = Path(client.save_state("full").result().path)
    assert (path / "model.safetensors").is_file()
    assert not (path / "adapter_model.safetensors").exists()
    lora_client = client_for(model_dirs["gpt2"], lora_rank=4)
    with pytest.raises(ValueError, match="holds every weight"):
        lora_client.load_state(str(path)).result()
    client.close()
    lora_client.close()


def test_lora_memory_against_full_fine_tuning(model_dirs: dict[str, Path]) -> None:
    """After one step: LoRA trains and keeps Adam state for the adapter alone; full
    fine-tuning for every weight. AdamW keeps two float32 moments per trained weight."""
    figures = {}
    for rank in (0, 8):
        client = client_for(model_dirs["llama"], lora_rank=rank)
        client.forward_backward([text_datum(client.get_tokenizer(), GAME_TEXT)], "cross_entropy")
        client.optim_step(ADAM).result()
        figures[rank] = client.memory()
        client.close()
    full, lora = figures[0], figures[8]
    base_parameters = full["parameters"]
    assert lora["parameters"] == base_parameters + lora["trainable_parameters"]
    assert lora["trainable_parameters"] < full["trainable_parameters"] / 5
    for figure in (full, lora):
        moments = 2 * 4 * figure["trainable_parameters"]
        steps = figure["optimizer_state_bytes"] - moments
        assert 0 <= steps <= 8 * 64  # AdamW's step counters: one scalar per tensor
    assert lora["optimizer_state_bytes"] < full["optimizer_state_bytes"] / 5


def test_gradient_checkpointing_keeps_the_gradients_and_saves_less(
    model_dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same gradients, and fewer bytes kept for the backward pass (counted by autograd's
    saved-tensor hooks around the training forward pass, on the client's worker thread)."""
    saved = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved[0] += t.numel() * t.element_size()
        return t

    forward = LocalTrainingClient._chunk_loss

    def counted(self: LocalTrainingClient, *args: object) -> object:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            return forward(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(LocalTrainingClient, "_chunk_loss", counted)
    results = {}
    for checkpointing in (False, True):
        client = client_for(model_dirs["qwen2"], lora_rank=4, gradient_checkpointing=checkpointing)
        datum = text_datum(client.get_tokenizer(), GAME_TEXT * 4)
        saved[0] = 0
        client.forward_backward([datum], "cross_entropy").result()
        grads = {
            n: p.grad.clone() for n, p in client.model.named_parameters() if p.grad is not None
        }
        results[checkpointing] = (saved[0], grads)
        client.close()
    (plain_saved, plain_grads), (ckpt_saved, ckpt_grads) = results[False], results[True]
    assert 0 < ckpt_saved < plain_saved / 2
    assert plain_grads.keys() == ckpt_grads.keys() and plain_grads
    for name, grad in plain_grads.items():
        assert torch.allclose(grad, ckpt_grads[name], atol=1e-6), name


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("rank", [0, 4])
async def test_the_output_layer_at_the_weighed_positions_keeps_logprobs_and_gradients(
    model_dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch, arch: str, rank: int
) -> None:
    """A training pass runs the output layer with a gradient only where the loss weighs
    (``trainer.local.heads``): every position's logprob, the loss and every gradient are
    those of the whole model's pass. GPT-2 has no split (it runs whole either way)."""
    from trainer.local import forward, heads

    found: dict[str, object] = {}
    for split in (True, False):
        if not split:
            monkeypatch.setattr(forward, "output_split", lambda model: None)
        client = client_for(model_dirs[arch], lora_rank=rank, seed=0)
        if split:
            assert (heads.output_split(client.model) is None) == (arch == "gpt2")
        datums, _ = await sampled_datums(client, ["[GAME] You are Player 0. Move:", "Board?"])
        out = client.forward_backward(datums, "importance_sampling").result()
        logprobs = [o["logprobs"].to_torch() for o in out.loss_fn_outputs]
        grads = {
            n: p.grad.clone() for n, p in client.model.named_parameters() if p.grad is not None
        }
        found[str(split)] = (out.metrics["loss:sum"], logprobs, grads)
        client.close()
    (loss, logprobs, grads), (whole_loss, whole_logprobs, whole_grads) = (
        found["True"],
        found["False"],  # type: ignore[misc]
    )
    assert loss == pytest.approx(whole_loss, rel=1e-4, abs=1e-5)
    for a, b in zip(logprobs, whole_logprobs, strict=True):
        assert a.shape == b.shape and torch.allclose(a, b, atol=1e-4)
    assert grads.keys() == whole_grads.keys() and grads
    for name, grad in grads.items():
        assert torch.allclose(grad, whole_grads[name], atol=1e-5), name


def test_dtype_resolution() -> None:
    cpu = torch.device("cpu")
    assert resolve_dtype("auto", cpu) == torch.float32
    assert resolve_dtype("bfloat16", cpu) == torch.bfloat16
    with pytest.raises(ValueError, match="unknown dtype 'fp8'"):
        resolve_dtype("fp8", cpu)
    lora = LocalModelConfig(dtype="bfloat16", lora_rank=8, model_path="x")
    full = LocalModelConfig(dtype="bfloat16", lora_rank=0, model_path="x")
    assert lora.weights_dtype(cpu) == torch.bfloat16 and lora.autocast_dtype(cpu) is None
    assert full.weights_dtype(cpu) == torch.float32 and full.autocast_dtype(cpu) == torch.bfloat16


def test_bfloat16_lora_keeps_the_base_in_bfloat16_and_the_adapter_in_float32(
    model_dirs: dict[str, Path],
) -> None:
    client = client_for(model_dirs["qwen3"], lora_rank=4, dtype="bfloat16")
    dtypes = {(p.requires_grad, p.dtype) for p in client.model.parameters()}
    assert dtypes == {(False, torch.bfloat16), (True, torch.float32)}
    client.close()


@needs_no_gpu
def test_a_device_that_is_not_here_is_a_clear_error() -> None:
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(ValueError, match=r"no CUDA GPU is available here.*use cpu or auto"):
        resolve_device("cuda")
    with pytest.raises(ValueError, match="no CUDA GPU"):
        resolve_device("cuda:1")
    with pytest.raises(ValueError, match="unknown device 'tpu'; choose auto, cpu, cuda"):
        LocalModelConfig(device="tpu")


@needs_no_gpu
def test_arena_train_device_cuda_without_a_gpu_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from arena_cli import main as arena_main

    args = ["train", "--log-dir", str(tmp_path / "run"), "--db", "", "--no-serve", "--quiet"]
    with pytest.raises(SystemExit) as exit_info:
        arena_main([*args, "--device", "cuda"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CUDA GPU is available here" in err[0]
    with pytest.raises(SystemExit) as exit_info:
        arena_main([*args, "--lora-rank", "-1"])
    assert exit_info.value.code == 2
    assert "lora_rank must be at least 0" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_arena_train_a_model_directory_with_lora_end_to_end(
    model_dirs: dict[str, Path], arch: str, tmp_path: Path
) -> None:
    """``arena train --model DIR --device auto --lora-rank 16``: matches recorded,
    checkpoints (adapters peft loads), ``--resume`` with the optimizer state, and the
    checkpoint playing in ``arena play --players run:NAME@STEP,random``."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from arena_cli import main as arena_main
    from storage import list_matches, open_database

    runs, db = tmp_path / "runs", str(tmp_path / "arena.db")
    common = [
        "train", "--model", str(model_dirs[arch]), "--device", "auto", "--lora-rank", "16",
        "--log-dir", str(runs / "tiny"), "--run-name", "tiny", "--db", db,
        "--batch-size", "2", "--group-size", "2", "--max-tokens", "4",
        "--eval-every", "0", "--save-every", "1", "--no-drop-constant-reward-groups",
        "--learning-rate", "1e-3", "--no-serve", "--quiet",
        "--warmup-steps", "2", "--warmup-games", "4",  # the compact view's format warm-up
    ]  # fmt: skip
    assert arena_main([*common, "--num-batches", "2"]) == 0
    checkpoints = [json.loads(line) for line in (runs / "tiny" / "checkpoints.jsonl").open()]
    states = [c for c in checkpoints if c.get("state_path")]
    assert [c["next_step"] for c in states] == [1, 2]
    last = Path(states[-1]["state_path"])
    assert (last / "adapter_model.safetensors").is_file() and (last / "optimizer.pt").is_file()
    assert json.loads((last / "state.json").read_text())["lora_rank"] == 16

    assert arena_main([*common, "--num-batches", "3", "--resume"]) == 0
    steps = [json.loads(line)["step"] for line in (runs / "tiny" / "metrics.jsonl").open()]
    assert steps == [-1, 0, 1, 2]  # -1: the warm-up
    checkpoints = [json.loads(line) for line in (runs / "tiny" / "checkpoints.jsonl").open()]
    final = next(c for c in reversed(checkpoints) if c.get("state_path"))
    state = json.loads((Path(final["state_path"]) / "state.json").read_text())
    assert state["step"] == final["step"] + 2  # the client counts the warm-up's 2 steps too

    rc = arena_main(
        ["play", "--game", "TicTacToe-v0", "--players", f"run:tiny@{final['step']},random",
         "--games", "2", "--runs-dir", str(runs), "--db", db, "--quiet"]
    )  # fmt: skip
    assert rc == 0

    async def read() -> list[object]:
        database = await open_database(db, read_only=True)
        try:
            return list(await list_matches(database, limit=200))
        finally:
            await database.close()

    matches = asyncio.run(read())
    played = [m for m in matches if m.seats[0].policy == f"checkpoint:tiny@{final['step']}"]  # type: ignore[attr-defined]
    assert len(played) == 2
    assert len(matches) > len(played)  # the training games were recorded too

    base = AutoModelForCausalLM.from_pretrained(model_dirs[arch])
    adapted = PeftModel.from_pretrained(base, final["state_path"])
    assert sum(p.numel() for n, p in adapted.named_parameters() if "lora_" in n) > 0
