"""The local model backend: Tinker's client surface on a tiny PyTorch model."""

from __future__ import annotations

import asyncio
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from tinker import types

from arena.renderers import ByteTokenizer
from trainer.local import (
    LocalModelConfig,
    LocalSamplingClient,
    LocalTrainingClient,
    create_local_training_client,
)

BOS, EOS = ByteTokenizer.BOS, ByteTokenizer.EOS


def tiny(**overrides: object) -> LocalModelConfig:
    """A model small enough for tests (a few milliseconds a step)."""
    settings: dict[str, object] = {"n_layer": 2, "n_embd": 32, "n_head": 2, "n_positions": 128}
    settings.update(overrides)
    return LocalModelConfig(**settings)  # type: ignore[arg-type]


PATIENT = {"batch_window_s": 2.0, "batch_quiet_s": 0.2}
"""Sampler settings that gather every request of a test into one batch, even on a busy
machine (the worker waits until no request came for 0.2 s)."""


def text(s: str) -> list[int]:
    return list(s.encode())


def prompt(tokens: list[int]) -> types.ModelInput:
    return types.ModelInput.from_ints(tokens)


def ints(values: list[int]) -> types.TensorData:
    return types.TensorData(data=values, dtype="int64")


def floats(values: list[float]) -> types.TensorData:
    return types.TensorData(data=values, dtype="float32")


def sequence_datum(
    prompt_tokens: list[int],
    action: list[int],
    *,
    advantage: float = 0.0,
    sampler_logprobs: list[float] | None = None,
) -> types.Datum:
    """Prompt then action, shifted by one; only the action positions carry weight and
    advantage."""
    full = prompt_tokens + action
    n_prompt = len(prompt_tokens) - 1
    logprobs = sampler_logprobs if sampler_logprobs is not None else [0.0] * len(action)
    return types.Datum(
        model_input=prompt(full[:-1]),
        loss_fn_inputs={
            "target_tokens": ints(full[1:]),
            "weights": floats([0.0] * n_prompt + [1.0] * len(action)),
            "advantages": floats([0.0] * n_prompt + [advantage] * len(action)),
            "logprobs": floats([0.0] * n_prompt + logprobs),
        },
    )


def action_logprobs(
    client: LocalTrainingClient, prompt_tokens: list[int], action: list[int]
) -> np.ndarray:
    """The model's logprobs of ``action`` after ``prompt_tokens``."""
    out = client.forward([sequence_datum(prompt_tokens, action)], "cross_entropy").result()
    return out.loss_fn_outputs[0]["logprobs"].to_numpy()[len(prompt_tokens) - 1 :]


ADAM = types.AdamParams(learning_rate=1e-2)
FIXED_BATCH = [
    sequence_datum([BOS, *text("Q:")], [*text("hello world"), EOS]),
    sequence_datum([BOS, *text("move?")], [*text("[4]"), EOS]),
]


@pytest.fixture(scope="module")
def trained() -> LocalTrainingClient:
    """A tiny model taught to answer ``<BOS>Q:`` with ``hello world<EOS>``."""
    client = create_local_training_client(tiny())
    for _ in range(80):
        client.forward_backward(FIXED_BATCH, "cross_entropy")
        client.optim_step(types.AdamParams(learning_rate=2e-2))
    client.forward(FIXED_BATCH, "cross_entropy").result()
    return client


# -- sampling ------------------------------------------------------------------------------


async def test_sampled_logprobs_match_forward_logprobs() -> None:
    client = create_local_training_client(tiny())
    sampler = await client.save_weights_and_get_sampling_client_async()
    start = [BOS, *text("U:board 1|2|3\nA:")]
    response = await sampler.sample_async(prompt(start), 3, types.SamplingParams(max_tokens=6))
    assert len(response.sequences) == 3
    for seq in response.sequences:
        assert seq.logprobs is not None and len(seq.logprobs) == len(seq.tokens)
        expected = action_logprobs(client, start, seq.tokens)
        np.testing.assert_allclose(seq.logprobs, expected, atol=1e-4)


@pytest.mark.parametrize("join_caches", [True, False])
async def test_prompts_of_different_lengths_sampled_together_match_forward(
    join_caches: bool,
) -> None:
    client = create_local_training_client(tiny(**PATIENT))
    sampler = await client.save_weights_and_get_sampling_client_async()
    sampler._decoder.joinable_cache = join_caches  # grouped prefill with joined caches, or one
    starts = [[BOS, *text("x" * n)] for n in (1, 4, 9, 30, 55, 90)]
    # Different max_tokens: rows finish at different steps (the batch shrinks).
    responses = await asyncio.gather(
        *(
            sampler.sample_async(prompt(s), 1, types.SamplingParams(max_tokens=2 + i, seed=i))
            for i, s in enumerate(starts)
        )
    )
    assert sampler.stats.batches == 1
    for s, response in zip(starts, responses, strict=True):
        seq = response.sequences[0]
        assert seq.logprobs is not None
        np.testing.assert_allclose(seq.logprobs, action_logprobs(client, s, seq.tokens), atol=1e-4)


async def test_tempered_logprobs_are_under_the_sampled_distribution() -> None:
    client = create_local_training_client(tiny())
    sampler = await client.save_weights_and_get_sampling_client_async()
    start = [BOS, *text("abc")]
    params = types.SamplingParams(max_tokens=4, temperature=0.5, seed=3)
    seq = (await sampler.sample_async(prompt(start), 1, params)).sequences[0]
    with torch.no_grad():
        logits = sampler.model(input_ids=torch.tensor([start + seq.tokens])).logits[0]
    tempered = torch.log_softmax(logits.float() / 0.5, dim=-1)
    expected = [float(tempered[len(start) - 1 + i, t]) for i, t in enumerate(seq.tokens)]
    np.testing.assert_allclose(seq.logprobs or [], expected, atol=1e-4)


async def test_greedy_sampling_is_deterministic_and_stops_at_eos(
    trained: LocalTrainingClient,
) -> None:
    sampler = await trained.save_weights_and_get_sampling_client_async()
    greedy = types.SamplingParams(max_tokens=30, temperature=0.0)
    first = await sampler.sample_async(prompt([BOS, *text("Q:")]), 2, greedy)
    again = await sampler.sample_async(prompt([BOS, *text("Q:")]), 1, greedy)
    tokens = first.sequences[0].tokens
    assert tokens == [*text("hello world"), EOS]
    assert first.sequences[1].tokens == tokens == again.sequences[0].tokens
    assert first.sequences[0].stop_reason == "stop"


async def test_sampling_stops_at_stop_strings_tokens_and_max_tokens(
    trained: LocalTrainingClient,
) -> None:
    sampler = await trained.save_weights_and_get_sampling_client_async()
    start = prompt([BOS, *text("Q:")])

    async def greedy(**kwargs: object) -> types.SampledSequence:
        params = types.SamplingParams(temperature=0.0, **kwargs)  # type: ignore[arg-type]
        return (await sampler.sample_async(start, 1, params)).sequences[0]

    by_string = await greedy(max_tokens=30, stop=["lo w", "zzz"])
    assert (by_string.tokens, by_string.stop_reason) == (text("hello w"), "stop")
    by_token = await greedy(max_tokens=30, stop=[ord(" ")])
    assert (by_token.tokens, by_token.stop_reason) == (text("hello "), "stop")
    by_length = await greedy(max_tokens=3)
    assert (by_length.tokens, by_length.stop_reason) == (text("hel"), "length")


async def test_top_k_1_and_tiny_top_p_sample_the_greedy_tokens() -> None:
    client = create_local_training_client(tiny())
    sampler = await client.save_weights_and_get_sampling_client_async()
    start = prompt([BOS, *text("abc")])
    greedy = await sampler.sample_async(start, 1, types.SamplingParams(max_tokens=6, temperature=0))
    for params in (
        types.SamplingParams(max_tokens=6, top_k=1, seed=1),
        types.SamplingParams(max_tokens=6, top_p=1e-6, seed=2),
    ):
        response = await sampler.sample_async(start, 1, params)
        assert response.sequences[0].tokens == greedy.sequences[0].tokens


async def test_64_concurrent_requests_share_forward_passes() -> None:
    client = create_local_training_client(tiny(max_batch_size=64, **PATIENT))
    sampler = await client.save_weights_and_get_sampling_client_async()
    starts = [[BOS, *text("y" * (5 + i))] for i in range(64)]
    params = types.SamplingParams(max_tokens=8, stop=[EOS])
    responses = await asyncio.gather(*(sampler.sample_async(prompt(s), 1, params) for s in starts))
    assert sampler.stats.sequences == 64
    assert sum(len(r.sequences[0].tokens) for r in responses) == sampler.stats.sampled_tokens
    # One at a time would take 64 * (1 prefill + 7 decoding steps) = 512 passes.
    assert sampler.stats.batches == 1 and sampler.stats.largest_batch == 64
    assert sampler.stats.forward_passes <= 8 + 4  # 7 decoding steps, a few prefill groups


async def test_requests_beyond_max_batch_size_and_cancelled_ones() -> None:
    client = create_local_training_client(tiny(max_batch_size=16, **PATIENT))
    sampler = await client.save_weights_and_get_sampling_client_async()
    params = types.SamplingParams(max_tokens=2)
    many = asyncio.create_task(sampler.sample_async(prompt([BOS, 1]), 40, params))
    dropped = asyncio.create_task(sampler.sample_async(prompt([BOS, 2]), 5, params))
    await asyncio.sleep(0)  # both are queued; the sampler is still gathering
    dropped.cancel()
    response = await many
    assert len(response.sequences) == 40
    assert dropped.cancelled()
    assert sampler.stats.sequences == 40 and sampler.stats.batches == 3


async def test_seeded_sampling_repeats() -> None:
    client = create_local_training_client(tiny())
    sampler = await client.save_weights_and_get_sampling_client_async()
    params = types.SamplingParams(max_tokens=10, seed=7)
    one = await sampler.sample_async(prompt([BOS, 1, 2]), 2, params)
    two = await sampler.sample_async(prompt([BOS, 1, 2]), 2, params)
    assert [s.tokens for s in one.sequences] == [s.tokens for s in two.sequences]
    assert one.sequences[0].tokens != one.sequences[1].tokens  # each sample its own stream


async def test_a_seeded_request_draws_the_same_whatever_it_is_batched_with() -> None:
    client = create_local_training_client(tiny())
    sampler = await client.save_weights_and_get_sampling_client_async()
    params = types.SamplingParams(max_tokens=10, seed=11)
    alone = await sampler.sample_async(prompt([BOS, *text("xo")]), 3, params)
    others = [
        sampler.sample_async(
            prompt([BOS, *text("abcdefgh"[: i + 1])]), 2, types.SamplingParams(max_tokens=10)
        )
        for i in range(8)
    ]
    crowded, *_ = await asyncio.gather(
        sampler.sample_async(prompt([BOS, *text("xo")]), 3, params), *others
    )
    assert [s.tokens for s in crowded.sequences] == [s.tokens for s in alone.sequences]
    client.close()


async def test_draws_follow_the_model_distribution() -> None:
    """400 one-token samples, seeded and not: each token's share is within 4.5 standard
    deviations of its probability under the model (the test fails for a biased draw)."""
    client = create_local_training_client(tiny(seed=2))
    sampler = await client.save_weights_and_get_sampling_client_async()
    start = [BOS, *text("ab")]
    with torch.no_grad():
        probs = torch.softmax(sampler.model(input_ids=torch.tensor([start])).logits[0, -1], -1)
    for seed in (None, 5):
        params = types.SamplingParams(max_tokens=1, seed=seed)
        response = await sampler.sample_async(prompt(start), 400, params)
        counts = torch.bincount(
            torch.tensor([s.tokens[0] for s in response.sequences]), minlength=len(probs)
        )
        sigma = torch.sqrt(400 * probs * (1 - probs)).clamp(min=0.5)
        assert bool(((counts - 400 * probs).abs() <= 4.5 * sigma + 1).all())
        assert int(counts[probs == 0].sum()) == 0
    client.close()


async def test_bad_sampling_requests_are_refused_at_once() -> None:
    client = create_local_training_client(tiny())
    sampler = await client.save_weights_and_get_sampling_client_async()
    assert sampler.context_length == 128
    with pytest.raises(ValueError, match="context_length"):
        await sampler.sample_async(prompt([1] * 120), 1, types.SamplingParams(max_tokens=16))
    with pytest.raises(ValueError, match="context_length"):
        await sampler.sample_async(prompt([1] * 128), 1, types.SamplingParams())
    with pytest.raises(ValueError, match="empty"):
        await sampler.sample_async(prompt([]), 1, types.SamplingParams(max_tokens=1))
    with pytest.raises(ValueError, match=r"ids must be in \[0"):
        await sampler.sample_async(prompt([999]), 1, types.SamplingParams(max_tokens=1))
    with pytest.raises(ValueError, match="num_samples"):
        sampler.sample(prompt([1]), 0, types.SamplingParams(max_tokens=1))


def test_sync_methods_return_tinker_futures() -> None:
    client = create_local_training_client(tiny())
    sampler = client.save_weights_and_get_sampling_client("probe").result()
    assert isinstance(sampler, LocalSamplingClient) and sampler.name == "probe"
    response = sampler.sample(prompt([BOS, 5]), 1, types.SamplingParams(max_tokens=2)).result()
    assert len(response.sequences[0].tokens) <= 2
    assert isinstance(client.get_tokenizer(), ByteTokenizer)
    config = tiny(seed=3)
    assert pickle.loads(pickle.dumps(config)) == config
    with pytest.raises(ValueError, match="n_head"):
        tiny(n_embd=30, n_head=4)


# -- training ------------------------------------------------------------------------------


def test_cross_entropy_steps_lower_the_loss() -> None:
    client = create_local_training_client(tiny())
    losses = []
    for _ in range(6):
        out = client.forward_backward(FIXED_BATCH, "cross_entropy").result()
        losses.append(out.metrics["loss:sum"])
        client.optim_step(ADAM).result()
    assert losses[-1] < 0.8 * losses[0]
    assert client.step == 6


def test_micro_batches_hold_to_their_token_bound_and_keep_the_order() -> None:
    from trainer.local.forward import Example, micro_batches

    found = [Example([0] * n, torch.zeros(n), {}) for n in (5, 3, 8, 2, 2)]

    def lengths(size: int, tokens: int | None) -> list[list[int]]:
        return [[len(e.tokens) for e in b] for b in micro_batches(found, size, tokens)]

    assert lengths(4, 10) == [[5, 3], [8], [2, 2]]  # 2 x 5 fits 10; 2 x 8 does not
    assert lengths(4, None) == [[5, 3, 8, 2], [2]]
    assert lengths(4, 1) == [[5], [3], [8], [2], [2]]  # longer than the bound: alone


def test_a_token_bound_splits_the_pass_but_not_its_result() -> None:
    whole = create_local_training_client(tiny())
    split = create_local_training_client(tiny())
    assert whole.micro_batch_tokens > 100_000  # the built-in model is never split
    split.micro_batch_tokens = 1  # every datum a pass of its own
    a = whole.forward_backward(FIXED_BATCH, "cross_entropy").result()
    b = split.forward_backward(FIXED_BATCH, "cross_entropy").result()
    assert a.metrics["loss:sum"] == pytest.approx(b.metrics["loss:sum"], rel=1e-5)
    for x, y in zip(a.loss_fn_outputs, b.loss_fn_outputs, strict=True):
        assert torch.allclose(x["logprobs"].to_torch(), y["logprobs"].to_torch(), atol=1e-5)
    for p, q in zip(whole.model.parameters(), split.model.parameters(), strict=True):
        assert p.grad is not None and q.grad is not None
        assert torch.allclose(p.grad, q.grad, atol=1e-5)  # the same summed gradient
    with pytest.raises(ValueError, match="train_micro_batch_mb must be at least 1"):
        LocalModelConfig(train_micro_batch_mb=0)


@pytest.mark.parametrize("advantage", [1.0, -1.0])
def test_importance_sampling_moves_the_action_logprob_with_the_advantage(
    advantage: float,
) -> None:
    client = create_local_training_client(tiny())
    start, action = [BOS, *text("turn:")], text("[7]")
    before = action_logprobs(client, start, action)
    datum = sequence_datum(start, action, advantage=advantage, sampler_logprobs=list(before))
    out = client.forward_backward([datum], "importance_sampling").result()
    # On-policy: the ratio is 1, so the loss is -sum(advantages).
    assert out.metrics["loss:sum"] == pytest.approx(-3 * advantage, abs=1e-4)
    client.optim_step(types.AdamParams(learning_rate=1e-3)).result()
    change = action_logprobs(client, start, action).sum() - before.sum()
    assert change * advantage > 0


def test_ppo_clipping_limits_the_update() -> None:
    client = create_local_training_client(tiny())
    start, action = [BOS, *text("turn:")], text("[7]")
    before = action_logprobs(client, start, action)
    # The sampler was much less likely to pick the action: ratio e > 1.2, clipped, so a
    # positive advantage gives no gradient.
    stale = [float(x) - 1.0 for x in before]
    datum = sequence_datum(start, action, advantage=1.0, sampler_logprobs=stale)
    out = client.forward_backward([datum], "ppo").result()
    assert out.metrics["loss:sum"] == pytest.approx(-1.2 * 3, abs=1e-4)
    client.optim_step(ADAM).result()
    np.testing.assert_array_equal(action_logprobs(client, start, action), before)
    # Inside the clip range the same step does move the policy.
    on_policy = sequence_datum(start, action, advantage=1.0, sampler_logprobs=list(before))
    client.forward_backward([on_policy], "ppo", {"clip_low_threshold": 0.9}).result()
    client.optim_step(ADAM).result()
    assert action_logprobs(client, start, action).sum() > before.sum()


def test_loss_choices_and_config_are_checked() -> None:
    client = create_local_training_client(tiny())
    with pytest.raises(ValueError, match="cross_entropy, importance_sampling, ppo"):
        client.forward_backward(FIXED_BATCH, "dpo")
    with pytest.raises(ValueError, match="clip_low_threshold"):
        client.forward_backward(FIXED_BATCH, "ppo", {"eps": 0.1})
    with pytest.raises(ValueError, match="advantages"):
        bare = types.Datum(
            model_input=prompt([1, 2]), loss_fn_inputs={"target_tokens": ints([2, 3])}
        )
        client.forward_backward([bare], "importance_sampling")
    with pytest.raises(ValueError, match="align"):
        short = types.Datum(model_input=prompt([1, 2]), loss_fn_inputs={"target_tokens": ints([2])})
        client.forward_backward([short], "cross_entropy")


def test_gradients_accumulate_until_optim_step() -> None:
    split = create_local_training_client(tiny())
    whole = create_local_training_client(tiny())
    split.forward_backward(FIXED_BATCH[:1], "cross_entropy")
    split.forward_backward(FIXED_BATCH[1:], "cross_entropy")
    split.optim_step(ADAM).result()
    whole.forward_backward(FIXED_BATCH, "cross_entropy")
    whole.optim_step(ADAM).result()
    a = split.forward(FIXED_BATCH, "cross_entropy").result()
    b = whole.forward(FIXED_BATCH, "cross_entropy").result()
    for x, y in zip(a.loss_fn_outputs, b.loss_fn_outputs, strict=True):
        np.testing.assert_allclose(x["logprobs"].to_numpy(), y["logprobs"].to_numpy(), atol=1e-5)


async def test_async_methods_work_as_with_tinker() -> None:
    client = create_local_training_client(tiny())
    fut = await client.forward_backward_async(FIXED_BATCH, "cross_entropy")
    out = await fut.result_async()
    assert [len(o["logprobs"].tolist()) for o in out.loss_fn_outputs] == [
        d.model_input.length for d in FIXED_BATCH
    ]
    step = await (await client.optim_step_async(ADAM)).result_async()
    assert step.metrics is not None and step.metrics["grad_norm"] > 0


# -- snapshots and checkpoints --------------------------------------------------------------


async def test_sampling_snapshot_does_not_change_with_training() -> None:
    client = create_local_training_client(tiny())
    snapshot = await client.save_weights_and_get_sampling_client_async()
    start = prompt([BOS, *text("Q:")])
    greedy = types.SamplingParams(max_tokens=8, temperature=0.0)
    before = (await snapshot.sample_async(start, 1, greedy)).sequences[0]
    for _ in range(3):
        await client.forward_backward_async(FIXED_BATCH, "cross_entropy")
        await (await client.optim_step_async(ADAM)).result_async()
    after = (await snapshot.sample_async(start, 1, greedy)).sequences[0]
    assert (after.tokens, after.logprobs) == (before.tokens, before.logprobs)
    fresh = await client.save_weights_and_get_sampling_client_async()
    moved = (await fresh.sample_async(start, 1, greedy)).sequences[0]
    assert moved.logprobs != before.logprobs


def test_save_and_load_state_resume_training_exactly(tmp_path: Path) -> None:
    a = create_local_training_client(tiny(checkpoint_dir=str(tmp_path)))
    for _ in range(2):
        a.forward_backward(FIXED_BATCH, "cross_entropy")
        a.optim_step(ADAM)
    saved = a.save_state("step2").result()
    assert Path(saved.path) == tmp_path / "step2"
    assert {p.name for p in tmp_path.joinpath("step2").iterdir()} == {
        "model.safetensors",
        "optimizer.pt",
        "state.json",
    }
    assert json.loads((tmp_path / "step2" / "state.json").read_text())["step"] == 2
    at_save = a.forward(FIXED_BATCH, "cross_entropy").result()
    a.forward_backward(FIXED_BATCH, "cross_entropy")
    a.optim_step(ADAM)
    after_a = a.forward(FIXED_BATCH, "cross_entropy").result()

    b = create_local_training_client(tiny(seed=99))  # different initial weights
    b.load_state_with_optimizer(saved.path).result()
    assert b.step == 2
    loaded = b.forward(FIXED_BATCH, "cross_entropy").result()
    b.forward_backward(FIXED_BATCH, "cross_entropy")
    b.optim_step(ADAM)
    after_b = b.forward(FIXED_BATCH, "cross_entropy").result()
    for x, y in [(at_save, loaded), (after_a, after_b)]:
        for ox, oy in zip(x.loss_fn_outputs, y.loss_fn_outputs, strict=True):
            np.testing.assert_array_equal(ox["logprobs"].to_numpy(), oy["logprobs"].to_numpy())

    # load_state restores the weights alone (Tinker's semantics): the next step differs.
    c = create_local_training_client(tiny(seed=98))
    c.load_state(saved.path).result()
    weights_only = c.forward(FIXED_BATCH, "cross_entropy").result()
    c.forward_backward(FIXED_BATCH, "cross_entropy")
    c.optim_step(ADAM)
    after_c = c.forward(FIXED_BATCH, "cross_entropy").result()
    np.testing.assert_array_equal(
        weights_only.loss_fn_outputs[0]["logprobs"].to_numpy(),
        at_save.loss_fn_outputs[0]["logprobs"].to_numpy(),
    )
    assert not np.array_equal(
        after_c.loss_fn_outputs[0]["logprobs"].to_numpy(),
        after_a.loss_fn_outputs[0]["logprobs"].to_numpy(),
    )

    with pytest.raises(FileExistsError):
        a.save_state("step2").result()
    a.save_state("step2", overwrite=True).result()
    with pytest.raises(ValueError, match="plain file name"):
        a.save_state("../escape")
    with pytest.raises(ValueError, match=r"model\.safetensors"):
        b.load_state(str(tmp_path / "nothing-here")).result()


# -- model directories ----------------------------------------------------------------------


def write_tiny_model_dir(path: Path) -> None:
    """A word-level tokenizer and a tiny GPT-2 saved as a Hugging Face model directory."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    words = ["[UNK]", "[PAD]", "[EOS]", "x", "o", "move", "board", "a", "b", "c"]
    vocab = {w: i for i, w in enumerate(words)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]"
    )
    tokenizer.save_pretrained(path)
    config = GPT2Config(
        vocab_size=len(words),
        n_layer=1,
        n_embd=16,
        n_head=2,
        n_positions=64,
        bos_token_id=2,
        eos_token_id=2,
        pad_token_id=1,
    )
    torch.manual_seed(0)
    GPT2LMHeadModel(config).save_pretrained(path)


async def test_model_directory_loads_with_its_tokenizer(tmp_path: Path) -> None:
    from transformers import PreTrainedTokenizerBase

    write_tiny_model_dir(tmp_path)
    client = create_local_training_client(LocalModelConfig(model_path=str(tmp_path)))
    tokenizer = client.get_tokenizer()
    assert isinstance(tokenizer, PreTrainedTokenizerBase)
    assert client.context_length == 64
    start = tokenizer.encode("board x o move")
    sampler = await client.save_weights_and_get_sampling_client_async()
    params = types.SamplingParams(max_tokens=12, seed=1, stop=["c"])
    seq = (await sampler.sample_async(prompt(start), 1, params)).sequences[0]
    if seq.stop_reason == "stop":  # at the stop string or the tokenizer's EOS
        assert "c" in tokenizer.decode(seq.tokens) or seq.tokens[-1] == tokenizer.eos_token_id
        assert "c" not in tokenizer.decode(seq.tokens[:-1])
    else:
        assert len(seq.tokens) == 12
    np.testing.assert_allclose(
        seq.logprobs or [], action_logprobs(client, start, seq.tokens), atol=1e-4
    )


def test_bad_model_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"config\.json") as info:
        create_local_training_client(LocalModelConfig(model_path=str(tmp_path)))
    assert str(tmp_path) in str(info.value)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="weights"):
        create_local_training_client(LocalModelConfig(model_path=str(tmp_path)))
    with pytest.raises(ValueError, match="not a directory"):
        create_local_training_client(LocalModelConfig(model_path=str(tmp_path / "missing")))
