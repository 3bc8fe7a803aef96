"""The one place a match is built (``arena.match``): line-ups and the one seeding rule."""

from __future__ import annotations

from dataclasses import dataclass, field

from arena.coordinator import BotAgent, SeatAgent
from arena.envs import MatchGroupBuilder
from arena.match import LearnerSeat, Lineup, LiveSeat, build_match, seat_seed
from arena.play import play_matches
from games.bots import make_bot


@dataclass(frozen=True)
class SeedRecorder:
    """A random bot that notes the seed each of its seats was built with."""

    built: list[tuple[int, int]] = field(default_factory=list, hash=False, compare=False)

    @property
    def name(self) -> str:
        return "recorder"

    def check(self, game_id: str) -> None:
        pass

    def build(self, seat: int, game_id: str, seed: int) -> SeatAgent:
        self.built.append((seat, seed))
        return BotAgent(make_bot("random", seed=seed), game_id)


def test_the_game_gets_the_match_seed_and_each_seat_its_seat_seed() -> None:
    recorder = SeedRecorder()
    coordinator = build_match(Lineup("TicTacToe-v0", (recorder, recorder), seed=7))
    assert coordinator.session.seed == 7
    assert recorder.built == [(0, seat_seed(7, 0)), (1, seat_seed(7, 1))]
    assert coordinator.players == ("recorder", "recorder")
    coordinator.abort("test over")


def test_learner_and_live_seats_get_no_built_agent() -> None:
    recorder = SeedRecorder()
    live = BotAgent(make_bot("random", seed=0), "TicTacToe-v0")
    lineup = Lineup("TicTacToe-v0", (LearnerSeat("checkpoint:run@3"), LiveSeat("human")), 1)
    coordinator = build_match(lineup, seated={1: live})
    assert coordinator.learner_seats == [0] and coordinator.agents == {1: live}
    assert coordinator.players == ("checkpoint:run@3", "human")
    coordinator.abort("test over")
    coordinator = build_match(Lineup("TicTacToe-v0", (LearnerSeat(), recorder), 5))
    assert recorder.built == [(1, seat_seed(5, 1))]
    coordinator.abort("test over")


async def test_play_and_training_groups_follow_the_same_rule() -> None:
    played = SeedRecorder()
    await play_matches("TicTacToe-v0", [played, "random"], 3, seed=40)
    assert sorted(played.built) == [(0, seat_seed(s, 0)) for s in (40, 41, 42)]
    grouped = SeedRecorder()
    builder = MatchGroupBuilder(
        "TicTacToe-v0", learner_seats=(1,), opponents=(grouped,), num_games=2, seed=40
    )
    coordinators = builder.make_coordinators()
    assert [c.session.seed for c in coordinators] == [40, 41]
    assert grouped.built == [(0, seat_seed(40, 0)), (0, seat_seed(41, 0))]
    for coordinator in coordinators:
        coordinator.abort("test over")
