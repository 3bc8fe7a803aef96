"""The self-play training loop, in the Tinker cookbook's order.

For each batch: build env groups from the dataset, roll them all out concurrently with the
current sampler (games that fail are dropped whole, or replayed), compute advantages,
build datums, optionally add the KL penalty against a reference model, submit
``forward_backward(datums, loss_fn)`` and ``optim_step(adam)`` in the same cycle, then a
fresh sampler from the new weights. Every ``eval_every`` steps the policy plays fixed
opponents; every ``save_every`` steps the state is saved. The run's log directory
(``storage.rundir.RunDirectory``: ``config.json``, ``metrics.jsonl`` with cookbook metric
names, ``checkpoints.jsonl``) is locked while the run trains.

The loop is this module; its parts live apart: how the training client starts
(``trainer.start``), one step's games (``trainer.rollout``), the league
(``trainer.leagueplay``), checkpoints and the best weights (``trainer.checkpoints``), the
service and renderer (``trainer.service``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from arena.match import MatchSettings
from arena.rollouts import GameRetry, TokenPolicy
from arena.runtime import freeze_heap
from matchmaking.league import GroupPlan
from storage.rundir import RunDirectory
from trainer.backend import SamplerPolicy, adam_params
from trainer.checkpoints import CheckpointBook
from trainer.config import TrainConfig
from trainer.data import (
    RoleBaseline,
    sampled_entropy,
)
from trainer.dataset import SelfPlayDataset
from trainer.engines.run import EngineRun, open_engines
from trainer.evaluate import default_opponents, yardstick_opponents
from trainer.leagueplay import LeaguePlay
from trainer.loaders import install as install_loader
from trainer.offpolicy import OffPolicyPool, with_offpolicy
from trainer.progress import ProgressFactory, no_bars
from trainer.rollout import (
    BatchRollout,
    Collected,
    batch_metrics,
    counts_between,
    groups_of_step,
    rollout_batch,
    sampler_counts,
)
from trainer.runeval import evaluate_run
from trainer.service import (
    RENDERER_METADATA_KEY,
    base_model_name,
    make_service_client,
    renderer_for,
    renderer_name,
)
from trainer.sft import check_source
from trainer.start import (
    cached_warmup,
    kl_reference,
    open_training_client,
    run_warmup,
    settle_run_name,
)
from trainer.step import guard_scale, optimize, phase_ends, prepare_batch
from trainer.workers import dask_executor, spawn_pool

logger = logging.getLogger("arena.train")

T = TypeVar("T")

__all__ = [
    "RENDERER_METADATA_KEY",
    "BatchRollout",
    "StepRecord",
    "Trainer",
    "base_model_name",
    "batch_metrics",
    "cached_warmup",
    "groups_of_step",
    "make_service_client",
    "renderer_for",
    "renderer_name",
    "rollout_batch",
    "run_warmup",
]


@dataclass
class StepRecord:
    """What one training step did."""

    step: int
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class _Run:
    """What the loop works with, once the run is set up (``Trainer._setup``)."""

    client: Any
    start: int
    settings: dict[str, MatchSettings]
    """Each game's match settings, built once (``TrainConfig.match_settings``)."""
    datasets: dict[str, SelfPlayDataset]
    strategy: GameRetry
    reference: Any
    """The KL reference's sampler (None without the KL penalty)."""
    baseline: RoleBaseline | None
    evaluates: bool
    sampler: Any = None
    sampler_version: int = 0
    """Optimizer steps behind ``sampler``'s weights."""
    started: float | None = None
    """When the first step's games began (``time.monotonic``)."""
    deadline: float | None = None
    """When ``time_budget_s`` runs out (``time.monotonic``)."""
    phase_start: int = 0
    """The step the KL reference's current phase began at (a resumed run: its start)."""
    offpolicy: OffPolicyPool | None = None
    """Recorded answers added to each step (``offpolicy_from``; None without)."""

    def out_of_time(self) -> bool:
        """True once ``time_budget_s`` has run out."""
        return self.deadline is not None and time.monotonic() > self.deadline


def sampler_policy(
    config: TrainConfig, sampler: Any, temperature: float | None = None
) -> SamplerPolicy:
    """The policy that samples from ``sampler`` with the run's settings, at
    ``temperature`` (None: the config's)."""
    return SamplerPolicy(
        sampler,
        config.max_tokens,
        config.temperature if temperature is None else temperature,
        timeout_s=config.sample_timeout_s,
    )


def _step_groups(
    config: TrainConfig, league: LeaguePlay | None, run: _Run, step: int
) -> tuple[list[GroupPlan] | None, list[Any]]:
    """Step ``step``'s groups: each game its share (``groups_of_step``), planned by its
    own league (the plans too), or the datasets' self-play batches without one."""
    shares = groups_of_step(list(run.datasets), step, config.batch_size)
    if league is None:
        builders: list[Any] = []
        for game_id, count in shares.items():
            builders += list(run.datasets[game_id].get_batch(step, count))
        return None, builders
    plans: list[GroupPlan] = []
    builders = []
    for game_id, count in shares.items():
        for plan, builder in league.plan(game_id, run.datasets[game_id], step, count):
            plans.append(plan)
            builders.append(builder)
    return plans, builders


async def new_sampler(engines: EngineRun | None, client: Any, updates: int) -> Any:
    """The sampling client of ``client``'s weights now (after ``updates`` optimizer steps):
    the backend's own, or the engines' once the weights are pushed to them."""
    if engines is not None:
        return await engines.sampler_after(client, updates)
    return await client.save_weights_and_get_sampling_client()


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
        self.checkpoints = CheckpointBook(
            config, self.run_dir, self.run_name, database=database, report=self.report
        )
        """The run's checkpoints and best weights."""
        self.league: LeaguePlay | None = None
        """Each game's league (None without league opponents)."""
        self._updates_done = 0
        self._answer_entropy: float | None = None
        self._owned_pool: ProcessPoolExecutor | None = None
        self.engines: EngineRun | None = None
        """The serving engines that sample the games (``sampler`` other than ``local``)."""

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
            if self.engines is not None:
                await self.engines.close()
                self.engines = None
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

    async def _move_kl_reference(self, client: Any, step: int) -> Any:
        """The policy as it is now becomes the KL reference (``kl_reference_every``)."""
        saved = await client.save_weights_for_sampler(f"kl-reference-{step:06d}")
        self.checkpoints.kl_reference_path = path = str(saved.path)
        return await self.service_client.create_sampling_client(model_path=path)

    async def _run(self, resume: bool) -> list[StepRecord]:
        with self.run_dir.lock():  # RunInUse while another process trains this run
            return await self._run_locked(resume)

    async def _setup(self, resume: bool) -> _Run:
        """The run's identity stored, its training client open, its datasets, leagues and
        KL reference ready."""
        if not resume and self.run_dir.holds_run():
            raise ValueError(
                f"{self.log_dir} already holds a run: pass --resume to continue it, "
                "or choose another --log-dir"
            )
        self.config = config = settle_run_name(self.config, self.run_dir, resume)
        await check_source(config, self.database)  # a mistyped --sft-from: before any work
        self.checkpoints.config, self.checkpoints.run_name = config, self.run_name
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
        opened = await open_training_client(
            config,
            self.service_client,
            self.run_dir,
            resume=resume,
            report=self.report,
            bars=self.bars,
            database=self.database,
        )
        book = self.checkpoints
        book.metadata, book.kl_reference_path = opened.metadata, opened.kl_reference_path
        book.best = opened.best or book.best
        self._updates_done = opened.updates_done
        client, start = opened.client, opened.start
        if resume:
            dropped = self.run_dir.drop_metrics_from(start)
            if dropped:
                self.report(f"--resume: {dropped} logged steps from {start} on are replayed")
        renderer = renderer_for(config, client.get_tokenizer())
        reference = await kl_reference(config, self.service_client, book.kl_reference_path)
        settings = {g: config.match_settings(g, renderer) for g in config.games}
        self.league = LeaguePlay.load(config, self.run_dir, resume, self.report)
        pool = await OffPolicyPool.load(
            config, renderer, database=self.database, progress=self.bars, report=self.report
        )
        run = _Run(
            client=client,
            start=start,
            settings=settings,
            datasets={g: SelfPlayDataset.for_game(config, settings[g]) for g in config.games},
            offpolicy=pool,
            strategy=GameRetry(
                max_retries=config.rollout_retries, sample_timeout_s=config.sample_timeout_s
            ),
            reference=reference,
            baseline=(
                RoleBaseline(config.role_baseline_decay) if config.baseline == "role" else None
            ),
            evaluates=bool(config.eval_every)
            and any(
                config.eval_opponents or default_opponents(g) or yardstick_opponents(g)
                for g in config.games
            ),
        )
        self.engines = await open_engines(config, self.run_dir.path, self.report)
        run.sampler = await new_sampler(self.engines, client, self._updates_done)
        run.sampler_version = self._updates_done
        run.phase_start = start
        return run

    async def _run_locked(self, resume: bool) -> list[StepRecord]:
        run = await self._setup(resume)
        config = self.config
        records: list[StepRecord] = []
        step = saved = run.start - 1
        ahead = config.max_steps_off_policy > 0
        pending: asyncio.Future[Collected] | None = None
        freeze_heap()  # set-up is done: what lives now lives for the whole run
        try:
            for step in range(run.start, config.num_batches):
                if self.stop_requested or run.out_of_time():
                    step -= 1
                    break
                t0 = time.perf_counter()
                metrics: dict[str, float] = {}
                try:
                    metrics.update(await self._maybe_evaluate(run, step))
                    t_eval = time.perf_counter()
                    if run.started is None:
                        run.started = time.monotonic()
                        if config.time_budget_s is not None:
                            run.deadline = run.started + config.time_budget_s
                    collected = await self._interruptible(pending or self._collect_soon(run, step))
                    pending = None
                except asyncio.CancelledError:
                    task = asyncio.current_task()
                    if not self._stop_now or (task is not None and task.cancelling()):
                        raise
                    step -= 1  # stopped at once: this step did not happen
                    break
                t_rollout = time.perf_counter()
                if ahead and step + 1 < config.num_batches and not self.stop_requested:
                    # The next step's games play while this step trains: one step off
                    # policy, corrected by the importance ratio of the loss.
                    pending = self._collect_soon(run, step + 1)
                metrics.update(await self._learn(run, step, collected))
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
                    await self.checkpoints.save(run.client, self._updates_done, step + 1)
                    saved = step
        finally:
            if pending is not None:
                pending.cancel()
                await asyncio.gather(pending, return_exceptions=True)
        if step >= run.start:
            if saved != step:
                await self.checkpoints.save(run.client, self._updates_done, step + 1)
            if run.evaluates and not self._stop_now:
                final = await self._evaluate(
                    self._policy(run.sampler),
                    run.settings,
                    (config.edge_eval_games or config.eval_games),
                    run.sampler_version,
                )
                await self._track_best(run, final)
                self.run_dir.append_metrics(step + 1, final)
                records.append(StepRecord(step + 1, final))
        return records

    async def _maybe_evaluate(self, run: _Run, step: int) -> dict[str, float]:
        """Step ``step``'s evaluation, when one is due (more games at the first step)."""
        config = self.config
        if not run.evaluates or step % config.eval_every:
            return {}
        games = (
            config.eval_games if step > run.start else (config.edge_eval_games or config.eval_games)
        )
        evaluation = self._evaluate(
            self._policy(run.sampler), run.settings, games, run.sampler_version
        )
        metrics = await self._interruptible(evaluation)
        await self._track_best(run, metrics)
        return metrics

    async def _learn(self, run: _Run, step: int, collected: Collected) -> dict[str, float]:
        """One optimizer step on ``collected``'s games, then a fresh sampler (and the KL
        reference moved when it is due)."""
        config = self.config
        metrics = {"train/off_policy_steps": float(collected.stale), **collected.sampler_counts}
        progress = step / config.num_batches
        if config.time_budget_s and run.started is not None:
            elapsed = time.monotonic() - run.started
            progress = max(progress, elapsed / config.time_budget_s)
        metrics["optim/lr"] = lr = config.learning_rate_at(progress)
        metrics.update(await self._train_step(collected, run, adam_params(lr)))
        run.sampler = await new_sampler(self.engines, run.client, self._updates_done)
        if self.engines is not None:
            metrics.update(self.engines.metrics())
        exact = config.decision_kl() is not None
        if (run.reference is not None or exact) and phase_ends(
            config, run.phase_start, step, metrics
        ):
            if exact:
                await run.client.reset_magnet()
            if run.reference is not None:
                run.reference = await self._move_kl_reference(run.client, step + 1)
            run.phase_start = step + 1
            metrics["kl/phase_ended"] = 1.0
        run.sampler_version = self._updates_done
        return metrics

    def _collect_soon(self, run: _Run, step: int) -> asyncio.Future[Collected]:
        """Step ``step``'s games, started now with the current sampler."""
        stale = self._updates_done - run.sampler_version
        return asyncio.ensure_future(self._collect(step, run.sampler, run, stale))

    async def _collect(self, step: int, sampler: Any, run: _Run, stale: int) -> Collected:
        """Play step ``step``'s groups with ``sampler`` (``stale`` updates behind): each
        game its share of them (``groups_of_step``), planned by its own league."""
        started = time.perf_counter()
        league = self.league
        if league is not None:
            version = self._updates_done - stale  # the sampler's weights: after this many
            if league.wants_snapshot(version):
                await league.snapshot(run.client, sampler, version, self.checkpoints)
        plans, builders = _step_groups(self.config, league, run, step)
        replace = self._replace_broken_pool if self._owned_pool is not None else None
        before = sampler_counts(sampler)
        batch = await rollout_batch(
            builders,
            self._policy(sampler, self.config.rollout_temperature),
            self.executor,
            run.strategy,
            replace_executor=replace,
        )
        return Collected(
            step=step,
            plans=plans,
            builders=builders,
            batch=batch,
            seconds=time.perf_counter() - started,
            stale=stale,
            sampler_counts=counts_between(before, sampler_counts(sampler)),
        )

    async def _train_step(self, collected: Collected, run: _Run, adam: Any) -> dict[str, float]:
        """Advantages, datums (with the recorded answers of ``offpolicy_from``), the KL
        penalty, one optimizer step; the step's metrics."""
        config = self.config
        batch = collected.batch
        groups = batch.groups
        metrics: dict[str, float] = {}
        entropy = sampled_entropy(groups)
        if entropy is not None:
            metrics["optim/entropy"] = entropy
        if self.league is not None and collected.plans is not None:
            metrics.update(
                self.league.update(
                    collected.step, collected.builders, collected.plans, batch, entropy
                )
            )
        prepared = prepare_batch(config, batch, run.baseline)
        datums, figures = await with_offpolicy(run.offpolicy, run.sampler, collected.step, prepared)
        metrics.update(figures)
        if datums:
            scale = guard_scale(config.entropy_floor, self._answer_entropy)
            metrics.update(await optimize(config, run.client, datums, run.reference, adam, scale))
            self._answer_entropy = metrics.get("policy/answer_entropy", self._answer_entropy)
            self._updates_done += 1
        # A step teaches when some group's games did not all end alike (see
        # ``--drop-constant-reward-groups``): the optimizer steps of the run so far.
        metrics["train/taught"] = 1.0 if datums else 0.0
        metrics["train/steps_taught"] = float(self._updates_done)
        return metrics

    # -- identity, data, evaluation ----------------------------------------------------
    @property
    def run_name(self) -> str:
        """The run's name (what its checkpoints are called by)."""
        return self.config.run_name or self.log_dir.name

    def _policy(self, sampler: Any, temperature: float | None = None) -> SamplerPolicy:
        """The policy that samples from ``sampler`` (``sampler_policy``)."""
        return sampler_policy(self.config, sampler, temperature)

    async def _evaluate(
        self,
        policy: TokenPolicy,
        settings: dict[str, MatchSettings],
        games: int,
        version: int,
    ) -> dict[str, float]:
        """Play the evaluation opponents (each game's, see ``evaluate_games``). The
        learner's seats are recorded as the exact weights they play with,
        ``checkpoint:<run>@<version>`` (the weights after ``version`` optimizer steps,
        which checkpoint ``version`` holds when it is saved), so evaluation matches rate
        each step's policy against the bots."""
        return await evaluate_run(self.config, policy, settings, games, version, self.bars)

    async def _track_best(self, run: _Run, metrics: dict[str, float]) -> None:
        """After an evaluation: a new best figure saves the weights it measured
        (``CheckpointBook.track_best``), and the leagues keep them in their pools."""
        path = await self.checkpoints.track_best(run.client, metrics, run.sampler_version)
        if path is not None and self.league is not None:
            self.league.anchor(self.run_name, run.sampler, path, run.sampler_version)
