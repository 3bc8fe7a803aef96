"""Credit for each move, by branching (VinePPO's Monte Carlo values, for several seats).

A training game is played to its end. Then, at some of its decision points, the game is
rebuilt as it stood there (the same deal, the recorded moves replayed: ``replay_turns``),
its chance is redrawn, and ``branches`` continuations are played from there with the same
players: the learner's policy in the learner's seats, the same bots or past checkpoints in
the others. The mean return of a point's continuations, per seat, is that seat's value of
the state; a move's advantage is the value after it minus the value before it
(``transition_advantages``). The continuations are only more sampling: they are played
concurrently, through the same policy, so a batching sampler sees them together.

Hidden information stays hidden from the policy: each seat's prompts in a continuation are
its own, rendered from its own messages. The branch is the trainer's, so the state it
continues from is the true one (the cards as dealt): the value is of the state, not of what
the seat knows of it, a baseline that does not depend on the seat's action.

Continuations are published to a private event bus: they are not recorded, rated or shown.
Their counts travel in each trajectory's metrics (``branch_games``, ``branch_moves``; each
trajectory of a game carries its share, so sums over trajectories are totals).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from arena.eventbus import EventBus
from arena.match import Lineup, build_match, start_session
from arena.rollouts import TokenPolicy, do_single_rollout
from arena.types import Trajectory
from games.limits import SessionLimits
from games.outcome import as_list
from games.replay import calls_of, replay_turns
from games.session import Status
from games.turnrecord import TurnRecord

VALUE_BEFORE = "value/before"
"""Transition metric: the seat's value at the last branch point at or before its move."""
VALUE_AFTER = "value/after"
"""Transition metric: the seat's value at the first branch point after its move (absent
when none follows: the game's result is the value after)."""
DECISION_LOG = "decision"
"""Transition log: how many moves the game had applied when the seat was asked."""

MAX_BRANCH_GAMES = 4096
"""Most continuations one group may play (``branches`` x points x games); a larger plan is
refused when the config is checked."""

Choice = Literal["random", "even"]


@dataclass(frozen=True)
class BranchConfig:
    """How a training game is branched. Plain, picklable configuration."""

    branches: int = 4
    """Continuations played from each branch point (K)."""
    points: int = 2
    """Branch points per game; 0: every decision point of the game."""
    choose: Choice = "random"
    """Which decision points: ``random`` (uniformly, without replacement) or ``even``
    (evenly spaced over the game)."""
    seed: int = 0
    """Seeds the choice of points and the continuations' chance."""

    def __post_init__(self) -> None:
        if self.branches < 1:
            raise ValueError(f"branches must be at least 1, got {self.branches}")
        if self.points < 0:
            raise ValueError(f"branch points must be 0 (every one) or more, got {self.points}")
        if self.choose not in ("random", "even"):
            raise ValueError(f"branch choice must be 'random' or 'even', got {self.choose!r}")

    def check_plan(self, group_size: int) -> None:
        """Raise ValueError when a group of ``group_size`` games could play more than
        ``MAX_BRANCH_GAMES`` continuations (with ``points`` 0 the count is the games')."""
        planned = self.branches * self.points * group_size
        if planned > MAX_BRANCH_GAMES:
            raise ValueError(
                f"branches x branch_points x group_size = {planned} continuations "
                f"a group, over the limit of {MAX_BRANCH_GAMES}: lower one of them"
            )

    def choose_points(self, decisions: Sequence[int], salt: str) -> list[int]:
        """The branch points among a game's ``decisions`` (sorted, distinct). The start
        is one too: its value is the state's as dealt, where the group's baseline is an
        average over the group's deals and its other seats' first moves."""
        candidates = sorted(set(decisions))
        if self.points == 0 or self.points >= len(candidates):
            return candidates
        if self.choose == "even":
            step = len(candidates) / self.points
            return sorted({candidates[int(step * i + step / 2)] for i in range(self.points)})
        rng = random.Random(f"{self.seed}/{salt}")
        return sorted(rng.sample(candidates, self.points))


def decision_points(turns: Sequence[TurnRecord]) -> list[int]:
    """Where a game can be branched: the number of moves applied before each call into the
    game (each move of a game in turns; each round of a simultaneous game, and each retry
    within a round)."""
    return [call[0].index for call in calls_of(turns)]


@dataclass
class _Game:
    """One played game of the group, as branching sees it."""

    lineup: Lineup
    limits: SessionLimits
    turns: list[TurnRecord]
    envs: list[Any]
    """The played game's learner envs (``arena.envs.PlayerEnv``)."""
    trajectories: list[Trajectory]


async def _continue(
    game: _Game,
    point: int,
    index: int,
    policy: TokenPolicy,
    config: BranchConfig,
    bus: EventBus,
    sample_timeout_s: float | None,
) -> tuple[dict[int, float], int] | None:
    """One continuation of ``game`` from ``point`` under the played game's limits (its
    clocks included): each learner seat's reward and the moves played; None when it was
    aborted."""
    lineup = game.lineup
    salt = f"{config.seed}/{lineup.seed}/{point}/{index}"
    session = start_session(lineup, game.limits)  # cheap: a reset, the moves replayed
    replay_turns(session, game.turns[:point])
    session.reseed(random.Random(salt).getrandbits(63))
    branch_lineup = dataclasses.replace(
        lineup, seed=random.Random(f"seats/{salt}").getrandbits(31), game_seed=lineup.deal
    )
    coordinator = build_match(
        branch_lineup,
        bus=bus,
        limits=game.limits,
        session=session,
        rated=False,
    )
    # Fresh envs of the played ones' kind (``arena.envs.PlayerEnv``) for the same seats.
    envs = [
        type(env)(coordinator, env.seat, env.renderer, env.observation_format) for env in game.envs
    ]
    try:
        results = await asyncio.gather(
            *(do_single_rollout(policy, env, sample_timeout_s=sample_timeout_s) for env in envs),
            return_exceptions=True,
        )
        if any(isinstance(r, BaseException) for r in results):
            return None
        await coordinator.wait_done()
        outcome = coordinator.outcome
        if outcome is None or outcome.status is Status.ABORTED:
            return None
        final = as_list(outcome.rewards, session.num_players)
        rewards = {env.seat: final[env.seat] for env in envs}
        return rewards, len(session.turns) - point
    finally:
        if not coordinator.stopped:
            await coordinator.close("the branch ended")


async def branch_group(
    envs: Sequence[Any],
    trajectories: Sequence[Trajectory],
    policy: TokenPolicy,
    config: BranchConfig,
    *,
    sample_timeout_s: float | None = None,
) -> None:
    """Branch every game of a played group (``envs``: its ``arena.envs.PlayerEnv``s, in
    the order of ``trajectories``) and write each move's values into its
    transition's metrics (``VALUE_BEFORE``, ``VALUE_AFTER``); each trajectory's share of
    the branch games and moves goes into ``branch_games`` and ``branch_moves`` of its last
    transition's metrics (read back by ``branch_counts``)."""
    games: dict[int, _Game] = {}
    for env, trajectory in zip(envs, trajectories, strict=True):
        coordinator = env.coordinator
        lineup = env.lineup
        if lineup is None or coordinator.outcome is None:
            continue
        game = games.get(id(coordinator))
        if game is None:
            game = games[id(coordinator)] = _Game(
                lineup, coordinator.session.limits, list(coordinator.session.turns), [], []
            )
        game.envs.append(env)
        game.trajectories.append(trajectory)
    bus = EventBus()  # continuations are the trainer's: nobody records or shows them
    plans: list[tuple[_Game, int]] = []
    for game in games.values():
        decisions = sorted({d for t in game.trajectories for d in _decisions(t)})
        salt = f"{game.lineup.seed}/{game.lineup.deal}"
        usable = set(decision_points(game.turns))
        chosen = config.choose_points([d for d in decisions if d in usable], salt)
        plans += [(game, point) for point in chosen]
    jobs = [
        _continue(game, point, k, policy, config, bus, sample_timeout_s)
        for game, point in plans
        for k in range(config.branches)
    ]
    results = await asyncio.gather(*jobs)
    values: dict[tuple[int, int], dict[int, list[float]]] = {}
    played: dict[int, tuple[int, int]] = {}
    for (game, point), result in zip(
        [plan for plan in plans for _ in range(config.branches)], results, strict=True
    ):
        games_moves = played.get(id(game), (0, 0))
        if result is None:
            played[id(game)] = (games_moves[0] + 1, games_moves[1])
            continue
        rewards, moves = result
        played[id(game)] = (games_moves[0] + 1, games_moves[1] + moves)
        per_seat = values.setdefault((id(game), point), {})
        for seat, reward in rewards.items():
            per_seat.setdefault(seat, []).append(reward)
    for game in games.values():
        count, moves = played.get(id(game), (0, 0))
        for env, trajectory in zip(game.envs, game.trajectories, strict=True):
            seat_values = {
                point: sum(rs) / len(rs)
                for (key, point), by_seat in values.items()
                if key == id(game) and (rs := by_seat.get(env.seat))
            }
            _annotate(trajectory, seat_values)
            last = trajectory.transitions[-1].metrics
            last["branch_games"] = count / len(game.envs)
            last["branch_moves"] = moves / len(game.envs)


def _decisions(trajectory: Trajectory) -> list[int]:
    out = []
    for transition in trajectory.transitions:
        decision = transition.logs.get(DECISION_LOG)
        if isinstance(decision, int):
            out.append(decision)
    return out


def _annotate(trajectory: Trajectory, values: Mapping[int, float]) -> None:
    """Each transition's values before and after (see ``transition_advantages``)."""
    points = sorted(values)
    for transition in trajectory.transitions:
        decision = transition.logs.get(DECISION_LOG)
        if not isinstance(decision, int):
            continue
        before = max((p for p in points if p <= decision), default=None)
        after = min((p for p in points if p > decision), default=None)
        if before is not None:
            transition.metrics[VALUE_BEFORE] = values[before]
        if after is not None:
            transition.metrics[VALUE_AFTER] = values[after]


def transition_advantages(trajectory: Trajectory, final: float, baseline: float) -> list[float]:
    """Each transition's advantage: its value after (the game's result ``final`` when no
    branch point follows) minus its value before (``baseline`` when no branch point
    precedes). Without branch values every transition gets ``final - baseline``."""
    out = []
    for transition in trajectory.transitions:
        after = transition.metrics.get(VALUE_AFTER)
        before = transition.metrics.get(VALUE_BEFORE)
        out.append(
            (final if after is None else float(after))
            - (baseline if before is None else float(before))
        )
    return out


def branch_counts(trajectories: Sequence[Trajectory]) -> tuple[float, float]:
    """Total continuations and continuation moves of ``trajectories``' games."""
    games = moves = 0.0
    for trajectory in trajectories:
        if trajectory.transitions:
            last = trajectory.transitions[-1].metrics
            games += float(last.get("branch_games", 0.0))
            moves += float(last.get("branch_moves", 0.0))
    return games, moves
