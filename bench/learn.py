"""Does RL make the local default model better at tic-tac-toe, and how fast?

Warm-up (format SFT on random legal moves, cached and shared by every variant), then
``--minutes`` of RL on the local default model, TicTacToe-v0, fixed seed, for each variant
in turn: ``league`` (arena's default: latest self, past checkpoints by PFSP, bots) and
``self`` (pure self-play) by default; a ``+kl`` suffix adds the KL penalty against the
warmed-up base (``--kl-coef``). The warmed-up base is the baseline: it is evaluated
(``--eval-games`` per opponent, half in each seat) before RL starts and each final policy the
same way at the end, against the random bot and the perfect bot. The learning curves
(smaller evaluations along the way) are drawn into one PNG.

    python -m bench.learn [--minutes 15] [--variants league,self] [--eval-games 1000] [--json]
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path
from typing import Any

from bench.common import emit
from bench.common import parser as bench_parser
from trainer.config import TrainConfig
from trainer.train import Trainer

KEYS = ("win", "draw", "loss", "invalid_move_rate")


def summary(metrics: dict[str, Any]) -> dict[str, float]:
    """The figures a run is judged by, from one evaluation's metrics."""
    out = {}
    for opponent in ("random", "optimal"):
        for outcome in KEYS:
            key = f"test/{opponent}/{outcome}"
            if key in metrics:
                out[key] = round(float(metrics[key]), 4)
    return out


def plot(runs: dict[str, Path], png: Path) -> None:
    """Draw every variant's learning curve (win vs random, draws vs perfect, invalid)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, middle, bottom) = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
    for variant, metrics_path in runs.items():
        rows = [json.loads(x) for x in metrics_path.read_text().splitlines() if x.strip()]
        evals = [r for r in rows if "test/random/win" in r and r["step"] >= 0]
        steps = [r["step"] for r in evals]
        top.plot(steps, [r["test/random/win"] for r in evals], marker="o", label=variant)
        if evals and "test/optimal/draw" in evals[0]:
            middle.plot(steps, [r["test/optimal/draw"] for r in evals], marker="o", label=variant)
        bottom.plot(
            steps, [r["test/random/invalid_move_rate"] for r in evals], marker="o", label=variant
        )
    top.set_ylabel("win vs random")
    middle.set_ylabel("draw vs perfect")
    bottom.set_ylabel("invalid moves / move")
    bottom.set_xlabel("RL step")
    for axis in (top, middle, bottom):
        axis.grid(alpha=0.3)
        axis.legend(loc="best", fontsize=8)
    fig.suptitle("TicTacToe-v0, local default model: evaluation during RL")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def run_variant(variant: str, args: Any, out: Path) -> dict[str, Any]:
    """Train one variant for the time budget; its start and end figures."""
    base, _, extra = variant.partition("+")
    if base not in ("league", "self") or extra not in ("", "kl"):
        raise SystemExit(f"unknown variant {variant!r}: league, self, league+kl, self+kl")
    log_dir = out / variant
    config = TrainConfig(
        game_id="TicTacToe-v0",
        log_dir=str(log_dir),
        steps=1_000_000,
        time_budget_s=args.minutes * 60,
        eval_every=args.eval_every,
        eval_games=args.curve_games,
        edge_eval_games=args.eval_games,
        save_every=0,
        seed=args.seed,
        db="",
        run_name=f"bench-{variant}",
        opponents=base,  # type: ignore[arg-type]
        kl_penalty_coef=args.kl_coef if extra == "kl" else 0.0,
        **({"learning_rate": args.learning_rate} if args.learning_rate else {}),
    )
    started = time.perf_counter()
    records = asyncio.run(Trainer(config, report=print).run())
    elapsed = time.perf_counter() - started
    rl_steps = len(records) - 1
    return {
        "start": summary(records[0].metrics),
        "end": summary(records[-1].metrics),
        "rl_steps": rl_steps,
        "games": rl_steps * config.groups_per_batch * config.games_per_group,
        "minutes": round(elapsed / 60, 2),
        "metrics": str(log_dir / "metrics.jsonl"),
    }


def main() -> None:
    args_parser = bench_parser(__doc__.splitlines()[0])
    args_parser.add_argument("--minutes", type=float, default=15.0, help="RL time per variant")
    args_parser.add_argument("--variants", default="league,self", help="comma-separated")
    args_parser.add_argument("--eval-games", type=int, default=1000, help="games per opponent")
    args_parser.add_argument("--curve-games", type=int, default=200, help="games per curve point")
    args_parser.add_argument("--eval-every", type=int, default=40, help="steps between points")
    args_parser.add_argument("--kl-coef", type=float, default=0.05, help="for +kl variants")
    args_parser.add_argument("--seed", type=int, default=0)
    args_parser.add_argument(
        "--learning-rate", type=float, default=None, help="RL learning rate (default: arena's)"
    )
    args_parser.add_argument("--out", default="bench-results/learn", help="log directory")
    args = args_parser.parse_args()
    out = Path(args.out)
    for child in out.glob("*") if out.exists() else []:
        if child.name != ".warmup-cache":  # fresh runs; the shared warm-up stays cached
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    out.mkdir(parents=True, exist_ok=True)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    results = {variant: run_variant(variant, args, out) for variant in variants}
    png = out / "learning_curves.png"
    plot({v: Path(r["metrics"]) for v, r in results.items()}, png)
    keys = list(next(iter(results.values()))["start"])
    print()
    header = f"{'figure':<34} {'base':>7}" + "".join(f" {v:>12}" for v in variants)
    print(header)
    for key in keys:
        base = next(iter(results.values()))["start"][key]
        row = f"{key:<34} {base:>7.3f}"
        row += "".join(f" {results[v]['end'].get(key, float('nan')):>12.3f}" for v in variants)
        print(row)
    for v in variants:
        r = results[v]
        gain = r["end"].get("test/random/win", 0.0) - r["start"].get("test/random/win", 0.0)
        r["win_vs_random_gain"] = round(gain, 4)
        print(
            f"{v}: {r['rl_steps']} RL steps, {r['games']} games, {r['minutes']} min, "
            f"win vs random {gain:+.3f}"
        )
    print(f"learning curves: {png}")
    emit(
        {"variants": results, "eval_games_per_opponent": args.eval_games, "png": str(png)},
        args.json,
    )


if __name__ == "__main__":
    main()
