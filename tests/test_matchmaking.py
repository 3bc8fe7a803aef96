"""Matchmaking: identities, ratings against hand-computed cases, PFSP, the league, the
sampler pool, and a checkpoint sitting in a recorded match."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from arena.eventbus import EventBus
from arena.identity import BadPolicyRef, PolicyKind, PolicyRef
from matchmaking.agents import SamplerPool, resolve_checkpoint
from matchmaking.btfit import BTRatings, fit
from matchmaking.bttable import bradley_terry
from matchmaking.leaderboard import seat_advantage
from matchmaking.league import GroupPlan, League, LeagueConfig, PoolMember
from matchmaking.openskill_ratings import LiveRatings
from matchmaking.paircounts import MatchResult, PairCounts, pairwise
from matchmaking.pfsp import (
    CollapseDetector,
    ScoreTracker,
    pfsp_probabilities,
    pfsp_weight,
    seat0_win_rate,
)
from matchmaking.ratings import Rating
from storage.rundir import UnknownCheckpoint

# -- identities ------------------------------------------------------------------------------


def test_policy_refs_parse_and_print() -> None:
    assert PolicyRef.parse("random") == PolicyRef.bot("random", "1")
    assert PolicyRef.parse("random").key == "bot:random@1"
    ckpt = PolicyRef.parse("run:ttt-1@120")
    assert ckpt.kind is PolicyKind.CHECKPOINT and ckpt.step == 120
    assert ckpt.key == "checkpoint:ttt-1@120" and ckpt.label == "ttt-1@120"
    assert PolicyRef.parse(ckpt.key) == ckpt
    assert PolicyRef.parse("learner:ttt-1").kind is PolicyKind.LEARNER
    assert PolicyRef.parse("agent:alice").key == "agent:alice"
    for bad in ("", "run:x", "run:x@y", "ghost:x", "x@3", "human:"):
        with pytest.raises(BadPolicyRef):
            PolicyRef.parse(bad)


# -- live ratings (openskill Plackett-Luce) ---------------------------------------------------


def plackett_luce_by_hand(
    ratings: list[tuple[float, float]], ranks: list[int]
) -> list[tuple[float, float]]:
    """Weng and Lin (2011), algorithm 4 (Plackett-Luce), one player per team, with
    openskill's defaults: beta = 25/6, kappa = 1e-4, gamma = sigma / c, and the dynamics
    factor tau = 25/300 added to every sigma before the update."""
    beta = 25.0 / 6.0
    kappa = 1e-4
    tau = 25.0 / 300.0
    ratings = [(mu, math.sqrt(sigma * sigma + tau * tau)) for mu, sigma in ratings]
    c = math.sqrt(sum(s * s + beta * beta for _, s in ratings))
    exps = [math.exp(mu / c) for mu, _ in ratings]
    sums = [sum(exps[q] for q in range(len(ratings)) if ranks[q] >= ranks[i]) for i in
            range(len(ratings))]  # fmt: skip
    out = []
    for i, (mu, sigma) in enumerate(ratings):
        omega = 0.0
        delta = 0.0
        for q in range(len(ratings)):
            if ranks[q] <= ranks[i]:
                share = exps[i] / sums[q]
                omega += (1.0 - share) if q == i else -share
                delta += share * (1.0 - share)
        gamma = sigma / c
        omega *= sigma * sigma / c
        delta *= gamma * sigma * sigma / (c * c)
        out.append((mu + omega, sigma * math.sqrt(max(1.0 - delta, kappa))))
    return out


def test_openskill_three_player_update_matches_the_paper() -> None:
    ratings = LiveRatings()
    new = ratings.update("G", ["a", "b", "c"], [1.0, 0.0, -1.0])
    expected = plackett_luce_by_hand([(25.0, 25.0 / 3.0)] * 3, [1, 2, 3])
    for policy, (mu, sigma) in zip("abc", expected, strict=True):
        assert new[policy].mu == pytest.approx(mu, rel=1e-9)
        assert new[policy].sigma == pytest.approx(sigma, rel=1e-9)
    # openskill's own figures for this case (its documentation's three-player example)
    assert new["a"].mu == pytest.approx(27.869, abs=1e-3)
    assert new["c"].mu == pytest.approx(21.414, abs=1e-3)
    assert [p for p, _ in ratings.table("G")] == ["a", "b", "c"]


def test_ties_share_a_rank_and_self_play_is_not_rated() -> None:
    ratings = LiveRatings()
    draw = ratings.update("G", ["a", "b"], [0.0, 0.0])
    assert draw["a"].mu == pytest.approx(draw["b"].mu)
    assert ratings.update("G", ["a", "a"], [1.0, -1.0]) == {}


# -- Bradley-Terry ----------------------------------------------------------------------------


def known_table(strengths: dict[str, float], games: int) -> list[MatchResult]:
    """Results whose win shares are exactly p_i / (p_i + p_j) (games per pair)."""
    names = sorted(strengths)
    results = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            share = strengths[a] / (strengths[a] + strengths[b])
            wins = round(share * games)
            results += [MatchResult((a, b), (1.0, -1.0))] * wins
            results += [MatchResult((a, b), (-1.0, 1.0))] * (games - wins)
    return results


def test_bradley_terry_recovers_known_strengths() -> None:
    # p = 4 : 2 : 1 with 300 games per pair gives win shares 2/3, 4/5 and 2/3 exactly.
    results = known_table({"bot:random@1": 1.0, "b": 2.0, "c": 4.0}, games=300)
    table = bradley_terry(results, prior=0.0, bootstrap=50)
    step = 400 * math.log10(2)  # a factor of 2 in odds is 120.4 Elo
    assert table.ratings["bot:random@1"] == pytest.approx(1000.0)
    assert table.ratings["b"] == pytest.approx(1000.0 + step, abs=0.01)
    assert table.ratings["c"] == pytest.approx(1000.0 + 2 * step, abs=0.01)
    for name in table.ratings:
        assert table.lower[name] <= table.ratings[name] <= table.upper[name]
    assert table.games == {"bot:random@1": 600, "b": 600, "c": 600}
    assert [row["policy"] for row in table.rows()] == ["c", "b", "bot:random@1"]
    assert table.rank == {"c": 1, "b": 2, "bot:random@1": 3}


def test_bradley_terry_ties_count_half_and_ranks_read_top_to_bottom() -> None:
    # Two draws count like one win each way.
    rows = pairwise([MatchResult(("a", "b"), (0.0, 0.0))] * 2)
    assert rows == {("a", "b", 0.5): 2}
    results = [MatchResult(("a", "b"), (0.0, 0.0))] * 10 + [
        MatchResult(("a", "b"), (1.0, -1.0)),
        MatchResult(("a", "b"), (-1.0, 1.0)),
    ]
    table = bradley_terry(results, bootstrap=100)
    assert table.ratings["a"] == pytest.approx(table.ratings["b"], abs=1e-6)
    assert table.anchor is None and table.notes
    with pytest.raises(ValueError, match="no results"):
        bradley_terry([MatchResult(("a", "a"), (1.0, -1.0))])
    # Close policies whose intervals overlap still get ranks 1, 2, 3, ... in table order.
    close = known_table({"bot:random@1": 1.0, "b": 1.1, "c": 1.2, "d": 1.3}, games=20)
    ranked = bradley_terry(close)
    rows = ranked.rows()
    assert [r["rank"] for r in rows] == [1, 2, 3, 4]
    assert [r["policy"] for r in rows] == ["d", "c", "b", "bot:random@1"]
    assert rows[0]["lower"] < rows[1]["upper"]  # the intervals do overlap


def test_davidson_ties_recover_the_strengths_and_the_tie_rate() -> None:
    """Counts equal to the Davidson model's expectations give back its parameters."""
    theta = {"a": 0.0, "b": 0.7, "c": -0.4}
    nu = 1.5
    counts = PairCounts()
    for x, y in itertools.combinations(sorted(theta), 2):
        pa, pb = math.exp(theta[x]), math.exp(theta[y])
        tie = nu * math.sqrt(pa * pb)
        total = pa + pb + tie
        counts.add_pair(x, y, 1.0, 1e6 * pa / total)
        counts.add_pair(x, y, 0.5, 1e6 * tie / total)
        counts.add_pair(x, y, 0.0, 1e6 * pb / total)
    found = fit(counts, ties="davidson", prior=0.0)
    got = dict(zip(found.names, found.theta, strict=True))
    for x, y in itertools.combinations(sorted(theta), 2):
        assert got[x] - got[y] == pytest.approx(theta[x] - theta[y], abs=1e-6)
    assert found.log_nu == pytest.approx(math.log(nu), abs=1e-6)
    # Ties as half a win read the same counts with a smaller spread (draws dilute).
    half = fit(counts, prior=0.0)
    spread = dict(zip(half.names, half.theta, strict=True))
    assert 0 < spread["b"] - spread["c"] < got["b"] - got["c"]


def test_live_bradley_terry_is_the_batch_fit_after_every_match() -> None:
    """``BTRatings`` refits from the previous strengths after each match; at every point
    its ratings equal a fit of the same results from scratch, standard errors included,
    three-seat matches too."""
    rng = random.Random(3)
    live = BTRatings()
    results: list[MatchResult] = []
    names = ["bot:random@1", "bot:optimal@1", "checkpoint:r@0", "checkpoint:r@25", "agent:x"]
    for step in range(300):
        seats = tuple(rng.sample(names, 3 if step % 5 == 0 else 2))
        rewards = tuple(float(rng.choice((-1, 0, 1))) for _ in seats)
        results.append(MatchResult(seats, rewards))
        new = live.update(seats, rewards)
        if step % 50 == 49:
            scratch = bradley_terry(results)
            for policy, rating in new.items():
                assert rating.mu == pytest.approx(scratch.ratings[policy], abs=1e-6)
                assert rating.sigma == pytest.approx(scratch.sigma[policy], abs=1e-6)
    assert new["bot:random@1"] == Rating(1000.0, 0.0)  # the anchor
    assert live.counts.games["bot:random@1"] == sum("bot:random@1" in r.policies for r in results)
    assert live.update(("agent:x", "agent:x"), (1.0, -1.0)) == new  # self-play: not rated


def test_standard_errors_cover_the_truth_at_their_rate() -> None:
    """The fit's 95 % intervals hold the true rating gap in about 95 % of samples."""
    rng = random.Random(7)
    truth = {"bot:random@1": 0.0, "b": 0.5, "c": 1.0}
    hits = trials = 0
    for _ in range(60):
        results = []
        for x, y in itertools.combinations(truth, 2):
            p = 1.0 / (1.0 + math.exp(truth[y] - truth[x]))
            for _g in range(60):
                win = rng.random() < p
                results.append(MatchResult((x, y), (1.0, -1.0) if win else (-1.0, 1.0)))
        table = bradley_terry(results, prior=0.0)
        for name in ("b", "c"):
            true_rating = 1000.0 + 400.0 / math.log(10.0) * truth[name]
            trials += 1
            hits += table.lower[name] <= true_rating <= table.upper[name]
    assert 0.85 <= hits / trials <= 0.99, hits / trials  # neither too narrow nor too wide


def test_seat_advantage_from_stored_results() -> None:
    results = (
        [MatchResult(("x", "x"), (1.0, -1.0))] * 60
        + [MatchResult(("x", "x"), (-1.0, 1.0))] * 30
        + [MatchResult(("x", "x"), (0.0, 0.0))] * 10
    )
    adv = seat_advantage(results)
    assert adv is not None and adv.games == 100
    assert adv.seat0_score == pytest.approx(0.65)
    assert adv.lower < 0.65 < adv.upper and adv.lower > 0.5
    assert seat_advantage([]) is None


# -- PFSP and the league ----------------------------------------------------------------------


def test_pfsp_weights() -> None:
    assert pfsp_weight(0.0) == 1.0 and pfsp_weight(1.0) == 0.0
    assert pfsp_weight(0.75, "hard", p=2.0) == pytest.approx(0.0625)
    assert pfsp_weight(0.5, "var") == pytest.approx(0.25)
    assert pfsp_weight(0.9, "uniform") == 1.0
    with pytest.raises(ValueError):
        pfsp_weight(1.5)
    probs = pfsp_probabilities({"hard": 0.2, "easy": 0.7, "beaten": 1.0})
    assert probs["hard"] > probs["easy"] > probs["beaten"] > 0  # floor: still revisited
    assert sum(probs.values()) == pytest.approx(1.0)
    assert probs["hard"] / probs["easy"] == pytest.approx(0.64 / 0.09)
    assert probs["beaten"] / probs["hard"] == pytest.approx(0.02)


def test_score_tracker_is_an_ema_from_the_prior() -> None:
    tracker = ScoreTracker(decay=0.5, prior=0.5)
    tracker.record("a", 1.0)
    tracker.record("a", 1.0)
    assert tracker.score("a") == pytest.approx(0.875)
    assert tracker.score("never") == 0.5 and tracker.games == {"a": 2}


def test_league_pool_cap_keeps_the_first_member() -> None:
    league = League(LeagueConfig(pool_size=3))
    dropped = [league.add(PoolMember(f"checkpoint:r@{s}", f"/p/{s}", s)) for s in range(5)]
    assert [m.step for m in league.members] == [0, 3, 4]
    assert [d.step if d else None for d in dropped] == [None, None, None, 1, 2]


def test_the_leagues_best_checkpoint_stays_in_the_pool_while_it_is_the_best() -> None:
    league = League(LeagueConfig(pool_size=3))
    league.add(PoolMember("checkpoint:r@0", "/p/0", 0))
    best = PoolMember("checkpoint:r@15", "/p/best-15", 15)
    league.anchor(best)
    for s in (20, 40, 60, 80):
        league.add(PoolMember(f"checkpoint:r@{s}", f"/p/{s}", s))
    assert [m.step for m in league.members] == [0, 15, 80]  # the start and the best stay
    league.anchor(PoolMember("checkpoint:r@80", "/p/80", 80))  # already a member: not twice
    assert [m.step for m in league.members] == [0, 15, 80]
    league.add(PoolMember("checkpoint:r@100", "/p/100", 100))
    assert [m.step for m in league.members] == [0, 80, 100]  # the old best is ordinary now
    again = League(LeagueConfig(pool_size=3))
    again.load(json.loads(json.dumps(league.state())))
    assert again.best == league.best and again.members == league.members


def test_league_plans_mix_self_past_and_bots_by_share() -> None:
    config = LeagueConfig(past_share=0.25, bot_share=0.25, bots=("random", "optimal"))
    league = League(config, seed=1)
    first = league.plan(step=0, groups=8)
    assert [p.kind for p in first].count(PolicyKind.CHECKPOINT) == 0  # nothing in the pool yet
    league.add(PoolMember("checkpoint:r@0", "/p/0", 0))
    league.add(PoolMember("checkpoint:r@20", "/p/20", 20))
    for _ in range(30):
        won = [1.0]  # the learner beats @0
        league.record(GroupPlan(PolicyKind.CHECKPOINT, "checkpoint:r@0"), won)
    plans = league.plan(step=40, groups=8)
    kinds = [p.kind for p in plans]
    assert (
        kinds.count(PolicyKind.CHECKPOINT) == 2
        and kinds.count(PolicyKind.BOT) == 2
        and kinds.count(PolicyKind.LEARNER) == 4
    )
    picks = [
        p.opponent
        for _ in range(50)
        for p in league.plan(step=41, groups=8)
        if p.kind == PolicyKind.CHECKPOINT
    ]
    assert picks.count("checkpoint:r@20") > 3 * picks.count("checkpoint:r@0")  # PFSP: hard
    assert {p.learner_seat for p in plans if p.kind != PolicyKind.LEARNER} == {0, 1}
    state = json.loads(json.dumps(league.state()))
    again = League(config)
    again.load(state)
    assert again.members == league.members and again.scores.scores == league.scores.scores


def test_collapse_raises_the_share_of_the_past_once_entropy_falls() -> None:
    league = League(LeagueConfig(past_share=0.2, collapse_share=0.6, collapse_steps=10))
    league.add(PoolMember("checkpoint:r@0", "/p/0", 0))
    detector = league.collapse
    reasons = [league.observe(step, 0.8, 0.02) for step in range(detector.window)]
    assert reasons == [None] * detector.window and detector.entropy_start == pytest.approx(0.8)
    reasons = [league.observe(step, 0.05, 0.02) for step in range(10, 30)]
    flagged = [step for step, r in zip(range(10, 30), reasons, strict=True) if r]
    # Reported once, when the window's mean entropy passes below a quarter of its start,
    # and treated while it stays there.
    assert len(flagged) == 1 and "entropy" in (reasons[flagged[0] - 10] or "")
    assert league.past_share(29) == 0.6 and league.past_share(29 + 11) == 0.2
    state = json.loads(json.dumps(league.state()))
    again = League(league.config)
    again.load(state)
    assert again.collapse.entropy_start == pytest.approx(0.8)


def test_collapse_is_not_a_first_mover_edge_nor_an_invalid_move_blip() -> None:
    detector = CollapseDetector(window=5)
    # A first-mover edge leaves the entropy where it was: nothing to flag.
    assert all(detector.update(0.7, 0.01) is None for _ in range(40))
    # One step with many invalid moves among quiet ones is a blip.
    assert detector.update(0.7, 0.5) is None
    assert all(detector.update(0.7, 0.01) is None for _ in range(10))
    # Invalid moves that stay high for a window are a collapse.
    flags = [detector.update(0.7, 0.3) for _ in range(5)]
    assert flags[-1] and "invalid" in flags[-1] and not any(flags[:2])
    assert seat0_win_rate([[1.0, -1.0], [0.0, 0.0]]) == pytest.approx(0.75)


# -- the sampler pool and checkpoints ---------------------------------------------------------


async def test_sampler_pool_is_capped_and_least_recently_used_goes() -> None:
    loaded: list[str] = []

    async def loader(path: str) -> Any:
        loaded.append(path)
        await asyncio.sleep(0)
        return f"client:{path}"

    pool = SamplerPool(capacity=2, loader=loader)
    together = await asyncio.gather(pool.get("a"), pool.get("a"))
    assert together == ["client:a", "client:a"] and loaded == ["a"]  # loaded once
    await pool.get("b")
    await pool.get("a")  # a is now the most recent
    await pool.get("c")  # b goes
    assert len(pool) == 2
    await pool.get("a")
    await pool.get("b")
    assert loaded == ["a", "b", "c", "b"]
    with pytest.raises(ValueError):
        SamplerPool(capacity=0)


def test_resolve_checkpoint_reads_the_runs_log(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "ttt"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"max_tokens": 6}))
    entry = {
        "step": 40,
        "state_path": str(run / "ckpt"),
        "sampler_path": str(run / "ckpt"),
        "base_model": "arena/byte-gpt2",
        "renderer_name": "bytes",
        "observation_format": "compact",
    }
    (run / "checkpoints.jsonl").write_text(json.dumps(entry) + "\n")
    info = resolve_checkpoint("run:ttt@40", runs_dir=tmp_path / "runs")
    assert info.sampler_path == str(run / "ckpt") and info.max_tokens == 6
    assert info.observation_format == "compact" and info.renderer.name == "bytes"
    with pytest.raises(UnknownCheckpoint, match="it has: 40"):
        resolve_checkpoint("run:ttt@41", runs_dir=tmp_path / "runs")
    with pytest.raises(UnknownCheckpoint, match="no run 'other'"):
        resolve_checkpoint("run:other@1", runs_dir=tmp_path / "runs")
    with pytest.raises(BadPolicyRef):
        resolve_checkpoint("random", runs_dir=tmp_path / "runs")


@pytest.mark.slow
async def test_a_checkpoint_plays_a_seat_in_a_recorded_match(tmp_path: Path) -> None:
    """A stored checkpoint of a real run sits in a seat: it is loaded from disk, plays
    every move of its seat, and the match records it as that checkpoint."""
    from arena.envs import MatchGroupBuilder
    from arena.eventbus import default_bus
    from arena.policies import RandomMovePolicy
    from arena.rollouts import do_group_rollout
    from matchmaking.agents import ModelAgent, default_pool
    from storage import Recorder, list_matches, open_database
    from trainer.config import TrainConfig
    from trainer.train import Trainer

    runs = tmp_path / "runs"
    config = TrainConfig(
        log_dir=str(runs / "tiny"), num_batches=2, batch_size=2, group_size=2,
        warmup_steps=2, warmup_games=4, eval_every=0, save_every=1, db="", run_name="tiny",
        opponents="self",
    )  # fmt: skip
    await Trainer(config).run()
    last = json.loads((runs / "tiny" / "checkpoints.jsonl").read_text().splitlines()[-1])
    ref = f"run:tiny@{last['step']}"  # the weights after that many optimizer steps
    info = resolve_checkpoint(ref, runs_dir=runs)
    seat = info.seat()
    assert isinstance(seat.build(1, "TicTacToe-v0", seed=0), ModelAgent)
    assert info.sampler_path not in default_pool()
    bus = default_bus()
    database = await open_database(str(tmp_path / "arena.db"))
    try:
        async with Recorder(database, bus) as recorder:
            builder = MatchGroupBuilder(
                "TicTacToe-v0", learner_seats=(0,), opponents=(seat,), group_size=3, seed=4
            )
            group = await do_group_rollout(builder, RandomMovePolicy(seed=1))
            await recorder.flush()
        matches = await list_matches(database, limit=10)
    finally:
        await database.close()
    assert len(group.trajectories_G) == 3
    assert info.sampler_path in default_pool()  # loaded from disk on its first move
    stored = [m for m in matches if m.status != "aborted"]
    assert stored, [m.status for m in matches]
    for match in stored:
        (ckpt,) = [s for s in match.seats if s.seat == 1]
        assert ckpt.policy == f"checkpoint:tiny@{last['step']}" and ckpt.kind == "checkpoint"
        assert ckpt.moves >= 1 or match.seats[0].forfeited


async def test_tournament_and_leaderboard_on_bots(tmp_path: Path) -> None:
    """A round robin of real bot matches, recorded; the live ratings kept as they ended
    are the Bradley-Terry fit of the stored results (the leaderboard), which ranks the
    perfect bot first; openskill replayed from the stored results is the tournament's."""
    from arena.eventbus import EventBus
    from arena.events import RatingsChanged
    from arena.seats import BotSpec
    from matchmaking.leaderboard import leaderboard
    from matchmaking.live import RatingKeeper, rebuild_ratings
    from matchmaking.tournament import round_robin
    from storage import Recorder, open_database
    from storage.ratings import load_ratings, rating_history

    bus = EventBus()
    changes = bus.subscribe(name="test")
    database = await open_database(str(tmp_path / "arena.db"))
    try:
        async with Recorder(database, bus) as recorder, RatingKeeper(database, bus) as keeper:
            result = await round_robin(
                "TicTacToe-v0", [BotSpec("random"), BotSpec("optimal")], 40, bus=bus,
                bootstrap=50,
            )  # fmt: skip
            await recorder.flush()
            await keeper.flush()
        board = await leaderboard(database, "TicTacToe-v0")
        replayed = await leaderboard(database, "TicTacToe-v0", "openskill")
        bootstrapped = await leaderboard(database, "TicTacToe-v0", bootstrap=50)
        history = await rating_history(database, "TicTacToe-v0", policy_prefix="bot:optimal")
        live = {r.policy: r for r in await load_ratings(database, "TicTacToe-v0")}
        assert await rebuild_ratings(database, "TicTacToe-v0") == 40
        rebuilt = {r.policy: r for r in await load_ratings(database, "TicTacToe-v0")}
    finally:
        await database.close()
    opt, rnd = "bot:optimal@1", "bot:random@1"
    # Kept live, one history row per rated match, and the same as the batch fit.
    assert keeper.stats.rated == 40 and len(history) == 40
    assert board.method == "bt" and board.matches == 40
    assert [r["policy"] for r in board.rows] == [opt, rnd]
    assert [r["rank"] for r in board.rows] == [1, 2]
    for row in board.rows:
        stored = live[str(row["policy"])]
        assert stored.mu == pytest.approx(row["rating"], abs=1e-6)
        assert stored.sigma == pytest.approx(row["sigma"], abs=1e-6)
        assert stored.games == row["games"] == 40
        assert rebuilt[str(row["policy"])].mu == pytest.approx(stored.mu, abs=1e-6)
    assert board.rows[1]["rating"] == pytest.approx(1000.0)  # the random bot is the anchor
    assert board.rows[0]["lower"] > 1000.0  # it never lost: clearly above
    assert bootstrapped.rows[0]["rating"] == board.rows[0]["rating"]
    assert bootstrapped.notes[-1] == "95% intervals from 50 bootstrap refits"
    assert result.bradley_terry is not None
    assert result.bradley_terry.ratings[opt] == pytest.approx(board.rows[0]["rating"])
    # openskill, replayed in the order the matches ended, is the tournament's own table.
    assert [r["policy"] for r in replayed.rows] == [opt, rnd]
    for row in replayed.rows:
        mine = result.ratings[str(row["policy"])]
        assert (row["mu"], row["sigma"]) == pytest.approx((mine.mu, mine.sigma))
        assert row["ordinal"] == row["mu"] - 3 * row["sigma"]  # unrounded
    events = []
    while (event := changes.get_nowait()) is not None:
        events.append(event)
    rating_events = [e for e in events if isinstance(e, RatingsChanged)]
    assert len(rating_events) == 40 and {r[0] for r in rating_events[-1].ratings} == {opt, rnd}
    last = dict(
        zip((r[0] for r in rating_events[-1].ratings), rating_events[-1].games, strict=True)
    )
    assert last == {opt: 40, rnd: 40}
    cell = result.table[(opt, rnd)]
    assert cell.games == 40 and cell.losses == 0 and cell.wins > 20  # perfect play
    assert result.table[(rnd, opt)].score == pytest.approx(1.0 - cell.score)
    rows = result.cross_table()
    assert rows[0] == ["", rnd, opt, "total"] and rows[1][1] == "-"
    assert board.seat_advantage is not None and board.seat_advantage.games == 40
    with pytest.raises(ValueError, match="at least two"):
        await round_robin("TicTacToe-v0", [BotSpec("random")], 2)


async def test_two_processes_keeping_one_database_converge_on_its_fit(tmp_path: Path) -> None:
    """Two recorders and keepers on two buses (two processes) record into one database;
    each recount takes in the other's matches, so both keep the batch fit of everything
    stored, and the table holds it."""
    from arena.play import play_matches
    from matchmaking.leaderboard import leaderboard
    from matchmaking.live import RatingKeeper
    from storage import Recorder, open_database
    from storage.ratings import load_ratings

    database = await open_database(str(tmp_path / "arena.db"))
    buses = [EventBus(), EventBus()]
    try:
        async with (
            Recorder(database, buses[0]) as rec_a,
            Recorder(database, buses[1]) as rec_b,
            RatingKeeper(database, buses[0], refit_every_s=0, recount_factor=0) as keep_a,
            RatingKeeper(database, buses[1], refit_every_s=0, recount_factor=0) as keep_b,
        ):
            for k, (bus, rec, keep, players) in enumerate([
                (buses[0], rec_a, keep_a, ["random", "optimal"]),
                (buses[1], rec_b, keep_b, ["random", "optimal"]),
                (buses[1], rec_b, keep_b, ["optimal", "random"]),
                (buses[0], rec_a, keep_a, ["optimal", "random"]),
            ]):  # fmt: skip
                await play_matches("TicTacToe-v0", players, 6, seed=10 * k, bus=bus)
                await rec.flush()
                await keep.flush()
        board = await leaderboard(database, "TicTacToe-v0")
        stored = {r.policy: r for r in await load_ratings(database, "TicTacToe-v0")}
    finally:
        await database.close()
    assert board.matches == 24
    for row in board.rows:
        assert stored[str(row["policy"])].mu == pytest.approx(row["rating"], abs=1e-6)
        assert stored[str(row["policy"])].games == 24
    for keeper in (keep_a, keep_b):
        assert keeper.stats.rated == 12 and keeper.stats.recounts >= 2


async def test_a_match_a_recount_read_stored_is_not_counted_again_when_its_event_comes(
    tmp_path: Path,
) -> None:
    """The recorder can store a match before the keeper takes its end off the queue (a
    long recount is running): the recount reads it, and its event, coming after, is not
    counted a second time."""
    from arena.events import MatchEnded, MatchStarted
    from matchmaking.leaderboard import leaderboard
    from matchmaking.live import RatingKeeper
    from storage import Recorder, open_database
    from storage.ratings import load_ratings

    def match(match_id: str, at: float, rewards: tuple[float, float]) -> list[Any]:
        return [
            MatchStarted(match_id=match_id, game_id="TicTacToe-v0", seed=0, num_players=2,
                         players=("random", "optimal"), time=at),
            MatchEnded(match_id=match_id, status="finished", rewards=rewards,
                       invalid_moves=(0, 0), time=at + 0.5),
        ]  # fmt: skip

    database = await open_database(str(tmp_path / "arena.db"))
    stored_bus, keeper_bus = EventBus(), EventBus()
    first, early = match("first", 100.0, (0.0, 0.0)), match("early", 100.2, (-1.0, 1.0))
    try:
        async with Recorder(database, stored_bus) as recorder:
            for event in [*first, *early]:  # both stored before the keeper hears of them
                stored_bus.publish(event)
            await recorder.flush()
        async with RatingKeeper(database, keeper_bus) as keeper:
            for event in first:  # its first match: a recount, which reads "early" too
                keeper_bus.publish(event)
            await keeper.flush()
            for event in early:  # then the event of the match the recount read
                keeper_bus.publish(event)
            await keeper.flush()
        stored = {r.policy: r for r in await load_ratings(database, "TicTacToe-v0")}
        board = await leaderboard(database, "TicTacToe-v0")
    finally:
        await database.close()
    assert keeper.stats.recounts == 1 and stored["bot:optimal@1"].games == 2
    for row in board.rows:
        assert stored[str(row["policy"])].mu == pytest.approx(row["rating"], abs=1e-6)


async def test_ratings_an_older_arena_stored_are_recomputed_not_shown(tmp_path: Path) -> None:
    """Rows of another model (openskill, as an older Arena kept them) are not returned;
    the keeper recomputes them from the stored results when it first rates a match."""
    from arena.play import play_matches
    from matchmaking.live import RatingKeeper
    from storage import Recorder, open_database
    from storage.models import Rating as RatingRow
    from storage.models import SchemaMeta
    from storage.ratings import RATINGS_MODEL_KEY, load_ratings

    database = await open_database(str(tmp_path / "arena.db"))
    bus = EventBus()
    try:
        async with Recorder(database, bus) as recorder:
            await play_matches("TicTacToe-v0", ["random", "optimal"], 8, seed=1, bus=bus)
            await recorder.flush()
        async with database.writes.begin() as session:
            session.add(RatingRow(game_id="TicTacToe-v0", policy="bot:optimal@1", mu=8.0,
                                  sigma=1.0, games=8, updated_at=0.0))  # fmt: skip
            session.add(RatingRow(game_id="KuhnPoker-v1", policy="bot:nash@1", mu=30.0,
                                  sigma=1.0, games=3, updated_at=0.0))  # fmt: skip
        assert await load_ratings(database, "TicTacToe-v0") == []  # no model recorded
        async with Recorder(database, bus) as recorder, RatingKeeper(database, bus) as keeper:
            await play_matches("TicTacToe-v0", ["optimal", "random"], 2, seed=2, bus=bus)
            await recorder.flush()
            await keeper.flush()
        ratings = {r.policy: r for r in await load_ratings(database, "TicTacToe-v0")}
        async with database.sessions() as session:
            meta = await session.get(SchemaMeta, RATINGS_MODEL_KEY)
        kuhn = await load_ratings(database, "KuhnPoker-v1")
    finally:
        await database.close()
    assert meta is not None and meta.value == "bradley-terry-elo/1"
    assert ratings["bot:optimal@1"].mu > 1000.0 and ratings["bot:optimal@1"].games == 10
    assert ratings["bot:random@1"].mu == 1000.0
    assert kuhn == []  # its stored results rate no one: the old row is gone


def test_which_matches_are_rated() -> None:
    from matchmaking.live import rated_keys

    assert rated_keys(("random", "optimal")) == ("bot:random@1", "bot:optimal@1")
    assert rated_keys(("checkpoint:r@5", "human:ann")) == ("checkpoint:r@5", "human:ann")
    assert rated_keys(("learner", "random")) is None  # the learner's weights move
    assert rated_keys(("random", "random")) is None  # self-play
    assert rated_keys(("random",)) is None


@pytest.mark.slow
def test_arena_play_seats_a_checkpoint_and_rates_it(tmp_path: Path) -> None:
    """``arena play --players run:NAME@STEP,optimal``: the checkpoint plays, the matches
    are recorded under its exact identity, and its rating is kept live."""
    import asyncio

    from arena_cli import main as arena_main
    from storage import list_matches, open_database
    from storage.ratings import load_ratings
    from trainer.config import TrainConfig
    from trainer.train import Trainer

    runs = tmp_path / "runs"
    config = TrainConfig(
        log_dir=str(runs / "tiny"), num_batches=1, batch_size=2, group_size=2,
        warmup_steps=2, warmup_games=4, eval_every=0, save_every=1, db="", run_name="tiny",
    )  # fmt: skip
    asyncio.run(Trainer(config).run())
    db = str(tmp_path / "arena.db")
    rc = arena_main(
        ["play", "--game", "TicTacToe-v0", "--players", "run:tiny@0,optimal", "--games", "6",
         "--runs-dir", str(runs), "--db", db, "--quiet"]
    )  # fmt: skip
    assert rc == 0

    async def read() -> tuple[list[Any], list[Any]]:
        database = await open_database(db, read_only=True)
        try:
            return await list_matches(database, limit=20), await load_ratings(
                database, "TicTacToe-v0"
            )
        finally:
            await database.close()

    matches, ratings = asyncio.run(read())
    assert len(matches) == 6
    assert all(m.seats[0].policy == "checkpoint:tiny@0" for m in matches)
    assert {r.policy: r.games for r in ratings} == {"checkpoint:tiny@0": 6, "bot:optimal@1": 6}
    with pytest.raises(SystemExit):
        arena_main(["play", "--game", "TicTacToe-v0", "--players", "run:tiny@7,optimal",
                    "--runs-dir", str(runs), "--db", db])  # fmt: skip


def test_the_tournament_table_fits_100_columns_with_a_legend() -> None:
    import io

    from matchmaking.cli import tournament_command

    out, err = io.StringIO(), io.StringIO()
    code = tournament_command(
        "ConnectFour-v0",
        ["random", "alphabeta-1", "alphabeta-2", "alphabeta-3"],
        2,
        record=False,
        quiet=True,
        out=out,
        err=err,
    )
    assert code == 0, err.getvalue()
    text = out.getvalue()
    assert all(len(line) <= 100 for line in text.splitlines()), text
    assert "  A = random" in text and "  D = alphabeta-3" in text
    assert text.splitlines()[1].split() == ["A", "B", "C", "D", "total"]


def test_the_average_league_keeps_a_uniform_sample_of_every_snapshot() -> None:
    """``average``: past the pool's size, each snapshot of the run stays with the same
    probability (reservoir sampling), the first one always; opponents are drawn
    uniformly. Over many seeds, the pool holds as many early snapshots as late ones."""
    from matchmaking.league import League, LeagueConfig, PoolMember

    early = late = 0
    for seed in range(200):
        league = League(
            LeagueConfig(pool_size=8, average=True, past_share=1.0, bot_share=0.0), seed=seed
        )
        for step in range(100):
            league.add(PoolMember(policy=f"p{step}", sampler_path="", step=step))
        assert len(league.members) == 8
        assert league.members[0].step == 0 and league.snapshots == 100
        early += sum(1 for m in league.members[1:] if m.step < 50)
        late += sum(1 for m in league.members[1:] if m.step >= 50)
    assert abs(early - late) < 0.15 * (early + late)
    plans = league.plan(0, 400)
    counts = {m.policy: sum(p.opponent == m.policy for p in plans) for m in league.members}
    assert min(counts.values()) > 25  # uniform: 50 each expected
    recent = League(LeagueConfig(pool_size=8), seed=0)
    for step in range(100):
        recent.add(PoolMember(policy=f"p{step}", sampler_path="", step=step))
    assert [m.step for m in recent.members][1:] == list(range(93, 100))
