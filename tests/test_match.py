"""The one place a match is built (``arena.match``): line-ups and the one seeding rule."""

from __future__ import annotations

from dataclasses import dataclass, field

from arena.envs import MatchGroupBuilder
from arena.match import LearnerSeat, Lineup, LiveSeat, MatchSettings, build_match, seat_seed
from arena.play import play_matches
from arena.seats import BotAgent, SeatAgent
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
        "TicTacToe-v0", learner_seats=(1,), opponents=(grouped,), group_size=2, seed=40
    )
    coordinators = builder.make_coordinators()
    assert [c.session.seed for c in coordinators] == [40, 41]
    assert grouped.built == [(0, seat_seed(40, 0)), (0, seat_seed(41, 0))]
    for coordinator in coordinators:
        coordinator.abort("test over")


def _cards(coordinator: object) -> tuple[str, ...]:
    session = coordinator.session  # type: ignore[attr-defined]
    return tuple(
        " ".join(m.text for m in session.seat_messages(seat)).split("Your card is ")[1][0]
        for seat in (0, 1)
    )


def test_a_shared_deal_deals_every_game_alike_and_keeps_each_seats_own_seed() -> None:
    recorder = SeedRecorder()
    shared = MatchGroupBuilder(
        "Kuhn-v0", learner_seats=(1,), opponents=(recorder,), group_size=8, seed=40, deal_seed=40
    )
    coordinators = shared.make_coordinators()
    assert {c.session.seed for c in coordinators} == {40}
    assert len({_cards(c) for c in coordinators}) == 1
    assert recorder.built == [(0, seat_seed(40 + i, 0)) for i in range(8)]
    replay = shared.replay_game(3).make_coordinators()
    assert replay[0].session.seed == 40 and _cards(replay[0]) == _cards(coordinators[0])
    apart = MatchGroupBuilder("Kuhn-v0", group_size=8, seed=40).make_coordinators()
    assert [c.session.seed for c in apart] == list(range(40, 48))
    assert len({_cards(c) for c in apart}) > 1  # 8 seeds, 6 possible deals
    for coordinator in [*coordinators, *replay, *apart]:
        coordinator.abort("test over")


def test_training_groups_share_a_deal_unless_told_not_to() -> None:
    from trainer.dataset import SelfPlayDataset

    dataset = SelfPlayDataset(MatchSettings("Kuhn-v0"), num_batches=1, batch_size=2, group_size=4)
    first, second = dataset.get_batch(0)
    assert first.deal_seed == first.seed and second.deal_seed == second.seed  # type: ignore[attr-defined]
    assert first.seed != second.seed  # type: ignore[attr-defined]
    apart = SelfPlayDataset(
        MatchSettings("Kuhn-v0"), num_batches=1, batch_size=2, group_size=4, shared_deal=False
    )
    assert all(b.deal_seed is None for b in apart.get_batch(0))  # type: ignore[attr-defined]
