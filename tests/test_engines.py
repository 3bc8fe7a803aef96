"""Training games sampled on serving engines (``trainer.engines``).

The settings are checked here without an engine. The rest runs a real vLLM server on
SmolLM2 (``make test-vllm``: marked ``slow`` and ``vllm``, skipped where no Python with
vLLM is found, ``$ARENA_VLLM_PYTHON`` or ``.venv-vllm``): the engine's logprobs of the
sampled tokens match the learner's, a step's adapter is served fresh (no keys and values
of the old weights), and a run whose engine is killed mid-run finishes every step. The
push's time is a benchmark figure (``python -m bench.engines``), never asserted here.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from tinker import types

from trainer.config import TrainConfig
from trainer.engines.run import engine_urls

ROOT = Path(__file__).resolve().parent.parent


def _vllm_python() -> str | None:
    for python in (os.environ.get("ARENA_VLLM_PYTHON"), str(ROOT / ".venv-vllm/bin/python")):
        if python and Path(python).exists():
            found = subprocess.run([python, "-c", "import vllm"], capture_output=True, check=False)
            if found.returncode == 0:
                return python
    return None


VLLM_PYTHON = _vllm_python()
needs_vllm = [
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.skipif(
        VLLM_PYTHON is None, reason="no Python with vLLM (make vllm, or set ARENA_VLLM_PYTHON)"
    ),
]


def test_engine_urls_are_read_and_checked() -> None:
    assert engine_urls("openai:http://a:8000/v1, http://b:8001/") == [
        "http://a:8000/v1",
        "http://b:8001/v1",
    ]
    with pytest.raises(ValueError, match="local, vllm or openai"):
        engine_urls("vllm://x")
    with pytest.raises(ValueError, match="http"):
        engine_urls("openai:ftp://x")


def test_engines_sample_a_real_models_lora_run_only() -> None:
    ok = TrainConfig(model="smollm2", lora_rank=16, sampler="vllm")
    ok.check_sampler()
    for bad in (
        TrainConfig(sampler="vllm"),  # the built-in byte-level model
        TrainConfig(model="smollm2", lora_rank=0, sampler="vllm"),  # full fine-tuning
        TrainConfig(model="smollm2", backend="tinker", sampler="openai:http://h/v1"),
    ):
        with pytest.raises(ValueError, match="real model's LoRA run"):
            bad.check_sampler()
    with pytest.raises(ValueError, match="engines must be at least 1"):
        TrainConfig(model="smollm2", lora_rank=16, sampler="vllm", engines=0).check_sampler()


# -- with a real engine ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("gguf")
    from trainer.engines.modeldir import engine_model_dir

    return engine_model_dir("smollm2", ROOT / "runs")


@pytest.fixture
async def engine(model_dir: Path, tmp_path: Path) -> AsyncIterator[Any]:
    from trainer.engines.pool import Engine, EnginePool
    from trainer.engines.server import VLLMServer

    assert VLLM_PYTHON is not None
    server = VLLMServer(model_dir, tmp_path / "engine.log", VLLM_PYTHON, kv_cache_gib=2)
    pool = EnginePool([Engine(server.url, server)])
    await pool.start()
    try:
        yield pool
    finally:
        await pool.close()


def _learner(tmp_path: Path) -> Any:
    from trainer.local import LocalModelConfig, create_local_training_client

    config = LocalModelConfig(
        model_path="smollm2", lora_rank=16, seed=0, checkpoint_dir=str(tmp_path / "ckpt")
    )
    return create_local_training_client(config)


def _prompts(client: Any) -> list[list[int]]:
    tokenizer = client.get_tokenizer()
    texts = [
        "You play tic-tac-toe as X. Cells 0-8; free: [0] [1] [2] [4] [8]. Your move?",
        "Name one colour of the rainbow, in one word.",
    ]
    prompts = []
    for text in texts:
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True
        )
        prompts.append(list(ids["input_ids"] if hasattr(ids, "keys") else ids))
    return prompts


async def _gap(engine_client: Any, learner_sampler: Any, prompts: list[list[int]]) -> float:
    """The mean absolute difference of the engine's and the learner's logprob of each
    token the engine sampled."""
    params = types.SamplingParams(max_tokens=8, temperature=1.0, seed=7)
    diffs: list[float] = []
    for prompt in prompts:
        answer = await engine_client.sample(types.ModelInput.from_ints(prompt), 4, params)
        for sequence in answer.sequences:
            full = types.ModelInput.from_ints(prompt + list(sequence.tokens))
            learner = await learner_sampler.compute_logprobs(full)
            tail = learner[len(prompt) :]
            diffs += [abs(a - b) for a, b in zip(sequence.logprobs, tail, strict=True)]
    return sum(diffs) / len(diffs)


async def _push(pool: Any, client: Any, step: int) -> Any:
    """The engines' sampling client of ``client``'s weights after ``step`` steps (the push's
    time is a benchmark figure: ``python -m bench.engines``)."""
    from trainer.engines.run import EngineRun

    return await EngineRun(pool, keep=2, report=lambda _line: None).sampler_after(client, step)


def _vllm(test: Any) -> Any:
    for mark in needs_vllm:
        test = mark(test)
    return test


@_vllm
async def test_the_engines_logprobs_are_the_learners_and_a_new_step_is_served_fresh(
    engine: Any, tmp_path: Path
) -> None:
    client = _learner(tmp_path)
    prompts = _prompts(client)
    sampler = await _push(engine, client, 0)
    learner = await client.save_weights_and_get_sampling_client()
    assert await _gap(sampler, learner, prompts) < 0.01
    # Train the adapter a few steps so its answers move, with the engine's prefix cache
    # warm from the old adapter on the same prompts: the new step's adapter (a new name
    # and directory) must be served with the new weights, never the old keys and values.
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(prompts[1][:-1]),
        loss_fn_inputs={
            "target_tokens": types.TensorData(data=prompts[1][1:], dtype="int64"),
            "weights": types.TensorData(data=[1.0] * (len(prompts[1]) - 1), dtype="float32"),
        },
    )
    for _ in range(3):
        client.forward_backward([datum], "cross_entropy")
        client.optim_step(types.AdamParams(learning_rate=5e-3))
    moved = await client.save_weights_and_get_sampling_client()
    old_vs_new = await _gap(sampler, moved, prompts)
    assert old_vs_new > 0.05  # the weights did move
    fresh = await _push(engine, client, 1)
    assert await _gap(fresh, moved, prompts) < 0.01


@_vllm
async def test_a_run_whose_engine_is_killed_finishes_every_step(tmp_path: Path) -> None:
    from trainer.train import Trainer

    assert VLLM_PYTHON is not None
    config = TrainConfig(
        model="smollm2",
        lora_rank=16,
        sampler="vllm",
        engine_python=VLLM_PYTHON,
        num_batches=3,
        batch_size=2,
        group_size=2,
        max_tokens=6,
        observation_format="compact",
        warmup_steps=0,
        eval_every=0,
        max_steps_off_policy=0,
        log_dir=str(tmp_path / "run"),
    )
    killed: list[int] = []
    trainer = Trainer(config)

    def kill_after_first_step(step: int, metrics: dict[str, float]) -> None:
        engines = trainer.engines
        if step == 0 and engines is not None and not killed:
            server = engines.pool.engines[0].server
            assert server is not None and server.process is not None
            killed.append(server.process.pid)
            server.process.kill()

    trainer.progress = kill_after_first_step
    records = await asyncio.wait_for(trainer.run(), timeout=1800)
    assert killed and [r.step for r in records] == [0, 1, 2]
    assert records[-1].metrics["sampler/engine_restarts"] >= 1


def test_a_python_without_vllm_is_refused_with_the_command_that_installs_it() -> None:
    import sys

    from trainer.engines.server import EngineStartError, vllm_python

    with pytest.raises(EngineStartError, match="make vllm"):
        vllm_python(sys.executable)  # the test environment has no vLLM


async def test_an_engine_that_exits_while_starting_fails_with_its_logs_last_lines(
    tmp_path: Path,
) -> None:
    from trainer.engines.pool import Engine, EnginePool
    from trainer.engines.server import EngineStartError, VLLMServer

    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'ValueError: no model at the path given' >&2\nexit 3\n")
    fake.chmod(0o755)
    server = VLLMServer(tmp_path / "no-model", tmp_path / "engine-0.log", str(fake))
    pool = EnginePool([Engine(server.url, server)])
    with pytest.raises(EngineStartError, match="exited with status 3") as failed:
        await pool.start()
    assert "no model at the path given" in str(failed.value)
    await pool.close()


async def test_engines_that_do_not_answer_stop_the_run_before_any_game(tmp_path: Path) -> None:
    from trainer.engines.pool import EngineError
    from trainer.engines.run import open_engines
    from trainer.engines.server import free_port

    config = TrainConfig(
        model="smollm2", lora_rank=16, sampler=f"openai:http://127.0.0.1:{free_port()}/v1"
    )
    with pytest.raises(EngineError, match="no engine answers"):
        await open_engines(config, tmp_path, lambda _line: None)
