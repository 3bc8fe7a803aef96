"""The stored checkpoints a person may play from the browser, by game.

Every run directory under the server's runs folder (``arena serve --runs-dir``, ``runs``
by default) that holds a ``checkpoints.jsonl`` offers each of its saved steps as an
opponent, named as everywhere else: ``run:NAME@STEP`` (``NAME`` the directory's name, as
``matchmaking.players.player_spec`` finds it). Files are read through
``storage.rundir.RunDirectory``, and again only when they change.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arena.identity import PolicyRef
from storage.rundir import CHECKPOINTS_FILE, RunDirectory

MAX_LISTED_CHECKPOINTS = 200
"""Most checkpoints listed per game (the newest steps of each run first out of the cut)."""


@dataclass
class StoredCheckpoints:
    """The checkpoints under ``runs_dir``, cached per ``checkpoints.jsonl`` (its size and
    modification time)."""

    runs_dir: str | os.PathLike[str]
    _cache: dict[Path, tuple[tuple[int, int], tuple[str, ...], list[dict[str, Any]]]] = field(
        default_factory=dict
    )

    def by_game(self) -> dict[str, list[dict[str, Any]]]:
        """Game id -> its checkpoints: ``player`` (``run:NAME@STEP``), ``policy`` (the key
        its matches and ratings are kept under), ``run``, ``step``, ``best`` (the run's
        best checkpoint by the game's yardstick). A multi-game run's checkpoints are listed
        under each of its games. Runs by name, steps newest first; at most
        ``MAX_LISTED_CHECKPOINTS`` per game. Never raises for unreadable files."""
        out: dict[str, list[dict[str, Any]]] = {}
        root = Path(self.runs_dir)
        try:
            folders = sorted(p for p in root.iterdir() if (p / CHECKPOINTS_FILE).is_file())
        except OSError:
            return out
        for folder in folders:
            games, entries = self._read(folder)
            for game_id in games if entries else ():
                out.setdefault(game_id, []).extend(entries)
        for game_id, entries in out.items():
            out[game_id] = entries[:MAX_LISTED_CHECKPOINTS]
        return out

    def _read(self, folder: Path) -> tuple[tuple[str, ...], list[dict[str, Any]]]:
        run = RunDirectory(folder)
        try:
            stat = run.checkpoints_path.stat()
        except OSError:
            return (), []
        stamp = (stat.st_mtime_ns, stat.st_size)
        cached = self._cache.get(folder)
        if cached is not None and cached[0] == stamp:
            return cached[1], cached[2]
        best = run.best()
        best_step = best.get("step") if best is not None else None
        steps = sorted(
            {
                e["step"]
                for e in run.checkpoints()
                if isinstance(e.get("step"), int) and e.get("sampler_path")
            },
            reverse=True,
        )
        name = folder.name
        entries = []
        for step in steps:
            ref = PolicyRef.checkpoint(name, step)
            if not ref.seatable:  # a folder name no player text can hold
                break
            entries.append(
                {"player": ref.player_text, "policy": ref.key, "run": name, "step": step,
                 "best": step == best_step}
            )  # fmt: skip
        self._cache[folder] = (stamp, run.games, entries)
        return run.games, entries
