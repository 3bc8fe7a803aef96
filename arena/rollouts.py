"""Rollouts: run every env of a group concurrently with a token policy.

A token policy is async: ``(ModelInput, stop condition) -> TokensWithLogprobs``. A sampler
that batches concurrent requests (the local backend's) sees all seats of all games of a
group at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

from arena.envs import PlayerEnv
from arena.types import (
    Env,
    EnvGroupBuilder,
    Observation,
    StopCondition,
    TokensWithLogprobs,
    Trajectory,
    TrajectoryGroup,
    Transition,
)


class TokenPolicy(Protocol):
    """Samples an action for a prompt."""

    async def __call__(self, ob: Observation, stop: StopCondition) -> TokensWithLogprobs:
        """Tokens (and logprobs) continuing ``ob`` until ``stop``."""
        ...


async def do_single_rollout(policy: TokenPolicy, env: Env) -> Trajectory:
    """Play one env to the end. If the policy fails, the env's match is aborted (so the
    other seats wake) and the error propagates."""
    try:
        ob, stop = await env.initial_observation()
        transitions: list[Transition] = []
        if env.episode_done_at_start():
            return Trajectory(transitions=transitions, final_ob=ob)
        while True:
            ac = await policy(ob, stop)
            if isinstance(env, PlayerEnv):  # records the sampler's logprobs with the move
                result = await env.step(ac.tokens, ac.maybe_logprobs)
            else:
                result = await env.step(ac.tokens)
            transitions.append(
                Transition(
                    ob=ob,
                    ac=ac,
                    reward=result.reward,
                    episode_done=result.episode_done,
                    metrics=result.metrics,
                )
            )
            ob, stop = result.next_observation, result.next_stop_condition
            if result.episode_done:
                return Trajectory(transitions=transitions, final_ob=ob)
    except BaseException as exc:
        abort = getattr(env, "abort", None)
        if abort is not None:
            abort(f"rollout failed: {type(exc).__name__}: {exc}")
        raise


async def do_group_rollout(builder: EnvGroupBuilder, policy: TokenPolicy) -> TrajectoryGroup:
    """Build the group's envs, roll them all out concurrently and score the group.

    When a rollout fails, the others still run to their (aborted) end before the first
    error is raised, so nothing is left waiting.
    """
    envs: Sequence[Env] = await builder.make_envs()
    results = await asyncio.gather(
        *(do_single_rollout(policy, env) for env in envs), return_exceptions=True
    )
    for result in results:
        if isinstance(result, BaseException):
            raise result
    trajectories = [r for r in results if isinstance(r, Trajectory)]
    rewards_and_metrics = await builder.compute_group_rewards(trajectories, envs)
    return TrajectoryGroup(
        trajectories_G=trajectories,
        final_rewards_G=[r for r, _ in rewards_and_metrics],
        metrics_G=[m for _, m in rewards_and_metrics],
    )
