"""``tinker.ServiceClient``'s surface, served by the local backend.

    service = LocalServiceClient(checkpoint_dir="runs/x/checkpoints")
    training = await service.create_lora_training_client("arena/byte-gpt2", rank=32)
    resumed = await service.create_training_client_from_state_with_optimizer(path)
    sampler = await service.create_sampling_client(model_path=sampler_path)

Every method has the signature of the real SDK's method of the same name (a test compares
them with ``inspect.signature``), so code written for Tinker (the cookbook's trainer, arena's
trainer) runs unchanged, and a wrong or unknown keyword fails here as it would there. Each
method returns what the SDK returns: an awaitable future (``LocalFuture``) from the plain
method, the object itself from the deprecated ``_async`` variant. Options the local backend
cannot honour (other optimizers, stability info) raise ValueError instead of being ignored.

Base models: ``arena/byte-gpt2`` (the built-in model, ``DEFAULT_LOCAL_MODEL``), a local
Hugging Face model directory, a ``.gguf`` file, a packaged model's name (``smollm2``: see
``arena.models``), or a name mapped to a directory in ``models``. Nothing is downloaded.
``create_lora_training_client(rank=r)`` trains a LoRA adapter of rank ``r`` through
``peft`` on the layers ``train_attn``, ``train_mlp`` and ``train_unembed`` choose;
``rank=0``, which Tinker does not offer, trains every weight instead.

Training runs and their metadata (``user_metadata``, base model, rank) are stored in
``<checkpoint_dir>/runs/<id>.json``, so ``create_rest_client()`` can answer
``get_training_run_by_tinker_path`` for a checkpoint after a restart, as Tinker's does.
"""

from __future__ import annotations

import datetime
import json
import os
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from tinker import types

from arena.models import PACKAGED_MODELS, is_model_name, resolve_model
from trainer.local.checkpoints import STATE_FILE, check_metadata, load_weights_copy
from trainer.local.config import LocalModelConfig
from trainer.local.futures import LocalClientFuture, LocalFuture
from trainer.local.sampler import LocalSamplingClient
from trainer.local.training import DEFAULT_LOCAL_MODEL, LocalTrainingClient

_BUILDERS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="arena-local-build")
"""Models are built and loaded here, never on the caller's thread (an event loop)."""


def _in_thread(build: Callable[[], Any]) -> LocalClientFuture[Any]:
    """A future of ``build()``, run on a builder thread; it raises what ``build`` raises."""
    return LocalClientFuture(_BUILDERS.submit(build))


def _done(value: Any) -> LocalClientFuture[Any]:
    future: Future[Any] = Future()
    future.set_result(value)
    return LocalClientFuture(future)


def _failed(exc: BaseException) -> LocalClientFuture[Any]:
    future: Future[Any] = Future()
    future.set_exception(exc)
    return LocalClientFuture(future)


class LocalServiceClient:
    """The local backend behind ``tinker.ServiceClient``'s methods (see the module doc)."""

    def __init__(
        self,
        config: LocalModelConfig | None = None,
        *,
        checkpoint_dir: str | os.PathLike[str] | None = None,
        models: Mapping[str, str] | None = None,
    ) -> None:
        """``config`` holds the settings every client gets (sizes of the built-in model,
        threads, batching); its ``model_path`` is replaced by the base model asked for.
        ``checkpoint_dir`` (default: ``config.checkpoint_dir``, else a temporary directory,
        removed when the process exits) holds every run's checkpoints. ``models`` maps
        extra base-model names to local model directories."""
        self.config = config if config is not None else LocalModelConfig()
        root = checkpoint_dir if checkpoint_dir is not None else self.config.checkpoint_dir
        if root is None:
            import atexit
            import shutil
            import tempfile

            root = tempfile.mkdtemp(prefix="arena-local-service-")
            # Temporary: removed when the process exits (pass checkpoint_dir to keep them).
            atexit.register(shutil.rmtree, root, ignore_errors=True)
        self.checkpoint_dir = Path(root)
        self.models = dict(models or {})

    # -- base models -----------------------------------------------------------------------
    def model_path(self, base_model: str) -> str | None:
        """The model directory ``base_model`` names (None: the built-in model).

        Raises ValueError for a name that is neither served here nor a model directory."""
        if base_model == DEFAULT_LOCAL_MODEL:
            return None
        if base_model in self.models:
            return self.models[base_model]
        if is_model_name(base_model):  # smollm2, FILE.gguf: ModelNotFound says what to do
            resolve_model(base_model)
            return base_model
        if Path(base_model).is_dir():
            return base_model
        served = ", ".join([DEFAULT_LOCAL_MODEL, *self.models]) or DEFAULT_LOCAL_MODEL
        raise ValueError(
            f"base model {base_model!r} is not served by the local backend: use one of "
            f"{served}, {', '.join(PACKAGED_MODELS)}, a .gguf file or a local Hugging Face "
            "model directory (nothing is downloaded)"
        )

    def _run_file(self, run_id: str) -> Path:
        return self.checkpoint_dir / "runs" / f"{run_id}.json"

    def _new_client(
        self,
        base_model: str,
        *,
        rank: int,
        seed: int | None,
        user_metadata: dict[str, str] | None,
        run_id: str | None = None,
        targets: tuple[str, ...] | None = None,
    ) -> LocalTrainingClient:
        if rank < 0:
            raise ValueError(f"rank must not be negative (0: every weight trains), got {rank}")
        metadata = check_metadata(user_metadata)
        run_id = run_id or uuid.uuid4().hex[:12]
        config = replace(
            self.config,
            model_path=self.model_path(base_model),
            seed=self.config.seed if seed is None else seed,
            checkpoint_dir=str(self.checkpoint_dir / run_id),
            lora_rank=rank,
            lora_targets=targets if targets is not None else self.config.lora_targets,
        )
        client = LocalTrainingClient(config, base_model=base_model)
        record = {
            "training_run_id": run_id,
            "base_model": base_model,
            "lora_rank": rank,
            "lora_targets": list(config.lora_targets),
            "user_metadata": metadata,
        }
        path = self._run_file(run_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=1))
        client.training_run_id = run_id  # type: ignore[attr-defined]
        return client

    def _state_info(self, path: str) -> dict[str, Any]:
        state_file = Path(path) / STATE_FILE
        if not state_file.is_file():
            raise ValueError(
                f"{path!r} is not a checkpoint of the local backend (no {STATE_FILE}); "
                "save one with save_state or save_weights_for_sampler"
            )
        info: dict[str, Any] = json.loads(state_file.read_text())
        return info

    # -- training clients ------------------------------------------------------------------
    def create_lora_training_client(
        self,
        base_model: str,
        rank: int = 32,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = True,
        user_metadata: dict[str, str] | None = None,
        optimizer: types.OptimizerConfig | None = None,
    ) -> LocalClientFuture[LocalTrainingClient]:
        """A future of a training client on ``base_model`` (see the module docstring):
        a LoRA adapter of ``rank`` on the attention, MLP and output layers as ``train_attn``,
        ``train_mlp`` and ``train_unembed`` say, or every weight for ``rank=0``. The future
        raises ValueError for an unknown base model, a negative rank, bad metadata, an
        optimizer other than Adam, or layers that the choice covers none of."""
        if optimizer is not None and not isinstance(optimizer, types.AdamOptimizerConfig):
            return _failed(
                ValueError(f"the local backend runs AdamW; got {type(optimizer).__name__}")
            )
        if not (train_mlp or train_attn or train_unembed):
            return _failed(ValueError("train_mlp, train_attn and train_unembed are all False"))
        targets = tuple(
            name
            for name, wanted in (
                ("attn", train_attn),
                ("mlp", train_mlp),
                ("unembed", train_unembed),
            )
            if wanted
        )
        return _in_thread(
            lambda: self._new_client(
                base_model, rank=rank, seed=seed, user_metadata=user_metadata, targets=targets
            )
        )

    async def create_lora_training_client_async(
        self,
        base_model: str,
        rank: int = 32,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = True,
        user_metadata: dict[str, str] | None = None,
        optimizer: types.OptimizerConfig | None = None,
    ) -> LocalTrainingClient:
        """``create_lora_training_client``, awaited: the client itself."""
        return await self.create_lora_training_client(
            base_model, rank, seed, train_mlp, train_attn, train_unembed, user_metadata, optimizer
        )

    def _from_state(
        self,
        path: str,
        base_model: str | None,
        user_metadata: dict[str, str] | None,
        optimizer: bool,
    ) -> LocalClientFuture[LocalTrainingClient]:
        return _in_thread(lambda: self._from_state_now(path, base_model, user_metadata, optimizer))

    def _from_state_now(
        self,
        path: str,
        base_model: str | None,
        user_metadata: dict[str, str] | None,
        optimizer: bool,
    ) -> LocalTrainingClient:
        info = self._state_info(path)
        model = base_model or info.get("base_model") or DEFAULT_LOCAL_MODEL
        run = self._run_of(path)
        metadata = dict(run.get("user_metadata") or {}) if run else {}
        metadata.update(check_metadata(user_metadata))
        # The checkpoint's own LoRA settings (older checkpoints trained every weight).
        targets = info.get("lora_targets")
        client = self._new_client(
            model,
            rank=int(info.get("lora_rank", 0)),
            seed=info.get("seed"),
            user_metadata=metadata,
            run_id=run.get("training_run_id") if run else None,
            targets=tuple(targets) if targets else None,
        )
        restore = client.load_state_with_optimizer if optimizer else client.load_state
        restore(path).result()
        return client

    def create_training_client_from_state(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
        optimizer: types.OptimizerConfig | None = None,
    ) -> LocalClientFuture[LocalTrainingClient]:
        """A future of a training client with the weights saved at ``path`` and a fresh
        optimizer (Tinker's semantics). The future raises ValueError when ``path`` is not
        a checkpoint of this backend or does not fit the model."""
        if optimizer is not None and not isinstance(optimizer, types.AdamOptimizerConfig):
            return _failed(
                ValueError(f"the local backend runs AdamW; got {type(optimizer).__name__}")
            )
        return self._from_state(path, base_model, user_metadata, optimizer=False)

    async def create_training_client_from_state_async(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
        optimizer: types.OptimizerConfig | None = None,
    ) -> LocalTrainingClient:
        """``create_training_client_from_state``, awaited: the client itself."""
        return await self.create_training_client_from_state(
            path, base_model, user_metadata, weights_access_token, optimizer
        )

    def create_training_client_from_state_with_optimizer(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
    ) -> LocalClientFuture[LocalTrainingClient]:
        """A future of a training client that resumes exactly from ``path``: weights,
        optimizer state and step count. Raises as ``create_training_client_from_state``."""
        return self._from_state(path, base_model, user_metadata, optimizer=True)

    async def create_training_client_from_state_with_optimizer_async(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
    ) -> LocalTrainingClient:
        """``create_training_client_from_state_with_optimizer``, awaited."""
        return await self.create_training_client_from_state_with_optimizer(
            path, base_model, user_metadata, weights_access_token
        )

    # -- sampling clients ------------------------------------------------------------------
    def create_sampling_client(
        self,
        model_path: str | None = None,
        base_model: str | None = None,
        retry_config: Any = None,
        record_stability_info: bool = False,
    ) -> LocalClientFuture[LocalSamplingClient]:
        """A future of a sampling client over saved weights (``model_path``) or a base
        model's initial weights (``base_model``); give one. The future raises ValueError
        for neither or both, an unknown model, or weights that do not fit."""
        return _in_thread(lambda: self._sampler_now(model_path, base_model, record_stability_info))

    def _sampler_now(
        self, model_path: str | None, base_model: str | None, record_stability_info: bool
    ) -> LocalSamplingClient:
        if (model_path is None) == (base_model is None):
            raise ValueError("give model_path or base_model, not both or neither")
        if record_stability_info:
            raise ValueError("the local backend does not support record_stability_info=True")
        info: dict[str, Any] = {}
        if model_path is not None:
            info = self._state_info(model_path)
            name = str(info.get("base_model") or DEFAULT_LOCAL_MODEL)
        else:
            assert base_model is not None
            name = base_model
        config = replace(self.config, model_path=self.model_path(name))
        rank = int(info.get("lora_rank", 0))
        if rank:
            # The base of an adapter loads as LoRA's base does (in the compute dtype), the
            # built-in model's from the seed it was trained from.
            config = replace(config, lora_rank=rank, seed=int(info.get("seed", config.seed)))
        from trainer.local.config import load_model

        loaded = load_model(config)
        if model_path is not None:
            loaded = load_weights_copy(loaded, model_path)
        client = LocalSamplingClient(
            loaded,
            max_batch_size=config.max_batch_size,
            batch_window_s=config.batch_window_s,
            batch_quiet_s=config.batch_quiet_s,
            seed=config.seed,
            name=Path(model_path).name if model_path else name,
            base_model=name,
            prefix_cache_mb=config.prefix_cache_mb,
        )
        return client

    async def create_sampling_client_async(
        self,
        model_path: str | None = None,
        base_model: str | None = None,
        retry_config: Any = None,
        record_stability_info: bool = False,
    ) -> LocalSamplingClient:
        """``create_sampling_client``, awaited: the client itself."""
        return await self.create_sampling_client(
            model_path, base_model, retry_config, record_stability_info
        )

    # -- runs ------------------------------------------------------------------------------
    def _run_of(self, path: str) -> dict[str, Any] | None:
        """The run that saved the checkpoint at ``path`` (its directory is the run id)."""
        resolved = Path(path).resolve()
        for parent in resolved.parents:
            run_file = self._run_file(parent.name)
            if parent.parent == self.checkpoint_dir.resolve() and run_file.is_file():
                record: dict[str, Any] = json.loads(run_file.read_text())
                return record
        return None

    def create_rest_client(self) -> LocalRestClient:
        """The REST client's run lookups, over this service's runs."""
        return LocalRestClient(self)


class LocalRestClient:
    """``tinker.RestClient``'s training-run lookups for a ``LocalServiceClient``."""

    def __init__(self, service: LocalServiceClient) -> None:
        self._service = service

    def get_training_run_by_tinker_path(
        self, tinker_path: str, access_scope: Literal["owned", "accessible"] = "owned"
    ) -> LocalFuture[types.TrainingRun]:
        """A future of the run that saved the checkpoint at ``tinker_path``; it raises
        ValueError when no run of this service saved it."""
        run = self._service._run_of(tinker_path)
        if run is None:
            return _failed(ValueError(f"no local training run saved {tinker_path!r}"))
        return _done(
            types.TrainingRun(
                training_run_id=str(run["training_run_id"]),
                base_model=str(run["base_model"]),
                model_owner="local",
                is_lora=int(run.get("lora_rank", 32)) > 0,
                lora_rank=int(run.get("lora_rank", 32)),
                last_request_time=datetime.datetime.now(datetime.UTC),
                user_metadata=dict(run.get("user_metadata") or {}) or None,
            )
        )

    async def get_training_run_by_tinker_path_async(
        self, tinker_path: str, access_scope: Literal["owned", "accessible"] = "owned"
    ) -> types.TrainingRun:
        """``get_training_run_by_tinker_path``, awaited: the run itself."""
        return await self.get_training_run_by_tinker_path(tinker_path, access_scope)
