"""How a run's training client starts: resumed from its last checkpoint (optimizer state
included), reloaded from the cached warm-up, warmed up now, or fresh; then, with
``sft_from``, taught recorded answers (``trainer.sft``) before RL.

The built-in model starts from random weights; its format warm-up (``trainer.warmup``) is
cached under ``<runs>/.warmup-cache`` by a key of everything it depends on, so later runs
with the same settings reuse it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arena.renderers import RendererConfig
from storage.rundir import RunDirectory
from trainer.backend import ServiceClientLike, TrainingClientLike
from trainer.config import TrainConfig
from trainer.evaluate import Headline
from trainer.progress import ProgressFactory, no_bars
from trainer.service import RENDERER_METADATA_KEY, base_model_name, renderer_for, renderer_name
from trainer.warmup import collect_examples, warm_up


def _warmup_key(config: TrainConfig) -> str:
    parts = {
        "game": config.game_id,
        "players": config.num_players,
        "format": config.resolved_format(),
        "model": config.model,
        "steps": config.resolved_warmup_steps(),
        "games": config.warmup_games,
        "lr": config.warmup_learning_rate,
        "seed": config.seed,
        # 3: the seat-relative compact views of tic-tac-toe and Connect Four; 4: answers end
        # with the renderer's end-of-turn token
        "version": 4,
    }
    if config.resolved_lora_rank():  # keys of full fine-tuning runs stay as they were
        parts["lora_rank"] = config.resolved_lora_rank()
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def cached_warmup(config: TrainConfig, cache_dir: Path) -> dict[str, Any] | None:
    """The cached warm-up state for this configuration, if one exists."""
    index = cache_dir / "warmup.json"
    cached = json.loads(index.read_text()) if index.exists() else {}
    entry = cached.get(_warmup_key(config))
    if entry is not None and Path(entry["path"]).exists():
        return dict(entry)
    return None


async def run_warmup(
    config: TrainConfig,
    client: TrainingClientLike,
    renderer: RendererConfig,
    cache_dir: Path,
    report: Callable[[str], None],
    bars: ProgressFactory = no_bars,
) -> dict[str, float]:
    """Warm the model up on random legal moves and cache the result for later runs."""
    key = _warmup_key(config)
    steps = config.resolved_warmup_steps()
    took = (
        f"about {max(10, round(steps / 13, -1)):.0f} s on 2 cores; " if config.builtin_model else ""
    )
    report(
        f"warm-up: {steps} supervised steps on random legal moves "
        f"({took}cached in {cache_dir} for later runs)"
    )
    started = time.perf_counter()
    examples = []
    for game_id in config.games:  # a multi-game run warms up on every game at once
        examples += await collect_examples(
            config.match_settings(game_id, renderer),
            config.warmup_games,
            seed=config.seed + 777,
            progress=bars,
        )
    losses = await warm_up(
        client,
        examples,
        steps=steps,
        learning_rate=config.warmup_learning_rate,
        seed=config.seed,
        progress=bars,
    )
    saved = Path((await client.save_state(f"warmup-{key}")).path)
    cache_dir.mkdir(parents=True, exist_ok=True)
    # Keep the cached state apart from this run's files, which users delete freely.
    path = str(cache_dir / saved.name)
    if saved.is_dir():
        shutil.copytree(saved, path, dirs_exist_ok=True)
    else:
        shutil.copy2(saved, path)
    index = cache_dir / "warmup.json"
    cached = json.loads(index.read_text()) if index.exists() else {}
    cached[key] = {"path": path, "loss": losses[-1] if losses else 0.0}
    index.write_text(json.dumps(cached, indent=1))
    seconds = time.perf_counter() - started
    report(
        f"warm-up: {len(examples)} examples, {len(losses)} steps, "
        f"loss {losses[0]:.3f} -> {losses[-1]:.3f} in {seconds:.0f} s"
    )
    return {
        "warmup/loss_first": losses[0] if losses else 0.0,
        "warmup/loss_final": losses[-1] if losses else 0.0,
        "warmup/seconds": seconds,
        "warmup/examples": float(len(examples)),
    }


@dataclass
class Opened:
    """A run's training client, and where the run stands."""

    client: Any
    start: int
    """The first loop step to play."""
    metadata: dict[str, str]
    """The checkpoints' ``user_metadata`` (renderer, base model, backend, game)."""
    updates_done: int = 0
    """Optimizer steps the weights have taken."""
    kl_reference_path: str | None = None
    """The KL reference's sampler weights (None without the KL penalty)."""
    best: Headline | None = None
    """The best headline figure so far (a resumed run's)."""


def run_metadata(config: TrainConfig) -> dict[str, str]:
    """What every checkpoint of the run carries as ``user_metadata``."""
    return {
        RENDERER_METADATA_KEY: renderer_name(config),
        "base_model": base_model_name(config),
        "arena_backend": config.backend,
        "arena_game": config.game_id,
    }


def _best_of(run_dir: RunDirectory) -> Headline | None:
    best = run_dir.best()
    if best is None or not isinstance(best.get("best_key"), str):
        return None
    key = str(best["best_key"])
    name = key.rsplit("/", 1)[-1]
    return Headline(key, float(best[name]), bool(best.get("higher_is_better", True)))


async def open_training_client(
    config: TrainConfig,
    service: ServiceClientLike,
    run_dir: RunDirectory,
    *,
    resume: bool,
    report: Callable[[str], None],
    bars: ProgressFactory = no_bars,
    database: Any = None,
) -> Opened:
    """The training client and the first step: resumed with its optimizer state (a
    supervised warm start done before is in it, not done again), or reloaded from the
    cached warm-up, warmed up now, or fresh, then taught ``sft_from``'s answers
    (``run_sft``; a ``db:`` source reads ``database``, else the config's ``db``). With the
    KL penalty, a fresh run saves its starting weights (after those) as the KL
    reference."""
    metadata = run_metadata(config)
    checkpoint = run_dir.last_state() if resume else None
    if resume and checkpoint is None:
        report(f"--resume: no checkpoint in {run_dir.path}; starting from scratch")
        run_dir.drop_metrics_from(first_logged_step(config))  # warm-up and SFT again
    if checkpoint is not None:
        client = await service.create_training_client_from_state_with_optimizer(
            checkpoint["state_path"], user_metadata=metadata
        )
        report(
            f"resumed from checkpoint {checkpoint['step']} ({checkpoint['state_path']}), "
            "optimizer state included"
        )
        regularize(config, client)
        return Opened(
            client,
            start=int(checkpoint.get("next_step", checkpoint["step"])),
            metadata=metadata,
            updates_done=int(checkpoint["step"]),
            kl_reference_path=checkpoint.get("kl_reference_path"),
            best=_best_of(run_dir),
        )
    # A real model's pretraining knows nothing of the compact view's format: it warms up too.
    learns_format = config.model is None or config.resolved_format() == "compact"
    wants_warmup = config.backend == "local" and learns_format and config.resolved_warmup_steps()
    cache_dir = run_dir.path.parent / ".warmup-cache"
    cached = cached_warmup(config, cache_dir) if wants_warmup else None
    if cached is not None:
        client = await service.create_training_client_from_state(
            cached["path"], user_metadata=metadata
        )
        report(f"warm-up: reused {cached['path']}")
        warm = {"warmup/loss_final": cached["loss"], "warmup/cached": 1.0}
        run_dir.append_metrics(first_logged_step(config), warm)
    else:
        client = await service.create_lora_training_client(
            base_model_name(config),
            rank=config.resolved_lora_rank(),
            seed=config.seed,
            user_metadata=metadata,
        )
        if wants_warmup:
            renderer = renderer_for(config, client.get_tokenizer())
            warm = await run_warmup(config, client, renderer, cache_dir, report, bars)
            run_dir.append_metrics(first_logged_step(config), warm)
    if config.sft_from is not None:
        await run_sft(config, client, run_dir, database, report, bars)
    regularize(config, client)
    opened = Opened(client, start=0, metadata=metadata)
    if config.resolved_kl_coef() > 0:
        saved = await client.save_weights_for_sampler("kl-reference")
        opened.kl_reference_path = str(saved.path)
    return opened


def first_logged_step(config: TrainConfig) -> int:
    """The step of the first metrics row written before RL: the warm-up's row, before the
    rows of the ``sft_steps`` supervised steps (steps -``sft_steps`` to -1), RL's from 0
    on; so the rows' steps grow through the file."""
    return -1 - (config.sft_steps if config.sft_from is not None else 0)


async def run_sft(
    config: TrainConfig,
    client: Any,
    run_dir: RunDirectory,
    database: Any,
    report: Callable[[str], None],
    bars: ProgressFactory = no_bars,
) -> None:
    """The supervised warm start (``trainer.sft``), each step's metrics (``sft/loss``,
    ``sft/examples``, ``sft/tokens``) logged as a row at steps -``sft_steps`` to -1."""
    from trainer.sft import supervised_warm_start

    def log(i: int, metrics: dict[str, float]) -> None:
        run_dir.append_metrics(i - config.sft_steps, metrics)

    renderer = renderer_for(config, client.get_tokenizer())
    await supervised_warm_start(
        config, client, renderer, database=database, report=report, bars=bars, on_step=log
    )


def regularize(config: TrainConfig, client: Any) -> None:
    """Turn on the exact KL toward the magnet (``TrainConfig.decision_kl``) where the run
    asks for it; a resumed client gets its checkpoint's magnet back."""
    settings = config.decision_kl()
    if settings is not None:
        client.regularize(settings)


def settle_run_name(config: TrainConfig, run_dir: RunDirectory, resume: bool) -> TrainConfig:
    """The config with the run's name settled: a resumed run keeps the name it was started
    with (a different ``run_name`` is refused: its checkpoints and matches are stored under
    the first); a new run is named ``run_name`` or its log dir's name. Raises ValueError."""
    stored = run_dir.config().get("run_name") if resume else None
    if stored and config.run_name and config.run_name != stored:
        raise ValueError(
            f"{run_dir.path} holds the run {stored!r}; --run-name {config.run_name!r}"
            " would rename it: drop --run-name to resume it"
        )
    name = stored or config.run_name or run_dir.path.name
    return dataclasses.replace(config, run_name=name)


async def kl_reference(config: TrainConfig, service: ServiceClientLike, path: str | None) -> Any:
    """The KL reference's sampler (None without the KL penalty). Raises ValueError when
    the penalty is on but the run has no reference (a resumed run started without it)."""
    if config.resolved_kl_coef() <= 0:
        return None
    if path is None:
        raise ValueError(
            "kl_penalty_coef > 0, but the resumed run has no KL reference "
            "(it was started without the KL penalty)"
        )
    return await service.create_sampling_client(model_path=path)
