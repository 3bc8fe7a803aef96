"""Training curves: following the ``metrics.jsonl`` files that training runs append to.

A run writes one JSON object per step to ``<log dir>/metrics.jsonl`` (``step`` and
cookbook metric names: ``env/all/reward/total``, ``test/random/win``, ``optim/loss``...).
The watcher reads what was appended since its last look and says which rows are new. Of
each run it keeps, in memory that stays bounded however long the run: every evaluation row
(one with ``test/...`` figures; at most ``EVAL_ROWS``) and at most ``STEP_ROWS`` of the
other rows, evenly spread over the whole run (``SpreadRows``), its newest row included.
Sources are log dirs, metrics files or glob patterns (``runs/*/metrics.jsonl``), looked up
again on every poll so new runs appear.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from storage.rundir import RunDirectory, metrics_files
from web.protocol import finite

log = logging.getLogger("web.metrics")

MAX_READ_BYTES = 1024 * 1024
"""Most bytes read from one file per poll (a huge backlog is read over several polls)."""
MAX_LINE_BYTES = 1024 * 1024
"""A longer line is skipped: no step logs that much."""
EVAL_PREFIX = "test/"
"""Metrics of evaluations (``test/random/win``, ``test/kuhn/exploitability``)."""
STEP_ROWS = 2_000
"""Rows without evaluation figures kept per run, evenly spread over the whole run: once a
run has more, every other kept row is dropped and from then on only every 2nd (then 4th,
8th...) row is kept, so a 100,000-step run is still charted from its start to its newest
row (always kept) with 1,000 to 2,000 rows, plenty for a chart's width."""
EVAL_ROWS = 10_000
"""Evaluation rows (those with ``test/...`` figures) kept per run: every one up to this many,
which a run that evaluates every 10 steps reaches at its 100,000th step; a longer run's are
thinned like the other rows, evenly over the whole run."""
CHECKPOINT_BOOKKEEPING = frozenset({"time", "next_step", "best", "league"})
"""Fields of a ``checkpoints.jsonl`` entry that are not figures of the checkpoint."""


Row = dict[str, float | None]
"""One metrics row: ``step`` and the numeric metrics of that line (non-finite ones None)."""


class SpreadRows:
    """At most ``most`` rows of a growing sequence, evenly spread over all of it: every
    ``stride``-th row (the first included) and the newest one. When the kept rows would
    exceed ``most`` the stride doubles and every other kept row goes, so memory stays
    bounded and the rows kept stay evenly spaced, two of them at most
    ``2 * (seen - 1) / (most - 1)`` rows apart. Each row is kept with its ``order`` (its
    place in the file), by which rows of several ``SpreadRows`` merge back into file order."""

    def __init__(self, most: int) -> None:
        if most < 2:
            raise ValueError(f"SpreadRows keeps at least 2 rows (the first and newest), not {most}")
        self.most = most
        self.stride = 1
        self.seen = 0
        """Rows offered so far."""
        self._kept: list[tuple[int, int, Row]] = []
        """(index among the rows offered, order, row) of every ``stride``-th row."""
        self._newest: tuple[int, int, Row] | None = None
        """The newest row, when it is not a ``stride``-th one."""

    def add(self, order: int, row: Row) -> None:
        """Offer the next row (``order``: its place in the file, increasing)."""
        index, self.seen = self.seen, self.seen + 1
        if index % self.stride:
            self._newest = (index, order, row)
            return
        self._newest = None
        self._kept.append((index, order, row))
        if len(self._kept) >= self.most:  # one place left for an off-stride newest row
            self.stride *= 2
            self._kept = [kept for kept in self._kept if kept[0] % self.stride == 0]
            if index % self.stride:  # off the new stride, yet the newest: kept as such
                self._newest = (index, order, row)

    def clear(self) -> None:
        """Forget every row and start over at stride 1."""
        self.stride, self.seen, self._kept, self._newest = 1, 0, [], None

    def __len__(self) -> int:
        return len(self._kept) + (self._newest is not None)

    def ordered(self) -> Iterator[tuple[int, Row]]:
        """The rows kept as (order, row), oldest first."""
        for _index, order, row in self._kept:
            yield order, row
        if self._newest is not None:
            yield self._newest[1], self._newest[2]


def is_eval_row(row: Row) -> bool:
    """Whether ``row`` holds evaluation figures (a ``test/...`` metric)."""
    return any(key.startswith(EVAL_PREFIX) for key in row)


class RunRows:
    """A run's rows as the server keeps them: every evaluation row (up to ``eval_rows``,
    then thinned evenly) and at most ``step_rows`` other rows evenly spread over the whole
    run, the newest of each included (see ``SpreadRows``)."""

    def __init__(self, step_rows: int = STEP_ROWS, eval_rows: int = EVAL_ROWS) -> None:
        self.steps = SpreadRows(step_rows)
        self.evals = SpreadRows(eval_rows)
        self.read = 0
        """Rows read from the file since it started (or started over)."""
        self._newest: Row | None = None

    def append(self, row: Row) -> None:
        """Keep the next row read, or make room for it as the bounds say."""
        (self.evals if is_eval_row(row) else self.steps).add(self.read, row)
        self.read += 1
        self._newest = row

    def clear(self) -> None:
        """Forget every row (the file was replaced or truncated)."""
        self.steps.clear()
        self.evals.clear()
        self.read, self._newest = 0, None

    def __len__(self) -> int:
        return len(self.steps) + len(self.evals)

    def __iter__(self) -> Iterator[Row]:
        """Every row kept, in file order."""
        merged = heapq.merge(self.steps.ordered(), self.evals.ordered(), key=lambda kept: kept[0])
        return (row for _order, row in merged)

    def newest(self) -> Row | None:
        """The last row read (kept whatever the bounds), or None before the first."""
        return self._newest

    def snapshot(self, step_rows: int) -> list[Row]:
        """What a new subscriber starts with: every evaluation row kept and at most
        ``step_rows`` of the others, evenly spaced over the run, the newest included; in
        file order."""
        steps = spread(list(self.steps.ordered()), step_rows)
        merged = heapq.merge(steps, self.evals.ordered(), key=lambda kept: kept[0])
        return [row for _order, row in merged]


def spread(rows: list[Any], most: int) -> list[Any]:
    """At most ``most`` of ``rows``, evenly spaced, the first and the last included."""
    if len(rows) <= most:
        return rows
    if most <= 1:
        return rows[-1:] if most == 1 else []
    step = (len(rows) - 1) / (most - 1)
    return [rows[round(i * step)] for i in range(most)]


@dataclass
class RunSeries:
    """One run's metrics file and the rows read from it."""

    name: str
    path: Path
    rows: RunRows
    run_id: str | None = None
    """The run id its matches carry (``run_name`` in the log dir's ``config.json``)."""
    game_id: str | None = None
    """The game it trains on (``game_id`` in ``config.json``)."""
    offset: int = 0
    inode: int | None = None
    partial: bytes = b""
    bad_lines: int = 0
    keys: set[str] = field(default_factory=set)
    last_eval: dict[str, Any] | None = None
    """The newest row with evaluation figures: ``step`` and its ``test/...`` metrics."""
    _checkpoints: tuple[tuple[int, int], dict[str, Any]] | None = None

    def take(self, row: Row) -> None:
        """Keep one new row (as ``rows`` bounds allow) and what it says about the run's
        metrics and its last evaluation."""
        self.rows.append(row)
        self.keys.update(row)
        figures = {k: v for k, v in row.items() if k.startswith(EVAL_PREFIX)}
        if figures:
            self.last_eval = {"step": row.get("step"), "metrics": figures}

    def clear(self) -> None:
        """Forget every row (the file was replaced or truncated)."""
        self.rows.clear()
        self.keys.clear()
        self.last_eval = None

    def checkpoint_facts(self) -> dict[str, Any]:
        """From ``checkpoints.jsonl``, read again only when it changed: ``first_time`` (when
        the first checkpoint was saved), ``count`` (distinct steps) and ``best`` (the entry
        marked best: its ``step`` and figures, or None)."""
        run = RunDirectory(self.path.parent)
        try:
            stat = run.checkpoints_path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
        except OSError:
            return {"first_time": None, "count": 0, "best": None}
        if self._checkpoints is None or self._checkpoints[0] != stamp:
            entries = run.checkpoints()
            times = [e["time"] for e in entries if isinstance(e.get("time"), int | float)]
            steps = {e.get("step") for e in entries if isinstance(e.get("step"), int)}
            best = run.best()
            facts = {
                "first_time": min(times) if times else None,
                "count": len(steps),
                "best": None if best is None else checkpoint_figures(best),
            }
            self._checkpoints = (stamp, facts)
        return dict(self._checkpoints[1])

    def started_at(self) -> float | None:
        """When the run started, as its files tell: the earlier of its ``config.json``
        (written at the start, and again by ``--resume``) and its first checkpoint."""
        times = [self.checkpoint_facts()["first_time"]]
        with contextlib.suppress(OSError):
            times.append(RunDirectory(self.path.parent).config_path.stat().st_mtime)
        known = [t for t in times if t is not None]
        return min(known) if known else None

    def info(self) -> dict[str, Any]:
        """JSON-ready description (no rows). ``source`` names the file without saying where
        it lies on the server's disk: relative to the server's working folder when inside
        it, else its folder's name and its own."""
        last = self.rows.newest() or {}
        facts = self.checkpoint_facts()
        return {
            "name": self.name,
            "run_id": self.run_id,
            "game_id": self.game_id,
            "source": shown_path(self.path),
            "rows": self.rows.read,
            "last_step": last.get("step"),
            "keys": sorted(self.keys),
            "started_at": self.started_at(),
            "last_eval": self.last_eval,
            "checkpoints": facts["count"],
            "best": facts["best"],
        }


def checkpoint_figures(entry: dict[str, Any]) -> dict[str, Any]:
    """A ``checkpoints.jsonl`` entry as the page shows it: its ``step`` and the figures
    stored beside it (numbers, non-finite ones as None), without its bookkeeping."""
    out: dict[str, Any] = {"step": entry.get("step")}
    for key, value in entry.items():
        if key in CHECKPOINT_BOOKKEEPING or key == "step" or isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            out[key] = finite(float(value))
    return out


def shown_path(path: Path) -> str:
    """``path`` as clients may see it: never absolute (it would tell the server's layout)."""
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(Path(path.parent.name) / path.name)


def parse_row(line: bytes) -> Row | None:
    """One metrics line as {key: number}, keeping only numeric values (non-finite ones as
    None); None when the line is not a JSON object."""
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    row: Row = {}
    for key, value in data.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        row[str(key)] = finite(float(value))
    return row


class RunWatcher:
    """Follows the metrics files of training runs. ``step_rows`` and ``eval_rows`` bound
    the rows kept of each run (``STEP_ROWS``, ``EVAL_ROWS``; see ``RunRows``)."""

    def __init__(
        self,
        sources: Sequence[str | os.PathLike[str]],
        step_rows: int = STEP_ROWS,
        eval_rows: int = EVAL_ROWS,
    ) -> None:
        self.sources = [str(s) for s in sources]
        self.step_rows = step_rows
        self.eval_rows = eval_rows
        self.runs: dict[str, RunSeries] = {}
        self._by_path: dict[Path, RunSeries] = {}

    def _paths(self) -> list[Path]:
        return metrics_files(self.sources)

    def _name_for(self, path: Path) -> str:
        name = path.parent.name or path.stem
        if name in self.runs:
            name = f"{path.parent.parent.name}/{name}"
        base, n = name, 2
        while name in self.runs:
            name, n = f"{base}-{n}", n + 1
        return name

    def _series(self, path: Path) -> RunSeries:
        series = self._by_path.get(path)
        if series is None:
            series = RunSeries(self._name_for(path), path, RunRows(self.step_rows, self.eval_rows))
            run = RunDirectory(path.parent)
            name = run.config().get("run_name")
            series.run_id, series.game_id = (str(name) if name else None), run.game_id
            self.runs[series.name] = series
            self._by_path[path] = series
        return series

    def poll(self) -> dict[str, tuple[list[Row], bool]]:
        """Read what was appended to every run's file: run name -> (new rows, reset). The
        new rows are every row read, before any thinning (what live clients are sent).
        ``reset`` is True when the file was replaced or truncated and the rows start over.
        Never raises on unreadable files (they are skipped until readable)."""
        changed: dict[str, tuple[list[Row], bool]] = {}
        for path in self._paths():
            series = self._series(path)
            try:
                rows, reset = self._read(series)
            except OSError as exc:
                log.debug("cannot read %s: %s", path, exc)
                continue
            if rows or reset:
                changed[series.name] = (rows, reset)
        return changed

    def _read(self, series: RunSeries) -> tuple[list[Row], bool]:
        stat = series.path.stat()
        reset = False
        if series.inode is not None and (
            stat.st_ino != series.inode or stat.st_size < series.offset
        ):
            series.clear()
            series.offset, series.partial, reset = 0, b"", True
        series.inode = stat.st_ino
        if stat.st_size == series.offset:
            return [], reset
        with series.path.open("rb") as f:
            f.seek(series.offset)
            data = f.read(MAX_READ_BYTES)
        series.offset += len(data)
        data = series.partial + data
        lines = data.split(b"\n")
        series.partial = lines.pop()
        if len(series.partial) > MAX_LINE_BYTES:
            series.partial, series.bad_lines = b"", series.bad_lines + 1
        rows = []
        for line in lines:
            if not line.strip():
                continue
            row = parse_row(line)
            if row is None:
                series.bad_lines += 1
                continue
            series.take(row)
            rows.append(row)
        return rows, reset
