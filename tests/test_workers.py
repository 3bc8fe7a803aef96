"""Rollouts on worker processes and on a Dask cluster: every match recorded exactly once,
and a worker that dies mid-step costs no more than a replay of its groups."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from arena.eventbus import default_bus
from arena.match import MatchSettings
from arena.types import Observation, StopCondition, TokensWithLogprobs
from storage import Recorder, list_matches, open_database
from trainer.config import TrainConfig
from trainer.train import Trainer


def small(tmp_path: Path, **overrides: Any) -> TrainConfig:
    values: dict[str, Any] = {
        "log_dir": str(tmp_path / "run"),
        "num_batches": 2,
        "batch_size": 3,
        "group_size": 2,
        "warmup_steps": 2,
        "warmup_games": 4,
        "eval_every": 0,
        "save_every": 0,
        "opponents": "self",
        "max_steps_off_policy": 0,
        "run_name": "workers",
        "db": "",
    }
    values.update(overrides)
    return TrainConfig(**values)


async def train_and_count(config: TrainConfig, tmp_path: Path) -> list[Any]:
    database = await open_database(str(tmp_path / "arena.db"))
    try:
        async with Recorder(database, default_bus()) as recorder:
            records = await Trainer(config, database=database).run()
            await recorder.flush()
        matches = await list_matches(database, run="workers", limit=1000)
    finally:
        await database.close()
    assert len(records) == config.num_batches
    return matches


@pytest.mark.slow
async def test_worker_process_rollouts_are_recorded_exactly_once(tmp_path: Path) -> None:
    matches = await train_and_count(small(tmp_path, rollout_workers=2), tmp_path)
    played = 2 * 3 * 2  # steps x groups x games
    assert len(matches) == played
    assert len({m.id for m in matches}) == played
    assert all(m.status in ("finished", "truncated") for m in matches)
    assert all(m.num_turns >= 1 for m in matches)


@pytest.mark.slow
async def test_dask_local_cluster_rollouts_are_recorded(tmp_path: Path) -> None:
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        config = small(tmp_path, executor=cluster.scheduler_address)
        matches = await train_and_count(config, tmp_path)
    assert len(matches) == 2 * 3 * 2
    assert all(m.status in ("finished", "truncated") for m in matches)


class DieOnce:
    """A token policy that kills the worker process it runs in, the first time only."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    async def __call__(self, ob: Observation, stop: StopCondition) -> TokensWithLogprobs:
        if not os.path.exists(self.marker):
            Path(self.marker).write_text("died")
            os._exit(1)  # the worker process dies mid-step
        return TokensWithLogprobs(tokens=[ord("4"), 257], maybe_logprobs=[-1.0, -1.0])


@pytest.mark.slow
async def test_a_worker_that_dies_mid_step_costs_only_a_replay(tmp_path: Path) -> None:
    from arena.envs import MatchGroupBuilder
    from trainer.train import rollout_batch
    from trainer.workers import spawn_pool

    builders = [
        MatchGroupBuilder(
            MatchSettings("TicTacToe-v0", observation_format="compact"), group_size=2, seed=i
        )
        for i in range(3)
    ]
    pools = [spawn_pool(2)]

    def replace() -> Any:
        pools[-1].shutdown(wait=False, cancel_futures=True)
        pools.append(spawn_pool(2))
        return pools[-1]

    policy = DieOnce(str(tmp_path / "died"))
    try:
        batch = await rollout_batch(builders, policy, pools[0], replace_executor=replace)
    finally:
        for pool in pools:
            pool.shutdown(wait=False, cancel_futures=True)
    assert (tmp_path / "died").exists() and len(pools) == 2
    assert batch.workers_lost >= 1  # the pool broke for the groups in flight on it
    assert len(batch.groups) == 3 and batch.failed_groups == 0  # replayed on a fresh pool
