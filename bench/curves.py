"""Learning curves of finished or running training runs, read from their ``metrics.jsonl``:
each evaluation's figures by step and by minute of RL, one column a run, and the mean over
the runs; the speed of each run (steps, games and tokens a minute, tokens computed and
reused); a PNG of the curves. For runs that ``arena train`` made by hand (a real model's
seeds, say), where ``bench.learn`` drives the built-in model itself.

    python -m bench.curves RUN_DIR [RUN_DIR ...] [--metrics test/random/win,...]
        [--png curves.png] [--markdown]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEFAULT_METRICS = (
    "test/random/win",
    "test/random/invalid_move_rate",
    "test/yardstick/non_loss_vs_optimal",
    "test/greedy/yardstick/non_loss_vs_optimal",
    "test/yardstick/exploitability",
)
"""The figures shown when none are named (those a run does not have are left out)."""


def read_run(path: Path) -> list[dict[str, Any]]:
    """The rows of a run's ``metrics.jsonl`` (a half-written last line is skipped)."""
    rows = []
    for line in (path / "metrics.jsonl").read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def speed(run: Path) -> dict[str, float]:
    """A run's RL steps, minutes (``time/total`` summed) and those of its evaluations,
    games played for training (steps x the config's games a step) and RL games a minute
    (evaluations left out), and the prompt and training tokens computed and reused."""
    steps = [r for r in read_run(run) if "time/total" in r]
    config = json.loads((run / "config.json").read_text())
    per_step = int(config.get("batch_size", 8)) * int(config.get("group_size", 8))
    minutes = sum(r["time/total"] for r in steps) / 60
    eval_minutes = sum(r.get("time/eval", 0.0) for r in steps) / 60
    out: dict[str, float] = {
        "steps": float(len(steps)),
        "minutes": minutes,
        "eval_minutes": eval_minutes,
        "games": float(len(steps) * per_step),
        "games_per_rl_minute": len(steps) * per_step / max(minutes - eval_minutes, 1e-9),
    }
    for key in ("sampler/tokens_computed", "sampler/tokens_reused", "train/tokens_computed",
                "train/tokens_reused"):  # fmt: skip
        out[key] = sum(r.get(key, 0.0) for r in steps)
    return out


def curve(rows: Sequence[dict[str, Any]], metric: str) -> list[tuple[int, float, float]]:
    """``(step, minute of RL at that step, value)`` at each evaluation that has ``metric``."""
    minute, points = 0.0, []
    for row in rows:
        if metric in row:
            points.append((int(row["step"]), minute, float(row[metric])))
        minute += row.get("time/total", 0.0) / 60
    return points


def markdown(runs: Sequence[Path], metrics: Sequence[str]) -> str:
    """A table per metric: its value at each evaluation, one column a run."""
    data = {run: read_run(run) for run in runs}
    lines = []
    for metric in metrics:
        curves = {run: curve(rows, metric) for run, rows in data.items()}
        if not any(curves.values()):
            continue
        lines += [f"**{metric}**", ""]
        lines.append("| evaluation | " + " | ".join(run.name for run in runs) + " |")
        lines.append("|---" * (len(runs) + 1) + "|")
        longest = max(len(c) for c in curves.values())
        for i in range(longest):
            cells = []
            for run in runs:
                points = curves[run]
                if i < len(points):
                    step, minute, value = points[i]
                    cells.append(f"{value:.3f} (step {step}, {minute:.0f} min)")
                else:
                    cells.append("")
            lines.append(f"| {i} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def plot(runs: Sequence[Path], metrics: Sequence[str], out: Path) -> None:
    """The curves by minute of RL, one panel a metric, one line a run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = {run: read_run(run) for run in runs}
    shown = [m for m in metrics if any(curve(rows, m) for rows in data.values())]
    if not shown:
        return
    fig, axes = plt.subplots(1, len(shown), figsize=(4.5 * len(shown), 3.5), squeeze=False)
    for ax, metric in zip(axes[0], shown, strict=True):
        for run, rows in data.items():
            points = curve(rows, metric)
            ax.plot([p[1] for p in points], [p[2] for p in points], marker="o", label=run.name)
        ax.set_title(metric, fontsize=9)
        ax.set_xlabel("minutes of RL (evaluations included)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories")
    parser.add_argument("--metrics", default=",".join(DEFAULT_METRICS), help="comma-separated")
    parser.add_argument("--png", type=Path, default=None, help="write the curves here")
    args = parser.parse_args(argv)
    metrics = [m for m in args.metrics.split(",") if m]
    missing = [run for run in args.runs if not (run / "metrics.jsonl").is_file()]
    if missing:
        parser.error(f"no metrics.jsonl in {', '.join(map(str, missing))}")
    print(markdown(args.runs, metrics))
    for run in args.runs:
        figures = speed(run)
        print(f"{run.name}: " + ", ".join(f"{k} {v:.1f}" for k, v in figures.items()))
    if args.png is not None:
        plot(args.runs, metrics, args.png)
        print(f"curves: {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
