"""The league: the learner's latest self, a pool of its past checkpoints, and bots.

Pure self-play drifts: the policy learns to beat its current self and forgets how to beat
anyone else. The league keeps what the policy was: every ``snapshot_every`` steps the
current weights join a pool of past checkpoints (capped at ``pool_size``; the oldest leaves
first, except the first member, the policy as training started, which always stays). Each
step's groups are then split by share: ``past_share`` of them against pool members chosen by
PFSP weights from the learner's score against each (the hard ones most often),
``bot_share`` against bots (PFSP-weighted too), and the rest self-play. In a game against a
pool member or a bot the learner plays one seat (alternating between groups) and only its
seats produce trajectories.

The run's best checkpoint by its game's yardstick (``anchor``) joins the pool and stays
there while it is the best, whatever the pool's size: what the run gained is always among
the opponents it must keep beating.

Collapse (the policy's entropy falling to a small share of its start, or invalid moves
rising for several steps, see ``matchmaking.pfsp.CollapseDetector``) raises the share of
past opponents to ``collapse_share`` until ``collapse_steps`` steps after its last sign.

The league's state (pool, scores) is plain data (``state()`` / ``load()``) so a resumed run
continues with the same pool.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from arena.identity import PolicyKind, PolicyRef
from matchmaking.pfsp import (
    CollapseDetector,
    ScoreTracker,
    Weighting,
    pfsp_probabilities,
    sample_opponents,
)

Opponents = Literal["self", "league"]


def bot_key(name: str) -> str:
    """The key a league bot's score is kept under: ``bot:NAME`` for a bot, the model's own
    text for a language model (``model:smollm2``, ``openai:BASE_URL#MODEL``)."""
    ref = PolicyRef.parse(name)
    return PolicyRef(PolicyKind.BOT, ref.name).key if ref.kind is PolicyKind.BOT else name


@dataclass(frozen=True)
class LeagueConfig:
    """How the league mixes opponents (see the module docstring)."""

    past_share: float = 0.3
    """Share of each step's groups against past checkpoints (once the pool has any)."""
    bot_share: float = 0.2
    """Share of each step's groups against bots."""
    bots: tuple[str, ...] = ("random",)
    """Bot names, or language models (``model:smollm2``, ``openai:BASE_URL#MODEL``)."""
    snapshot_every: int = 20
    """Steps between two checkpoints joining the pool."""
    pool_size: int = 8
    """Most past checkpoints in the pool."""
    weighting: Weighting = "hard"
    """PFSP weighting: ``hard`` (1 - x)^p, ``var`` x (1 - x), or ``uniform``."""
    pfsp_p: float = 2.0
    collapse_share: float = 0.6
    """Share of groups against past checkpoints while collapse is flagged."""
    collapse_steps: int = 20
    average: bool = False
    """The past as the average policy (NFSP, fictitious play): the pool is a uniform sample
    of every snapshot of the run (reservoir sampling: the n-th snapshot joins with
    probability ``pool_size / n``, in place of a random member), and its members are
    chosen uniformly, not by PFSP. Playing a uniformly drawn past policy in each group is
    playing the average of the run's policies, which converges where the latest does
    not."""

    def __post_init__(self) -> None:
        for name in ("past_share", "bot_share", "collapse_share"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        if self.past_share + self.bot_share > 1.0:
            raise ValueError("past_share + bot_share must not exceed 1")
        if self.snapshot_every < 1 or self.pool_size < 1:
            raise ValueError("snapshot_every and pool_size must be at least 1")


def check_league_models(names: Sequence[str]) -> None:
    """Raise ValueError (BadPolicyRef, ModelNotFound) for a league bot (``LeagueConfig.bots``)
    that is neither a bot's name nor a language model found here (``model:NAME``) or a
    served one (``openai:BASE_URL#MODEL``); bots' names are checked against each game
    later."""
    from arena.models import resolve_model

    for name in names:
        ref = PolicyRef.parse(name)
        if ref.kind is PolicyKind.MODEL:
            resolve_model(ref.name)
        elif ref.kind not in (PolicyKind.BOT, PolicyKind.OPENAI):
            raise ValueError(
                f"league_bots: {name} is not a bot, model:NAME or openai:BASE_URL#MODEL "
                "(past checkpoints join the league by themselves)"
            )


@dataclass(frozen=True)
class PoolMember:
    """A past checkpoint in the pool."""

    policy: str
    """Its policy key (``checkpoint:run@step``)."""
    sampler_path: str
    step: int


@dataclass(frozen=True)
class GroupPlan:
    """Who the learner plays in one group: itself (``PolicyKind.LEARNER``), a pool member
    (``CHECKPOINT``), or a league bot (``BOT``: a bot, or a language model the league lists
    among its bots)."""

    kind: PolicyKind
    opponent: str = ""
    """The pool member's policy key, or the bot's name."""
    learner_seat: int = 0


@dataclass
class League:
    """The pool, the scores and the mixing (see the module docstring)."""

    config: LeagueConfig
    num_players: int = 2
    seed: int = 0
    members: list[PoolMember] = field(default_factory=list)
    scores: ScoreTracker = field(default_factory=ScoreTracker)
    collapse: CollapseDetector = field(default_factory=CollapseDetector)
    collapse_until: int = -1
    """The step until which collapse is being treated (-1: none)."""
    collapse_reason: str = ""
    best: PoolMember | None = None
    """The run's best checkpoint so far (see ``anchor``)."""
    snapshots: int = 0
    """Snapshots offered to the pool so far (``average``'s reservoir counts them)."""

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def wants_snapshot(self, step: int) -> bool:
        """True at the steps whose weights join the pool (step 0: the starting policy)."""
        return step % self.config.snapshot_every == 0

    def add(self, member: PoolMember) -> PoolMember | None:
        """Add a checkpoint; returns the member that left the pool to make room (with
        ``average``, possibly ``member`` itself), if any."""
        self.snapshots += 1
        self.members.append(member)
        if len(self.members) <= self.config.pool_size:
            return None
        # The first member (the starting policy) and the best one stay: forgetting them is
        # what the pool is there to prevent.
        keep = {self.members[0].policy} if self.config.pool_size > 1 else set()
        if self.best is not None:
            keep.add(self.best.policy)
        if self.config.average:
            # Reservoir sampling: each snapshot so far stays with the same probability.
            if self._rng.random() >= self.config.pool_size / self.snapshots:
                return self.members.pop()
            candidates = [i for i, old in enumerate(self.members[:-1]) if old.policy not in keep]
            if candidates:
                return self.members.pop(self._rng.choice(candidates))
            return self.members.pop()
        for index, old in enumerate(self.members):
            if old.policy not in keep and old is not member:
                return self.members.pop(index)
        return None

    def anchor(self, member: PoolMember) -> None:
        """Make ``member`` the run's best checkpoint: it joins the pool (if it is not in it
        yet) and is never evicted while it is the best; the previous best becomes an
        ordinary member again."""
        self.best = member
        if all(m.policy != member.policy for m in self.members):
            self.add(member)

    def member(self, policy: str) -> PoolMember:
        """The pool member with this key. Raises KeyError."""
        for m in self.members:
            if m.policy == policy:
                return m
        raise KeyError(policy)

    def past_share(self, step: int) -> float:
        """This step's share of groups against past checkpoints."""
        if not self.members:
            return 0.0
        if step <= self.collapse_until:
            return max(self.config.past_share, self.config.collapse_share)
        return self.config.past_share

    def plan(self, step: int, groups: int) -> list[GroupPlan]:
        """Who the learner plays in each of the step's ``groups`` groups."""
        past = round(self.past_share(step) * groups)
        bots = min(round(self.config.bot_share * groups), groups - past)
        plans: list[GroupPlan] = []
        pool = {m.policy: self.scores.score(m.policy) for m in self.members}
        weighting = "uniform" if self.config.average else self.config.weighting
        chosen = sample_opponents(
            pfsp_probabilities(pool, weighting, self.config.pfsp_p), past, self._rng
        )
        bot_scores = {bot_key(b): self.scores.score(bot_key(b)) for b in self.config.bots}
        chosen_bots = sample_opponents(
            pfsp_probabilities(bot_scores, self.config.weighting, self.config.pfsp_p),
            bots,
            self._rng,
        )
        for g, opponent in enumerate(chosen):
            plans.append(GroupPlan(PolicyKind.CHECKPOINT, opponent, (step + g) % self.num_players))
        by_key = {bot_key(b): b for b in self.config.bots}
        for g, opponent in enumerate(chosen_bots):
            plans.append(
                GroupPlan(PolicyKind.BOT, by_key[opponent], (step + past + g) % self.num_players)
            )
        plans += [GroupPlan(PolicyKind.LEARNER)] * (groups - len(plans))
        return plans

    def record(self, plan: GroupPlan, learner_scores: Sequence[float]) -> None:
        """Add the learner's results against the plan's opponent to its score: one
        ``games.outcome`` score per game (1 win, 1/2 draw, 0 loss with two seats)."""
        if plan.kind is PolicyKind.LEARNER:
            return
        key = plan.opponent if plan.kind is PolicyKind.CHECKPOINT else bot_key(plan.opponent)
        for score in learner_scores:
            self.scores.record(key, score)

    def observe(
        self, step: int, entropy: float | None, invalid_per_game: float | None
    ) -> str | None:
        """Feed the step's figures (the policy's entropy per action token, invalid moves per
        self-play game) to the collapse detector; while it flags collapse, lean on the past
        until ``collapse_steps`` steps after the last flagged step. Returns the reason when
        a collapse starts at this step (not at the steps that prolong it)."""
        reason = self.collapse.update(entropy, invalid_per_game)
        if reason is None:
            return None
        started = step > self.collapse_until
        self.collapse_until = step + self.config.collapse_steps
        self.collapse_reason = reason
        return reason if started else None

    def metrics(self, step: int) -> dict[str, float]:
        """The league's figures for ``metrics.jsonl`` (cookbook-style names)."""
        out = {
            "league/pool_size": float(len(self.members)),
            "league/past_share": self.past_share(step),
            "league/bot_share": self.config.bot_share,
            "league/collapse": float(step <= self.collapse_until),
        }
        for key, score in self.scores.scores.items():
            out[f"league/score/{key}"] = score
        return out

    def state(self) -> dict[str, Any]:
        """JSON-ready state, for resuming."""
        return {
            "members": [asdict(m) for m in self.members],
            "scores": dict(self.scores.scores),
            "games": dict(self.scores.games),
            "collapse_until": self.collapse_until,
            "entropy_start": self.collapse.entropy_start,
            "best": asdict(self.best) if self.best is not None else None,
            "snapshots": self.snapshots,
        }

    def load(self, state: dict[str, Any]) -> None:
        """Restore ``state()``."""
        self.members = [PoolMember(**m) for m in state.get("members", [])]
        self.scores.scores = {k: float(v) for k, v in state.get("scores", {}).items()}
        self.scores.games = {k: int(v) for k, v in state.get("games", {}).items()}
        self.collapse_until = int(state.get("collapse_until", -1))
        start = state.get("entropy_start")
        self.collapse.entropy_start = float(start) if start is not None else None
        best = state.get("best")
        self.best = PoolMember(**best) if best else None
        self.snapshots = int(state.get("snapshots", len(self.members)))
