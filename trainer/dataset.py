"""Self-play datasets: each batch is a list of ``MatchGroupBuilder``s.

By default the learner plays every seat (self-play). ``bot_fraction`` of the groups
instead put the learner in one seat against bots (the learner's seat alternates), for a
mix of self-play and fixed opponents.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from arena.branching import BranchConfig
from arena.envs import MatchGroupBuilder
from arena.match import MatchSettings
from arena.seats import AgentSpec
from arena.types import EnvGroupBuilder, RLDataset
from trainer.config import TrainConfig


@dataclass(frozen=True)
class SelfPlayDataset(RLDataset):
    """``num_batches`` batches of ``batch_size`` groups of ``group_size`` games, played as
    ``settings`` says."""

    settings: MatchSettings
    """How the games are played (``arena.match.MatchSettings``), carried whole into every
    group."""
    num_batches: int
    batch_size: int
    group_size: int
    seed: int = 0
    bot_fraction: float = 0.0
    bots: tuple[str, ...] = ("random",)
    run_id: str | None = None
    learner_name: str = "learner"
    shared_deal: bool = True
    """Every game of a group is dealt alike (``MatchGroupBuilder.deal_seed``); each group
    is dealt its own."""
    branching: BranchConfig | None = None
    """Branch the played games for per-move values (``MatchGroupBuilder.branching``)."""

    @classmethod
    def for_game(cls, config: TrainConfig, settings: MatchSettings) -> SelfPlayDataset:
        """The dataset a run with ``config`` plays ``settings``' game from."""
        return cls(
            settings=settings,
            num_batches=config.num_batches,
            batch_size=config.batch_size,
            group_size=config.group_size,
            seed=config.seed,
            bot_fraction=config.bot_fraction,
            bots=config.bots,
            run_id=config.run_name,
            shared_deal=config.shared_deal,
            branching=config.branching(),
        )

    @property
    def game_id(self) -> str:
        return self.settings.game_id

    @property
    def num_players(self) -> int:
        return self.settings.num_players

    def __len__(self) -> int:
        return self.num_batches

    def group(
        self,
        index: int,
        g: int,
        learner_seats: tuple[int, ...] | None = None,
        opponents: tuple[str | AgentSpec, ...] = (),
    ) -> MatchGroupBuilder:
        """Group ``g`` of batch ``index``: self-play, or the learner in ``learner_seats``
        against ``opponents`` (bot names or agent specs, in seat order)."""
        seed = (self.seed * 1_000_003 + index * self.batch_size + g) * self.group_size
        return MatchGroupBuilder(
            self.settings,
            learner_seats=learner_seats,
            opponents=opponents,
            group_size=self.group_size,
            seed=seed,
            deal_seed=seed if self.shared_deal else None,
            group_id=f"b{index}g{g}",
            run_id=self.run_id,
            learner_name=self.learner_name,
            branching=self.branching,
        )

    def get_batch(self, index: int, count: int | None = None) -> Sequence[EnvGroupBuilder]:
        """Batch ``index``: ``count`` groups (None: ``batch_size``; a multi-game run
        gives each game its share), ``bot_fraction`` of them against bots."""
        if not 0 <= index < self.num_batches:
            raise IndexError(f"batch {index} out of range 0..{self.num_batches - 1}")
        count = self.batch_size if count is None else count
        bot_groups = round(self.bot_fraction * count)
        builders: list[EnvGroupBuilder] = []
        for g in range(count):
            if g < bot_groups:
                seat = (index + g) % self.num_players
                bot = self.bots[g % len(self.bots)]
                builders.append(self.group(index, g, (seat,), (bot,) * (self.num_players - 1)))
            else:
                builders.append(self.group(index, g))
        return builders
