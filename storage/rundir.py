"""A training run's log directory: the one module that writes and reads it.

Layout of ``<log dir>/`` (all plain files, so any tool can read them):

- ``config.json``: the run's ``TrainConfig`` as a JSON object (``run_name``, ``game_id``,
  ...), written when training starts;
- ``metrics.jsonl``: one JSON object per line, ``{"step": N, <metric>: <number>, ...}``
  (cookbook metric names; step ``-1`` holds the warm-up's figures, and the final
  evaluation is logged at the step after the last one trained);
- ``checkpoints.jsonl``: one JSON object per saved checkpoint: ``step`` (optimizer steps
  taken: the weights ``checkpoint:<run>@<step>`` names), ``next_step`` (the loop step a
  resumed run starts at), ``state_path`` and ``sampler_path``, ``base_model``,
  ``renderer_name``, ``observation_format``, ``time``; league snapshots carry
  ``league: true`` and only a ``sampler_path``; the best checkpoint so far by the game's
  yardstick carries ``best: true`` (see ``mark_best``);
- ``league.json``: the league's state (pool, scores), for ``--resume``;
- ``run.lock``: held (``flock``) by the process that trains the run, which wrote its pid,
  host and start time into it. The kernel releases it when that process dies, so a
  killed run's lock is simply taken over by the next one.

The trainer writes through ``RunDirectory``; matchmaking (``run:NAME@STEP``), the web
dashboard, the CLI and the benchmarks read through it.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import socket
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
CHECKPOINTS_FILE = "checkpoints.jsonl"
LEAGUE_FILE = "league.json"
LOCK_FILE = "run.lock"

DEFAULT_RUNS_DIR = "runs"
"""Where ``arena train`` puts runs by default (``runs/<name>``)."""
DEFAULT_RUN_SOURCES = (f"{DEFAULT_RUNS_DIR}/*/{METRICS_FILE}",)
"""Where ``arena serve`` looks for training runs by default."""


class RunInUse(Exception):
    """The run directory is being trained by another process (its lock is held)."""


class UnknownCheckpoint(ValueError):
    """No stored checkpoint matches the reference; the message says what exists."""


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file (none when it is missing). A line that is
    not a JSON object (a torn last line of a killed process) is skipped."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def _append_jsonl(path: Path, row: dict[str, Any], *, sort_keys: bool = False) -> None:
    with path.open("a") as f:
        f.write(json.dumps(row, sort_keys=sort_keys) + "\n")


def _replace(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a reader sees the old file or the new one)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@dataclass(frozen=True)
class RunDirectory:
    """One run's log directory (see the module docstring for its files)."""

    path: Path

    def __init__(self, path: str | os.PathLike[str]) -> None:
        object.__setattr__(self, "path", Path(path))

    # -- files -----------------------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def metrics_path(self) -> Path:
        return self.path / METRICS_FILE

    @property
    def checkpoints_path(self) -> Path:
        return self.path / CHECKPOINTS_FILE

    @property
    def league_path(self) -> Path:
        return self.path / LEAGUE_FILE

    # -- what the run is -------------------------------------------------------------------
    def holds_run(self) -> bool:
        """True when a run has written its metrics here (a new run must not start here)."""
        return self.metrics_path.exists()

    def config(self) -> dict[str, Any]:
        """The run's ``config.json`` ({} when it is missing or unreadable)."""
        try:
            data = json.loads(self.config_path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def write_config(self, config: dict[str, Any]) -> None:
        """Write ``config.json`` (creating the directory)."""
        self.path.mkdir(parents=True, exist_ok=True)
        _replace(self.config_path, json.dumps(config, indent=1))

    @property
    def run_name(self) -> str:
        """The run's name: ``run_name`` in its config, else the directory's name."""
        return str(self.config().get("run_name") or self.path.name)

    @property
    def game_id(self) -> str | None:
        """The game the run trains on (from its config), if known."""
        game = self.config().get("game_id")
        return str(game) if game else None

    @property
    def games(self) -> tuple[str, ...]:
        """Every game the run trains on (a multi-game run's ``game_id`` is comma-separated);
        empty when unknown."""
        game = self.game_id
        return tuple(g.strip() for g in game.split(",") if g.strip()) if game else ()

    # -- metrics ---------------------------------------------------------------------------
    def append_metrics(self, step: int, metrics: dict[str, float]) -> None:
        """Append one step's metrics to ``metrics.jsonl``."""
        _append_jsonl(self.metrics_path, {"step": step, **metrics}, sort_keys=True)

    def metrics(self) -> list[dict[str, Any]]:
        """Every row of ``metrics.jsonl``, in the order written."""
        return _read_jsonl(self.metrics_path)

    def drop_metrics_from(self, step: int) -> int:
        """Remove the rows of steps ``>= step`` (a resumed run replays them from its last
        checkpoint, so they would otherwise appear twice); returns how many went. Rows
        without a whole-number step are kept."""
        rows = self.metrics()
        kept = [r for r in rows if not isinstance(r.get("step"), int) or r["step"] < step]
        if len(kept) != len(rows):
            _replace(self.metrics_path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))
        return len(rows) - len(kept)

    # -- checkpoints -----------------------------------------------------------------------
    def checkpoints(self) -> list[dict[str, Any]]:
        """Every entry of ``checkpoints.jsonl``, oldest first."""
        return _read_jsonl(self.checkpoints_path)

    def append_checkpoint(self, entry: dict[str, Any]) -> None:
        """Append one checkpoint entry."""
        self.path.mkdir(parents=True, exist_ok=True)
        _append_jsonl(self.checkpoints_path, entry)

    def last_state(self) -> dict[str, Any] | None:
        """The newest full checkpoint (training state, not sampler weights alone), or None."""
        entries = [e for e in self.checkpoints() if e.get("state_path")]
        return entries[-1] if entries else None

    def checkpoint(self, step: int) -> dict[str, Any] | None:
        """The newest entry saved at ``step`` (optimizer steps), or None."""
        return next((e for e in reversed(self.checkpoints()) if e.get("step") == step), None)

    def best(self) -> dict[str, Any] | None:
        """The entry marked best by the game's yardstick, or None."""
        marked = [e for e in self.checkpoints() if e.get("best")]
        return marked[-1] if marked else None

    def mark_best(self, step: int, **figures: float) -> None:
        """Mark the checkpoint at ``step`` as the run's best (only one entry carries
        ``best: true``; ``figures`` are stored beside it, e.g. the yardstick's value).
        Raises UnknownCheckpoint when no entry has that step."""
        entries = self.checkpoints()
        index = next(
            (i for i in range(len(entries) - 1, -1, -1) if entries[i].get("step") == step), None
        )
        if index is None:
            raise UnknownCheckpoint(f"{self.path}: no checkpoint at step {step} to mark best")
        for i, entry in enumerate(entries):
            entry.pop("best", None)
            if i == index:
                entry["best"] = True
                entry.update(figures)
        _replace(self.checkpoints_path, "".join(json.dumps(e) + "\n" for e in entries))

    # -- the league ------------------------------------------------------------------------
    def league_state(self) -> dict[str, Any] | None:
        """The saved league state, or None."""
        try:
            data = json.loads(self.league_path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def write_league_state(self, state: dict[str, Any]) -> None:
        """Save the league's state."""
        _replace(self.league_path, json.dumps(state, indent=1))

    # -- the lock --------------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the run's lock while training. Raises RunInUse (naming the holder) when
        another live process holds it; a dead holder's lock is taken over."""
        self.path.mkdir(parents=True, exist_ok=True)
        path = self.path / LOCK_FILE
        f: IO[str] = path.open("a+")
        try:
            try:
                import fcntl

                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except ImportError:  # pragma: no cover - not a POSIX system: no lock
                pass
            except OSError:
                f.seek(0)
                holder = f.read().strip() or "another process"
                raise RunInUse(
                    f"{self.path} is being trained by {holder}: wait for it to end, "
                    "or choose another --log-dir / --run-name"
                ) from None
            f.seek(0)
            f.truncate()
            started = time.strftime("%Y-%m-%d %H:%M:%S")
            f.write(f"process {os.getpid()} on {socket.gethostname()} (since {started})\n")
            f.flush()
            yield
        finally:
            f.close()  # releases the lock


def find_run(
    name: str, runs_dir: str | os.PathLike[str] = DEFAULT_RUNS_DIR, extra: Sequence[str] = ()
) -> RunDirectory | None:
    """The log directory of the run called ``name``: one of ``extra`` (log directories
    given by the user) whose run has that name, else ``runs_dir/name``; None when none
    holds checkpoints."""
    for candidate in [*extra, str(Path(runs_dir) / name)]:
        run = RunDirectory(candidate)
        if run.checkpoints_path.is_file() and name in (run.run_name, run.path.name):
            return run
    return None


def metrics_files(sources: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """The ``metrics.jsonl`` files that ``sources`` name (log directories, metrics files or
    glob patterns such as ``runs/*/metrics.jsonl``), resolved, in order."""
    found: list[Path] = []
    for source in (str(s) for s in sources):
        candidates = (
            [Path(p) for p in sorted(glob.glob(source))]
            if glob.has_magic(source)
            else [Path(source)]
        )
        for path in candidates:
            if path.is_dir():
                path = path / METRICS_FILE
            if path.is_file():
                found.append(path.resolve())
    return found
