"""Each token computed once: the sampler's prefix cache and the training pass's shared
prefixes give what the plain passes give, and count what they saved."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
import torch
from tinker import types

from tests.tiny_models import write_tiny_model_dir
from trainer.local import LocalModelConfig, load_model
from trainer.local.prefix_cache import PrefixCache
from trainer.local.sampler import LocalSamplingClient
from trainer.local.service import LocalServiceClient
from trainer.local.shared_prefix import Cluster, plan


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model_dir(tmp_path_factory.mktemp("models") / "llama", "llama")


def _kv(tokens: int, value: float = 0.0) -> torch.Tensor:
    return torch.full((2, 2, 1, tokens, 4), value)  # layers, k/v, heads, time, dim


def test_a_prompt_reuses_whole_blocks_and_computes_its_last_token() -> None:
    cache = PrefixCache(max_bytes=1 << 20, block=4)
    tokens = list(range(10))
    cache.store(tokens, torch.arange(10.0).expand(2, 2, 1, 10).unsqueeze(-1).expand(2, 2, 1, 10, 4))
    assert len(cache) == 2  # two whole blocks of 4; the last 2 tokens are not a block
    found = cache.lookup([*tokens[:9], 99])
    assert found is not None and found.shape[3] == 8
    assert found[0, 0, 0, :, 0].tolist() == [float(i) for i in range(8)]
    # exactly 8 tokens: the last one must be computed, so only the first block is reused
    found = cache.lookup(tokens[:8])
    assert found is not None and found.shape[3] == 4
    assert cache.lookup([1, 2, 3, 4, 5]) is None  # a prefix matches from the first token only
    assert cache.missing_from([*tokens[:8], 50, 51, 52, 53]) == 8


def test_the_cache_stays_within_its_bytes_and_drops_leaves_first() -> None:
    one_block = _kv(4).numel() * 4
    cache = PrefixCache(max_bytes=3 * one_block, block=4)
    trunk = [1, 2, 3, 4]
    cache.store([*trunk, 5, 6, 7, 8], _kv(8))
    cache.store([*trunk, 9, 9, 9, 9], _kv(8))  # the trunk is shared: one more block
    assert len(cache) == 3 and cache.bytes == 3 * one_block
    cache.store([*trunk, 7, 7, 7, 7], _kv(8))
    assert cache.bytes <= cache.max_bytes and cache.evicted_blocks == 1
    # the oldest leaf went; the trunk, touched by every store, stays
    assert cache.lookup([*trunk, 0]) is not None
    assert cache.lookup([*trunk, 5, 6, 7, 8, 0]).shape[3] == 4  # type: ignore[union-attr]
    assert cache.lookup([*trunk, 7, 7, 7, 7, 0]).shape[3] == 8  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="must not be negative"):
        PrefixCache(max_bytes=-1)


def _turns(seed: int) -> list[list[list[int]]]:
    """Three rounds of 6 prompts: each round's prompt extends the previous one (a seat's
    next turn), and every prompt starts with the same 40 tokens (the rules)."""
    rng = random.Random(seed)
    rules = [rng.randrange(10, 300) for _ in range(40)]
    prompts = [
        rules + [rng.randrange(10, 300) for _ in range(rng.randrange(1, 30))] for _ in range(6)
    ]
    rounds = [prompts]
    for _ in range(2):
        prompts = [
            p + [rng.randrange(10, 300) for _ in range(rng.randrange(5, 40))] for p in prompts
        ]
        rounds.append(prompts)
    return rounds


def _sample(
    client: LocalSamplingClient, rounds: list[list[list[int]]]
) -> list[types.SampleResponse]:
    async def go(prompts: list[list[int]], r: int) -> list[types.SampleResponse]:
        return await asyncio.gather(
            *(
                client.sample_async(
                    types.ModelInput.from_ints(p),
                    1,
                    types.SamplingParams(max_tokens=5, temperature=1.0, seed=100 * r + i),
                )
                for i, p in enumerate(prompts)
            )
        )

    return [resp for r, prompts in enumerate(rounds) for resp in asyncio.run(go(prompts, r))]


def test_the_sampler_reuses_a_seats_earlier_turns_and_samples_the_same(llama_dir: Path) -> None:
    loaded = load_model(LocalModelConfig(model_path=str(llama_dir), device="cpu"))
    rounds = _turns(0)
    plain = LocalSamplingClient(loaded, prefix_cache_mb=0)
    reusing = LocalSamplingClient(loaded, prefix_cache_mb=64)
    want, got = _sample(plain, rounds), _sample(reusing, rounds)
    for a, b in zip(want, got, strict=True):
        assert a.sequences[0].tokens == b.sequences[0].tokens
        assert a.sequences[0].logprobs == pytest.approx(b.sequences[0].logprobs, abs=1e-4)
    total = sum(len(p) for prompts in rounds for p in prompts)
    assert plain.stats.tokens_computed == plain.stats.prompt_tokens == total
    assert plain.stats.tokens_reused == 0
    stats = reusing.stats
    assert stats.prompt_tokens == total
    assert stats.tokens_computed + stats.tokens_reused == total
    assert stats.tokens_reused >= total // 3  # later rounds re-read mostly cached tokens


def _datum(tokens: list[int], answer_from: int, rng: random.Random) -> types.Datum:
    n = len(tokens)
    advantages = [0.0] * answer_from + [rng.uniform(-1, 1)] * (n - answer_from)
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens),
        loss_fn_inputs={
            "target_tokens": types.TensorData.from_torch(torch.tensor([*tokens[1:], 1])),
            "logprobs": types.TensorData.from_torch(torch.full((n,), -2.0)),
            "advantages": types.TensorData.from_torch(torch.tensor(advantages)),
        },
    )


def test_training_computes_a_shared_prefix_once_with_the_same_loss_and_gradients(
    llama_dir: Path,
) -> None:
    rng = random.Random(1)
    rules = {s: [rng.randrange(10, 300) for _ in range(60)] for s in (0, 1)}
    data = []
    for i in range(7):
        own = [rng.randrange(10, 300) for _ in range(rng.randrange(5, 30))]
        prompt = rules[i % 2] + own
        data.append(
            _datum(prompt + [rng.randrange(10, 300) for _ in range(3)], len(prompt) - 1, rng)
        )
    found = {}
    for share in (False, True):
        service = LocalServiceClient(LocalModelConfig(device="cpu", train_shared_prefix=share))
        client = service.create_lora_training_client(str(llama_dir), rank=0).result()
        out = client.forward_backward(data, "importance_sampling").result()
        grads = [p.grad.clone() for p in client.trainable_parameters() if p.grad is not None]
        found[share] = (out, grads)
        client.close()
    (plain, plain_grads), (shared, shared_grads) = found[False], found[True]
    assert shared.metrics["loss:sum"] == pytest.approx(plain.metrics["loss:sum"], rel=1e-5)
    for a, b in zip(plain.loss_fn_outputs, shared.loss_fn_outputs, strict=True):
        assert torch.allclose(a["logprobs"].to_torch(), b["logprobs"].to_torch(), atol=1e-5)
    assert len(plain_grads) == len(shared_grads) > 0
    for a, b in zip(plain_grads, shared_grads, strict=True):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)
    total = sum(d.model_input.length for d in data)
    assert "tokens_computed:sum" not in plain.metrics
    reused = shared.metrics["tokens_reused:sum"]
    assert shared.metrics["tokens_computed:sum"] + reused == total
    assert reused >= 60 * 5  # the two rules prefixes, each computed once for its datums


def test_no_prefix_is_shared_past_a_weighed_position() -> None:
    rows = [[*list(range(100)), 1], [*list(range(100)), 2], [*list(range(100)), 3]]
    assert plan(rows, [101, 101, 101])[0].length == 100
    clusters = plan(rows, [101, 40, 101])
    assert clusters and clusters[0].length == 40
    # a datum weighed under the shortest prefix worth a pass shares nothing, splits nothing
    assert plan(rows, [101, 10, 101]) == [Cluster(100, (0, 2))]
    assert plan([rows[0]], [101]) == []  # one datum alone shares nothing


def test_prompts_of_one_batch_that_start_alike_compute_their_start_once(llama_dir: Path) -> None:
    loaded = load_model(LocalModelConfig(model_path=str(llama_dir), device="cpu"))
    first = _turns(2)[:1]  # six prompts, one batch, nothing cached: the same 40-token rules
    plain, reusing = (LocalSamplingClient(loaded, prefix_cache_mb=mb) for mb in (0, 64))
    want, got = _sample(plain, first), _sample(reusing, first)
    for a, b in zip(want, got, strict=True):
        assert a.sequences[0].tokens == b.sequences[0].tokens
    stats = reusing.stats
    assert stats.tokens_computed + stats.tokens_reused == stats.prompt_tokens
    # the rules' whole blocks computed once, the others take what their padding allows
    assert 0 < stats.tokens_reused <= 5 * 32
