"""The hosted (Tinker) path, against a strict fake of the service.

The service cannot be reached here; ``tests.fake_tinker.FakeServiceClient`` stands in for
``tinker.ServiceClient`` with the SDK's own signatures and return types, over a small model
whose tokenizer has a real chat template, so ``arena train --backend tinker`` runs end to end:
credentials, the cookbook's renderer for the model, datums with only the loss's documented
inputs, ``forward_backward`` and ``optim_step`` submitted together, checkpoints with their
metadata, and ``--resume`` through ``create_training_client_from_state_with_optimizer``.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest
import tinker

from arena.renderers import ChatTemplateRenderer, RendererConfig, register_tokenizer
from arena_cli import main as arena_main
from tests.chat_model import write_chat_model_dir
from tests.fake_tinker import FakeServiceClient
from trainer.backend import BackendError, check_tinker_credentials
from trainer.local.sampler import LocalSamplingClient
from trainer.local.service import LocalRestClient, LocalServiceClient
from trainer.local.training import LocalTrainingClient

HOSTED = "Qwen/Qwen3-4B-Instruct-2507"

LOCAL_EXTRAS = {
    LocalServiceClient: {"model_path"},
    LocalTrainingClient: {"close", "memory", "trainable_parameters", "regularize", "reset_magnet"},
    LocalSamplingClient: set(),
    LocalRestClient: set(),
}
"""Public methods of the local clients that the SDK does not have (documented helpers)."""


def _shape(function: Any) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


@pytest.mark.parametrize(
    ("local", "real"),
    [
        (LocalServiceClient, tinker.ServiceClient),
        (LocalTrainingClient, tinker.TrainingClient),
        (LocalSamplingClient, tinker.SamplingClient),
        (LocalRestClient, tinker.RestClient),
    ],
)
def test_local_clients_have_the_sdk_signatures(local: type, real: type) -> None:
    """Every public method of the fake is the SDK's method: same parameter names, kinds and
    defaults, so a wrong or unknown keyword fails here as it fails against the service."""
    checked = 0
    for name, function in inspect.getmembers(local, inspect.isfunction):
        if name.startswith("_") or name in LOCAL_EXTRAS[local]:
            continue
        counterpart = getattr(real, name, None)
        assert counterpart is not None, f"{local.__name__}.{name} is not in the SDK"
        assert _shape(function) == _shape(counterpart), f"{local.__name__}.{name}"
        checked += 1
    assert checked >= (2 if local is LocalRestClient else 4)
    assert _shape(FakeServiceClient.__init__) == _shape(tinker.ServiceClient.__init__)


async def test_the_fake_rejects_what_the_sdk_rejects(tmp_path: Path) -> None:
    service = LocalServiceClient(checkpoint_dir=tmp_path)
    with pytest.raises(TypeError):
        service.create_lora_training_client("arena/byte-gpt2", lora_rank=8)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="not served by the local backend"):
        await service.create_lora_training_client("Qwen/Unknown-Model")
    client = await service.create_lora_training_client("arena/byte-gpt2", rank=4)
    with pytest.raises(TypeError):
        client.save_state("x", weights_only=True)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="optim_params or adam_params"):
        client.optim_step()
    sampler = await client.save_weights_and_get_sampling_client()
    prompt = tinker.ModelInput.from_ints([256, 65])
    with pytest.raises(ValueError, match="does not support include_prompt_logprobs"):
        sampler.sample(prompt, 1, tinker.SamplingParams(max_tokens=1), include_prompt_logprobs=True)
    logprobs = await sampler.compute_logprobs(tinker.ModelInput.from_ints([256, 65, 66]))
    assert logprobs[0] is None and len(logprobs) == 3 and all(v < 0 for v in logprobs[1:])
    client.close()


def test_chat_template_renderer_with_a_real_tokenizer(tmp_path: Path) -> None:
    """transformers 5 returns a BatchEncoding from apply_chat_template(tokenize=True): the
    renderer must still produce the template's exact tokens."""
    from transformers import AutoTokenizer

    write_chat_model_dir(tmp_path)
    hf = AutoTokenizer.from_pretrained(tmp_path)
    renderer = ChatTemplateRenderer(hf)
    messages = [{"role": "user", "content": "[GAME] You are Player 0 in Tic Tac Toe."}]
    tokens = renderer.build_generation_prompt(messages).to_ints()  # type: ignore[arg-type]
    text = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert tokens == hf.encode(text, add_special_tokens=False)
    assert hf.decode(tokens).endswith("<|im_start|>assistant\n")
    assert renderer.get_stop_sequences() == [hf.convert_tokens_to_ids("<|im_end|>")]
    answer = [*hf.encode("[4]", add_special_tokens=False), hf.eos_token_id]
    assert renderer.parse_response(answer) == ({"role": "assistant", "content": "[4]"}, True)


def test_cookbook_renderer_for_a_hosted_model(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    write_chat_model_dir(tmp_path)
    hf = AutoTokenizer.from_pretrained(tmp_path)
    register_tokenizer("test/qwen-like", hf)
    cookbook = RendererConfig(name="qwen3_instruct", tokenizer_path="test/qwen-like").build()
    template = RendererConfig(name="chat", tokenizer_path="test/qwen-like").build()
    messages = [{"role": "user", "content": "Submit [0] or [1]."}]
    assert (
        cookbook.build_generation_prompt(messages).to_ints()  # type: ignore[arg-type]
        == template.build_generation_prompt(messages).to_ints()  # type: ignore[arg-type]
    )
    assert cookbook.get_stop_sequences() == [hf.convert_tokens_to_ids("<|im_end|>")]
    with pytest.raises(ValueError, match="unknown renderer"):
        RendererConfig(name="no-such-renderer", tokenizer_path="test/qwen-like").build()


def test_missing_credentials_fail_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    monkeypatch.delenv("TINKER_CREDENTIAL_CMD", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no key stored by `tinker auth login`
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    with pytest.raises(BackendError, match=r"TINKER_API_KEY.*TINKER_CREDENTIAL_CMD"):
        check_tinker_credentials()
    monkeypatch.setenv("TINKER_CREDENTIAL_CMD", "echo token")
    check_tinker_credentials()  # another of the SDK's credential sources


@pytest.fixture
def fake_service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> type[FakeServiceClient]:
    model_dir = tmp_path / "hosted-model"
    write_chat_model_dir(model_dir)
    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
    monkeypatch.setattr(tinker, "ServiceClient", FakeServiceClient)
    monkeypatch.setattr(FakeServiceClient, "models", {HOSTED: str(model_dir)})
    monkeypatch.setattr(FakeServiceClient, "checkpoint_dir", tmp_path / "service")
    monkeypatch.setattr(FakeServiceClient, "calls", [])
    return FakeServiceClient


def _names(calls: list[tuple[str, Any]]) -> list[str]:
    return [name for name, _ in calls]


@pytest.mark.slow
def test_arena_train_backend_tinker_end_to_end_with_resume(
    tmp_path: Path, fake_service: type[FakeServiceClient]
) -> None:
    log_dir = tmp_path / "run"
    common = [
        "train", "--backend", "tinker", "--model", HOSTED, "--log-dir", str(log_dir),
        "--batch-size", "2", "--group-size", "2", "--max-tokens", "6",
        "--eval-every", "0", "--save-every", "1", "--no-drop-constant-reward-groups",
        "--lora-rank", "8", "--db", "", "--no-serve", "--quiet",
    ]  # fmt: skip
    assert arena_main([*common, "--num-batches", "2"]) == 0
    calls = fake_service.calls
    create = next(args for name, args in calls if name == "create_lora_training_client")
    assert create["args"] == (HOSTED,) and create["rank"] == 8
    assert create["user_metadata"]["renderer_name"] == "qwen3_instruct"
    # Only the loss's documented inputs are sent; the optimizer step is submitted before
    # the gradients are awaited (the same clock cycle).
    sent = [args for name, args in calls if name == "forward_backward"]
    assert len(sent) == 2
    assert all(s["inputs"] == ["advantages", "logprobs", "target_tokens"] for s in sent)
    names = _names(calls)
    first = names.index("forward_backward")
    awaited = calls.index(("await", "forward_backward"), first)
    assert names.index("optim_step", first) < awaited
    assert not any(n.endswith("_async") for n in names), "deprecated SDK methods were used"
    checkpoints = [json.loads(line) for line in (log_dir / "checkpoints.jsonl").open()]
    checkpoints = [c for c in checkpoints if c.get("state_path")]  # not league snapshots
    assert [c["next_step"] for c in checkpoints] == [1, 2]
    assert [c["step"] for c in checkpoints] == [1, 2]  # every step had datums
    last = checkpoints[-1]
    assert last["renderer_name"] == "qwen3_instruct" and last["base_model"] == HOSTED
    assert Path(last["sampler_path"]).exists() and Path(last["state_path"]).exists()
    metrics = [json.loads(line) for line in (log_dir / "metrics.jsonl").open()]
    assert all(m["optim/datums"] > 0 for m in metrics)

    fake_service.calls.clear()
    assert arena_main([*common, "--num-batches", "3", "--resume"]) == 0
    resumed = [args for name, args in fake_service.calls if name.startswith("create_training")]
    assert _names(fake_service.calls).count("create_training_client_from_state_with_optimizer") == 1
    assert resumed[0]["args"] == (last["state_path"],)
    assert "create_lora_training_client" not in _names(fake_service.calls)
    steps = [json.loads(line)["step"] for line in (log_dir / "metrics.jsonl").open()]
    assert steps == [0, 1, 2]


@pytest.mark.slow
def test_resume_restores_the_optimizer_state(tmp_path: Path) -> None:
    """Through the service: the resumed client continues exactly as the original would."""
    import asyncio

    import numpy as np
    from tinker import types

    async def go() -> None:
        service = LocalServiceClient(checkpoint_dir=tmp_path)
        a = await service.create_lora_training_client("arena/byte-gpt2", seed=1)
        datum = types.Datum(
            model_input=tinker.ModelInput.from_ints([256, 65, 66, 67]),
            loss_fn_inputs={
                "target_tokens": types.TensorData(data=[65, 66, 67, 257], dtype="int64", shape=[4])
            },
        )
        adam = types.AdamParams(learning_rate=1e-2)
        for _ in range(2):
            a.forward_backward([datum], "cross_entropy")
            await a.optim_step(adam)
        saved = await a.save_state("s2", user_metadata={"renderer_name": "bytes"})
        run = await service.create_rest_client().get_training_run_by_tinker_path(saved.path)
        assert run.base_model == "arena/byte-gpt2"
        b = await service.create_training_client_from_state_with_optimizer(saved.path)
        c = await service.create_training_client_from_state(saved.path)  # fresh optimizer
        outs = []
        for client in (a, b, c):
            client.forward_backward([datum], "cross_entropy")
            await client.optim_step(adam)
            out = await client.forward([datum], "cross_entropy")
            outs.append(out.loss_fn_outputs[0]["logprobs"].to_numpy())
            client.close()
        np.testing.assert_array_equal(outs[0], outs[1])
        assert not np.array_equal(outs[0], outs[2])

    asyncio.run(go())
