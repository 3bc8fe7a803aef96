"""A run's checkpoints: saving the training state, logging every saved weight in
``checkpoints.jsonl``, and keeping the best-measured weights (``best``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from storage.rundir import RunDirectory
from trainer.config import TrainConfig
from trainer.evaluate import Headline, run_headline
from trainer.service import RENDERER_METADATA_KEY


@dataclass
class CheckpointBook:
    """Where a run's weights are saved and what ``checkpoints.jsonl`` says of them."""

    config: TrainConfig
    run_dir: RunDirectory
    run_name: str
    metadata: dict[str, str] = field(default_factory=dict)
    """Every checkpoint's ``user_metadata`` (renderer, base model, backend, game)."""
    kl_reference_path: str | None = None
    """The KL reference's weights, logged with every checkpoint so a resumed run keeps it."""
    best: Headline | None = None
    """The best headline figure so far (see ``track_best``)."""
    database: Any = None
    """A ``storage.Database`` where the run's checkpoints are stored too, or None."""
    report: Callable[[str], None] = print

    def log(self, entry: dict[str, Any]) -> None:
        """Append to ``checkpoints.jsonl`` (with what a sampler needs to load it)."""
        full = {
            "base_model": self.metadata.get("base_model"),
            RENDERER_METADATA_KEY: self.metadata.get(RENDERER_METADATA_KEY),
            "backend": self.config.backend,
            "observation_format": self.config.resolved_format(),
            "time": time.time(),
            **entry,
        }
        if self.kl_reference_path is not None:
            full["kl_reference_path"] = self.kl_reference_path
        self.run_dir.append_checkpoint(full)

    async def record(self, version: int) -> None:
        """The checkpoint ``version`` in the database (when the run has one)."""
        if self.database is not None:
            from storage.runs import record_checkpoint

            await record_checkpoint(self.database, self.run_name, version)

    async def save(self, client: Any, step: int, next_step: int) -> None:
        """Save the training state as checkpoint ``step``: the weights after ``step``
        optimizer steps (what evaluation records as ``checkpoint:<run>@<step>``); a resumed
        run starts at loop step ``next_step`` (steps without datums take no optimizer
        step, so the two may differ)."""
        name = f"step-{next_step:06d}"  # unique (two saves may hold the same weights)
        state = client.save_state(name, user_metadata=self.metadata)
        if self.config.backend == "tinker":
            # Sampler weights, so the checkpoint can sit in a seat later.
            sampler = client.save_weights_for_sampler(name, user_metadata=self.metadata)
            state_path, sampler_path = (await state).path, (await sampler).path
        else:
            state_path = sampler_path = (await state).path  # local states load into samplers
        self.log(
            {
                "step": step,
                "next_step": next_step,
                "state_path": state_path,
                "sampler_path": sampler_path,
            }
        )
        await self.record(step)
        self.report(f"saved step {step} to {state_path}")

    async def track_best(self, client: Any, metrics: dict[str, float], version: int) -> str | None:
        """After an evaluation: when its headline figure (``run_headline``: the game's
        yardstick, else the mean score against the evaluation bots) is the run's best so
        far, the weights it measured (after ``version`` updates) are saved and marked
        ``best`` in ``checkpoints.jsonl`` (with the figure). Returns their sampler path,
        or None when the figure is not a new best."""
        figure = run_headline(self.config.games, metrics)
        if figure is None or not figure.better_than(self.best):
            return None
        self.best = figure
        saved = await client.save_weights_for_sampler(
            f"best-{version:06d}", user_metadata=self.metadata
        )
        path = str(saved.path)
        self.log({"step": version, "sampler_path": path})
        self.run_dir.mark_best(
            version,
            **{figure.key.rsplit("/", 1)[-1]: figure.value},
            best_key=figure.key,  # type: ignore[arg-type]
            higher_is_better=figure.higher_is_better,
        )
        return path
