"""Does self-play make the local default model better at tic-tac-toe, and how fast?

Warm-up (format SFT on random legal moves), then ``--minutes`` of self-play RL on the
local default model, TicTacToe-v0, fixed seed. The warmed-up base is the baseline: it is
evaluated (``--eval-games`` per opponent, half in each seat) before RL starts and the final
policy the same way at the end, against the random bot and the perfect bot. The learning
curve (smaller evaluations along the way) is saved as a PNG.

    python -m bench.learn [--minutes 15] [--eval-games 1000] [--json]
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


def summary(metrics: dict[str, Any]) -> dict[str, float]:
    """The figures a run is judged by, from one evaluation's metrics."""
    out = {}
    for opponent in ("random", "optimal"):
        for outcome in ("win", "draw", "loss", "invalid_move_rate"):
            key = f"test/{opponent}/{outcome}"
            if key in metrics:
                out[key] = round(float(metrics[key]), 4)
    return out


def plot(metrics_path: Path, png: Path) -> None:
    """Draw the learning curve of a run's ``metrics.jsonl``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in metrics_path.read_text().splitlines() if line.strip()]
    evals = [r for r in rows if "test/random/win" in r and r["step"] >= 0]
    train = [r for r in rows if "env/all/invalid_moves" in r]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    steps = [r["step"] for r in evals]
    for key, label in (
        ("test/random/win", "win vs random"),
        ("test/random/loss", "loss vs random"),
        ("test/optimal/draw", "draw vs perfect"),
        ("test/random/invalid_move_rate", "invalid moves / move (vs random)"),
    ):
        if evals and key in evals[0]:
            top.plot(steps, [r[key] for r in evals], marker="o", label=label)
    top.set_ylabel("rate (evaluation)")
    top.set_ylim(0, 1)
    top.grid(alpha=0.3)
    top.legend(loc="best", fontsize=8)
    bottom.plot(
        [r["step"] for r in train],
        [r["env/all/invalid_moves"] for r in train],
        label="invalid/game",
    )
    if train and "optim/loss" in train[0]:
        bottom.plot(
            [r["step"] for r in train if "optim/loss" in r],
            [r["optim/loss"] for r in train if "optim/loss" in r],
            label="loss / action token",
        )
    bottom.set_xlabel("RL step")
    bottom.grid(alpha=0.3)
    bottom.legend(loc="best", fontsize=8)
    fig.suptitle("TicTacToe-v0 self-play, local default model")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def main() -> None:
    args_parser = bench_parser(__doc__.splitlines()[0])
    args_parser.add_argument("--minutes", type=float, default=15.0, help="RL time budget")
    args_parser.add_argument("--eval-games", type=int, default=1000, help="games per opponent")
    args_parser.add_argument("--curve-games", type=int, default=200, help="games per curve point")
    args_parser.add_argument("--eval-every", type=int, default=40, help="steps between points")
    args_parser.add_argument("--seed", type=int, default=0)
    args_parser.add_argument(
        "--learning-rate", type=float, default=None, help="RL learning rate (default: arena's)"
    )
    args_parser.add_argument("--out", default="bench-results/learn", help="log directory")
    args = args_parser.parse_args()
    out = Path(args.out)
    if out.exists():  # a fresh run each time (the warm-up cache lives beside it)
        shutil.rmtree(out)
    config = TrainConfig(
        game_id="TicTacToe-v0",
        log_dir=str(out),
        steps=1_000_000,
        time_budget_s=args.minutes * 60,
        eval_every=args.eval_every,
        eval_games=args.curve_games,
        edge_eval_games=args.eval_games,
        save_every=0,
        seed=args.seed,
        db="",
        run_name="bench-learn",
        **({"learning_rate": args.learning_rate} if args.learning_rate else {}),
    )
    started = time.perf_counter()
    records = asyncio.run(Trainer(config, report=print).run())
    elapsed = time.perf_counter() - started
    start = summary(records[0].metrics)
    end = summary(records[-1].metrics)
    rl_steps = len(records) - 1
    games = rl_steps * config.groups_per_batch * config.games_per_group
    png = out / "learning_curve.png"
    plot(out / "metrics.jsonl", png)
    print(f"RL steps: {rl_steps}, self-play games: {games}, wall time {elapsed / 60:.1f} min")
    print(f"{'figure':<36} {'start':>8} {'end':>8}")
    for key in start:
        print(f"{key:<36} {start[key]:>8.3f} {end.get(key, float('nan')):>8.3f}")
    print(f"learning curve: {png}")
    emit(
        {
            "start": start,
            "end": end,
            "rl_steps": rl_steps,
            "self_play_games": games,
            "minutes": args.minutes,
            "eval_games_per_opponent": args.eval_games,
            "win_vs_random_gain": round(
                end.get("test/random/win", 0.0) - start.get("test/random/win", 0.0), 4
            ),
            "png": str(png),
        },
        args.json,
    )


if __name__ == "__main__":
    main()
