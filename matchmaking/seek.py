"""The seek queue: who wants a game, and who plays whom. No I/O, no clock of its own.

Remote agents and people in a browser ``seek`` a game; ``SeekQueue.pair(now)`` turns the
waiting seeks into ``Pairing``s (seeks and time in, pairings out), so tests drive it
without sockets. The rules:

* Seeks pair only with seeks of the same game, seat count and kind of match (rated or
  casual); never with another seek of the same owner (an agent does not play itself);
  and only when each side accepts the other's kind (``Seek.opponents``).
* Rating closeness: two seeks may pair when their ratings (``mu``: the live Bradley-Terry
  rating, Elo scale, ``matchmaking.ratings``) differ by at
  most the wider of their two windows. A seek's window starts at ``window`` plus its
  own ``sigma`` (an uncertain rating accepts more) and widens by ``widen_per_s`` for each
  second it has waited, up to ``max_window``: nobody waits for ever for the perfect
  opponent. The oldest seek picks first, and picks the closest ratings.
* Games with more than two seats fill every seat: the pairing takes ``num_players``
  seeks.
* Fill-ins: when a seek has waited ``fill_after_s`` and not enough others are there, bots
  and stored checkpoints (``fillers``, per game) take the empty seats, the closest
  ratings first and each at most once while others remain; only when every seek of the
  group accepts their kind. ``fill_after_s = None`` turns fill-ins off.
* Seats are dealt at random (seeded), so the oldest seek does not always move first.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from arena.identity import SEEKABLE_KINDS, PolicyKind
from matchmaking.ratings import UNRATED

DEFAULT_MU = UNRATED.mu
"""The rating a policy never rated in the game is paired at (the random bot's, 1000)."""
DEFAULT_SIGMA = UNRATED.sigma
"""Its uncertainty (350 Elo): a newcomer accepts a wide window at once."""


@dataclass(frozen=True)
class MatchmakerConfig:
    """How the seek queue pairs. Every field is named and has a default."""

    window: float = 60.0
    """Rating difference (Elo points: 60 is a 58 % score) a fresh seek accepts, besides
    its own sigma."""
    widen_per_s: float = 30.0
    """How much a seek's window widens per second of waiting."""
    max_window: float = 1500.0
    """The widest window (ratings rarely span more): past it, anyone of the kind will do."""
    fill_after_s: float | None = 3.0
    """Seconds a seek waits for other seekers before bots or checkpoints fill the empty
    seats (None: never)."""

    def __post_init__(self) -> None:
        if self.window < 0 or self.widen_per_s < 0 or self.max_window < 0:
            raise ValueError("window, widen_per_s and max_window must be 0 or more")
        if self.fill_after_s is not None and self.fill_after_s < 0:
            raise ValueError("fill_after_s must be 0 or more (or None: no fill-ins)")


@dataclass(frozen=True)
class Seek:
    """One request for a game."""

    seek_id: str
    owner: str
    """Who asks (an agent's policy key, or a browser connection's): never paired with
    itself."""
    kind: PolicyKind
    """``PolicyKind.AGENT`` or ``PolicyKind.HUMAN``."""
    game_id: str
    num_players: int
    rated: bool
    opponents: frozenset[PolicyKind]
    """The kinds it accepts in the other seats (of ``arena.identity.SEEKABLE_KINDS``)."""
    created: float
    """When it was made (the caller's clock, in seconds)."""
    mu: float = DEFAULT_MU
    sigma: float = DEFAULT_SIGMA


@dataclass(frozen=True)
class Filler:
    """A bot or stored checkpoint that can fill a seat of a game."""

    player: str
    """Its text form (``random``, ``run:NAME@STEP``): what the match seats."""
    kind: PolicyKind
    """``PolicyKind.BOT`` or ``PolicyKind.CHECKPOINT``."""
    mu: float = DEFAULT_MU
    sigma: float = DEFAULT_SIGMA


Seated = Seek | Filler


@dataclass(frozen=True)
class Pairing:
    """A match to start: who sits in each seat."""

    game_id: str
    num_players: int
    rated: bool
    seats: tuple[Seated, ...]
    """Seat ``i`` is played by ``seats[i]``."""
    seed: int
    """The match's seed."""

    @property
    def seeks(self) -> list[Seek]:
        """The seeks it answers."""
        return [s for s in self.seats if isinstance(s, Seek)]


FillerSource = Callable[[str, int], Sequence[Filler]]
"""``(game id, seats) -> the fillers that can play that game``."""


@dataclass
class _Bucket:
    seeks: list[Seek] = field(default_factory=list)


class SeekQueue:
    """The waiting seeks and the pairing rules (see the module's docstring).

    ``fillers`` lists the bots and checkpoints that may fill a game's seats (their
    ratings included); ``seed`` seeds the seat deals and match seeds.
    """

    def __init__(
        self,
        config: MatchmakerConfig | None = None,
        fillers: FillerSource | None = None,
        seed: int | None = None,
    ) -> None:
        self.config = config or MatchmakerConfig()
        self.fillers: FillerSource = fillers or (lambda _game, _n: ())
        self._rng = random.Random(seed)
        self._seeks: dict[str, Seek] = {}

    def __len__(self) -> int:
        return len(self._seeks)

    def __contains__(self, seek_id: object) -> bool:
        return seek_id in self._seeks

    def get(self, seek_id: str) -> Seek | None:
        """The waiting seek ``seek_id``, if any."""
        return self._seeks.get(seek_id)

    def seeks(self) -> list[Seek]:
        """Every waiting seek, oldest first."""
        return sorted(self._seeks.values(), key=lambda s: s.created)

    def add(self, seek: Seek) -> None:
        """Queue ``seek``. Raises ValueError for a duplicate id, an unknown opponent kind
        or a seat count below 2."""
        if seek.seek_id in self._seeks:
            raise ValueError(f"seek {seek.seek_id!r} is queued already")
        unknown = set(seek.opponents) - set(SEEKABLE_KINDS)
        if unknown or not seek.opponents:
            raise ValueError(
                f"opponents must be some of {', '.join(SEEKABLE_KINDS)}; got "
                f"{', '.join(sorted(seek.opponents)) or 'none'}"
            )
        if seek.num_players < 2:
            raise ValueError("a match needs at least 2 seats")
        self._seeks[seek.seek_id] = seek

    def remove(self, seek_id: str) -> Seek | None:
        """Take a seek out of the queue (cancelled, its owner left); the seek, if it was
        there."""
        return self._seeks.pop(seek_id, None)

    def expire(self, older_than: float) -> list[Seek]:
        """Remove and return the seeks made before ``older_than``."""
        old = [s for s in self._seeks.values() if s.created < older_than]
        for seek in old:
            del self._seeks[seek.seek_id]
        return old

    def window(self, seek: Seek, now: float) -> float:
        """The rating difference ``seek`` accepts at ``now``."""
        cfg = self.config
        waited = max(0.0, now - seek.created)
        return min(cfg.max_window, cfg.window + seek.sigma + cfg.widen_per_s * waited)

    def _close_enough(self, a: Seek, b: Seek, now: float) -> bool:
        return abs(a.mu - b.mu) <= max(self.window(a, now), self.window(b, now))

    @staticmethod
    def _accept(a: Seek, b: Seek) -> bool:
        return a.owner != b.owner and b.kind in a.opponents and a.kind in b.opponents

    def pair(self, now: float) -> list[Pairing]:
        """Pair what can be paired at ``now``; the paired seeks leave the queue."""
        buckets: dict[tuple[str, int, bool], _Bucket] = {}
        for seek in self.seeks():
            buckets.setdefault(
                (seek.game_id, seek.num_players, seek.rated), _Bucket()
            ).seeks.append(seek)
        pairings: list[Pairing] = []
        for (game_id, num_players, rated), bucket in buckets.items():
            taken: set[str] = set()
            for seek in bucket.seeks:  # oldest first: it picks first
                if seek.seek_id in taken:
                    continue
                group = self._group(seek, bucket.seeks, taken, num_players, now)
                seats: list[Seated] = list(group)
                if len(group) < num_players:
                    fill = self._fill(group, num_players, now)
                    if fill is None:
                        continue
                    seats.extend(fill)
                for member in group:
                    taken.add(member.seek_id)
                    del self._seeks[member.seek_id]
                self._rng.shuffle(seats)
                pairings.append(
                    Pairing(
                        game_id=game_id,
                        num_players=num_players,
                        rated=rated,
                        seats=tuple(seats),
                        seed=self._rng.randrange(2**31),
                    )
                )
        return pairings

    def _group(
        self, first: Seek, seeks: Iterable[Seek], taken: set[str], size: int, now: float
    ) -> list[Seek]:
        """``first`` and up to ``size - 1`` others it may play, closest ratings first;
        every member accepts every other."""
        candidates = sorted(
            (
                s
                for s in seeks
                if s.seek_id != first.seek_id
                and s.seek_id not in taken
                and self._accept(first, s)
                and self._close_enough(first, s, now)
            ),
            key=lambda s: (abs(s.mu - first.mu), s.created),
        )
        group = [first]
        for candidate in candidates:
            if len(group) == size:
                break
            if all(self._accept(m, candidate) for m in group[1:]):
                group.append(candidate)
        return group

    def _fill(self, group: list[Seek], size: int, now: float) -> list[Filler] | None:
        """Fill-ins for the empty seats of ``group``, or None when it must wait."""
        cfg = self.config
        oldest = group[0]
        if cfg.fill_after_s is None or now - oldest.created < cfg.fill_after_s:
            return None
        pool = [
            f
            for f in self.fillers(oldest.game_id, size)
            if all(f.kind in member.opponents for member in group)
        ]
        if not pool:
            return None
        mu = sum(m.mu for m in group) / len(group)
        pool.sort(key=lambda f: abs(f.mu - mu))
        need = size - len(group)
        # Distinct fill-ins first: the same policy in two seats makes a match unrated.
        return [pool[i % len(pool)] for i in range(need)]
