"""The seek queue, sans I/O: seeks and time in, pairings out."""

from __future__ import annotations

import pytest

from arena.identity import PolicyKind
from matchmaking.seek import Filler, MatchmakerConfig, Pairing, Seek, SeekQueue

AGENT, HUMAN, BOT, CHECKPOINT = (
    PolicyKind.AGENT,
    PolicyKind.HUMAN,
    PolicyKind.BOT,
    PolicyKind.CHECKPOINT,
)
ALL = frozenset({AGENT, HUMAN, BOT, CHECKPOINT})


def seek(
    seek_id: str,
    *,
    owner: str | None = None,
    kind: PolicyKind = AGENT,
    game: str = "TicTacToe-v0",
    players: int = 2,
    rated: bool = True,
    opponents: frozenset[PolicyKind] = ALL,
    created: float = 0.0,
    mu: float = 25.0,
    sigma: float = 1.0,
) -> Seek:
    return Seek(
        seek_id=seek_id,
        owner=owner or f"agent:{seek_id}",
        kind=kind,
        game_id=game,
        num_players=players,
        rated=rated,
        opponents=opponents,
        created=created,
        mu=mu,
        sigma=sigma,
    )


def owners(pairing: Pairing) -> set[str]:
    return {s.owner if isinstance(s, Seek) else s.player for s in pairing.seats}


NO_FILL = MatchmakerConfig(fill_after_s=None)


def test_two_seeks_of_a_game_pair_and_leave_the_queue() -> None:
    queue = SeekQueue(NO_FILL, seed=1)
    queue.add(seek("a"))
    assert queue.pair(0.0) == []
    queue.add(seek("b", created=0.1))
    (pairing,) = queue.pair(0.2)
    assert owners(pairing) == {"agent:a", "agent:b"} and pairing.rated
    assert len(queue) == 0 and queue.pair(0.3) == []


def test_seeks_pair_only_within_game_seats_and_rated_or_casual() -> None:
    queue = SeekQueue(NO_FILL)
    queue.add(seek("a"))
    queue.add(seek("b", game="ConnectFour-v0"))
    queue.add(seek("c", rated=False))
    queue.add(seek("d", players=3, game="LowestUnique-v0"))
    assert queue.pair(100.0) == []
    queue.add(seek("e", rated=False))
    (pairing,) = queue.pair(100.0)
    assert owners(pairing) == {"agent:c", "agent:e"} and not pairing.rated


def test_an_owner_never_plays_itself() -> None:
    queue = SeekQueue(NO_FILL)
    queue.add(seek("a1", owner="agent:a"))
    queue.add(seek("a2", owner="agent:a"))
    assert queue.pair(100.0) == []
    queue.add(seek("b"))
    (pairing,) = queue.pair(100.0)
    assert owners(pairing) == {"agent:a", "agent:b"}
    assert len(queue) == 1  # the other seek of agent:a waits on


def test_kinds_must_be_accepted_both_ways() -> None:
    queue = SeekQueue(NO_FILL)
    queue.add(seek("bot-averse", opponents=frozenset({AGENT})))
    queue.add(seek("h", kind=HUMAN, owner="human:1"))
    assert queue.pair(100.0) == []  # the agent does not accept people
    queue.add(seek("people-only", opponents=frozenset({HUMAN})))
    (pairing,) = queue.pair(100.0)
    assert owners(pairing) == {"human:1", "agent:people-only"}


def test_ratings_far_apart_pair_only_once_the_window_has_widened() -> None:
    cfg = MatchmakerConfig(window=2.0, widen_per_s=1.0, max_window=50.0, fill_after_s=None)
    queue = SeekQueue(cfg)
    queue.add(seek("weak", mu=10.0, sigma=1.0, created=0.0))
    queue.add(seek("strong", mu=25.0, sigma=1.0, created=0.0))
    # windows at t: 2 + 1 + t; the gap is 15, so they pair at t >= 12
    assert queue.pair(11.0) == []
    assert queue.window(queue.seeks()[0], 11.0) == 14.0
    (pairing,) = queue.pair(12.0)
    assert owners(pairing) == {"agent:weak", "agent:strong"}


def test_an_uncertain_rating_accepts_a_wider_gap_and_the_window_is_capped() -> None:
    cfg = MatchmakerConfig(window=2.0, widen_per_s=1.0, max_window=20.0, fill_after_s=None)
    queue = SeekQueue(cfg)
    fresh = seek("fresh", sigma=8.0)
    assert queue.window(fresh, 0.0) == 10.0
    assert queue.window(fresh, 1_000.0) == 20.0


def test_the_oldest_seek_picks_the_closest_rating() -> None:
    queue = SeekQueue(NO_FILL)
    queue.add(seek("old", mu=25.0, created=0.0))
    queue.add(seek("far", mu=28.0, created=1.0))
    queue.add(seek("near", mu=25.5, created=2.0))
    (pairing,) = queue.pair(2.0)
    assert owners(pairing) == {"agent:old", "agent:near"}
    assert [s.seek_id for s in queue.seeks()] == ["far"]


def test_bots_fill_in_after_the_wait_and_only_for_seeks_that_accept_them() -> None:
    fillers = [Filler("random", BOT, mu=20.0), Filler("optimal", BOT, mu=35.0)]
    queue = SeekQueue(MatchmakerConfig(fill_after_s=3.0), lambda game, n: fillers)
    queue.add(seek("a", mu=33.0, created=0.0))
    queue.add(seek("no-bots", opponents=frozenset({AGENT}), game="Other-v0", created=0.0))
    assert queue.pair(2.9) == []
    (pairing,) = queue.pair(3.0)
    assert owners(pairing) == {"agent:a", "optimal"}  # the closest rating
    assert [s.seek_id for s in queue.seeks()] == ["no-bots"]
    assert queue.pair(1_000.0) == []


def test_a_game_with_more_seats_fills_them_all() -> None:
    queue = SeekQueue(NO_FILL, seed=3)
    for i, name in enumerate("abc"):
        queue.add(seek(name, game="LowestUnique-v0", players=4, created=float(i)))
    assert queue.pair(10.0) == []  # three of four seats
    queue.add(seek("d", game="LowestUnique-v0", players=4, created=4.0))
    (pairing,) = queue.pair(10.0)
    assert len(pairing.seats) == 4 and owners(pairing) == {f"agent:{n}" for n in "abcd"}


def test_empty_seats_of_a_bigger_game_are_filled_distinct_first() -> None:
    fillers = [Filler("random", BOT), Filler("run:x@5", CHECKPOINT)]
    queue = SeekQueue(MatchmakerConfig(fill_after_s=0.0), lambda game, n: fillers)
    queue.add(seek("a", game="LowestUnique-v0", players=4))
    queue.add(seek("b", game="LowestUnique-v0", players=4))
    (pairing,) = queue.pair(0.0)
    players = sorted(s.player if isinstance(s, Filler) else s.owner for s in pairing.seats)
    assert players == ["agent:a", "agent:b", "random", "run:x@5"]


def test_seat_order_is_dealt_at_random_but_reproducibly() -> None:
    def first_seats(seed: int) -> list[str]:
        queue = SeekQueue(NO_FILL, seed=seed)
        out = []
        for i in range(20):
            queue.add(seek(f"a{i}", owner="agent:a", created=float(i)))
            queue.add(seek(f"b{i}", owner="agent:b", created=float(i)))
            (pairing,) = queue.pair(float(i))
            first = pairing.seats[0]
            assert isinstance(first, Seek)
            out.append(first.owner)
        return out

    assert first_seats(7) == first_seats(7)
    assert set(first_seats(7)) == {"agent:a", "agent:b"}


def test_bad_seeks_are_refused_and_old_ones_expire() -> None:
    queue = SeekQueue(NO_FILL)
    with pytest.raises(ValueError, match="opponents must be"):
        queue.add(seek("x", opponents=frozenset({"aliens"})))
    with pytest.raises(ValueError, match="opponents must be"):
        queue.add(seek("x", opponents=frozenset()))
    with pytest.raises(ValueError, match="at least 2"):
        queue.add(seek("x", players=1))
    queue.add(seek("old", created=0.0))
    with pytest.raises(ValueError, match="already"):
        queue.add(seek("old"))
    queue.add(seek("new", created=50.0, owner="agent:old"))
    assert [s.seek_id for s in queue.expire(10.0)] == ["old"]
    assert queue.remove("new") is not None and queue.remove("new") is None
    with pytest.raises(ValueError):
        MatchmakerConfig(fill_after_s=-1.0)
