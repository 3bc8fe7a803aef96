"""From trajectory groups to datums: advantages, masking, merging of turns.

Advantages are group-centred (GRPO-style): each trajectory's total reward minus the mean
of its group. ``RoleBaseline`` offers the role-conditioned alternative (SPIRAL's RAE): an
exponential moving average of reward per game and seat, subtracted instead of the group
mean, for games where one seat is favoured.

A datum holds one trajectory's tokens (observations and actions, with consecutive turns
merged when the next observation extends the previous observation plus action). Only
action tokens carry weight: each has the sampler's logprob and the trajectory's advantage.
Datums are the cookbook's (``trajectory_to_data``): ``target_tokens``, ``logprobs``,
``advantages`` and ``mask`` (1 on action tokens); ``mask`` is for arena's own use (the KL
penalty, token counts) and is removed by ``wire_datums`` before a datum is sent, so the
service gets only the loss function's documented inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import tinker
from tinker import types

from arena.branching import VALUE_AFTER, VALUE_BEFORE, branch_counts, transition_advantages
from arena.renderers import prompt_tokens
from arena.types import Trajectory, TrajectoryGroup
from trainer.losses import get_loss


def is_aborted(metrics: dict[str, float | int]) -> bool:
    """True when the trajectory's match was aborted (it carries no learning signal)."""
    return bool(metrics.get("aborted", 0))


def won_by_forfeit(metrics: dict[str, float | int]) -> bool:
    """True when the trajectory's seat won because another seat forfeited (an invalid
    answer): its own moves did not win the game."""
    return bool(metrics.get("win", 0)) and bool(metrics.get("opponent_forfeit", 0))


def group_centered_advantages(rewards_G: Sequence[float]) -> list[float]:
    """Each reward minus the group mean."""
    if not rewards_G:
        return []
    mean = sum(rewards_G) / len(rewards_G)
    return [r - mean for r in rewards_G]


@dataclass
class RoleBaseline:
    """Exponential moving average of reward per (game, seat): SPIRAL's role-conditioned
    advantage estimation. ``advantage = reward - baseline[game, seat]``."""

    decay: float = 0.95
    """Weight kept by the old value at each update."""
    values: dict[str, float] = field(default_factory=dict)

    def advantages(
        self, game_id: str, seats: Sequence[int], rewards: Sequence[float]
    ) -> list[float]:
        """Advantages against the current baselines, then update them with ``rewards``."""
        out = []
        for seat, reward in zip(seats, rewards, strict=True):
            key = f"{game_id}/{seat}"
            baseline = self.values.get(key, 0.0)
            out.append(reward - baseline)
        for seat, reward in zip(seats, rewards, strict=True):
            key = f"{game_id}/{seat}"
            old = self.values.get(key)
            self.values[key] = (
                reward if old is None else self.decay * old + (1 - self.decay) * reward
            )
        return out


@dataclass
class PreparedGroup:
    """The usable part of a trajectory group, with advantages."""

    trajectories: list[Trajectory]
    advantages: list[float]
    """Per trajectory: its total reward minus its baseline."""
    dropped_aborted: int
    dropped_constant: bool
    """True when the group was dropped because all its rewards (and, with branching,
    all its moves' advantages) were equal."""
    totals: list[float] = field(default_factory=list)
    """Per trajectory: its total reward (with ``advantages``, its baseline)."""

    def move_advantages(self) -> list[list[float]]:
        """Per trajectory, each transition's advantage: with branch values
        (``arena.branching``) the value after the move minus the value before it; without,
        the trajectory's advantage for every move."""
        out = []
        for i, (trajectory, advantage) in enumerate(
            zip(self.trajectories, self.advantages, strict=True)
        ):
            total = self.totals[i] if self.totals else advantage
            out.append(transition_advantages(trajectory, total, total - advantage))
        return out


def seat_centered_advantages(rewards_G: Sequence[float], seats_G: Sequence[int]) -> list[float]:
    """Each reward minus the mean reward of the same seat in the group.

    In self-play both seats of every game are in the group: centring them together would
    credit every move of the favoured seat and blame every move of the other, whatever
    their quality (the feedback loop behind self-play collapse). Centred per seat, a
    trajectory is compared with others that played the same role."""
    by_seat: dict[int, list[float]] = {}
    for seat, reward in zip(seats_G, rewards_G, strict=True):
        by_seat.setdefault(seat, []).append(reward)
    means = {seat: sum(values) / len(values) for seat, values in by_seat.items()}
    return [reward - means[seat] for seat, reward in zip(seats_G, rewards_G, strict=True)]


def prepare_group(
    group: TrajectoryGroup,
    *,
    game_id: str = "",
    drop_constant_reward: bool = False,
    baseline: RoleBaseline | None = None,
    per_seat: bool = False,
    forfeit_wins_teach: bool = True,
) -> PreparedGroup:
    """Drop aborted trajectories, then compute advantages for the rest.

    With ``drop_constant_reward`` a group whose remaining rewards are all equal is dropped
    (it has no signal under group centring). Advantages are group-centred, or with
    ``per_seat`` centred within each seat of the group (``seat_centered_advantages``), or
    with ``baseline`` role-conditioned against a running average. The seat comes from
    each trajectory's ``seat`` metric. Without ``forfeit_wins_teach``, a trajectory that
    won because another seat forfeited is left out (it teaches nothing: its moves would
    get the forfeit's credit).
    """
    totals = group.get_total_rewards()
    keep = [
        i
        for i, m in enumerate(group.metrics_G)
        if not is_aborted(m) and (forfeit_wins_teach or not won_by_forfeit(m))
    ]
    dropped = sum(1 for m in group.metrics_G if is_aborted(m))
    trajectories = [group.trajectories_G[i] for i in keep]
    rewards = [totals[i] for i in keep]
    seats = [int(group.metrics_G[i].get("seat", 0)) for i in keep]
    if per_seat:
        advantages = seat_centered_advantages(rewards, seats)
        constant = all(a == 0 for a in advantages)
    else:
        advantages = []
        constant = len(set(rewards)) == 1
    if constant and keep and _has_branch_values(trajectories):
        # Equal results, yet the branches may tell the moves apart.
        centred = seat_centered_advantages(rewards, seats) if per_seat else None
        check = PreparedGroup(
            trajectories, centred or group_centered_advantages(rewards), 0, False, rewards
        )
        constant = all(a == 0 for moves in check.move_advantages() for a in moves)
    if not keep or (drop_constant_reward and constant):
        return PreparedGroup([], [], dropped, dropped_constant=bool(keep))
    if baseline is not None:
        advantages = baseline.advantages(game_id, seats, rewards)
    elif not per_seat:
        advantages = group_centered_advantages(rewards)
    return PreparedGroup(trajectories, advantages, dropped, dropped_constant=False, totals=rewards)


def batch_seat_means(
    groups: Sequence[TrajectoryGroup], game_ids: Sequence[str]
) -> dict[tuple[str, int], float]:
    """The mean total reward of each (game, seat) over the batch's finished trajectories."""
    sums: dict[tuple[str, int], list[float]] = {}
    for group, game_id in zip(groups, game_ids, strict=True):
        for metrics, total in zip(group.metrics_G, group.get_total_rewards(), strict=True):
            if not is_aborted(metrics):
                sums.setdefault((game_id, int(metrics.get("seat", 0))), []).append(total)
    return {key: sum(values) / len(values) for key, values in sums.items()}


def batch_centred_group(
    group: TrajectoryGroup,
    game_id: str,
    means: Mapping[tuple[str, int], float],
    *,
    forfeit_wins_teach: bool = True,
) -> PreparedGroup | None:
    """A group whose games all ended alike, centred on the batch (``means``, from
    ``batch_seat_means``) instead of within itself; None when that leaves no signal."""
    prepared = prepare_group(group, game_id=game_id, forfeit_wins_teach=forfeit_wins_teach)
    if not prepared.trajectories:
        return None
    keep = [
        m
        for m in group.metrics_G
        if not is_aborted(m) and (forfeit_wins_teach or not won_by_forfeit(m))
    ]
    seats = [int(m.get("seat", 0)) for m in keep]
    advantages = [
        reward - means.get((game_id, seat), reward)
        for reward, seat in zip(prepared.totals, seats, strict=True)
    ]
    if all(abs(a) < 1e-9 for a in advantages):
        return None
    return PreparedGroup(
        prepared.trajectories, advantages, prepared.dropped_aborted, False, prepared.totals
    )


def _has_branch_values(trajectories: Sequence[Trajectory]) -> bool:
    return any(
        VALUE_BEFORE in t.metrics or VALUE_AFTER in t.metrics
        for trajectory in trajectories
        for t in trajectory.transitions
    )


def token_datum(
    tokens: list[int], logprobs: list[float], advantages: list[float], mask: list[float]
) -> types.Datum:
    """A policy-gradient datum of ``tokens``, each with its logprob, advantage and mask
    (1 on answer tokens), shifted by one as the loss reads them."""
    # Position t predicts token t+1: inputs drop the last token, targets drop the first.
    n = len(tokens) - 1
    return types.Datum(
        model_input=tinker.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": types.TensorData(data=tokens[1:], dtype="int64", shape=[n]),
            "logprobs": types.TensorData(data=logprobs[1:], dtype="float32", shape=[n]),
            "advantages": types.TensorData(data=advantages[1:], dtype="float32", shape=[n]),
            "mask": types.TensorData(data=mask[1:], dtype="float32", shape=[n]),
        },
    )


def wire_datums(
    datums: Sequence[types.Datum], loss_fn: str, keep: Sequence[str] = ()
) -> list[types.Datum]:
    """The datums as sent to ``forward_backward``: only the loss's documented inputs
    (``trainer.losses.Loss.wire_inputs``) and those named in ``keep`` (``mask``, for the
    local backend's exact KL). Raises ValueError for an unknown loss."""
    keep = (*get_loss(loss_fn).wire_inputs, *keep)
    out = []
    for datum in datums:
        inputs = datum.loss_fn_inputs
        if all(k in keep for k in inputs):
            out.append(datum)
        else:
            kept = {k: v for k, v in inputs.items() if k in keep}
            out.append(types.Datum(model_input=datum.model_input, loss_fn_inputs=kept))
    return out


def scale_advantages(datums: Sequence[types.Datum], scale: float) -> list[types.Datum]:
    """The datums with every advantage multiplied by ``scale``."""
    out = []
    for datum in datums:
        inputs = dict(datum.loss_fn_inputs)
        advantages = inputs["advantages"]
        values = [float(v) * scale for v in advantages.data or []]
        inputs["advantages"] = types.TensorData(
            data=values, dtype="float32", shape=advantages.shape
        )
        out.append(types.Datum(model_input=datum.model_input, loss_fn_inputs=inputs))
    return out


def trajectory_to_datums(
    trajectory: Trajectory, advantage: float | Sequence[float]
) -> list[types.Datum]:
    """Datums for one trajectory: observation tokens masked, action tokens weighted by
    ``advantage`` (one for every move, or one per transition).

    Consecutive turns share one datum while each observation extends the previous
    observation plus action; otherwise a new datum starts. Actions sampled without
    logprobs get logprob 0.0 (fine for ``cross_entropy``; importance sampling needs them).
    """
    datums: list[types.Datum] = []
    tokens: list[int] = []
    logprobs: list[float] = []
    advs: list[float] = []
    mask: list[float] = []
    per_move = (
        [float(advantage)] * len(trajectory.transitions)
        if isinstance(advantage, int | float)
        else list(advantage)
    )
    for transition, move_advantage in zip(trajectory.transitions, per_move, strict=True):
        ob = prompt_tokens(transition.ob)
        ac = transition.ac.tokens
        ac_logprobs = transition.ac.maybe_logprobs or [0.0] * len(ac)
        if tokens and len(ob) >= len(tokens) and ob[: len(tokens)] == tokens:
            new_ob = ob[len(tokens) :]
        else:
            if len(tokens) > 1 and any(mask):
                datums.append(token_datum(tokens, logprobs, advs, mask))
            tokens, logprobs, advs, mask = [], [], [], []
            new_ob = ob
        tokens += list(new_ob) + list(ac)
        logprobs += [0.0] * len(new_ob) + list(ac_logprobs)
        advs += [0.0] * len(new_ob) + [move_advantage] * len(ac)
        mask += [0.0] * len(new_ob) + [1.0] * len(ac)
    if len(tokens) > 1 and any(mask):
        datums.append(token_datum(tokens, logprobs, advs, mask))
    return datums


def groups_to_datums(prepared: Sequence[PreparedGroup]) -> list[types.Datum]:
    """All datums of a batch."""
    out: list[types.Datum] = []
    for group in prepared:
        moves = group.move_advantages()
        for trajectory, advantages in zip(group.trajectories, moves, strict=True):
            out.extend(trajectory_to_datums(trajectory, advantages))
    return out


def sampled_entropy(groups: Sequence[TrajectoryGroup]) -> float | None:
    """The sampler's entropy per action token, estimated as the mean of ``-logprob`` over
    every sampled action token of the groups' trajectories that were not aborted (those of
    groups dropped for a constant reward too: a deterministic policy's games are the ones
    that get dropped), as the cookbook's ``optim/entropy``; None without any logprob. A
    fall towards 0 is the policy turning deterministic."""
    total = 0.0
    count = 0
    for group in groups:
        for trajectory, metrics in zip(group.trajectories_G, group.metrics_G, strict=True):
            if is_aborted(metrics):
                continue
            for transition in trajectory.transitions:
                logprobs = transition.ac.maybe_logprobs
                if logprobs:
                    total -= float(sum(logprobs))
                    count += len(logprobs)
    return total / count if count else None


def weighted_tokens(datums: Sequence[types.Datum]) -> float:
    """How many tokens carry weight (the action tokens) in ``datums``: the sum of their
    ``mask`` (or, for cross-entropy datums, ``weights``)."""
    total = 0.0
    for datum in datums:
        weights = datum.loss_fn_inputs.get("mask") or datum.loss_fn_inputs.get("weights")
        if weights is not None and weights.data is not None:
            total += float(sum(weights.data))
    return total


MAX_CHARTED_MOVES = 12
"""Moves of a seat whose advantages are charted one by one (``advantage/move_N/...``);
later moves are counted with the last."""


def move_metrics(
    prepared: Sequence[PreparedGroup], groups: Sequence[TrajectoryGroup]
) -> dict[str, float]:
    """The spread of the advantages by move number (``advantage/move_N/std`` and
    ``.../mean_abs``: a seat's N-th move; with branching they differ from move to move),
    and what branching cost (``branch/games``, ``branch/moves``: continuations and the
    moves played in them; ``branch/moves_per_move``: continuation moves per move of the
    training games' learner seats)."""
    by_move: dict[int, list[float]] = {}
    for group in prepared:
        for per_move in group.move_advantages():
            for k, advantage in enumerate(per_move, start=1):
                by_move.setdefault(min(k, MAX_CHARTED_MOVES), []).append(advantage)
    out: dict[str, float] = {}
    for k, values in sorted(by_move.items()):
        mean = sum(values) / len(values)
        out[f"advantage/move_{k}/std"] = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
        out[f"advantage/move_{k}/mean_abs"] = sum(abs(v) for v in values) / len(values)
    trajectories = [t for g in groups for t in g.trajectories_G]
    games, moves = branch_counts(trajectories)
    if games:
        played = sum(len(t.transitions) for t in trajectories)
        out["branch/games"] = games
        out["branch/moves"] = moves
        out["branch/moves_per_move"] = moves / played if played else 0.0
    return out
