"""The trainer's side of the league: whom each group plays, past selves joining the pool,
the scores against each opponent, collapse detection and the leagues' saved state.

``matchmaking.league`` holds the league itself (PFSP sampling, the pool, collapse rules);
this module wires it to a run: its datasets, its checkpoints and its run directory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from arena.envs import MatchGroupBuilder
from arena.identity import PolicyKind, PolicyRef
from arena.seats import AgentSpec
from matchmaking.agents import ModelSeat, default_pool
from matchmaking.league import GroupPlan, League, PoolMember
from matchmaking.pfsp import seat0_win_rate
from matchmaking.players import player_spec
from storage.rundir import RunDirectory
from trainer.checkpoints import CheckpointBook
from trainer.config import TrainConfig
from trainer.dataset import SelfPlayDataset
from trainer.rollout import BatchRollout


def league_bot(name: str, config: TrainConfig) -> AgentSpec:
    """A league bot as a seat (``matchmaking.players.player_spec``): a bot, a language model
    as released (``model:smollm2``) or a served one (``openai:BASE_URL#MODEL``), sampled at
    the run's temperature and answer length and recorded under its own name."""
    return player_spec(name, temperature=config.temperature, max_tokens=config.max_tokens)


@dataclass
class LeaguePlay:
    """Each game's league of one run (``load`` builds it; None without league
    opponents)."""

    config: TrainConfig
    run_dir: RunDirectory
    leagues: dict[str, League]
    report: Callable[[str], None]

    @classmethod
    def load(
        cls,
        config: TrainConfig,
        run_dir: RunDirectory,
        resume: bool,
        report: Callable[[str], None],
    ) -> LeaguePlay | None:
        """Each game's league (None without league opponents): its own bots and its own
        scores against the past checkpoints, which every game's league shares; a resumed
        run's as it was saved."""
        if config.opponents != "league":
            return None
        leagues = {
            game_id: League(
                config.league_config(game_id), num_players=config.num_players, seed=config.seed
            )
            for game_id in config.games
        }
        state = run_dir.league_state() if resume else None
        if state is not None:
            states = state["games"] if config.multi_game else {config.games[0]: state}
            for game_id, league in leagues.items():
                if game_id in states:
                    league.load(states[game_id])
        return cls(config, run_dir, leagues, report)

    def write(self) -> None:
        """The leagues' state in the run directory (one game's as it is; several under
        ``games``)."""
        if self.config.multi_game:
            self.run_dir.write_league_state(
                {"games": {game_id: league.state() for game_id, league in self.leagues.items()}}
            )
        else:
            self.run_dir.write_league_state(next(iter(self.leagues.values())).state())

    def wants_snapshot(self, version: int) -> bool:
        """True when the weights after ``version`` updates should join the pool now."""
        first = next(iter(self.leagues.values()))
        return first.wants_snapshot(version) and all(m.step != version for m in first.members)

    async def snapshot(
        self, client: Any, sampler: Any, version: int, checkpoints: CheckpointBook
    ) -> None:
        """The sampler's weights (after ``version`` updates) join the league's pool: on
        disk, so worker processes and later matches can load them (``run:NAME@version``);
        in memory, as the sampler the step already has."""
        name = f"league-{version:06d}"
        saved = await client.save_weights_for_sampler(name, user_metadata=checkpoints.metadata)
        path = str(saved.path)
        default_pool().put(path, sampler)
        policy = PolicyRef.checkpoint(checkpoints.run_name, version).key
        for league in self.leagues.values():
            league.add(PoolMember(policy=policy, sampler_path=path, step=version))
        checkpoints.log({"step": version, "sampler_path": path, "league": True})
        await checkpoints.record(version)

    def anchor(self, run_name: str, sampler: Any, path: str, version: int) -> None:
        """The run's best weights so far (saved at ``path``) stay in every pool."""
        default_pool().put(path, sampler)
        policy = PolicyRef.checkpoint(run_name, version).key
        for league in self.leagues.values():
            league.anchor(PoolMember(policy=policy, sampler_path=path, step=version))
        self.write()

    def plan(
        self,
        game_id: str,
        dataset: SelfPlayDataset,
        step: int,
        count: int,
    ) -> list[tuple[GroupPlan, MatchGroupBuilder]]:
        """Game ``game_id``'s ``count`` groups of step ``step``: each one's plan and
        builder (played as ``dataset.settings`` says)."""
        league = self.leagues[game_id]
        return [
            (plan, self._group(dataset, step, g, plan, league))
            for g, plan in enumerate(league.plan(step, count))
        ]

    def _group(
        self,
        dataset: SelfPlayDataset,
        step: int,
        g: int,
        plan: GroupPlan,
        league: League,
    ) -> MatchGroupBuilder:
        config = self.config
        if plan.kind is PolicyKind.LEARNER:
            return dataset.group(step, g)
        opponent: str | AgentSpec
        if plan.kind is PolicyKind.BOT:
            opponent = league_bot(plan.opponent, config)
        else:
            member = league.member(plan.opponent)
            opponent = ModelSeat(
                policy=member.policy,
                sampler_path=member.sampler_path,
                renderer=dataset.settings.renderer,
                observation_format=dataset.settings.observation_format,
                max_tokens=config.max_tokens,
                temperature=config.temperature,
                sample_timeout_s=config.sample_timeout_s,
            )
        others = (opponent,) * (config.num_players - 1)
        return dataset.group(step, g, (plan.learner_seat,), others)

    def update(
        self,
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
        for game_id, league in self.leagues.items():
            self_play: list[list[float]] = []
            invalid: list[float] = []
            for builder, group in zip(batch.builders, batch.groups, strict=True):
                if builder.game_id != game_id:
                    continue
                plan = plan_of[id(builder)]
                league.record(
                    plan, [float(m["score"]) for m in group.metrics_G if not m.get("aborted")]
                )
                if plan.kind is PolicyKind.LEARNER:
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
        self.write()
        return out
