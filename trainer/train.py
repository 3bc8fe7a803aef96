"""The self-play training loop, in the Tinker cookbook's order.

For each batch: build env groups from the dataset, roll them all out concurrently with the
current sampler (games that fail are dropped whole, or replayed), compute advantages,
build datums, optionally add the KL penalty against a reference model, submit
``forward_backward(datums, loss_fn)`` and ``optim_step(adam)`` in the same cycle, then a
fresh sampler from the new weights. Every ``eval_every`` steps the policy plays fixed
opponents; every ``save_every`` steps the state is saved. The run's log directory
(``storage.rundir.RunDirectory``: ``config.json``, ``metrics.jsonl`` with cookbook metric
names, ``checkpoints.jsonl``) is locked while the run trains.

Both backends go through a service client with ``tinker.ServiceClient``'s methods: the
hosted service (``--backend tinker``), or ``trainer.local.LocalServiceClient``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
import shutil
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from tinker_cookbook.exceptions import AllTrajectoriesFailedError

from arena.envs import MatchGroupBuilder
from arena.events import default_bus
from arena.identity import PolicyRef
from arena.renderers import (
    ObservationFormat,
    RendererConfig,
    recommended_renderer,
    register_tokenizer,
)
from arena.rollouts import GameRetry, TokenPolicy, do_group_rollout
from arena.runtime import freeze_heap
from arena.types import EnvGroupBuilder, TrajectoryGroup, metrics_mean
from games.session import SessionLimits
from matchmaking.agents import ModelSeat, default_pool
from matchmaking.league import GroupPlan, League, PoolMember
from matchmaking.pfsp import seat0_win_rate
from storage.rundir import RunDirectory
from trainer.backend import (
    SamplerPolicy,
    ServiceClientLike,
    TrainingClientLike,
    adam_params,
    tinker_service_client,
)
from trainer.config import TrainConfig
from trainer.data import (
    RoleBaseline,
    groups_to_datums,
    prepare_group,
    sampled_entropy,
    weighted_tokens,
    wire_datums,
)
from trainer.dataset import SelfPlayDataset
from trainer.evaluate import (
    Headline,
    default_opponents,
    evaluate_games,
    run_headline,
    yardstick_opponents,
)
from trainer.loaders import install as install_loader
from trainer.progress import ProgressFactory, no_bars
from trainer.warmup import collect_examples, warm_up
from trainer.workers import (
    WorkerResult,
    dask_executor,
    is_lost_worker,
    play_in_worker,
    spawn_pool,
)

logger = logging.getLogger("arena.train")

T = TypeVar("T")

RENDERER_METADATA_KEY = "renderer_name"
"""The training run's metadata key for the renderer (the cookbook's name for it)."""


def groups_of_step(games: Sequence[str], step: int, groups_per_batch: int) -> dict[str, int]:
    """How many of step ``step``'s ``groups_per_batch`` groups each game plays: the slots
    are dealt to the games in turn, going on where the last step stopped, so that over
    the steps every game gets the same share (one game: all of them). Games with no
    slot this step are left out."""
    counts = dict.fromkeys(games, 0)
    for slot in range(groups_per_batch):
        counts[games[(step * groups_per_batch + slot) % len(games)]] += 1
    return {game: n for game, n in counts.items() if n}


@dataclass
class StepRecord:
    """What one training step did."""

    step: int
    metrics: dict[str, float] = field(default_factory=dict)


def base_model_name(config: TrainConfig) -> str:
    """The model the run starts from, as the service names it."""
    if config.model:
        return config.model
    from trainer.local.training import DEFAULT_LOCAL_MODEL

    return DEFAULT_LOCAL_MODEL


def renderer_name(config: TrainConfig) -> str:
    """The renderer the run uses (see ``TrainConfig.renderer``)."""
    if config.renderer:
        return config.renderer
    if config.backend == "local" and config.model is None:
        return "bytes"
    if config.backend == "tinker":
        return recommended_renderer(base_model_name(config))
    return "chat"


def renderer_for(config: TrainConfig, tokenizer: Any) -> RendererConfig:
    """The renderer config matching the model's tokenizer (registered in this process)."""
    name = renderer_name(config)
    if name == "bytes":
        return RendererConfig(name="bytes")
    model = base_model_name(config)
    register_tokenizer(model, tokenizer)
    return RendererConfig(name=name, tokenizer_path=model)


def make_service_client(config: TrainConfig) -> ServiceClientLike:
    """The service the backend names: Tinker's (credentials checked first) or the local one
    (checkpoints under the run's log directory). Raises BackendError."""
    if config.backend == "tinker":
        return tinker_service_client()
    from trainer.local import LocalModelConfig
    from trainer.local.service import LocalServiceClient

    local = LocalModelConfig(
        seed=config.seed,
        device=config.device,
        dtype=config.dtype,
        gradient_checkpointing=config.gradient_checkpointing,
    )
    local.weights_dtype(local.torch_device())  # ValueError now for a device or dtype not here
    return LocalServiceClient(local, checkpoint_dir=Path(config.log_dir) / "checkpoints")


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
        "version": 3,  # 3: the seat-relative compact views of tic-tac-toe and Connect Four
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
    builtin = config.backend == "local" and config.model is None
    took = (
        f"about {max(10, round(config.warmup_steps / 13, -1)):.0f} s on 2 cores; "
        if builtin
        else ""
    )
    report(
        f"warm-up: {config.warmup_steps} supervised steps on random legal moves "
        f"({took}cached in {cache_dir} for later runs)"
    )
    started = time.perf_counter()
    examples = []
    for game_id in config.games:  # a multi-game run warms up on every game at once
        examples += await collect_examples(
            game_id,
            config.warmup_games,
            num_players=config.num_players,
            seed=config.seed + 777,
            renderer=renderer,
            observation_format=config.resolved_format(),
            progress=bars,
        )
    losses = await warm_up(
        client,
        examples,
        steps=config.warmup_steps,
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
class Collected:
    """One step's games, as the trainer gets them back."""

    step: int
    plans: list[GroupPlan] | None
    builders: list[Any]
    batch: BatchRollout
    seconds: float
    """How long the games took to play."""
    stale: int = 0
    """Optimizer steps taken between the sampler's weights and the training step."""


@dataclass
class BatchRollout:
    """The groups of one batch that produced trajectories, and what was lost."""

    groups: list[TrajectoryGroup]
    builders: list[Any]
    failed_groups: int = 0
    """Groups in which every game failed (nothing to train on), workers lost included."""
    workers_lost: int = 0
    """Groups whose worker process or machine went away."""
    errors: list[str] = field(default_factory=list)


@dataclass
class _Lost:
    error: BaseException


async def _play_on(
    executor: Executor,
    builders: Sequence[EnvGroupBuilder],
    policy: TokenPolicy,
    strategy: GameRetry,
) -> list[Any]:
    """Each group played on ``executor``: its group (its events republished here), an
    AllTrajectoriesFailedError, another exception, or ``_Lost`` when the worker died."""
    loop = asyncio.get_running_loop()
    futures = [
        loop.run_in_executor(executor, play_in_worker, b, policy, strategy) for b in builders
    ]
    results: list[Any] = list(await asyncio.gather(*futures, return_exceptions=True))
    bus = default_bus()
    for i, result in enumerate(results):
        if isinstance(result, WorkerResult):
            for event in result.events:
                bus.publish(event)
            results[i] = (
                result.group
                if result.group is not None
                else AllTrajectoriesFailedError(result.failure or "no game survived")
            )
        elif isinstance(result, BaseException) and is_lost_worker(result):
            results[i] = _Lost(result)
    return results


async def rollout_batch(
    builders: Sequence[EnvGroupBuilder],
    policy: TokenPolicy,
    executor: Executor | None = None,
    strategy: GameRetry | None = None,
    replace_executor: Callable[[], Executor] | None = None,
) -> BatchRollout:
    """Roll out every group of a batch concurrently (in-process, or on ``executor``).

    On an executor each group plays in a worker, which sends back the match events its
    games published; they are republished here, on this process's bus, so the matches are
    recorded and shown as if played here. A group whose games all failed, or whose worker
    died, is left out and counted; with ``replace_executor`` the groups a dead worker took
    down are played once more on the executor it returns. RuntimeError when every group
    of the batch failed (the message has the first error)."""
    strategy = strategy or GameRetry()
    out = BatchRollout(groups=[], builders=[])
    if executor is None:
        results: list[Any] = await asyncio.gather(
            *(do_group_rollout(b, policy, strategy=strategy) for b in builders),
            return_exceptions=True,
        )
    else:
        results = await _play_on(executor, builders, policy, strategy)
        lost = [i for i, r in enumerate(results) if isinstance(r, _Lost)]
        out.workers_lost = len(lost)
        if lost and replace_executor is not None:
            # A dead worker breaks a process pool for every group in flight on it: play
            # those groups again, once, on a fresh pool.
            retried = await _play_on(
                replace_executor(), [builders[i] for i in lost], policy, strategy
            )
            for i, result in zip(lost, retried, strict=True):
                results[i] = result
        for i, result in enumerate(results):
            if isinstance(result, _Lost):
                results[i] = AllTrajectoriesFailedError(f"worker lost: {result.error!r}")
    for builder, result in zip(builders, results, strict=True):
        if isinstance(result, AllTrajectoriesFailedError):
            out.failed_groups += 1
            out.errors.append(str(result))
        elif isinstance(result, BaseException):
            raise result
        else:
            out.groups.append(result)
            out.builders.append(builder)
    if not out.groups and builders:
        raise RuntimeError(f"every group of the batch failed; first: {out.errors[0]}")
    return out


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
    """Runs a ``TrainConfig``. Use ``await Trainer(config).run()``.

    ``service_client`` replaces the backend's service (anything with
    ``tinker.ServiceClient``'s methods, e.g. a ``LocalServiceClient`` over another model).
    """

    def __init__(
        self,
        config: TrainConfig,
        *,
        service_client: Any = None,
        rollout_executor: Executor | None = None,
        database: Any = None,
        report: Callable[[str], None] | None = None,
        progress: Callable[[int, dict[str, float]], None] | None = None,
        bars: ProgressFactory = no_bars,
    ) -> None:
        config.validate()
        install_loader()  # past checkpoints in seats (the league) load through it
        self.config = config
        self.log_dir = Path(config.log_dir)
        self.run_dir = RunDirectory(self.log_dir)
        self.service_client = service_client
        if service_client is None:
            self.service_client = make_service_client(config)  # BackendError before any work
        self.executor = rollout_executor
        self.database = database
        """A ``storage.Database``: the run and its checkpoints are stored there."""
        self.report = report or (lambda line: logger.info(line))
        self.progress = progress
        self.bars = bars
        """Progress bars of the long phases (warm-up, evaluation)."""
        self.stop_requested = False
        self._stop_now = False
        self._phase: asyncio.Future[Any] | None = None
        self._metadata: dict[str, str] = {}
        self._kl_reference_path: str | None = None
        self._league_state: dict[str, League] | None = None
        """Each game's league (None without league opponents)."""
        self._best: Headline | None = None
        """The best headline figure so far (see ``_track_best``)."""
        self._updates_done = 0
        self._owned_pool: ProcessPoolExecutor | None = None

    @property
    def _edge_games(self) -> int:
        return self.config.edge_eval_games or self.config.eval_games

    def request_stop(self, now: bool = False) -> None:
        """Finish the current step, save, and stop (what Ctrl-C does). ``now``: stop the
        step in progress too (its evaluation or games are dropped; the steps finished
        before it are saved, and a resumed run replays it); no final evaluation."""
        self.stop_requested = True
        if now:
            self._stop_now = True
            if self._phase is not None:
                self._phase.cancel()

    async def _interruptible(self, work: Awaitable[T]) -> T:
        """Await ``work`` so that ``request_stop(now=True)`` can cancel it."""
        task = asyncio.ensure_future(work)
        self._phase = task
        try:
            return await task
        finally:
            self._phase = None

    async def _open(self, resume: bool) -> tuple[Any, int]:
        """The training client and the first step: resumed with its optimizer state,
        reloaded from the cached warm-up, warmed up now, or fresh."""
        config = self.config
        service = self.service_client
        model = base_model_name(config)
        self._metadata = {
            RENDERER_METADATA_KEY: renderer_name(config),
            "base_model": model,
            "arena_backend": config.backend,
            "arena_game": config.game_id,
        }
        checkpoint = self.run_dir.last_state() if resume else None
        if resume and checkpoint is None:
            self.report(f"--resume: no checkpoint in {self.log_dir}; starting from scratch")
            self.run_dir.drop_metrics_from(-1)  # the warm-up is logged again
        if checkpoint is not None:
            client = await service.create_training_client_from_state_with_optimizer(
                checkpoint["state_path"], user_metadata=self._metadata
            )
            self._kl_reference_path = checkpoint.get("kl_reference_path")
            self._updates_done = int(checkpoint["step"])
            best = self.run_dir.best()
            if best is not None and isinstance(best.get("best_key"), str):
                key = str(best["best_key"])
                name = key.rsplit("/", 1)[-1]
                self._best = Headline(
                    key, float(best[name]), bool(best.get("higher_is_better", True))
                )
            self.report(
                f"resumed from checkpoint {checkpoint['step']} ({checkpoint['state_path']}), "
                "optimizer state included"
            )
            return client, int(checkpoint.get("next_step", checkpoint["step"]))
        wants_warmup = config.backend == "local" and config.model is None and config.warmup_steps
        cache_dir = self.log_dir.parent / ".warmup-cache"
        cached = cached_warmup(config, cache_dir) if wants_warmup else None
        if cached is not None:
            client = await service.create_training_client_from_state(
                cached["path"], user_metadata=self._metadata
            )
            self.report(f"warm-up: reused {cached['path']}")
            self.run_dir.append_metrics(
                -1, {"warmup/loss_final": cached["loss"], "warmup/cached": 1.0}
            )
        else:
            client = await service.create_lora_training_client(
                model,
                rank=config.resolved_lora_rank(),
                seed=config.seed,
                user_metadata=self._metadata,
            )
            if wants_warmup:
                renderer = renderer_for(config, client.get_tokenizer())
                warm = await run_warmup(config, client, renderer, cache_dir, self.report, self.bars)
                self.run_dir.append_metrics(-1, warm)
        if config.resolved_kl_coef() > 0:
            saved = await client.save_weights_for_sampler("kl-reference")
            self._kl_reference_path = str(saved.path)
        return client, 0

    async def _move_kl_reference(self, client: TrainingClientLike, step: int) -> Any:
        """The policy as it is now becomes the KL reference (``kl_reference_every``)."""
        saved = await client.save_weights_for_sampler(f"kl-reference-{step:06d}")
        self._kl_reference_path = str(saved.path)
        return await self.service_client.create_sampling_client(model_path=self._kl_reference_path)

    async def run(self, resume: bool = False) -> list[StepRecord]:
        """Train; returns the per-step records. Saves state at the end, also when stopped.

        Raises ValueError for a setting that cannot work here (an unreachable Dask
        scheduler, a log dir that holds another run), BackendError, and what the backend
        raises."""
        config = self.config
        owned_pool: Any = None
        dask_client: Any = None
        if self.executor is None and config.executor:
            self.executor, dask_client = dask_executor(config.executor)
        elif self.executor is None and config.rollout_workers > 0:
            self.executor = owned_pool = spawn_pool(config.rollout_workers)
        self._owned_pool = owned_pool
        try:
            return await self._run(resume)
        finally:
            if self._owned_pool is not None:
                self._owned_pool.shutdown(wait=False, cancel_futures=True)
                self.executor = None
            if dask_client is not None:
                self.executor = None
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(dask_client.close)

    def _replace_broken_pool(self) -> Executor:
        """A worker of our process pool died (the pool refuses work from then on): a fresh
        pool."""
        pool = self._owned_pool
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        new = spawn_pool(self.config.rollout_workers)
        self.executor = self._owned_pool = new
        self.report("a rollout worker died: the pool is rebuilt and its groups replayed")
        return new

    async def _run(self, resume: bool) -> list[StepRecord]:
        with self.run_dir.lock():  # RunInUse while another process trains this run
            return await self._run_locked(resume)

    async def _run_locked(self, resume: bool) -> list[StepRecord]:
        if not resume and self.run_dir.holds_run():
            raise ValueError(
                f"{self.log_dir} already holds a run: pass --resume to continue it, "
                "or choose another --log-dir"
            )
        self.config = config = self._identity(resume)
        if self.database is not None:
            from storage.runs import claim_run

            await claim_run(
                self.database,
                self.run_name,
                log_dir=str(self.log_dir.resolve()),
                config=config.to_json(),
                resume=resume,
            )
        self.run_dir.write_config(config.to_json())
        client, start = await self._open(resume)
        if resume:
            dropped = self.run_dir.drop_metrics_from(start)
            if dropped:
                self.report(f"--resume: {dropped} logged steps from {start} on are replayed")
        renderer = renderer_for(config, client.get_tokenizer())
        reference = None
        if config.resolved_kl_coef() > 0:
            if self._kl_reference_path is None:
                raise ValueError(
                    "kl_penalty_coef > 0, but the resumed run has no KL reference "
                    "(it was started without the KL penalty)"
                )
            reference = await self.service_client.create_sampling_client(
                model_path=self._kl_reference_path
            )
        fmt = config.resolved_format()
        limits = {game_id: config.session_limits(game_id) for game_id in config.games}
        datasets = {
            game_id: self._dataset(game_id, renderer, fmt, limits[game_id])
            for game_id in config.games
        }
        strategy = GameRetry(
            max_retries=config.rollout_retries, sample_timeout_s=config.sample_timeout_s
        )
        leagues = self._league_state = self._leagues(resume)
        baseline = RoleBaseline(config.role_baseline_decay) if config.baseline == "role" else None
        evaluates = bool(config.eval_every) and any(
            config.eval_opponents or default_opponents(g) or yardstick_opponents(g)
            for g in config.games
        )
        run_started: float | None = None
        sampler = await client.save_weights_and_get_sampling_client()
        sampler_version = self._updates_done
        records: list[StepRecord] = []
        step = saved = start - 1
        deadline: float | None = None
        ahead = config.max_steps_off_policy > 0
        pending: asyncio.Future[Collected] | None = None
        freeze_heap()  # set-up is done: what lives now lives for the whole run

        def collect(at: int, with_sampler: Any) -> asyncio.Future[Collected]:
            stale = self._updates_done - sampler_version
            return asyncio.ensure_future(
                self._collect(
                    at, with_sampler, client, leagues, datasets, renderer, fmt, strategy, stale
                )
            )

        try:
            for step in range(start, config.steps):
                if self.stop_requested or (deadline is not None and time.monotonic() > deadline):
                    step -= 1
                    break
                t0 = time.perf_counter()
                metrics: dict[str, float] = {}
                try:
                    if evaluates and step % config.eval_every == 0:
                        games = config.eval_games if step > start else self._edge_games
                        evaluation = self._evaluate(
                            self._policy(sampler),
                            renderer,
                            fmt,
                            limits,
                            games,
                            sampler_version,
                        )
                        metrics.update(await self._interruptible(evaluation))
                        await self._track_best(client, sampler, metrics, sampler_version, leagues)
                    t_eval = time.perf_counter()
                    if run_started is None:
                        run_started = time.monotonic()
                    if deadline is None and config.time_budget_s is not None:
                        deadline = time.monotonic() + config.time_budget_s
                    if pending is None:
                        pending = collect(step, sampler)
                    collected = await self._interruptible(pending)
                    pending = None
                except asyncio.CancelledError:
                    task = asyncio.current_task()
                    if not self._stop_now or (task is not None and task.cancelling()):
                        raise
                    step -= 1  # stopped at once: this step did not happen
                    break
                t_rollout = time.perf_counter()
                if ahead and step + 1 < config.steps and not self.stop_requested:
                    # The next step's games play while this step trains: one step off
                    # policy, corrected by the importance ratio of the loss.
                    pending = collect(step + 1, sampler)
                metrics["train/off_policy_steps"] = float(collected.stale)
                progress = step / config.steps
                if config.time_budget_s and run_started is not None:
                    elapsed = time.monotonic() - run_started
                    progress = max(progress, elapsed / config.time_budget_s)
                metrics["optim/lr"] = lr = config.learning_rate_at(progress)
                adam = adam_params(lr)
                metrics.update(await self._train_step(collected, client, reference, baseline, adam))
                sampler = await client.save_weights_and_get_sampling_client()
                every = config.kl_reference_every
                if reference is not None and every and (step + 1) % every == 0:
                    reference = await self._move_kl_reference(client, step + 1)
                sampler_version = self._updates_done
                t_train = time.perf_counter()
                metrics["time/eval"] = t_eval - t0
                metrics["time/rollout"] = t_rollout - t_eval
                metrics["time/rollout_games"] = collected.seconds
                metrics["time/train"] = t_train - t_rollout
                metrics["time/total"] = t_train - t0
                self.run_dir.append_metrics(step, metrics)
                records.append(StepRecord(step, metrics))
                if self.progress is not None:
                    self.progress(step, metrics)
                if config.save_every and (step + 1) % config.save_every == 0:
                    await self._save(client, self._updates_done, step + 1)
                    saved = step
        finally:
            if pending is not None:
                pending.cancel()
                await asyncio.gather(pending, return_exceptions=True)
        if step >= start:
            if saved != step:
                await self._save(client, self._updates_done, step + 1)
            if evaluates and not self._stop_now:
                final = await self._evaluate(
                    self._policy(sampler),
                    renderer,
                    fmt,
                    limits,
                    self._edge_games,
                    sampler_version,
                )
                await self._track_best(client, sampler, final, sampler_version, leagues)
                self.run_dir.append_metrics(step + 1, final)
                records.append(StepRecord(step + 1, final))
        return records

    async def _collect(
        self,
        step: int,
        sampler: Any,
        client: Any,
        leagues: dict[str, League] | None,
        datasets: dict[str, SelfPlayDataset],
        renderer: RendererConfig,
        fmt: ObservationFormat,
        strategy: GameRetry,
        stale: int,
    ) -> Collected:
        """Play step ``step``'s groups with ``sampler`` (``stale`` updates behind): each
        game its share of them (``groups_of_step``), planned by its own league."""
        started = time.perf_counter()
        plans = None
        builders: list[Any] = []
        shares = groups_of_step(list(datasets), step, self.config.groups_per_batch)
        if leagues is not None:
            version = self._updates_done - stale  # the sampler's weights: after this many
            first = next(iter(leagues.values()))
            if first.wants_snapshot(version) and all(m.step != version for m in first.members):
                await self._snapshot(client, sampler, leagues, version)
            plans = []
            for game_id, count in shares.items():
                league = leagues[game_id]
                for g, plan in enumerate(league.plan(step, count)):
                    plans.append(plan)
                    builders.append(
                        self._league_group(datasets[game_id], step, g, plan, league, renderer, fmt)
                    )
        else:
            for game_id, count in shares.items():
                builders += list(datasets[game_id].get_batch(step, count))
        replace = self._replace_broken_pool if self._owned_pool is not None else None
        batch = await rollout_batch(
            builders,
            self._policy(sampler, self.config.rollout_temperature),
            self.executor,
            strategy,
            replace_executor=replace,
        )
        return Collected(
            step=step,
            plans=plans,
            builders=builders,
            batch=batch,
            seconds=time.perf_counter() - started,
            stale=stale,
        )

    async def _train_step(
        self,
        collected: Collected,
        client: Any,
        reference: Any,
        baseline: RoleBaseline | None,
        adam: Any,
    ) -> dict[str, float]:
        """Advantages, datums, the KL penalty, one optimizer step; the step's metrics."""
        config = self.config
        batch = collected.batch
        groups = batch.groups
        metrics: dict[str, float] = {}
        entropy = sampled_entropy(groups)
        if entropy is not None:
            metrics["optim/entropy"] = entropy
        if self._league_state is not None and collected.plans is not None:
            metrics.update(
                self._league_update(
                    self._league_state,
                    collected.step,
                    collected.builders,
                    collected.plans,
                    batch,
                    entropy,
                )
            )
        prepared = [
            prepare_group(
                g,
                game_id=builder.game_id,
                drop_constant_reward=config.drop_constant_reward_groups,
                baseline=baseline,
                per_seat=config.baseline == "seat",
            )
            for g, builder in zip(groups, batch.builders, strict=True)
        ]
        datums = groups_to_datums(prepared)
        metrics.update(batch_metrics(groups, [b.logging_tags() for b in batch.builders]))
        metrics["env/all/aborted_games"] = float(
            sum(len(g.rollout_errors) for g in groups) + batch.failed_groups
        )
        metrics["env/all/failed_groups"] = float(batch.failed_groups)
        metrics["env/all/workers_lost"] = float(batch.workers_lost)
        metrics["env/all/constant_reward_groups"] = float(sum(p.dropped_constant for p in prepared))
        metrics["optim/datums"] = float(len(datums))
        if datums:
            if reference is not None:
                from tinker_cookbook.rl.metrics import incorporate_kl_penalty

                metrics.update(
                    await incorporate_kl_penalty(
                        datums, reference, config.resolved_kl_coef(), config.kl_discount_factor
                    )
                )
            # Submitted together, as the cookbook does: the optimizer step lands in the
            # same clock cycle as the gradients.
            fwd_bwd = client.forward_backward(wire_datums(datums, config.loss_fn), config.loss_fn)
            optim = client.optim_step(adam)
            output = await fwd_bwd
            stepped = await optim
            self._updates_done += 1
            grad_norm = (getattr(stepped, "metrics", None) or {}).get("grad_norm")
            if grad_norm is not None:
                metrics["optim/grad_norm"] = float(grad_norm)
            tokens = weighted_tokens(datums)
            loss = float(output.metrics.get("loss:sum", 0.0))
            metrics["optim/loss"] = loss / tokens if tokens else 0.0
            metrics["optim/action_tokens"] = float(tokens)
        return metrics

    # -- the league ------------------------------------------------------------------------
    @property
    def run_name(self) -> str:
        """The run's name (what its checkpoints are called by)."""
        return self.config.run_name or self.log_dir.name

    def _identity(self, resume: bool) -> TrainConfig:
        """The config with the run's name settled: a resumed run keeps the name it was
        started with (a different ``run_name`` is refused: its checkpoints and matches are
        stored under the first); a new run is named ``run_name`` or its log dir's name."""
        stored = self.run_dir.config().get("run_name") if resume else None
        if stored and self.config.run_name and self.config.run_name != stored:
            raise ValueError(
                f"{self.log_dir} holds the run {stored!r}; --run-name {self.config.run_name!r}"
                " would rename it: drop --run-name to resume it"
            )
        name = stored or self.config.run_name or self.log_dir.name
        return dataclasses.replace(self.config, run_name=name)

    def _dataset(
        self,
        game_id: str,
        renderer: RendererConfig,
        fmt: ObservationFormat,
        limits: SessionLimits,
    ) -> SelfPlayDataset:
        config = self.config
        return SelfPlayDataset(
            game_id=game_id,
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
            move_timeout_s=config.move_timeout_s,
            run_id=config.run_name,
            shared_deal=config.shared_deal,
        )

    def _leagues(self, resume: bool) -> dict[str, League] | None:
        """Each game's league (None without league opponents): its own bots and its own
        scores against the past checkpoints, which every game's league shares."""
        config = self.config
        if config.opponents != "league":
            return None
        leagues = {
            game_id: League(
                config.league_config(game_id), num_players=config.num_players, seed=config.seed
            )
            for game_id in config.games
        }
        state = self.run_dir.league_state() if resume else None
        if state is not None:
            states = state["games"] if config.multi_game else {config.games[0]: state}
            for game_id, league in leagues.items():
                if game_id in states:
                    league.load(states[game_id])
        return leagues

    def _write_leagues(self, leagues: dict[str, League]) -> None:
        """The leagues' state in the run directory (one game's as it is; several under
        ``games``)."""
        if self.config.multi_game:
            self.run_dir.write_league_state(
                {"games": {game_id: league.state() for game_id, league in leagues.items()}}
            )
        else:
            self.run_dir.write_league_state(next(iter(leagues.values())).state())

    async def _snapshot(
        self, client: Any, sampler: Any, leagues: dict[str, League], version: int
    ) -> None:
        """The sampler's weights (after ``version`` updates) join the league's pool: on
        disk, so worker processes and later matches can load them (``run:NAME@version``);
        in memory, as the sampler the step already has."""
        name = f"league-{version:06d}"
        saved = await client.save_weights_for_sampler(name, user_metadata=self._metadata)
        path = str(saved.path)
        default_pool().put(path, sampler)
        policy = PolicyRef.checkpoint(self.run_name, version).key
        for league in leagues.values():
            league.add(PoolMember(policy=policy, sampler_path=path, step=version))
        self._log_checkpoint({"step": version, "sampler_path": path, "league": True})
        if self.database is not None:
            from storage.runs import record_checkpoint

            await record_checkpoint(self.database, self.run_name, version)

    def _league_group(
        self,
        dataset: SelfPlayDataset,
        step: int,
        g: int,
        plan: GroupPlan,
        league: League,
        renderer: RendererConfig,
        fmt: ObservationFormat,
    ) -> MatchGroupBuilder:
        config = self.config
        if plan.kind == "self":
            return dataset.group(step, g)
        opponent: str | ModelSeat
        if plan.kind == "bot":
            opponent = plan.opponent
        else:
            member = league.member(plan.opponent)
            opponent = ModelSeat(
                policy=member.policy,
                sampler_path=member.sampler_path,
                renderer=renderer,
                observation_format=fmt,
                max_tokens=config.max_tokens,
                temperature=config.temperature,
                sample_timeout_s=config.sample_timeout_s,
            )
        others = (opponent,) * (config.num_players - 1)
        return dataset.group(step, g, (plan.learner_seat,), others)

    def _league_update(
        self,
        leagues: dict[str, League],
        step: int,
        builders: list[Any],
        plans: list[GroupPlan],
        batch: BatchRollout,
        entropy: float | None,
    ) -> dict[str, float]:
        """Each game's league: scores against each opponent, collapse detection (from the
        step's ``entropy`` per action token and its invalid moves per self-play game), its
        metrics (``league/...``; a multi-game run's under ``league/<game>/...``)."""
        plan_of = {id(b): p for b, p in zip(builders, plans, strict=True)}
        out: dict[str, float] = {}
        for game_id, league in leagues.items():
            self_play: list[list[float]] = []
            invalid: list[float] = []
            for builder, group in zip(batch.builders, batch.groups, strict=True):
                if builder.game_id != game_id:
                    continue
                plan = plan_of[id(builder)]
                league.record(
                    plan, [float(m["score"]) for m in group.metrics_G if not m.get("aborted")]
                )
                if plan.kind == "self":
                    seats = self.config.num_players
                    rewards = group.final_rewards_G
                    self_play += [
                        list(rewards[i : i + seats]) for i in range(0, len(rewards), seats)
                    ]
                    invalid += [float(m.get("invalid_moves", 0)) for m in group.metrics_G]
            invalid_per_game = sum(invalid) / len(invalid) if invalid else None
            reason = league.observe(step, entropy, invalid_per_game)
            where = f" ({game_id})" if self.config.multi_game else ""
            if reason is not None:
                self.report(f"step {step}: collapse?{where} {reason}; playing the past more")
            figures = league.metrics(step)
            share = seat0_win_rate(self_play)
            if share is not None:
                figures["league/self_play_seat0_score"] = share
            if self.config.multi_game:
                figures = {
                    f"league/{game_id}/{k.removeprefix('league/')}": v for k, v in figures.items()
                }
            out.update(figures)
        self._write_leagues(leagues)
        return out

    def _policy(self, sampler: Any, temperature: float | None = None) -> SamplerPolicy:
        """The policy that samples from ``sampler``, at ``temperature`` (None: the
        config's)."""
        config = self.config
        return SamplerPolicy(
            sampler,
            config.max_tokens,
            config.temperature if temperature is None else temperature,
            timeout_s=config.sample_timeout_s,
        )

    async def _evaluate(
        self,
        policy: TokenPolicy,
        renderer: RendererConfig,
        fmt: ObservationFormat,
        limits: dict[str, SessionLimits],
        games: int,
        version: int,
    ) -> dict[str, float]:
        """Play the evaluation opponents (each game's, see ``evaluate_games``). The
        learner's seats are recorded as the exact weights they play with,
        ``checkpoint:<run>@<version>`` (the weights after ``version`` optimizer steps,
        which checkpoint ``version`` holds when it is saved), so evaluation matches rate
        each step's policy against the bots."""
        opponents = self.config.eval_opponents
        return await evaluate_games(
            policy,
            self.config.games,
            list(opponents) if opponents else None,
            games,
            yardstick_samples=self.config.yardstick_samples,
            num_players=self.config.num_players,
            limits_by_game=limits,
            renderer=renderer,
            observation_format=fmt,
            run_id=self.config.run_name,
            sample_timeout_s=self.config.sample_timeout_s,
            learner_name=PolicyRef.checkpoint(self.run_name, version).key,
            progress=self.bars,
        )

    async def _track_best(
        self,
        client: Any,
        sampler: Any,
        metrics: dict[str, float],
        version: int,
        leagues: dict[str, League] | None,
    ) -> None:
        """After an evaluation: when its headline figure (``run_headline``: the game's
        yardstick, else the mean score against the evaluation bots) is the run's best so
        far, the weights it measured (after ``version`` updates) are saved and marked
        ``best`` in ``checkpoints.jsonl`` (with the figure); the leagues keep them in their
        pools."""
        figure = run_headline(self.config.games, metrics)
        if figure is None or not figure.better_than(self._best):
            return
        self._best = figure
        saved = await client.save_weights_for_sampler(
            f"best-{version:06d}", user_metadata=self._metadata
        )
        path = str(saved.path)
        self._log_checkpoint({"step": version, "sampler_path": path})
        self.run_dir.mark_best(
            version,
            **{figure.key.rsplit("/", 1)[-1]: figure.value},
            best_key=figure.key,  # type: ignore[arg-type]
            higher_is_better=figure.higher_is_better,
        )
        if leagues is not None:
            default_pool().put(path, sampler)
            policy = PolicyRef.checkpoint(self.run_name, version).key
            for league in leagues.values():
                league.anchor(PoolMember(policy=policy, sampler_path=path, step=version))
            self._write_leagues(leagues)

    def _log_checkpoint(self, entry: dict[str, Any]) -> None:
        """Append to ``checkpoints.jsonl`` (with what a sampler needs to load it)."""
        full = {
            "base_model": self._metadata.get("base_model"),
            RENDERER_METADATA_KEY: self._metadata.get(RENDERER_METADATA_KEY),
            "backend": self.config.backend,
            "observation_format": self.config.resolved_format(),
            "time": time.time(),
            **entry,
        }
        if self._kl_reference_path is not None:
            full["kl_reference_path"] = self._kl_reference_path
        self.run_dir.append_checkpoint(full)

    async def _save(self, client: Any, step: int, next_step: int) -> None:
        """Save the training state as checkpoint ``step``: the weights after ``step``
        optimizer steps (what evaluation records as ``checkpoint:<run>@<step>``); a resumed
        run starts at loop step ``next_step`` (steps without datums take no optimizer
        step, so the two may differ)."""
        config = self.config
        name = f"step-{next_step:06d}"  # unique (two saves may hold the same weights)
        state = client.save_state(name, user_metadata=self._metadata)
        if config.backend == "tinker":
            # Sampler weights, so the checkpoint can sit in a seat later.
            sampler = client.save_weights_for_sampler(name, user_metadata=self._metadata)
            state_path, sampler_path = (await state).path, (await sampler).path
        else:
            state_path = sampler_path = (await state).path  # local states load into samplers
        self._log_checkpoint(
            {
                "step": step,
                "next_step": next_step,
                "state_path": state_path,
                "sampler_path": sampler_path,
            }
        )
        if self.database is not None:
            from storage.runs import record_checkpoint

            await record_checkpoint(self.database, self.run_name, step)
        self.report(f"saved step {step} to {state_path}")
