"""The self-play training loop, in the Tinker cookbook's order.

For each batch: build env groups from the dataset, roll them all out concurrently with the
current sampler, drop aborted matches, compute advantages, build datums,
``forward_backward(datums, loss_fn)``, ``optim_step(adam)``, then a fresh sampler from the
new weights. Every ``eval_every`` steps the policy plays fixed opponents; every
``save_every`` steps the state is saved. The run's log directory holds ``config.json``,
``metrics.jsonl`` (cookbook metric names) and ``checkpoints.jsonl``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import shutil
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinker import types

from arena.renderers import ObservationFormat, RendererConfig, register_tokenizer
from arena.rollouts import TokenPolicy, do_group_rollout
from arena.types import EnvGroupBuilder, TrajectoryGroup, metrics_mean
from games.session import SessionLimits
from trainer.backend import (
    SamplerPolicy,
    TinkerSettings,
    TrainingClientLike,
    check_tinker_key,
    create_tinker_training_client,
    resolve,
    saved_path,
)
from trainer.config import TrainConfig
from trainer.data import RoleBaseline, groups_to_datums, prepare_group, weighted_tokens
from trainer.dataset import SelfPlayDataset
from trainer.evaluate import default_opponents, evaluate
from trainer.warmup import collect_examples, warm_up

logger = logging.getLogger("arena.train")


@dataclass
class StepRecord:
    """What one training step did."""

    step: int
    metrics: dict[str, float] = field(default_factory=dict)


class MetricsLog:
    """Appends one JSON object per step to ``metrics.jsonl``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, step: int, metrics: dict[str, float]) -> None:
        """Append the step's metrics."""
        with self.path.open("a") as f:
            f.write(json.dumps({"step": step, **metrics}, sort_keys=True) + "\n")


def last_checkpoint(log_dir: Path) -> dict[str, Any] | None:
    """The newest entry of ``checkpoints.jsonl``, or None."""
    path = log_dir / "checkpoints.jsonl"
    if not path.exists():
        return None
    last = None
    for line in path.read_text().splitlines():
        if line.strip():
            last = json.loads(line)
    return last


def renderer_for(config: TrainConfig, client: TrainingClientLike) -> RendererConfig:
    """The renderer config matching the model's tokenizer."""
    if config.backend == "local" and config.model is None:
        return RendererConfig(name="bytes")
    # Prompts go through the chat template of the tokenizer the training client uses.
    name = config.model or ""
    register_tokenizer(name, client.get_tokenizer())
    return RendererConfig(name="chat", tokenizer_path=name)


async def make_training_client(
    config: TrainConfig, service_client: Any = None
) -> TrainingClientLike:
    """The backend's training client. Raises BackendError (e.g. a missing API key)."""
    if config.backend == "tinker":
        settings = TinkerSettings(base_model=config.model or "")
        return await create_tinker_training_client(settings, service_client)
    from trainer.local import LocalModelConfig, create_local_training_client

    model_config = LocalModelConfig(
        model_path=config.model,
        seed=config.seed,
        checkpoint_dir=str(Path(config.log_dir) / "checkpoints"),
    )
    return create_local_training_client(model_config)


def _warmup_key(config: TrainConfig) -> str:
    parts = {
        "game": config.game_id,
        "players": config.num_players,
        "format": config.resolved_format(),
        "model": config.model,
        "steps": config.warmup_steps,
        "games": config.warmup_games,
        "lr": config.warmup_learning_rate,
        "seed": config.seed,
        "version": 1,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


async def run_warmup(
    config: TrainConfig,
    client: TrainingClientLike,
    renderer: RendererConfig,
    cache_dir: Path,
    report: Callable[[str], None],
) -> dict[str, float]:
    """Warm the model up on random legal moves, reusing a cached result when one exists."""
    key = _warmup_key(config)
    index = cache_dir / "warmup.json"
    cached = json.loads(index.read_text()) if index.exists() else {}
    if key in cached and Path(cached[key]["path"]).exists():
        await resolve(await client.load_state_async(cached[key]["path"]))
        report(f"warm-up: reused {cached[key]['path']}")
        return {"warmup/loss_final": cached[key]["loss"], "warmup/cached": 1.0}
    report(
        f"warm-up: {config.warmup_steps} supervised steps on random legal moves "
        f"(about a minute or two here; cached in {cache_dir} for later runs)"
    )
    started = time.perf_counter()
    examples = await collect_examples(
        config.game_id,
        config.warmup_games,
        num_players=config.num_players,
        seed=config.seed + 777,
        renderer=renderer,
        observation_format=config.resolved_format(),
    )
    losses = await warm_up(
        client,
        examples,
        steps=config.warmup_steps,
        learning_rate=config.warmup_learning_rate,
        seed=config.seed,
    )
    saved = Path(saved_path(await resolve(await client.save_state_async(f"warmup-{key}"))))
    cache_dir.mkdir(parents=True, exist_ok=True)
    # Keep the cached state apart from this run's files, which users delete freely.
    path = str(cache_dir / saved.name)
    if saved.is_dir():
        shutil.copytree(saved, path, dirs_exist_ok=True)
    else:
        shutil.copy2(saved, path)
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


async def rollout_batch(
    builders: list[EnvGroupBuilder],
    policy: TokenPolicy,
    executor: Executor | None = None,
) -> list[TrajectoryGroup]:
    """Roll out every group of a batch concurrently (in-process, or on ``executor``)."""
    if executor is None:
        return list(await asyncio.gather(*(do_group_rollout(b, policy) for b in builders)))
    loop = asyncio.get_running_loop()
    futures = [loop.run_in_executor(executor, _rollout_in_worker, b, policy) for b in builders]
    return list(await asyncio.gather(*futures))


def _rollout_in_worker(builder: EnvGroupBuilder, policy: TokenPolicy) -> TrajectoryGroup:
    return asyncio.run(do_group_rollout(builder, policy))


def batch_metrics(groups: list[TrajectoryGroup], tags: list[list[str]]) -> dict[str, float]:
    """Cookbook-style env metrics: ``env/all/reward/total``, win/draw/loss, per-tag too."""
    out: dict[str, float] = {}
    buckets: dict[str, list[dict[str, float | int]]] = {"all": []}
    rewards: dict[str, list[float]] = {"all": []}
    for group, group_tags in zip(groups, tags, strict=True):
        totals = group.get_total_rewards()
        for metrics, total in zip(group.metrics_G, totals, strict=True):
            for tag in ["all", *group_tags]:
                buckets.setdefault(tag, []).append(metrics)
                if not metrics.get("aborted"):
                    rewards.setdefault(tag, []).append(total)
    for tag, metric_list in buckets.items():
        for key, value in metrics_mean(metric_list).items():
            if key != "seat":
                out[f"env/{tag}/{key}"] = value
        values = rewards.get(tag, [])
        out[f"env/{tag}/reward/total"] = sum(values) / len(values) if values else 0.0
    return out


class Trainer:
    """Runs a ``TrainConfig``. Use ``await Trainer(config).run()``."""

    def __init__(
        self,
        config: TrainConfig,
        *,
        service_client: Any = None,
        rollout_executor: Executor | None = None,
        database: Any = None,
        report: Callable[[str], None] | None = None,
        progress: Callable[[int, dict[str, float]], None] | None = None,
    ) -> None:
        config.validate()
        if config.backend == "tinker":
            check_tinker_key(TinkerSettings(base_model=config.model or ""))
        self.config = config
        self.log_dir = Path(config.log_dir)
        self.service_client = service_client
        self.executor = rollout_executor
        self.database = database
        """A ``storage.Database``: the run and its checkpoints are stored there."""
        self.report = report or (lambda line: logger.info(line))
        self.progress = progress
        self.stop_requested = False

    @property
    def _edge_games(self) -> int:
        return self.config.edge_eval_games or self.config.eval_games

    def request_stop(self) -> None:
        """Finish the current step, save, and stop (what Ctrl-C does)."""
        self.stop_requested = True

    async def run(self, resume: bool = False) -> list[StepRecord]:
        """Train; returns the per-step records. Saves state at the end, also when stopped."""
        config = self.config
        if not resume and (self.log_dir / "metrics.jsonl").exists():
            raise ValueError(
                f"{self.log_dir} already holds a run: pass --resume to continue it, "
                "or choose another --log-dir"
            )
        self.log_dir.mkdir(parents=True, exist_ok=True)
        (self.log_dir / "config.json").write_text(json.dumps(config.to_json(), indent=1))
        client = await make_training_client(config, self.service_client)
        if self.database is not None and config.run_name:
            from storage.runs import save_run

            await save_run(self.database, config.run_name, config=config.to_json())
        renderer = renderer_for(config, client)
        fmt = config.resolved_format()
        metrics_log = MetricsLog(self.log_dir / "metrics.jsonl")
        start = 0
        checkpoint = last_checkpoint(self.log_dir) if resume else None
        if resume and checkpoint is None:
            self.report(f"--resume: no checkpoint in {self.log_dir}; starting from scratch")
        if checkpoint is not None:
            await resolve(await client.load_state_async(checkpoint["state_path"]))
            start = int(checkpoint["step"]) + 1
            self.report(f"resumed from step {checkpoint['step']} ({checkpoint['state_path']})")
        elif config.backend == "local" and config.model is None and config.warmup_steps > 0:
            warm = await run_warmup(
                config, client, renderer, self.log_dir.parent / ".warmup-cache", self.report
            )
            metrics_log.write(-1, warm)
        limits = SessionLimits(
            invalid_move_policy=config.invalid_move_policy,
            invalid_move_penalty=config.invalid_move_penalty,
        )
        dataset = SelfPlayDataset(
            game_id=config.game_id,
            num_players=config.num_players,
            num_batches=config.steps,
            groups_per_batch=config.groups_per_batch,
            games_per_group=config.games_per_group,
            seed=config.seed,
            bot_fraction=config.bot_fraction,
            bots=config.bots,
            limits=limits,
            renderer=renderer,
            observation_format=fmt,
            run_id=config.run_name,
        )
        opponents = list(config.eval_opponents or default_opponents(config.game_id))
        baseline = RoleBaseline(config.role_baseline_decay) if config.baseline == "role" else None
        adam = types.AdamParams(learning_rate=config.learning_rate)
        sampler = await client.save_weights_and_get_sampling_client_async(f"step-{start}")
        records: list[StepRecord] = []
        step = saved = start - 1
        deadline: float | None = None
        for step in range(start, config.steps):
            if self.stop_requested or (deadline is not None and time.monotonic() > deadline):
                step -= 1
                break
            t0 = time.perf_counter()
            policy = SamplerPolicy(sampler, config.max_tokens, config.temperature)
            metrics: dict[str, float] = {}
            if config.eval_every and step % config.eval_every == 0 and opponents:
                games = config.eval_games if step > start else self._edge_games
                metrics.update(
                    await self._evaluate(policy, opponents, renderer, fmt, limits, games)
                )
            t_eval = time.perf_counter()
            if deadline is None and config.time_budget_s is not None:
                deadline = time.monotonic() + config.time_budget_s
            builders = list(dataset.get_batch(step))
            groups = await rollout_batch(builders, policy, self.executor)
            t_rollout = time.perf_counter()
            prepared = [
                prepare_group(
                    g,
                    game_id=config.game_id,
                    drop_constant_reward=config.drop_constant_reward_groups,
                    baseline=baseline,
                )
                for g in groups
            ]
            datums = groups_to_datums(prepared)
            metrics.update(batch_metrics(groups, [b.logging_tags() for b in builders]))
            metrics["env/all/aborted_trajectories"] = float(
                sum(p.dropped_aborted for p in prepared)
            )
            metrics["env/all/constant_reward_groups"] = float(
                sum(p.dropped_constant for p in prepared)
            )
            metrics["optim/datums"] = float(len(datums))
            if datums:
                output = await resolve(await client.forward_backward_async(datums, config.loss_fn))
                await resolve(await client.optim_step_async(adam))
                tokens = weighted_tokens(datums)
                loss = float(output.metrics.get("loss:sum", 0.0))
                metrics["optim/loss"] = loss / tokens if tokens else 0.0
                metrics["optim/action_tokens"] = float(tokens)
            sampler = await client.save_weights_and_get_sampling_client_async(f"step-{step + 1}")
            t_train = time.perf_counter()
            metrics["time/eval"] = t_eval - t0
            metrics["time/rollout"] = t_rollout - t_eval
            metrics["time/train"] = t_train - t_rollout
            metrics["time/total"] = t_train - t0
            metrics_log.write(step, metrics)
            records.append(StepRecord(step, metrics))
            if self.progress is not None:
                self.progress(step, metrics)
            if config.save_every and (step + 1) % config.save_every == 0:
                await self._save(client, step)
                saved = step
        if step >= start:
            if saved != step:
                await self._save(client, step)
            final_policy = SamplerPolicy(sampler, config.max_tokens, config.temperature)
            if opponents and config.eval_every:
                final = await self._evaluate(
                    final_policy, opponents, renderer, fmt, limits, self._edge_games
                )
                metrics_log.write(step + 1, final)
                records.append(StepRecord(step + 1, final))
        return records

    async def _evaluate(
        self,
        policy: TokenPolicy,
        opponents: list[str],
        renderer: RendererConfig,
        fmt: ObservationFormat,
        limits: SessionLimits,
        games: int,
    ) -> dict[str, float]:
        results = await evaluate(
            policy,
            self.config.game_id,
            opponents,
            games,
            num_players=self.config.num_players,
            limits=limits,
            renderer=renderer,
            observation_format=fmt,
            run_id=self.config.run_name,
        )
        out: dict[str, float] = {}
        for result in results:
            out.update(result.metrics())
        return out

    async def _save(self, client: TrainingClientLike, step: int) -> None:
        path = saved_path(await resolve(await client.save_state_async(f"step-{step:06d}")))
        with (self.log_dir / "checkpoints.jsonl").open("a") as f:
            f.write(json.dumps({"step": step, "state_path": path, "time": time.time()}) + "\n")
        if self.database is not None and self.config.run_name:
            from storage.runs import record_checkpoint

            await record_checkpoint(self.database, self.config.run_name, step)
        self.report(f"saved step {step} to {path}")


async def train(config: TrainConfig, resume: bool = False, **kwargs: Any) -> list[StepRecord]:
    """Run a training job to the end (or until stopped)."""
    trainer = Trainer(config, **kwargs)
    with contextlib.suppress(asyncio.CancelledError):
        return await trainer.run(resume=resume)
    return []
