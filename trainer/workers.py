"""Rollouts on other processes or machines, with nothing lost.

``--rollout-workers N`` plays each group in a spawn process pool; ``--executor
dask://HOST:PORT`` on a Dask cluster (``distributed.Client.get_executor``). A worker plays
its group and returns the trajectories together with every match event its games
published (the bus is per process); the trainer republishes them on its own bus, so each
match played anywhere is recorded by the run's recorder exactly once and appears in the
live view (at the end of its group, not move by move).

A worker that dies mid-step (killed, out of memory) loses only its group: the step goes on
without it and counts it in ``env/all/failed_groups``. A process pool that lost a worker is
rebuilt before the next step; Dask reschedules by itself.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from concurrent.futures import Executor, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from arena.eventbus import default_bus
from arena.events import MatchEvent
from arena.rollouts import GameRetry, TokenPolicy, do_group_rollout
from arena.types import EnvGroupBuilder, TrajectoryGroup

MAX_CAPTURED_EVENTS = 1_000_000
"""Most events one worker keeps for one group (a group's games publish far fewer)."""


@dataclass
class WorkerResult:
    """What a worker sends back for one group."""

    group: TrajectoryGroup | None
    events: list[MatchEvent] = field(default_factory=list)
    failure: str | None = None
    """Why no game of the group survived (the group is then dropped)."""


def play_in_worker(
    builder: EnvGroupBuilder, policy: TokenPolicy, strategy: GameRetry
) -> WorkerResult:
    """Play one group in this (worker) process and capture its events."""
    from tinker_cookbook.exceptions import AllTrajectoriesFailedError

    from trainer.loaders import install

    install()  # past checkpoints in the group's seats load their weights here

    capture = default_bus().subscribe(max_queue=MAX_CAPTURED_EVENTS, name="worker-capture")
    events: list[MatchEvent] = []
    try:
        try:
            group: TrajectoryGroup | None = asyncio.run(
                do_group_rollout(builder, policy, strategy=strategy)
            )
            failure = None
        except AllTrajectoriesFailedError as exc:
            group, failure = None, str(exc)
    finally:
        while (event := capture.get_nowait()) is not None:
            events.append(event)
        capture.close()
    return WorkerResult(group=group, events=events, failure=failure)


def spawn_pool(workers: int) -> ProcessPoolExecutor:
    """A spawn process pool (fork would copy the parent's threads' locks)."""
    if workers < 1:
        raise ValueError("rollout workers must be at least 1")
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))


def dask_executor(address: str) -> tuple[Executor, Any]:
    """An executor on the Dask scheduler at ``address`` (``dask://HOST:PORT`` or
    ``tcp://HOST:PORT``), and its client (close it when done). Raises ValueError when the
    scheduler cannot be reached."""
    from distributed import Client

    url = "tcp://" + address.removeprefix("dask://") if address.startswith("dask://") else address
    try:
        client = Client(url, timeout="10s")
    except (OSError, TimeoutError) as exc:
        raise ValueError(f"cannot reach the Dask scheduler at {address}: {exc}") from exc
    return client.get_executor(pure=False), client


def is_lost_worker(exc: BaseException) -> bool:
    """True for the errors that mean a worker died rather than the group failed."""
    if isinstance(exc, BrokenProcessPool):
        return True
    return type(exc).__name__ in ("KilledWorker", "CommClosedError", "FutureCancelledError")
