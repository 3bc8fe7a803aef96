"""Does RL make the local default model better at a game, does it keep what it gains, and
how fast?

For one game (``--game``, default TicTacToe-v0) or every game of the suite (``--suite``):
a format warm-up (SFT on random legal moves, cached per game and seed, shared by every
variant), then ``--minutes`` (or ``--num-batches``) of RL on the local default model for each
variant and each seed in turn. The warmed-up base is the baseline: it is evaluated
(``--eval-games`` per opponent, half in each seat) before RL starts, and each final policy
the same way at the end; so is the run's best checkpoint by the game's yardstick (picked on
the curve's smaller evaluations, then measured again on ``--eval-games``, so that its
figure is not the luckiest of many noisy points). The learning curves (evaluations every
``--eval-every`` steps on ``--curve-games``) go into one PNG per game; the figures into one
table, Markdown and JSON.

Variants are ``+``-joined: a base, ``league`` (the defaults: latest self, past checkpoints
by PFSP, bots) or ``self`` (pure self-play), then modifiers: ``kl`` / ``nokl`` (the KL
penalty against the warmed-up base at ``--kl-coef``, or off), ``role`` / ``group`` /
``seat`` (the advantage baseline), or ``FIELD=VALUE`` for any ``TrainConfig`` field
(``league+learning_rate=1e-4``).

Shorthand modifiers for the methods of per-move credit and convergence: ``branch``
(``branches=4``, ``branch_points=2``), ``nashpg`` (NashPG's phases: ``kl_penalty_coef=0.3``,
``kl_reference_every=100``, ``kl_phase_limit=0.05``), ``avg`` (the average-policy past:
``league_average``, a pool of 32, half the groups against it) and ``sampledkl`` (the
former default: the sampled KL of 0.1 to the warmed-up base, no exact KL).

Every report gives each run's *time to target*: the minutes of RL and the step at which
the game's target (``TARGETS``) was first reached and then held at every later evaluation.

``--quick``: one game, one variant, one seed in at most about 5 minutes on 2 cores (3
minutes of RL, evaluations included; the first run of a game and seed also warms up, about
90 s, cached after): it prints the headline figure with its standard error (over 4
independent evaluations of the final weights) and writes its own results file,
``<out>/<game>/quick-<variant>-s<seed>.json``, so that several can run one after another.

    python -m bench.learn [--game G | --suite] [--minutes 15 | --num-batches N] [--seeds 0,1,2]
        [--variants league,self] [--eval-games 1000] [--curve-games 200] [--json]
    python -m bench.learn --quick --game Kuhn-v0 --variants league+nashpg --seeds 1
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import shutil
import statistics
import time
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import emit
from bench.common import parser as bench_parser
from storage.rundir import RunDirectory
from trainer.config import TrainConfig
from trainer.evaluate import MEAN_SCORE_KEY, headline, yardstick_key
from trainer.renames import renamed_option
from trainer.train import Trainer

OUTCOMES = ("win", "draw", "loss", "score", "invalid_move_rate")
"""The per-opponent figures kept in the tables."""


@dataclass(frozen=True)
class BenchGame:
    """One game of the suite."""

    game_id: str
    kind: str
    """What it stands for in the suite (``board``, ``hidden information``, ...)."""
    num_players: int = 2


SUITE: tuple[BenchGame, ...] = (
    BenchGame("TicTacToe-v0", "board, solved"),
    BenchGame("Kuhn-v0", "hidden information, solved"),
    BenchGame("ConnectFour-v0", "board, graded bots"),
    BenchGame("Goofspiel-v0", "simultaneous bidding, hidden"),
    BenchGame("LowestUnique-v0", "3 seats, hidden picks", num_players=3),
    BenchGame("Haggle-v0", "negotiation in free text, hidden values"),
)
"""``--suite``: every kind of game arena measures."""


def bench_game(game_id: str) -> BenchGame:
    """The suite's entry for ``game_id``, or a two-seat entry for another game."""
    for game in SUITE:
        if game.game_id == game_id:
            return game
    return BenchGame(game_id, "")


TARGETS: dict[str, tuple[tuple[str, str, float], ...]] = {
    "TicTacToe-v0": (
        ("test/yardstick/non_loss_vs_optimal", ">=", 0.60),
        ("test/random/win", ">=", 0.75),
    ),
    "Kuhn-v0": (("test/yardstick/exploitability", "<", 0.10),),
    "ConnectFour-v0": (
        ("test/random/win", ">=", 0.85),
        ("test/yardstick/score_vs_alphabeta", ">=", 0.5),
    ),
    "Goofspiel-v0": (("test/mean_score", ">=", 0.5),),
}
"""Each game's target: every (figure, comparison, value) met at one evaluation."""

SHORTHANDS: dict[str, dict[str, Any]] = {
    "branch": {"branches": 4, "branch_points": 2},
    "nashpg": {"kl_penalty_coef": 0.3, "kl_reference_every": 100, "kl_phase_limit": 0.05},
    "avg": {"league_average": True, "league_pool_size": 32, "league_past_share": 0.5},
    "sampledkl": {"kl_penalty_coef": 0.1, "kl_reverse_coef": 0.0, "kl_forward_coef": 0.0},
}
"""Modifiers that stand for several ``TrainConfig`` settings (see the module docstring)."""

QUICK_MINUTES = 3.0
"""``--quick``: minutes of RL (the rest of its 5 minutes: evaluations and start-up)."""
QUICK_REPEATS = 4
"""``--quick``: independent evaluations of the final weights (their spread gives the
standard error)."""


def meets(game_id: str, metrics: dict[str, Any]) -> bool | None:
    """Whether one evaluation's ``metrics`` meet the game's target (None: no target, or
    the evaluation lacks one of its figures)."""
    target = TARGETS.get(game_id)
    if not target or any(key not in metrics for key, _, _ in target):
        return None
    for key, op, value in target:
        figure = float(metrics[key])
        if not (figure >= value if op == ">=" else figure < value):
            return False
    return True


def time_to_target(game_id: str, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """When the run first reached the game's target and then held it at every later
    evaluation: its RL step and minutes (the steps' ``time/total`` summed up to it, so
    evaluations and branches count). ``reached`` False when it never held to the end."""
    evaluations = [r for r in rows if r.get("step", -1) >= 0 and meets(game_id, r) is not None]
    held_from: int | None = None
    for i, row in enumerate(evaluations):
        if meets(game_id, row):
            if held_from is None:
                held_from = i
        else:
            held_from = None
    if held_from is None:
        return {"reached": False, "step": None, "minutes": None}
    step = int(evaluations[held_from]["step"])
    seconds = sum(float(r.get("time/total", 0.0)) for r in rows if 0 <= r.get("step", -1) < step)
    return {"reached": True, "step": step, "minutes": round(seconds / 60, 2)}


def target_text(game_id: str) -> str:
    """The game's target, as text (``exploitability < 0.1``)."""
    target = TARGETS.get(game_id, ())
    return ", ".join(f"{k.removeprefix('test/')} {op} {v:g}" for k, op, v in target) or "-"


def _coerce(name: str, text: str) -> Any:
    """``text`` as a value of ``TrainConfig`` field ``name``. Raises SystemExit."""
    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    if name not in fields:
        raise SystemExit(f"unknown TrainConfig field {name!r} in a variant")
    hint = typing.get_type_hints(TrainConfig)[name]
    args = typing.get_args(hint)
    if text == "None" and type(None) in args:
        return None
    if hint is bool:
        return text.lower() in ("1", "true", "yes", "on")
    for kind in (int, float):
        if hint is kind or kind in args:
            try:
                return kind(text)
            except ValueError:
                raise SystemExit(f"{name} takes a number, not {text!r}") from None
    if typing.get_origin(hint) is tuple or any(typing.get_origin(a) is tuple for a in args):
        return tuple(x for x in text.split(",") if x)
    return text


def variant_settings(variant: str, kl_coef: float) -> dict[str, Any]:
    """The ``TrainConfig`` overrides a variant name stands for. Raises SystemExit."""
    base, *mods = variant.split("+")
    if base not in ("league", "self"):
        raise SystemExit(f"unknown variant {variant!r}: it starts with league or self")
    out: dict[str, Any] = {"opponents": base}
    for mod in mods:
        if mod == "kl":
            out["kl_penalty_coef"] = kl_coef
        elif mod == "nokl":
            out["kl_penalty_coef"] = 0.0
        elif mod in ("role", "group", "seat"):
            out["baseline"] = mod
        elif mod in SHORTHANDS:
            out.update(SHORTHANDS[mod])
        elif "=" in mod:
            name, _, value = mod.partition("=")
            out[name] = _coerce(name, value)
        else:
            raise SystemExit(
                f"unknown modifier {mod!r} in {variant!r}: kl, nokl, role, group, seat, "
                f"{', '.join(SHORTHANDS)}, FIELD=VALUE"
            )
    return out


def figures(game_id: str, metrics: dict[str, Any]) -> dict[str, float]:
    """The figures a run is judged by, from one evaluation's metrics: the yardstick's,
    the mean score, and win/draw/loss/score/invalid rate against each bot."""
    out = {}
    for key, value in metrics.items():
        # (a multi-game run's are test/<game>/yardstick/..., test/<game>/<bot>/win, ...)
        kept = "/yardstick/" in key or key.endswith("/mean_score")
        if kept or (key.startswith("test/") and key.rsplit("/", 1)[-1] in OUTCOMES):
            out[key] = round(float(value), 4)
    return out


def played_opponents(metrics: dict[str, Any]) -> list[str]:
    """The opponents an evaluation's ``metrics`` played (``test/<opponent>/win``; the
    greedy yardstick's ``test/greedy/...`` are the same opponents again)."""
    return sorted(
        {
            k.split("/")[1]
            for k in metrics
            if k.startswith("test/") and k.endswith("/win") and not k.startswith("test/greedy/")
        }
    )


def headline_key(game_id: str) -> str:
    """The metric a game's runs are ranked by (a multi-game run's: the mean score)."""
    if "," in game_id:
        return MEAN_SCORE_KEY
    return yardstick_key(game_id) or MEAN_SCORE_KEY


def game_key(game_id: str, key: str, multi: bool) -> str:
    """Where the figure ``key`` (``test/...``) of ``game_id`` is in a multi-game run's
    metrics (``test/<game>/...``), or in its own run's."""
    return f"test/{game_id}/{key.removeprefix('test/')}" if multi else key


def higher_is_better(game_id: str, metrics: dict[str, float]) -> bool:
    """Whether the headline figure grows as the policy improves."""
    figure = headline(game_id, metrics)
    return figure.higher_is_better if figure is not None else True


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Every row of a ``metrics.jsonl``."""
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


async def remeasure(
    config: TrainConfig,
    sampler_path: str,
    games: int,
    opponents: Sequence[str],
    client: Any = None,
) -> dict[str, float]:
    """The figures of the checkpoint at ``sampler_path`` (or its loaded ``client``) on
    ``games`` games per opponent (the same evaluation as the run's last one)."""
    from arena.renderers import RendererConfig
    from trainer.backend import SamplerPolicy
    from trainer.evaluate import evaluate_games
    from trainer.loaders import load_sampler

    if client is None:
        client = await load_sampler(sampler_path)
    policy = SamplerPolicy(
        client, config.max_tokens, config.temperature, timeout_s=config.sample_timeout_s
    )
    return await evaluate_games(
        policy,
        [config.match_settings(g, RendererConfig(name="bytes")) for g in config.games],
        list(opponents) if opponents else None,
        games,
        yardstick_samples=config.yardstick_samples,
        sample_timeout_s=config.sample_timeout_s,
    )


async def remeasure_repeats(
    config: TrainConfig, sampler_path: str, games: int, opponents: Sequence[str], repeats: int
) -> list[dict[str, float]]:
    """``repeats`` independent evaluations of the checkpoint at ``sampler_path`` (one
    sampling client, whose random stream goes on from one to the next: a client loaded
    afresh would draw the same samples again)."""
    from trainer.loaders import load_sampler

    client = await load_sampler(sampler_path)
    return [
        await remeasure(config, sampler_path, games, opponents, client=client)
        for _ in range(repeats)
    ]


def run_one(game: BenchGame, variant: str, seed: int, args: Any, out: Path) -> dict[str, Any]:
    """Train one variant of one game with one seed; its start, end and best figures."""
    log_dir = out / _slug(game.game_id) / f"{_slug(variant)}-s{seed}"
    settings = variant_settings(variant, args.kl_coef)
    if args.learning_rate:
        settings.setdefault("learning_rate", args.learning_rate)
    config = TrainConfig(
        game_id=game.game_id,
        num_players=game.num_players,
        log_dir=str(log_dir),
        num_batches=args.num_batches or 1_000_000,
        time_budget_s=None if args.num_batches else args.minutes * 60,
        eval_every=args.eval_every,
        eval_games=args.curve_games,
        edge_eval_games=args.eval_games,
        save_every=0,
        seed=seed,
        db="",
        run_name=f"bench-{_slug(game.game_id)}-{_slug(variant)}-s{seed}",
        **settings,
    )
    print(f"== {game.game_id} {variant} seed {seed}", flush=True)
    started = time.perf_counter()
    records = asyncio.run(Trainer(config, report=print).run())
    elapsed = time.perf_counter() - started
    start, end = records[0].metrics, records[-1].metrics
    rl_steps = records[-1].step
    rows = read_metrics(log_dir / "metrics.jsonl")
    run_dir = RunDirectory(log_dir)
    best = run_dir.best() or {}
    result: dict[str, Any] = {
        "game": game.game_id,
        "variant": variant,
        "seed": seed,
        "settings": settings,
        "start": figures(game.game_id, start),
        "end": figures(game.game_id, end),
        "rl_steps": rl_steps,
        "minutes": round(elapsed / 60, 2),
        "metrics": str(log_dir / "metrics.jsonl"),
        "best_step": best.get("step"),
        "best_curve": best.get(headline_key(game.game_id).rsplit("/", 1)[-1]),
        "time_to_target": time_to_target(game.game_id, rows),
        "branch_moves_per_move": _mean_of(rows, "branch/moves_per_move"),
    }
    key = headline_key(game.game_id)
    final = run_dir.last_state() or {}
    if best and best.get("step") == final.get("step"):  # the final weights are the best
        result["best"] = result["end"]
    elif best:
        opponents = played_opponents(end)
        if config.multi_game:
            opponents = []  # each game's own evaluation bots, as the run played them
        again = asyncio.run(remeasure(config, best["sampler_path"], args.eval_games, opponents))
        result["best"] = figures(game.game_id, again)
    else:
        result["best"] = {}
    result["headline"] = key
    return result


def _mean_of(rows: Sequence[dict[str, Any]], key: str) -> float | None:
    values = [float(r[key]) for r in rows if key in r]
    return round(sum(values) / len(values), 3) if values else None


def _invalid_key(metrics: dict[str, Any]) -> str:
    """The invalid-move rate to show: against random where it plays, else the first."""
    if "test/random/invalid_move_rate" in metrics:
        return "test/random/invalid_move_rate"
    return next((k for k in sorted(metrics) if k.endswith("/invalid_move_rate")), "")


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.=" else "_" for c in text)


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value)."""
    if not values:
        return math.nan, math.nan
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return statistics.mean(values), sd


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per game and variant: mean and sd over seeds of each figure, start, end and best."""
    out: dict[str, Any] = {}
    for run in runs:
        slot = out.setdefault(run["game"], {}).setdefault(run["variant"], {"seeds": []})
        slot["seeds"].append(run)
    for variants in out.values():
        for slot in variants.values():
            seeds = slot["seeds"]
            for part in ("start", "end", "best"):
                keys = sorted({k for r in seeds for k in r[part]})
                slot[part] = {k: mean_sd([r[part][k] for r in seeds if k in r[part]]) for k in keys}
            slot["rl_steps"] = mean_sd([r["rl_steps"] for r in seeds])
            slot["headline"] = seeds[0]["headline"]
    return out


def _cell(pair: tuple[float, float] | None, digits: int = 3) -> str:
    if pair is None or math.isnan(pair[0]):
        return "-"
    mean, sd = pair
    return f"{mean:.{digits}f} ± {sd:.{digits}f}" if sd else f"{mean:.{digits}f}"


def markdown(summary: dict[str, Any], seeds: Sequence[int], budget: str) -> str:
    """One table: a row per game and variant with its headline figure (base, end, best
    re-measured, the gap end - best), win vs random and the invalid-move rate."""
    lines = [
        f"RL budget {budget} per run; seeds {', '.join(map(str, seeds))} (mean ± sd over seeds); "
        "final and best figures on the large evaluation.",
        "",
        "| game | variant | RL steps | headline | base | end | best (re-measured) | "
        "end - best | win vs random (base → end) | invalid/move (end) | time to target |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for game_id, variants in summary.items():
        for variant, slot in variants.items():
            key = slot["headline"]
            start, end, best = slot["start"], slot["end"], slot["best"]
            gaps = [r["end"][key] - r["best"][key] for r in slot["seeds"] if key in r["best"]]
            win = "test/random/win"
            inv = _invalid_key(end)
            win_text = f"{_cell(start.get(win))} → {_cell(end.get(win))}" if win in end else "-"
            lines.append(
                f"| {game_id} | {variant} | {_cell(slot['rl_steps'], 0)} | "
                f"{key.removeprefix('test/')} | {_cell(start.get(key))} | {_cell(end.get(key))} | "
                f"{_cell(best.get(key))} | {_cell(mean_sd(gaps) if gaps else None)} | "
                f"{win_text} | {_cell(end.get(inv), 4)} | {_reached(slot['seeds'])} |"
            )
    return "\n".join(lines) + "\n"


def _reached(seeds: Sequence[dict[str, Any]]) -> str:
    """Time to target over seeds: ``2/3 seeds, 6.1 min (step 480)`` (means of those that
    reached it), or ``not reached``."""
    hits = [r["time_to_target"] for r in seeds if r.get("time_to_target", {}).get("reached")]
    if not hits:
        return "not reached"
    minutes = statistics.mean(h["minutes"] for h in hits)
    step = statistics.mean(h["step"] for h in hits)
    return f"{len(hits)}/{len(seeds)} seeds, {minutes:.1f} min (step {step:.0f})"


def game_table(game_id: str, variants: dict[str, Any]) -> str:
    """Every figure of one game: base, and per variant end and best (mean ± sd)."""
    names = list(variants)
    keys = sorted({k for slot in variants.values() for k in slot["end"]})
    first = variants[names[0]]
    lines = [
        f"### {game_id}",
        "",
        "| figure | base | " + " | ".join(f"{v} end | {v} best" for v in names) + " |",
        "|---|---|" + "---|---|" * len(names),
    ]
    for key in keys:
        row = f"| {key.removeprefix('test/')} | {_cell(first['start'].get(key))} |"
        for v in names:
            slot = variants[v]
            row += f" {_cell(slot['end'].get(key))} | {_cell(slot['best'].get(key))} |"
        lines.append(row)
    return "\n".join(lines) + "\n"


def plot(game_id: str, runs: list[dict[str, Any]], png: Path) -> None:
    """Every run's learning curve of one game: the headline figure, win vs random and the
    invalid-move rate; thin lines per seed, a thick line for the mean over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key = headline_key(game_id)
    panels = [(key, key.removeprefix("test/"))]
    panels.append(("test/random/win", "win vs random"))
    panels.append(("invalid", "invalid moves / move"))
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 3 * len(panels)), sharex=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    by_variant: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        by_variant.setdefault(run["variant"], []).append(run)
    for i, (variant, seeds) in enumerate(by_variant.items()):
        colour = colours[i % len(colours)]
        for axis, (metric, _label) in zip(axes, panels, strict=True):
            curves: dict[int, list[float]] = {}
            for run in seeds:
                rows = [r for r in read_metrics(Path(run["metrics"])) if r["step"] >= 0]
                xs, ys = [], []
                for r in rows:
                    name = metric
                    if metric == "invalid":
                        name = _invalid_key(r)
                    if name in r:
                        xs.append(r["step"])
                        ys.append(r[name])
                        curves.setdefault(r["step"], []).append(r[name])
                axis.plot(xs, ys, color=colour, alpha=0.3, linewidth=0.8)
            steps = sorted(s for s, v in curves.items() if len(v) == len(seeds))
            axis.plot(
                steps,
                [statistics.mean(curves[s]) for s in steps],
                color=colour,
                linewidth=2,
                label=f"{variant} ({len(seeds)} seeds)",
            )
    for axis, (_metric, label) in zip(axes, panels, strict=True):
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
        axis.legend(loc="best", fontsize=8)
    axes[-1].set_xlabel("RL step")
    fig.suptitle(f"{game_id}, local default model: evaluation during RL")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def multi_game_table(runs: list[dict[str, Any]], games: Sequence[str], steps: str) -> str:
    """Single-game runs against the one multi-game run on ``games`` (same steps, same
    settings): each game's headline figure and win vs random, base and end."""
    multi_id = ",".join(games)
    multi = [r for r in runs if r["game"] == multi_id]
    lines = [
        f"One model trained on {', '.join(games)} at once vs one model per game, {steps} each "
        "(every step has the same number of groups, so the multi-game model played each game "
        f"1/{len(games)} as often); final figures on the large evaluation.",
        "",
        "| game | figure | base | single-game end | multi-game end | "
        "win vs random: single end | multi end |",
        "|---|---|---|---|---|---|---|",
    ]
    for game_id in games:
        key = headline_key(game_id)
        single = [r for r in runs if r["game"] == game_id]
        rand = "test/random/win"

        def pick(rows: list[dict[str, Any]], part: str, name: str, in_multi: bool,
                 game: str = game_id) -> str:  # fmt: skip
            want = game_key(game, name, in_multi)
            values = [r[part][want] for r in rows if want in r[part]]
            return _cell(mean_sd(values)) if values else "-"

        lines.append(
            f"| {game_id} | {key.removeprefix('test/')} | {pick(single, 'start', key, False)} | "
            f"{pick(single, 'end', key, False)} | {pick(multi, 'end', key, True)} | "
            f"{pick(single, 'end', rand, False)} | {pick(multi, 'end', rand, True)} |"
        )
    return "\n".join(lines) + "\n"


def quick(args: Any) -> None:
    """``--quick``: one game, one variant, one seed; the headline with its standard
    error, time to target, and a results file of its own."""
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    if len(variants) != 1 or len(seeds) != 1:
        raise SystemExit("--quick runs one variant and one seed: give one of each")
    variant, seed = variants[0], seeds[0]
    variant_settings(variant, args.kl_coef)
    game = bench_game(args.game)
    out = Path(args.out)
    log_dir = out / _slug(game.game_id) / f"{_slug(variant)}-s{seed}"
    if log_dir.exists():
        shutil.rmtree(log_dir)
    started = time.perf_counter()
    result = run_one(game, variant, seed, args, out)
    config = TrainConfig(**json.loads((log_dir / "config.json").read_text()))
    final = RunDirectory(log_dir).last_state() or {}
    key = result["headline"]
    opponents = played_opponents(result["end"])
    per_repeat = max(2, args.eval_games // QUICK_REPEATS)
    repeats = asyncio.run(
        remeasure_repeats(config, final["sampler_path"], per_repeat, opponents, QUICK_REPEATS)
    )
    values = [float(again[key]) for again in repeats if key in again]
    mean, sd = mean_sd(values)
    stderr = sd / math.sqrt(len(values)) if len(values) > 1 else math.nan
    result["quick"] = {
        "figure": key,
        "value": mean,
        "stderr": stderr,
        "repeats": values,
        "games_per_opponent_each": per_repeat,
        "total_minutes": round((time.perf_counter() - started) / 60, 2),
    }
    base = result["start"].get(key)
    ttt = result["time_to_target"]
    reached = (
        f"reached at step {ttt['step']} after {ttt['minutes']} min of RL and held"
        if ttt["reached"]
        else "not reached (or not held to the end)"
    )
    line = (
        f"{game.game_id} {variant} seed {seed}: {key.removeprefix('test/')} "
        f"{mean:.3f} ± {stderr:.3f} (standard error over {len(values)} evaluations of "
        f"{per_repeat} games per opponent; base {base if base is not None else '-'}), "
        f"{result['rl_steps']} RL steps in {result['minutes']} min; "
        f"target {target_text(game.game_id)}: {reached}; "
        f"{result['quick']['total_minutes']} min in all"
    )
    path = out / _slug(game.game_id) / f"quick-{_slug(variant)}-s{seed}.json"
    path.write_text(json.dumps(result, indent=1))
    print()
    print(line)
    print(f"results: {path}")
    emit(result, args.json)


def main() -> None:
    args_parser = bench_parser(__doc__.splitlines()[0])
    what = args_parser.add_mutually_exclusive_group()
    what.add_argument("--game", default="TicTacToe-v0", help="the game (default TicTacToe-v0)")
    what.add_argument("--suite", action="store_true", help="every game of the suite")
    what.add_argument(
        "--multi",
        metavar="G1,G2,...",
        help="one model on these games at once vs one model per game (same steps)",
    )
    budget = args_parser.add_mutually_exclusive_group()
    budget.add_argument(
        "--minutes", type=float, default=None, help="RL time per run (default 15; --quick 3)"
    )
    budget.add_argument(
        "--num-batches", type=int, default=None, help="RL steps (batches) per run instead"
    )
    budget.add_argument(
        "--steps",
        dest="num_batches",
        type=int,
        action=renamed_option("--num-batches"),
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
    )
    args_parser.add_argument("--seeds", default="0", help="comma-separated seeds")
    args_parser.add_argument("--variants", default="league,self", help="comma-separated")
    args_parser.add_argument(
        "--eval-games", type=int, default=None, help="games per opponent (1000; --quick 400)"
    )
    args_parser.add_argument(
        "--curve-games", type=int, default=None, help="games per curve point (200; --quick 100)"
    )
    args_parser.add_argument(
        "--eval-every", type=int, default=None, help="steps between points (40; --quick 20)"
    )
    args_parser.add_argument(
        "--quick",
        action="store_true",
        help="one game, variant and seed in about 5 minutes: the headline with its noise",
    )
    args_parser.add_argument("--kl-coef", type=float, default=0.05, help="for +kl variants")
    args_parser.add_argument(
        "--learning-rate", type=float, default=None, help="RL learning rate (default: arena's)"
    )
    args_parser.add_argument("--out", default="bench-results/learn", help="log directory")
    args = args_parser.parse_args()
    fast = args.quick
    if args.minutes is None and args.num_batches is None:
        args.minutes = QUICK_MINUTES if fast else 15.0
    for name, full, short in (("eval_games", 1000, 400), ("curve_games", 200, 100),
                              ("eval_every", 40, 20)):  # fmt: skip
        if getattr(args, name) is None:
            setattr(args, name, short if fast else full)
    if fast:
        if args.suite or args.multi:
            raise SystemExit("--quick runs one game: give --game")
        if args.variants == "league,self":
            args.variants = "league"
        quick(args)
        return
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    multi = [g.strip() for g in args.multi.split(",") if g.strip()] if args.multi else []
    if args.multi and len(multi) < 2:
        raise SystemExit("--multi takes two games or more, comma-separated")
    games = list(SUITE) if args.suite else [bench_game(args.game)]
    if multi:
        players = {bench_game(g).num_players for g in multi}
        if len(players) > 1:
            raise SystemExit("--multi: the games must seat the same number of players")
        games = [bench_game(g) for g in multi]
        games.append(BenchGame(",".join(multi), "multi-game", num_players=players.pop()))
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for v in variants:
        variant_settings(v, args.kl_coef)  # refuse a bad name before any work
    out = Path(args.out)
    for game in games:  # fresh runs of this command; other runs and the warm-ups stay
        for variant in variants:
            for seed in seeds:
                old = out / _slug(game.game_id) / f"{_slug(variant)}-s{seed}"
                if old.is_dir():
                    shutil.rmtree(old)
    out.mkdir(parents=True, exist_ok=True)
    runs = [
        run_one(game, variant, seed, args, out)
        for game in games
        for variant in variants
        for seed in seeds
    ]
    summary = aggregate(runs)
    pngs = {}
    for game in games:
        png = out / _slug(game.game_id) / "learning_curves.png"
        plot(game.game_id, [r for r in runs if r["game"] == game.game_id], png)
        pngs[game.game_id] = str(png)
    budget_text = f"{args.num_batches} steps" if args.num_batches else f"{args.minutes:g} minutes"
    table = markdown(summary, seeds, budget_text)
    details = "\n".join(game_table(g, v) for g, v in summary.items())
    name = "suite" if args.suite else _slug(games[0].game_id)
    if multi:
        name = "multi-" + _slug("+".join(multi))
        table = multi_game_table(runs, multi, budget_text) + "\n" + table
    (out / f"{name}.md").write_text(table + "\n" + details)
    report = {
        "budget": budget_text,
        "seeds": seeds,
        "eval_games_per_opponent": args.eval_games,
        "games": {
            g: {v: {k: s for k, s in slot.items() if k != "seeds"} for v, slot in vs.items()}
            for g, vs in summary.items()
        },
        "runs": runs,
        "png": pngs,
    }
    (out / f"{name}.json").write_text(json.dumps(report, indent=1))
    print()
    print(table)
    print(details)
    print(
        f"tables: {out / f'{name}.md'}, {out / f'{name}.json'}; curves: {', '.join(pngs.values())}"
    )
    emit(report, args.json)


if __name__ == "__main__":
    main()
