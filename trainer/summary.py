"""The end of a training run in a few lines: how it did against each evaluation opponent at
its first and last evaluation, its best and last checkpoints, and what to run next.

Read from the run's directory (``storage.rundir``), so it describes what was stored, also
for a run that stopped early.
"""

from __future__ import annotations

from typing import Any

from storage.rundir import RunDirectory

_OUTCOMES = ("win", "draw", "loss", "score", "reward", "invalid_move_rate", "games", "aborted")
"""The per-opponent figures evaluation writes (``test/<opponent>/<figure>``, a multi-game
run's ``test/<game>/<opponent>/<figure>``); other ``test/...`` keys are the games' own
yardsticks (Kuhn poker's exploitability, ...) and mean scores."""
WIDTH = 100
"""Columns the summary fits in."""


def _evaluations(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        r
        for r in rows
        if isinstance(r.get("step"), int)
        and r["step"] >= 0
        and any(k.startswith("test/") for k in r)
    ]


def _is_figure(key: str, figure: str) -> bool:
    parts = key.split("/")
    return len(parts) in (3, 4) and parts[0] == "test" and parts[-1] == figure


def _opponent(key: str) -> str:
    """``test/<opponent>/win`` -> ``<opponent>``; ``test/<game>/<opponent>/win`` ->
    ``<game>/<opponent>``."""
    return key.removeprefix("test/").rsplit("/", 1)[0]


def _cell(row: dict[str, Any], opponent: str) -> str:
    get = lambda k: row.get(f"test/{opponent}/{k}")  # noqa: E731
    if get("win") is None:
        return "-"
    text = f"W {get('win'):.2f}  D {get('draw') or 0:.2f}  L {get('loss') or 0:.2f}"
    invalid = get("invalid_move_rate")
    if invalid is not None:
        text += f"  inv {100 * invalid:.1f}%"
    return text


def summary_lines(run: RunDirectory, game_id: str | None = None) -> list[str]:
    """The summary of the run in ``run`` (see the module docstring), at most ``WIDTH``
    columns wide."""
    rows = run.metrics()
    trained = {r["step"] for r in rows if isinstance(r.get("step"), int) and "time/total" in r}
    game = game_id or run.game_id or "?"
    name = run.run_name
    lines = [f"run {name} ({game}): {len(trained)} RL steps logged in {run.path}"]
    evaluations = _evaluations(rows)
    if evaluations:
        first, last = evaluations[0], evaluations[-1]
        opponents = sorted({_opponent(k) for r in evaluations for k in r if _is_figure(k, "win")})
        yardsticks = sorted(
            {
                k
                for r in evaluations
                for k in r
                if k.startswith("test/") and k.split("/")[-1] not in _OUTCOMES
            }
        )
        widest = WIDTH - 36 - 34  # the two figures' columns
        labels = [f"vs {o}"[: widest - 2] for o in opponents] + [
            k.removeprefix("test/").replace("/yardstick/", "/")[: widest - 2] for k in yardsticks
        ]
        col = max(16, *(len(label) + 2 for label in labels))  # a label never runs into a figure
        head = f"{'':<{col}}{'first (step ' + str(first['step']) + ')':<36}"
        head += f"last (step {last['step']})"
        lines.append(head)
        for label, opponent in zip(labels, opponents, strict=False):
            lines.append(f"{label:<{col}}{_cell(first, opponent):<36}{_cell(last, opponent)}")
        for label, key in zip(labels[len(opponents) :], yardsticks, strict=True):
            a, b = first.get(key), last.get(key)
            shown = [f"{v:.4f}" if isinstance(v, int | float) else "-" for v in (a, b)]
            lines.append(f"{label:<{col}}{shown[0]:<36}{shown[1]}")
    checkpoints = [c for c in run.checkpoints() if c.get("state_path") or c.get("sampler_path")]
    last_state = run.last_state()
    best = run.best()
    if last_state is not None:
        lines.append(f"last checkpoint: step {last_state['step']} ({last_state['state_path']})")
    if best is not None:
        figures = ", ".join(
            f"{k} {v:.3f}" for k, v in best.items() if isinstance(v, float) and k not in ("time",)
        )
        lines.append(f"best checkpoint: step {best['step']}" + (f" ({figures})" if figures else ""))
    lines.append("next:")
    lines.append(f"  arena serve --runs {run.path}   # the browser view ends with training")
    if checkpoints:
        step = (best or last_state or checkpoints[-1])["step"]
        seats = int(run.config().get("num_players") or 2)
        others = ",".join(["random"] * max(1, seats - 1))
        for each in run.games or (game,):  # a multi-game run plays each of its games
            lines.append(f"  arena play --game {each} --players run:{name}@{step},{others}")
    if last_state is not None:
        lines.append(f"  arena train --log-dir {run.path} --resume --num-batches N   # train on")
    return [line if len(line) <= WIDTH else line[: WIDTH - 3] + "..." for line in lines]


def evaluation_text(metrics: dict[str, Any]) -> str:
    """One evaluation's figures on one line: each opponent's W/D/L, then the yardsticks."""
    opponents = sorted({_opponent(k) for k in metrics if _is_figure(k, "win")})
    parts = [f"vs {o} {_cell(metrics, o)}" for o in opponents]
    parts += [
        f"{k.removeprefix('test/')} {metrics[k]:.4f}"
        for k in sorted(metrics)
        if k.startswith("test/") and k.split("/")[-1] not in _OUTCOMES
    ]
    return "; ".join(parts)
