"""Training runs: the trainer saves its run (name, configuration); matches refer to it."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update

from arena.identity import PolicyKind, PolicyRef
from storage.db import Database
from storage.models import Policy, Run


@dataclass(frozen=True)
class RunInfo:
    """A stored training run."""

    id: str
    name: str
    created_at: float
    config: dict[str, Any] | None


async def save_run(
    db: Database, run_id: str, *, name: str | None = None, config: dict[str, Any] | None = None
) -> RunInfo:
    """Create the run ``run_id`` or update its name and configuration (a JSON-ready dict).

    The recorder creates runs it meets in events by id alone; call this to name them.
    Raises SQLAlchemy errors (``db.error(exc)`` explains them).
    """
    async with db.writes.begin() as session:
        # (created if new, whoever else creates it meanwhile: see Recorder._ensure_run)
        await session.execute(
            db.insert_new(Run).values(
                id=run_id, name=name or run_id, created_at=time.time(), config=config
            )
        )
        changes: dict[str, Any] = {}
        if name is not None:
            changes["name"] = name
        if config is not None:
            changes["config"] = config
        if changes:
            await session.execute(update(Run).where(Run.id == run_id).values(**changes))
        row = (
            await session.execute(
                select(Run.id, Run.name, Run.created_at, Run.config).where(Run.id == run_id)
            )
        ).one()
    return RunInfo(row.id, row.name, row.created_at, row.config)


async def list_runs(db: Database) -> list[RunInfo]:
    """Every stored run, newest first. Raises SQLAlchemy errors."""
    async with db.sessions() as session:
        runs = (await session.scalars(select(Run).order_by(Run.created_at.desc()))).all()
    return [RunInfo(r.id, r.name, r.created_at, r.config) for r in runs]


async def record_checkpoint(db: Database, run_id: str, step: int) -> int:
    """Store the checkpoint of run ``run_id`` at ``step`` as a policy (kind
    ``checkpoint``, named ``checkpoint:<run>@<step>``) so that later matches can name it
    as a player; returns the policy id. Idempotent. Raises SQLAlchemy errors."""
    name = PolicyRef.checkpoint(run_id, step).key
    async with db.writes.begin() as session:
        await session.execute(
            db.insert_new(Run).values(id=run_id, name=run_id, created_at=time.time(), config=None)
        )
        await session.execute(
            db.insert_new(Policy).values(
                kind=PolicyKind.CHECKPOINT, name=name, run_id=run_id, checkpoint_step=step
            )
        )
        found = await session.execute(
            select(Policy.id).where(
                Policy.kind == PolicyKind.CHECKPOINT, Policy.name == name, Policy.run_id == run_id
            )
        )
        return int(found.scalar_one())


async def list_checkpoints(db: Database, run_id: str) -> list[tuple[int, str]]:
    """The stored checkpoints of ``run_id`` as (step, policy name), by step."""
    async with db.sessions() as session:
        rows = (
            await session.scalars(
                select(Policy)
                .where(Policy.kind == PolicyKind.CHECKPOINT, Policy.run_id == run_id)
                .order_by(Policy.checkpoint_step)
            )
        ).all()
    return [(int(p.checkpoint_step or 0), p.name) for p in rows]


class RunNameTaken(ValueError):
    """A new training run was given the name of a run the database already holds."""


async def claim_run(
    db: Database, run_id: str, *, log_dir: str, config: dict[str, Any], resume: bool
) -> RunInfo:
    """Store the training run ``run_id`` trained in ``log_dir`` (an absolute path), or
    refuse the name: a run's checkpoints and matches are stored under its name, so two runs
    of one name would be rated, listed and loaded as one.

    A new run (``resume`` False) may take a name only when no run of that name is stored,
    or when the stored one was started in the same ``log_dir`` and left nothing there (the
    caller checks that the directory holds no run). A resumed run keeps its name. Raises
    RunNameTaken, or SQLAlchemy errors."""
    stored_config = {**config, "log_dir_resolved": log_dir}
    async with db.writes.begin() as session:
        created = await session.execute(
            db.insert_new(Run).values(
                id=run_id, name=run_id, created_at=time.time(), config=stored_config
            )
        )
        if created.rowcount != 1:  # type: ignore[attr-defined]  # the name is stored already
            row = (await session.execute(select(Run.config).where(Run.id == run_id))).one()
            stored = row.config if isinstance(row.config, dict) else {}
            if not resume and stored.get("log_dir_resolved") != log_dir:
                shown = stored.get("log_dir") or "another log dir"
                raise RunNameTaken(
                    f"run name {run_id!r} is taken in this database (by {shown}): choose "
                    "another --run-name (or --log-dir), or --resume that run"
                )
            await session.execute(update(Run).where(Run.id == run_id).values(config=stored_config))
        row = (
            await session.execute(
                select(Run.id, Run.name, Run.created_at, Run.config).where(Run.id == run_id)
            )
        ).one()
    return RunInfo(row.id, row.name, row.created_at, row.config)
