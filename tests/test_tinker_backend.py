"""The tinker backend's code path, against a fake service with Tinker's methods.

The hosted service cannot be reached here. The fake has the same methods as
``tinker.ServiceClient`` / ``TrainingClient`` and answers with real ``tinker.types``
(it runs a tiny local Hugging Face model), so the trainer's real Tinker path runs:
``create_lora_training_client_async``, the tokenizer from the training client with its
chat template, ``forward_backward_async`` / ``optim_step_async`` futures, sampling
clients and ``save_state_async``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tinker import types

from tests.test_local_backend import write_tiny_model_dir
from trainer.config import TrainConfig
from trainer.local import LocalModelConfig, LocalTrainingClient, create_local_training_client
from trainer.train import Trainer


class FakeTrainingClient:
    """Tinker's TrainingClient methods, served by a local model; records the calls."""

    def __init__(self, inner: LocalTrainingClient, calls: list[tuple[str, Any]]) -> None:
        self.inner = inner
        self.calls = calls

    async def forward_backward_async(
        self, data: list[types.Datum], loss_fn: str, loss_fn_config: Any = None
    ) -> Any:
        assert all(isinstance(d, types.Datum) for d in data)
        self.calls.append(("forward_backward", loss_fn))
        return await self.inner.forward_backward_async(data, loss_fn, loss_fn_config)

    async def optim_step_async(self, adam_params: types.AdamParams) -> Any:
        assert isinstance(adam_params, types.AdamParams)
        self.calls.append(("optim_step", adam_params.learning_rate))
        return await self.inner.optim_step_async(adam_params)

    async def save_weights_and_get_sampling_client_async(self, name: str | None = None) -> Any:
        self.calls.append(("sampler", name))
        return await self.inner.save_weights_and_get_sampling_client_async(name)

    async def save_state_async(self, name: str) -> Any:
        self.calls.append(("save_state", name))
        return await self.inner.save_state_async(name)

    async def load_state_async(self, path: str) -> Any:
        return await self.inner.load_state_async(path)

    def get_tokenizer(self) -> Any:
        return self.inner.get_tokenizer()


class FakeServiceClient:
    """``tinker.ServiceClient``'s ``create_lora_training_client_async``, locally."""

    def __init__(self, model_dir: Path, checkpoints: Path) -> None:
        self.model_dir = model_dir
        self.checkpoints = checkpoints
        self.calls: list[tuple[str, Any]] = []

    async def create_lora_training_client_async(
        self, base_model: str, rank: int = 32, **_: Any
    ) -> FakeTrainingClient:
        self.calls.append(("create_lora_training_client", (base_model, rank)))
        inner = create_local_training_client(
            LocalModelConfig(model_path=str(self.model_dir), checkpoint_dir=str(self.checkpoints))
        )
        return FakeTrainingClient(inner, self.calls)


@pytest.mark.slow
async def test_tinker_path_trains_against_the_fake_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TINKER_API_KEY", "test-key")
    model_dir = tmp_path / "base-model"
    write_tiny_model_dir(model_dir)
    service = FakeServiceClient(model_dir, tmp_path / "ckpt")
    config = TrainConfig(
        backend="tinker",
        model=str(model_dir),
        log_dir=str(tmp_path / "run"),
        steps=2,
        groups_per_batch=2,
        games_per_group=2,
        observation_format="compact",
        max_tokens=4,
        eval_every=0,
        save_every=1,
        drop_constant_reward_groups=False,
        db="",
    )
    records = await Trainer(config, service_client=service).run()
    assert [r.step for r in records] == [0, 1]
    assert service.calls[0] == ("create_lora_training_client", (str(model_dir), 32))
    kinds = [c[0] for c in service.calls]
    assert kinds.count("save_state") == 2
    assert kinds.count("forward_backward") == 2
    assert ("forward_backward", "importance_sampling") in service.calls
    assert kinds.count("optim_step") == 2
    checkpoints = [
        json.loads(line)
        for line in (tmp_path / "run" / "checkpoints.jsonl").read_text().splitlines()
    ]
    assert [c["step"] for c in checkpoints] == [0, 1]
    assert all(Path(c["state_path"]).exists() for c in checkpoints)
    for record in records:
        assert record.metrics["env/all/aborted"] == 0
