"""Rating methods against each other on the same match streams.

Each stream is a sequence of rated matches (who sat where, the rewards), replayed in order
through every method, as a live leaderboard would see them:

* ``tictactoe``: simulated, draw-heavy, like ``make demo`` twice over: the random and the
  perfect bot, and two runs whose checkpoints (every 25 steps to 200) improve as
  training goes (each plays its move with probability 1 - eps, a random one otherwise,
  eps falling with the step); each checkpoint, as it is made, plays 200 evaluation games
  against each bot, and a round robin of the bots and four checkpoints ends the stream.
  The known order is by eps (the perfect bot first).
* ``connect-four``: stored real games (``bench/data/connect_four.jsonl.gz``: the random
  bot and alpha-beta search of depths 1 to 5, 40 games per pair, each depth entering the
  stream after the shallower ones; ``--write-connect-four`` plays them again). Deeper is
  not always stronger here (depth 2 beats depth 3 as the second player), so the order to
  match is the head-to-head one (Copeland: pairs won minus pairs lost).
* ``three-seat``: simulated 3-seat matches of eight policies of known skill (a seat's
  performance is its skill plus Gumbel noise, rounded: equal performances tie), the
  policies entering one by one.
* ``--db PATH --game G`` (repeatable ``--db``): the stored rated matches of a database, in
  the order they ended; the order to match is the head-to-head one.

For each method and stream: Kendall's tau between its final order and the true one (and
its mean over 20 points along the stream: how right the live view was), the rank it gives
the truly best policy, the clear head-to-head results it violates (A scored >= 0.65
against B over >= 40 games, yet ranks below B), and the cost per rated match (time in the
method's update, microseconds, and as a ratio to openskill's in the same run). For the
Bradley-Terry methods, also how far the live ratings are from a fit of the same results
from scratch.

    python -m bench.ratings [--streams tictactoe,connect-four,three-seat] [--db PATH --game G]
                            [--seed 0] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import itertools
import json
import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from openskill.models import PlackettLuce, ThurstoneMostellerFull

from arena.identity import PolicyKind, PolicyRef, policy_key
from bench.common import emit
from games.outcome import ranks, score_against
from matchmaking.btfit import BTRatings, elo_ratings, fit
from matchmaking.paircounts import PairCounts
from matchmaking.ratings import Rating

DATA = Path(__file__).resolve().parent / "data"
CONNECT_FOUR = DATA / "connect_four.jsonl.gz"
CLEAR_SCORE = 0.65
CLEAR_GAMES = 40
SNAPSHOTS = 20
SOLVERS = ("bot:optimal@1", "bot:nash@1")
"""Bots that play perfectly (an anchor for the anchored variant)."""

Match = tuple[tuple[str, ...], tuple[float, ...]]


@dataclass
class Stream:
    """A named sequence of rated matches and what is true about its policies."""

    name: str
    matches: list[Match]
    strength: dict[str, float] | None = None
    """Known strengths (higher is stronger); None: the head-to-head order is the truth."""
    notes: str = ""


# -- methods ----------------------------------------------------------------------------------


class Method(Protocol):
    """A rating method as a live leaderboard runs it."""

    def update(self, policies: tuple[str, ...], rewards: tuple[float, ...]) -> None:
        """Take one rated match."""
        ...

    def order(self) -> list[str]:
        """The rated policies, best first (as its leaderboard sorts them)."""
        ...


def _parent(key: str, known: dict[str, Rating]) -> Rating | None:
    """The rating of the previous checkpoint of ``key``'s run, if ``key`` is a checkpoint."""
    try:
        ref = PolicyRef.parse(key)
    except ValueError:
        return None
    if ref.kind is not PolicyKind.CHECKPOINT or ref.step is None:
        return None
    prefix = PolicyRef.checkpoint_prefix(ref.name)
    best: tuple[int, Rating] | None = None
    for other, rating in known.items():
        if other.startswith(prefix) and other[len(prefix) :].isdigit():
            step = int(other[len(prefix) :])
            if step < ref.step and (best is None or step > best[0]):
                best = (step, rating)
    return best[1] if best else None


class OpenSkill:
    """openskill (Plackett-Luce by default), sorted by ordinal as its leaderboard was.

    ``parent``: a checkpoint enters at its run's previous checkpoint's mu, its sigma
    widened (sqrt(sigma^2 + (sigma0 / 2)^2)), as UnstableBaselines enters a new model.
    ``anchors``: the random bot and the solver bots keep fixed ratings (prior -+ 2 sigma0,
    sigma 1): their updates are dropped."""

    def __init__(
        self, model: object | None = None, *, parent: bool = False, anchors: bool = False
    ) -> None:
        self.model = model if model is not None else PlackettLuce()
        self.parent = parent
        self.anchors = anchors
        self.ratings: dict[str, Rating] = {}
        prior = self.model.rating()  # type: ignore[attr-defined]
        self.mu0, self.sigma0 = float(prior.mu), float(prior.sigma)

    def _get(self, key: str) -> Rating:
        found = self.ratings.get(key)
        if found is not None:
            return found
        fixed = self._fixed(key)
        if fixed is not None:
            return fixed
        if self.parent:
            parent = _parent(key, self.ratings)
            if parent is not None:
                return Rating(parent.mu, math.hypot(parent.sigma, self.sigma0 / 2.0))
        return Rating(self.mu0, self.sigma0)

    def _fixed(self, key: str) -> Rating | None:
        if not self.anchors:
            return None
        if key in SOLVERS:
            return Rating(self.mu0 + 2 * self.sigma0, 1.0)
        if key == "bot:random@1":
            return Rating(self.mu0 - 2 * self.sigma0, 1.0)
        return None

    def update(self, policies: tuple[str, ...], rewards: tuple[float, ...]) -> None:
        model = self.model
        teams = [[model.rating(mu=r.mu, sigma=r.sigma)] for r in map(self._get, policies)]  # type: ignore[attr-defined]
        rated = model.rate(teams, ranks=[float(r) for r in ranks(rewards)])  # type: ignore[attr-defined]
        for key, team in zip(policies, rated, strict=True):
            fixed = self._fixed(key)
            self.ratings[key] = fixed or Rating(float(team[0].mu), float(team[0].sigma))

    def order(self) -> list[str]:
        return sorted(self.ratings, key=lambda k: -self.ratings[k].ordinal)


class Elo:
    """Classic Elo, pairwise (ties half), K per pairwise result, everyone from 1000."""

    def __init__(self, k: float = 32.0) -> None:
        self.k = k
        self.ratings: dict[str, float] = {}

    def update(self, policies: tuple[str, ...], rewards: tuple[float, ...]) -> None:
        current = [self.ratings.get(p, 1000.0) for p in policies]
        delta = [0.0] * len(policies)
        for x, y in itertools.combinations(range(len(policies)), 2):
            expected = 1.0 / (1.0 + 10.0 ** ((current[y] - current[x]) / 400.0))
            change = self.k * (score_against(rewards[x], rewards[y]) - expected)
            delta[x] += change
            delta[y] -= change
        for p, r, d in zip(policies, current, delta, strict=True):
            self.ratings[p] = r + d

    def order(self) -> list[str]:
        return sorted(self.ratings, key=lambda k: -self.ratings[k])


class BradleyTerryLive:
    """``matchmaking.btfit.BTRatings``: the batch fit of every result so far, refitted
    after each match from the previous strengths (the default)."""

    def __init__(self, ties: str = "half") -> None:
        self.live = BTRatings(ties=ties)  # type: ignore[arg-type]

    def update(self, policies: tuple[str, ...], rewards: tuple[float, ...]) -> None:
        self.live.update(policies, rewards)

    def order(self) -> list[str]:
        return [p for p, _ in self.live.table()]

    def batch_gap(self) -> float:
        """Largest difference (Elo) between the live ratings and a fit from scratch."""
        live = self.live.ratings()
        scratch, _ = elo_ratings(fit(self.live.counts, ties=self.live.ties, prior=self.live.prior))
        return max((abs(live[p].mu - scratch[p].mu) for p in live), default=0.0)


METHODS: dict[str, Callable[[], Method]] = {
    "openskill": lambda: OpenSkill(),
    "openskill-parent": lambda: OpenSkill(parent=True),
    "openskill-anchored": lambda: OpenSkill(anchors=True),
    "openskill-tm-margin": lambda: OpenSkill(ThurstoneMostellerFull(margin=1.0)),
    "elo-32": lambda: Elo(32.0),
    "bt": lambda: BradleyTerryLive("half"),
    "davidson": lambda: BradleyTerryLive("davidson"),
}
"""The candidates. ``openskill`` is the former default (Plackett-Luce, drift tau = 25/300);
``openskill-tm-margin`` is Thurstone-Mosteller with a draw margin of 1; ``bt`` (the
default) and ``davidson`` are Bradley-Terry fits kept live, ties as half a win or as
Davidson ties."""
BASELINE = "openskill"


# -- measures ---------------------------------------------------------------------------------


def kendall_tau(order: Sequence[str], strength: dict[str, float]) -> float:
    """Kendall's tau between ``order`` (best first) and ``strength`` (pairs of equal
    strength, or of a policy without one, left out)."""
    position = {p: i for i, p in enumerate(order) if p in strength}
    names = list(position)
    concordant = discordant = 0
    for a, b in itertools.combinations(names, 2):
        if strength[a] == strength[b]:
            continue
        truth = strength[a] > strength[b]
        said = position[a] < position[b]
        if truth == said:
            concordant += 1
        else:
            discordant += 1
    total = concordant + discordant
    return (concordant - discordant) / total if total else 1.0


def clear_results(counts: PairCounts) -> list[tuple[str, str]]:
    """(A, B) for each clear head-to-head result: A scored >= 0.65 against B over >= 40
    games."""
    out = []
    for (i, j), (wins, ties, losses) in counts.pairs.items():
        games = wins + ties + losses
        if games < CLEAR_GAMES:
            continue
        score = (wins + ties / 2.0) / games
        a, b = counts.names[i], counts.names[j]
        if score >= CLEAR_SCORE:
            out.append((a, b))
        elif 1.0 - score >= CLEAR_SCORE:
            out.append((b, a))
    return out


def violations(order: Sequence[str], clear: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The clear results ``order`` contradicts (the winner ranked below the loser)."""
    position = {p: i for i, p in enumerate(order)}
    return [(a, b) for a, b in clear if position.get(a, 0) > position.get(b, 0)]


def copeland(counts: PairCounts, min_games: float = 20.0) -> dict[str, float]:
    """The head-to-head order as a strength: pairs won minus pairs lost (over pairs with at
    least ``min_games`` games), then the mean score as a tie-break."""
    won: dict[str, float] = dict.fromkeys(counts.names, 0.0)
    mean: dict[str, list[float]] = {n: [] for n in counts.names}
    for (i, j), (wins, ties, losses) in counts.pairs.items():
        games = wins + ties + losses
        a, b = counts.names[i], counts.names[j]
        score = (wins + ties / 2.0) / games
        mean[a].append(score)
        mean[b].append(1.0 - score)
        if games < min_games or score == 0.5:
            continue
        winner, loser = (a, b) if score > 0.5 else (b, a)
        won[winner] += 1.0
        won[loser] -= 1.0
    return {n: won[n] + (sum(mean[n]) / len(mean[n]) if mean[n] else 0.5) / 2.0 for n in won}


@dataclass
class Outcome:
    """One method on one stream."""

    method: str
    tau: float
    tau_mean: float
    best_rank: int
    violated: int
    clear: int
    us_per_match: float
    batch_gap: float | None = None
    top: list[str] = field(default_factory=list)


def run(stream: Stream, name: str) -> Outcome:
    """Replay ``stream`` through method ``name``."""
    method = METHODS[name]()
    counts = PairCounts()
    marks = {round(len(stream.matches) * (k + 1) / SNAPSHOTS) - 1 for k in range(SNAPSHOTS)}
    taus: list[float] = []
    spent = 0.0
    for index, (policies, rewards) in enumerate(stream.matches):
        counts.add(policies, rewards)
        started = time.perf_counter()
        method.update(policies, rewards)
        spent += time.perf_counter() - started
        if index in marks:
            truth = stream.strength or copeland(counts)
            taus.append(kendall_tau(method.order(), truth))
    order = method.order()
    truth = stream.strength or copeland(counts)
    best = max(truth, key=lambda p: truth[p])
    clear = clear_results(counts)
    gap = method.batch_gap() if isinstance(method, BradleyTerryLive) else None
    return Outcome(
        method=name,
        tau=kendall_tau(order, truth),
        tau_mean=sum(taus) / len(taus) if taus else 1.0,
        best_rank=order.index(best) + 1 if best in order else len(order) + 1,
        violated=len(violations(order, clear)),
        clear=len(clear),
        us_per_match=1e6 * spent / max(1, len(stream.matches)),
        batch_gap=gap,
        top=order[:3],
    )


# -- streams ----------------------------------------------------------------------------------


def _ttt_move(cells: list[str], mark: str, eps: float, rng: random.Random) -> int:
    from games.textarena_games.tic_tac_toe import best_moves

    empty = [i for i, c in enumerate(cells) if not c]
    if rng.random() < eps:
        return rng.choice(empty)
    return rng.choice(best_moves(cells, mark))


def play_tictactoe(eps: tuple[float, float], rng: random.Random) -> tuple[float, float]:
    """One game of tic-tac-toe between two eps-greedy players (seat 0 moves first);
    rewards +1 / -1, or 0 each for a draw."""
    from games.textarena_games.tic_tac_toe import winner

    cells = [""] * 9
    for ply in range(9):
        seat = ply % 2
        mark = "OX"[seat]
        cells[_ttt_move(cells, mark, eps[seat], rng)] = mark
        if winner(cells):
            return (1.0, -1.0) if seat == 0 else (-1.0, 1.0)
    return (0.0, 0.0)


def tictactoe_stream(seed: int) -> Stream:
    """The simulated tic-tac-toe stream (see the module docstring)."""
    rng = random.Random(seed)
    eps: dict[str, float] = {"bot:random@1": 1.0, "bot:optimal@1": 0.0}
    curves = {
        "demo": lambda step: 0.45 + 0.52 * math.exp(-step / 70.0),
        "second": lambda step: 0.55 + 0.42 * math.exp(-step / 110.0),
        "third": lambda step: 0.40 + 0.57 * math.exp(-step / 50.0),
    }
    matches: list[Match] = []

    def games(a: str, b: str, count: int) -> list[Match]:
        out: list[Match] = []
        for g in range(count):
            seats = (a, b) if g % 2 == 0 else (b, a)
            rewards = play_tictactoe((eps[seats[0]], eps[seats[1]]), rng)
            out.append((seats, rewards))
        return out

    for run, curve in curves.items():
        for step in range(0, 201, 25):
            key = PolicyRef.checkpoint(run, step).key
            eps[key] = curve(step)
            for bot in ("bot:random@1", "bot:optimal@1"):  # one opponent after the other
                block = games(key, bot, 200)
                rng.shuffle(block)
                matches += block
    final = ["bot:random@1", "bot:optimal@1", "checkpoint:demo@200", "checkpoint:second@200",
             "checkpoint:demo@100", "checkpoint:second@100"]  # fmt: skip
    block = []
    for a, b in itertools.combinations(final, 2):
        block += games(a, b, 40)
    rng.shuffle(block)
    matches += block
    return Stream(
        "tictactoe",
        matches,
        strength={k: -e for k, e in eps.items()},
        notes=f"{len(eps)} policies, {len(matches)} matches",
    )


def three_seat_stream(seed: int, policies: int = 8, matches: int = 3000) -> Stream:
    """The simulated 3-seat stream (see the module docstring)."""
    rng = random.Random(seed)
    skill = {f"bot:p{k}@1": 0.5 * k for k in range(policies)}
    names = list(skill)
    every = matches // (policies + 1)
    out: list[Match] = []
    for index in range(matches):
        available = names[: max(3, min(policies, 2 + index // every))]
        seats = tuple(rng.sample(available, 3))
        performance = [round(skill[p] - math.log(-math.log(rng.random())) * 1.5) for p in seats]
        places = ranks(performance)  # 1 is best; ties share
        reward_of_place = {1: 1.0, 2: 0.0, 3: -1.0}
        rewards = []
        for place, perf in zip(places, performance, strict=True):
            tied = [p for p, q in zip(places, performance, strict=True) if q == perf]
            spots = range(place, place + len(tied))
            rewards.append(sum(reward_of_place[s] for s in spots) / len(tied))
        out.append((seats, tuple(rewards)))
    notes = f"{policies} policies, {matches} matches"
    return Stream("three-seat", out, strength=skill, notes=notes)


def play_connect_four(depths: tuple[int, int], rng: random.Random) -> tuple[float, float]:
    """One game of Connect Four between alpha-beta searches of these depths (0: random)."""
    from games.textarena_games.connect_four import _drop, _wins_at, best_columns

    grid = [["."] * 7 for _ in range(6)]
    for ply in range(42):
        seat = ply % 2
        disc = "XO"[seat]
        legal = [c for c in range(7) if grid[0][c] == "."]
        depth = depths[seat]
        col = rng.choice(legal) if depth == 0 else rng.choice(best_columns(grid, disc, depth))
        row = _drop(grid, col, disc)
        if _wins_at(grid, row, col):
            return (1.0, -1.0) if seat == 0 else (-1.0, 1.0)
    return (0.0, 0.0)


def write_connect_four(path: Path, per_pair: int = 40, seed: int = 19) -> int:
    """Play the Connect Four stream and store it (gzip, one JSON match a line)."""
    rng = random.Random(seed)

    def name(depth: int) -> str:
        return "random" if depth == 0 else f"alphabeta-{depth}"

    rows: list[dict[str, object]] = []
    for high in range(1, 6):
        block = []
        for low in range(high):
            for g in range(per_pair):
                seats = (low, high) if g % 2 == 0 else (high, low)
                rewards = play_connect_four(seats, rng)
                block.append({"players": [name(d) for d in seats], "rewards": list(rewards)})
        rng.shuffle(block)
        rows += block
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")
    return len(rows)


def connect_four_stream(path: Path = CONNECT_FOUR) -> Stream:
    """The stored Connect Four stream."""
    matches: list[Match] = []
    with gzip.open(path, "rt") as rows:
        for line in rows:
            row = json.loads(line)
            seats = tuple(policy_key(p) for p in row["players"])
            matches.append((seats, tuple(float(r) for r in row["rewards"])))
    return Stream("connect-four", matches, notes=f"{len(matches)} stored matches")


async def _stored(db_path: str, game_id: str) -> list[Match]:
    from storage import open_database
    from storage.results import iter_results

    db = await open_database(db_path, read_only=True)
    out: list[Match] = []
    try:
        async for stored in iter_results(db, game_id):
            if PolicyKind.LEARNER.value in stored.kinds:
                continue
            keys = tuple(
                policy_key(n, k) for n, k in zip(stored.policies, stored.kinds, strict=True)
            )
            if len(set(keys)) == len(keys) and len(keys) >= 2:
                out.append((keys, stored.rewards))
    finally:
        await db.close()
    return out


def database_stream(db_path: str, game_id: str) -> Stream:
    """A database's stored rated matches of ``game_id``, in the order they ended."""
    matches = asyncio.run(_stored(db_path, game_id))
    return Stream(
        f"{Path(db_path).name}:{game_id}", matches, notes=f"{len(matches)} stored matches"
    )


# -- the report -------------------------------------------------------------------------------


def report(stream: Stream, outcomes: list[Outcome]) -> str:
    """One stream's table (text)."""
    base = next((o.us_per_match for o in outcomes if o.method == BASELINE), None)
    truth = "known strengths" if stream.strength else "head-to-head (Copeland)"
    lines = [
        f"{stream.name}: {stream.notes}; true order: {truth}",
        f"{'method':<20} {'tau':>6} {'tau live':>8} {'best at':>7} {'violated':>9} "
        f"{'us/match':>9} {'x openskill':>11}  top 3",
    ]
    for o in outcomes:
        ratio = f"{o.us_per_match / base:.1f}" if base else "-"
        lines.append(
            f"{o.method:<20} {o.tau:>6.3f} {o.tau_mean:>8.3f} {o.best_rank:>7} "
            f"{o.violated:>4} / {o.clear:<3} {o.us_per_match:>9.0f} {ratio:>11}  "
            + ", ".join(o.top)
        )
    gaps = [f"{o.method} {o.batch_gap:.1e}" for o in outcomes if o.batch_gap is not None]
    if gaps:
        lines.append("live vs a fit from scratch, largest gap (Elo): " + ", ".join(gaps))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", default="tictactoe,connect-four,three-seat")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--db", action="append", default=[], help="a database to replay")
    p.add_argument("--game", default="TicTacToe-v0", help="the game of --db's matches")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="end with one JSON line of results")
    p.add_argument("--write-connect-four", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.write_connect_four:
        print(f"wrote {write_connect_four(CONNECT_FOUR)} matches to {CONNECT_FOUR}")
        return 0
    methods = [m for m in args.methods.split(",") if m]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        p.error(f"unknown method {unknown[0]!r}; choose from {', '.join(METHODS)}")
    builders: dict[str, Callable[[], Stream]] = {
        "tictactoe": lambda: tictactoe_stream(args.seed),
        "connect-four": lambda: connect_four_stream(),
        "three-seat": lambda: three_seat_stream(args.seed),
    }
    streams: list[Stream] = []
    for name in [s for s in args.streams.split(",") if s]:
        if name not in builders:
            p.error(f"unknown stream {name!r}; choose from {', '.join(builders)}")
        streams.append(builders[name]())
    for path in args.db:
        if not Path(path).exists():
            p.error(f"no database at {path}")
        streams.append(database_stream(path, args.game))
    results: dict[str, object] = {}
    for stream in streams:
        if not stream.matches:
            print(f"{stream.name}: no rated matches", file=sys.stderr)
            continue
        outcomes = [run(stream, m) for m in methods]
        print(report(stream, outcomes), flush=True)
        print()
        results[stream.name] = [vars(o) for o in outcomes]
    emit(results, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
