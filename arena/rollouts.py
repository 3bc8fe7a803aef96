"""Rollouts: play every env of a group concurrently with a token policy.

A token policy is the cookbook's ``TokenCompleter`` shape: an async callable
``(ModelInput, stop condition) -> TokensWithLogprobs``. A sampler that batches concurrent
requests (the local backend's) sees all seats of all games of a group at once.

Arena's driver follows the cookbook's protocol exactly (``GameOverBeforeFirstMove`` is the
cookbook's no-sampling sentinel, ``step(action, extra=...)``, stop reasons from the
``stop/<reason>`` metric), so arena's builders also run under the cookbook's own
``do_group_rollout`` and its strategies, and cookbook envs run under arena's driver. It
adds two things: the sampler's logprobs travel to the env (they are recorded with each
move), and every policy call can have a time limit.

``GameRetry`` is a cookbook ``RolloutStrategy`` with whole-game semantics: when a seat
fails or its match is aborted, the whole game is dropped (its other seats' trajectories
are not half of a game) and, while the retry budget lasts, replayed from scratch with all
its seats. Pass it to the cookbook's trainer as ``rollout_error_tolerance=GameRetry(...)``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import tinker
from tinker_cookbook.exceptions import AllTrajectoriesFailedError
from tinker_cookbook.rl.rollout_runner import stop_reason_from_metrics
from tinker_cookbook.rl.rollout_strategy import RolloutResult, RolloutStrategy

from arena.policies import SampleTimeoutError
from arena.types import (
    ArenaActionExtra,
    Env,
    EnvGroupBuilder,
    InitialObservationOverflow,
    Observation,
    RolloutError,
    StopCondition,
    TokensWithLogprobs,
    Trajectory,
    TrajectoryGroup,
    Transition,
)


class TokenPolicy(Protocol):
    """Samples an action for a prompt (the cookbook's ``TokenCompleter`` call shape)."""

    async def __call__(self, ob: Observation, stop: StopCondition) -> TokensWithLogprobs:
        """Tokens (and logprobs) continuing ``ob`` until ``stop``."""
        ...


async def _sample(
    policy: TokenPolicy, ob: Observation, stop: StopCondition, timeout_s: float | None
) -> TokensWithLogprobs:
    if timeout_s is None:
        return await policy(ob, stop)
    try:
        async with asyncio.timeout(timeout_s):
            return await policy(ob, stop)
    except TimeoutError as exc:
        raise SampleTimeoutError(f"the policy did not answer within {timeout_s:g} s") from exc


async def do_single_rollout(
    policy: TokenPolicy, env: Env, *, sample_timeout_s: float | None = None
) -> Trajectory:
    """Play one env to the end and return its trajectory.

    ``sample_timeout_s`` bounds each policy call (SampleTimeoutError when it passes). If
    the policy or the env fails, the env's match is aborted (so the other seats wake at
    once) and the exception propagates.
    """
    try:
        return await _play(policy, env, sample_timeout_s)
    except BaseException as exc:
        abort = getattr(env, "abort", None)
        if abort is not None:
            abort(f"rollout failed: {type(exc).__name__}: {exc}")
        raise


async def _play(policy: TokenPolicy, env: Env, sample_timeout_s: float | None) -> Trajectory:
    initial = await env.initial_observation()
    if isinstance(initial, InitialObservationOverflow):
        # The cookbook's shape: one empty terminal transition (no training tokens).
        transition = Transition(
            ob=tinker.ModelInput.empty(),
            ac=TokensWithLogprobs(tokens=[], maybe_logprobs=[]),
            reward=initial.reward,
            episode_done=True,
            metrics=dict(initial.metrics),
            logs=dict(initial.logs),
        )
        return Trajectory(
            transitions=[transition],
            final_ob=tinker.ModelInput.empty(),
            stop_reason=stop_reason_from_metrics(transition.metrics),
        )
    ob, stop = initial
    transitions: list[Transition] = []
    while True:
        ac = await _sample(policy, ob, stop, sample_timeout_s)
        extra = ArenaActionExtra(stop_reason=ac.stop_reason, logprobs=ac.maybe_logprobs)
        result = await env.step(ac.tokens, extra=extra)
        transitions.append(
            Transition(
                ob=ob,
                ac=ac,
                reward=result.reward,
                episode_done=result.episode_done,
                metrics=result.metrics,
                logs=result.logs,
            )
        )
        ob, stop = result.next_observation, result.next_stop_condition
        if result.episode_done:
            return Trajectory(
                transitions=transitions,
                final_ob=ob,
                stop_reason=stop_reason_from_metrics(result.metrics),
            )


def _games(envs: Sequence[Env]) -> list[list[int]]:
    """Positions of the envs of each game, in order. Arena's envs know their game; other
    builders' groups count as one game (a retry rebuilds the whole group)."""
    by_game: dict[object, list[int]] = {}
    for i, env in enumerate(envs):
        key = getattr(env, "coordinator", None)
        by_game.setdefault(key if key is not None else "group", []).append(i)
    return list(by_game.values())


def _abort_reason(envs: Sequence[Env]) -> str | None:
    for env in envs:
        coordinator = getattr(env, "coordinator", None)
        outcome = getattr(coordinator, "outcome", None)
        status = getattr(getattr(outcome, "status", None), "value", None)
        if status == "aborted":
            return str(getattr(outcome, "reason", "aborted"))
    return None


_GameTask = asyncio.Task[tuple[list[Trajectory] | None, list[RolloutError]]]
"""One game of a group played by ``GameRetry``: its trajectories, or None and its errors."""


@dataclass(frozen=True)
class GameRetry(RolloutStrategy):
    """Whole-game rollouts for multiplayer groups (a cookbook ``RolloutStrategy``).

    Every seat of every game runs concurrently. A game in which any seat raised, or whose
    match was aborted, is dropped whole and recorded in ``RolloutResult.errors``; while
    ``max_retries`` lasts it is replayed from scratch (``builder.replay_game(i)``: the same
    game and seed, fresh envs for all its seats). When no game survives,
    ``AllTrajectoriesFailedError`` is raised (the cookbook then skips the group).
    ``sample_timeout_s`` bounds every policy call. Picklable.
    """

    max_retries: int = 0
    """Replays allowed per group, over all its games."""
    sample_timeout_s: float | None = None
    """Time limit of one policy call (None: no limit)."""

    async def _play(
        self, envs: Sequence[Env], policy: TokenPolicy
    ) -> tuple[list[Trajectory] | None, list[RolloutError]]:
        results = await asyncio.gather(
            *(
                do_single_rollout(policy, env, sample_timeout_s=self.sample_timeout_s)
                for env in envs
            ),
            return_exceptions=True,
        )
        errors: list[RolloutError] = []
        for result in results:
            if isinstance(result, KeyboardInterrupt | SystemExit):
                raise result
            if isinstance(result, BaseException):
                errors.append(RolloutError(type(result).__name__, str(result)))
        if not errors and (reason := _abort_reason(envs)) is not None:
            errors.append(RolloutError("MatchAborted", reason))
        if errors:
            return None, errors
        return [r for r in results if isinstance(r, Trajectory)], errors

    async def execute(  # type: ignore[override]
        self, env_group_builder: EnvGroupBuilder, policy: TokenPolicy
    ) -> RolloutResult:
        """Play the group's games (see the class docstring)."""
        envs = list(await env_group_builder.make_envs())
        games = _games(envs)
        replay = getattr(env_group_builder, "replay_game", None)
        retries = self.max_retries
        played: dict[int, tuple[list[Env], list[Trajectory]]] = {}
        errors: list[RolloutError] = []
        replays: list[EnvGroupBuilder] = []
        tasks: dict[_GameTask, int] = {}
        finished: asyncio.Queue[_GameTask] = asyncio.Queue()  # games as they end (O(1) each)
        current: dict[int, list[Env]] = {}
        index_of = {slot: getattr(envs[p[0]], "game_index", slot) for slot, p in enumerate(games)}

        def launch(slot: int, game_envs: list[Env]) -> None:
            current[slot] = game_envs
            task = asyncio.ensure_future(self._play(game_envs, policy))
            tasks[task] = slot
            task.add_done_callback(finished.put_nowait)

        try:
            for slot, positions in enumerate(games):
                launch(slot, [envs[i] for i in positions])
            while tasks:
                done = [await finished.get()]
                while not finished.empty():
                    done.append(finished.get_nowait())
                for task in done:
                    slot = tasks.pop(task)
                    trajectories, game_errors = task.result()
                    errors.extend(game_errors)
                    if trajectories is not None:
                        played[slot] = (current[slot], trajectories)
                    elif retries > 0:
                        retries -= 1
                        if replay is not None:
                            rebuilt: EnvGroupBuilder = replay(index_of[slot])
                        else:
                            rebuilt = env_group_builder
                        replays.append(rebuilt)
                        launch(slot, list(await rebuilt.make_envs()))
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for rebuilt in replays:
                if rebuilt is not env_group_builder:
                    await rebuilt.cleanup()
        if not played:
            first = errors[0] if errors else RolloutError("NoGames", "the group had no games")
            raise AllTrajectoriesFailedError(
                f"every game of the group failed ({len(errors)} errors, "
                f"max_retries={self.max_retries}); first: {first.error_type}: "
                f"{first.error_message}"
            )
        out_envs: list[Env] = []
        out_trajectories: list[Trajectory] = []
        for slot in sorted(played):
            game_envs, trajectories = played[slot]
            out_envs.extend(game_envs)
            out_trajectories.extend(trajectories)
        return RolloutResult(trajectories=out_trajectories, envs=out_envs, errors=errors)


async def do_group_rollout(
    builder: EnvGroupBuilder,
    policy: TokenPolicy,
    *,
    strategy: RolloutStrategy | None = None,
    sample_timeout_s: float | None = None,
) -> TrajectoryGroup:
    """Build the group's envs, play them all concurrently and score the group.

    The default strategy is ``GameRetry(max_retries=0, sample_timeout_s=...)``: a game in
    which a seat fails or whose match aborts is dropped whole and listed in
    ``TrajectoryGroup.rollout_errors``. Raises AllTrajectoriesFailedError when no game
    survives. ``builder.cleanup()`` runs in every case, as in the cookbook.
    """
    if strategy is None:
        strategy = GameRetry(sample_timeout_s=sample_timeout_s)
    try:
        result = await strategy.execute(builder, policy)  # type: ignore[arg-type]
        branch = getattr(builder, "branch_played", None)
        if branch is not None:  # per-move values (arena.branching), before the scores
            timeout = getattr(strategy, "sample_timeout_s", sample_timeout_s)
            await branch(result.envs, result.trajectories, policy, timeout)
        scored = await builder.compute_group_rewards(result.trajectories, result.envs)
        return TrajectoryGroup(
            trajectories_G=result.trajectories,
            final_rewards_G=[reward for reward, _ in scored],
            metrics_G=[metrics for _, metrics in scored],
            rollout_errors=list(result.errors),
        )
    finally:
        await builder.cleanup()


__all__ = [
    "GameRetry",
    "SampleTimeoutError",
    "TokenPolicy",
    "do_group_rollout",
    "do_single_rollout",
]
