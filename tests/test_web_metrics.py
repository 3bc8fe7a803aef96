"""The rows the server keeps of a training run's ``metrics.jsonl`` (``web.pages.metrics``): every
evaluation row, the other rows evenly spread over the whole run in bounded memory, and what
live subscribers and page loads are sent."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from tests.test_web import client, http_get, recv, request
from web import ServerLimits, serve
from web.pages.metrics import EVAL_ROWS, STEP_ROWS, Row, RunRows, RunWatcher, SpreadRows, spread


def long_run(path: Path, steps: range, every: int = 50) -> None:
    """Rows as the trainer writes them: one a step, with evaluation figures every ``every``
    steps (in that step's row)."""
    with path.open("a") as f:
        for step in steps:
            row: dict[str, float] = {"step": step, "optim/loss": 1 / (step + 1)}
            if step % every == 0:
                row["test/random/win"] = (step % 7) / 7
                row["test/yardstick/exploitability"] = 0.09 + (step % 3) / 10
            f.write(json.dumps(row) + "\n")


def read_all(watcher: RunWatcher) -> list[Row]:
    """Poll until nothing more is read; every new row the polls reported."""
    new: list[Row] = []
    while changed := watcher.poll():
        for rows, _reset in changed.values():
            new += rows
    return new


def steps_of(rows: list[Row]) -> list[int]:
    return [int(r["step"] or 0) for r in rows]


def test_a_long_run_keeps_every_evaluation_and_its_steps_spread_over_the_whole_run(
    tmp_path: Path,
) -> None:
    bound = 200
    long_run(tmp_path / "metrics.jsonl", range(3_000))
    watcher = RunWatcher([str(tmp_path)], step_rows=bound)
    new = read_all(watcher)
    assert steps_of(new) == list(range(3_000))  # polls report every row read
    series = watcher.runs[tmp_path.name]
    kept = list(series.rows)
    steps = steps_of(kept)
    assert steps == sorted(steps)  # in file order
    evals = [r for r in kept if "test/random/win" in r]
    assert steps_of(evals) == list(range(0, 3_000, 50))  # all 60 of them
    others = [s for s, r in zip(steps, kept, strict=True) if "test/random/win" not in r]
    assert len(others) <= bound and len(series.rows) <= bound + 60
    assert steps[0] == 0 and steps[-1] == 2_999  # the first and the newest
    gaps = [b - a for a, b in itertools.pairwise(steps)]
    assert max(gaps) <= 2 * 3_000 / (bound - 1)  # spread over the whole run, not its end
    assert len([s for s in others if s < 1_500]) >= len(others) // 3
    info = series.info()
    assert info["rows"] == 3_000 and info["last_step"] == 2_999
    assert info["last_eval"]["step"] == 2_950


def test_a_new_subscriber_gets_every_evaluation_and_an_even_sample_of_the_steps(
    tmp_path: Path,
) -> None:
    long_run(tmp_path / "metrics.jsonl", range(3_000))
    watcher = RunWatcher([str(tmp_path)], step_rows=400)
    read_all(watcher)
    snapshot = watcher.runs[tmp_path.name].rows.snapshot(50)
    steps = steps_of(snapshot)
    assert steps == sorted(steps) and steps[0] == 0 and steps[-1] == 2_999
    assert steps_of([r for r in snapshot if "test/random/win" in r]) == list(range(0, 3_000, 50))
    assert len(snapshot) <= 60 + 50


def test_spread_rows_stay_bounded_and_even_as_they_grow() -> None:
    for most in (2, 3, 10, 101):
        rows = SpreadRows(most)
        for i in range(5_000):
            rows.add(i, {"step": float(i)})
            kept = [order for order, _row in rows.ordered()]
            assert len(kept) == len(rows) <= most
            assert kept[0] == 0 and kept[-1] == i
        gaps = [b - a for a, b in itertools.pairwise(kept)]
        assert max(gaps) <= 2 * 4_999 / (most - 1), most
    with pytest.raises(ValueError, match="at least 2"):
        SpreadRows(1)


def test_evaluations_past_their_cap_are_thinned_evenly_too() -> None:
    rows = RunRows(step_rows=10, eval_rows=16)
    for step in range(1_000):
        rows.append({"step": float(step), "test/random/win": 0.5})
    kept = steps_of(list(rows))
    assert len(kept) <= 16 and kept[0] == 0 and kept[-1] == 999
    assert STEP_ROWS < EVAL_ROWS  # evaluations are few: they get the larger bound


def test_spread_keeps_the_first_and_the_last() -> None:
    assert spread(list(range(10)), 20) == list(range(10))
    assert spread(list(range(101)), 5) == [0, 25, 50, 75, 100]
    assert spread(list(range(10)), 1) == [9]


def test_a_truncated_file_starts_the_rows_over(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    long_run(path, range(500))
    watcher = RunWatcher([str(tmp_path)], step_rows=50)
    read_all(watcher)
    path.write_text("")
    long_run(path, range(3))
    ((new, reset),) = watcher.poll().values()
    assert reset is True and steps_of(new) == [0, 1, 2]
    assert steps_of(list(watcher.runs[tmp_path.name].rows)) == [0, 1, 2]


async def test_subscribers_and_the_json_api_get_every_evaluation_of_a_long_run(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "runs" / "long"
    run_dir.mkdir(parents=True)
    metrics = run_dir / "metrics.jsonl"
    long_run(metrics, range(2_000), every=40)
    limits = ServerLimits(metrics_rows=300, metrics_snapshot_rows=100)
    hub = await serve(
        None, None, port=0, poll_interval_s=0.05, limits=limits,
        run_sources=[str(tmp_path / "runs" / "*")],
    )  # fmt: skip
    try:
        ws = await client(hub)
        status, body = await http_get(hub, "/api/runs")
        assert status == 200 and json.loads(body)["runs"][0]["rows"] == 2_000  # all read
        await request(ws, {"type": "subscribe", "stream": "run", "run": "long"})
        first = await recv(ws)
        assert first["reset"] is True and first["info"]["rows"] == 2_000
        steps = steps_of(first["rows"])
        evals = steps_of([r for r in first["rows"] if "test/random/win" in r])
        assert evals == list(range(0, 2_000, 40)) and steps[0] == 0 and steps[-1] == 1_999
        assert len(steps) - len(evals) <= 100
        long_run(metrics, range(2_000, 2_045), every=40)
        live: list[Row] = []
        while len(live) < 45:  # live: every new row, as read
            update = await recv(ws)
            assert update["reset"] is False
            live += update["rows"]
        assert steps_of(live) == list(range(2_000, 2_045))
        status, body = await http_get(hub, "/api/runs/long")
        rows = json.loads(body)["rows"]
        assert steps_of([r for r in rows if "test/random/win" in r]) == list(range(0, 2_045, 40))
        assert len(rows) <= 300 + 52 and steps_of(rows)[-1] == 2_044
        await ws.close()
    finally:
        await hub.close()
