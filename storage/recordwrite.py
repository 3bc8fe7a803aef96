"""The recorder's writing: one batch of events, planned (``storage.recordplan``) and
encoded (``storage.recordencode``), stored in one transaction; transient errors retried,
a batch that cannot be stored split until the events at fault are found, and the matches
of what is given up marked aborted with the next write that succeeds."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table, bindparam, insert, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from arena.identity import PolicyKind, checkpoint_of
from storage.db import Database
from storage.errors import DatabaseFull, DatabaseReadOnly, is_transient
from storage.models import (
    STORED_TURNS,
    Base,
    BlockDictionary,
    Match,
    MatchStatus,
    Policy,
    Run,
    Seat,
    TurnBlock,
)
from storage.recordencode import BlockEncoder
from storage.recordplan import Plan, PolicyKey, Queued, RecordPlanner, Unstorable

log = logging.getLogger("storage.recorder")

MATCHES = Base.metadata.tables[Match.__tablename__]
SEATS = Base.metadata.tables[Seat.__tablename__]
BLOCKS = Base.metadata.tables[TurnBlock.__tablename__]
BLOCK_COLUMNS = ("match_id", "seq", "first", "count", "data", "dictionary_id")
DICTIONARIES = Base.metadata.tables[BlockDictionary.__tablename__]
_MATCH_END = (
    update(MATCHES)
    .where(MATCHES.c.id == bindparam("m_id"))
    .values(
        status=bindparam("status"),
        reason=bindparam("reason"),
        ended_at=bindparam("ended_at"),
        num_turns=bindparam("num_turns"),
    )
)
_SEAT_END = (
    update(SEATS)
    .where(SEATS.c.match_id == bindparam("m_id"), SEATS.c.seat == bindparam("s_seat"))
    .values(
        reward=bindparam("reward"),
        moves=bindparam("moves"),
        invalid_moves=bindparam("invalid_moves"),
        forfeited=bindparam("forfeited"),
    )
)


@dataclass
class RecorderStats:
    """What the recorder has done so far."""

    events: int = 0
    """Events taken from the bus (including ignored ones)."""
    batches: int = 0
    """Transactions committed."""
    max_batch: int = 0
    """Most events written in one transaction."""
    matches_started: int = 0
    matches_ended: int = 0
    """Matches whose end (finished, truncated or aborted) was written."""
    turns: int = 0
    """Turns written."""
    drops: int = 0
    """Times the bus dropped the recorder for falling behind."""
    lost_matches: int = 0
    """Matches whose events were lost or could not be written (stored as aborted when the
    database still takes writes, else not stored at all)."""
    marked_aborted: int = 0
    """Of those, matches marked aborted in the database."""
    ignored: int = 0
    """Events of matches that are not recorded (started while the recorder was away)."""
    write_errors: int = 0
    """Failed write attempts (each one logged)."""
    write_s: float = 0.0
    """Wall time spent in write transactions."""
    max_pending: int = 0
    """Most events seen queued at once."""
    checkpoints: int = 0
    """WAL checkpoints run."""

    def as_dict(self) -> dict[str, float | int]:
        """JSON-ready copy."""
        return dict(self.__dict__)


class _GiveUp(Exception):
    """A write failed for good; its matches are marked aborted."""


class BatchWriter:
    """Writes batches planned by ``planner`` into ``db``, counting in ``stats``; a write
    that fails with a transient error is retried for ``retry_s`` seconds."""

    def __init__(
        self, db: Database, planner: RecordPlanner, stats: RecorderStats, retry_s: float
    ) -> None:
        self.db = db
        self.planner = planner
        self.stats = stats
        self.retry_s = retry_s
        self.encoder = BlockEncoder(db)
        self.policy_ids: dict[PolicyKey, int] = {}
        """The row of each policy known to be stored."""
        self.failing = False
        """The last write failed for good (the next one is not retried)."""
        self.last_error: str | None = None
        """The last write error that lost matches, in words."""

    def aborts_pending(self) -> bool:
        """Matches wait to be marked aborted, and writes are not failing."""
        return bool(self.planner.to_abort) and not self.failing

    async def write(self, batch: list[Queued], writer_id: int | None) -> None:
        """Write one batch (its new matches name ``writer_id``); never raises (errors
        are logged and end in aborted matches).

        A batch that fails for another reason than the database being unavailable is
        split in halves, in order, until the events that cannot be stored are found.
        """
        saved = self.planner.snapshot()
        try:
            await self._write_with_retries(batch, writer_id)
            return
        except _GiveUp as exc:
            self.planner.restore(saved)
            self._give_up(batch, str(exc))
            return
        except SQLAlchemyError as exc:
            reason = str(self.db.error(exc))
        except Unstorable as exc:
            reason = str(exc)
        except Exception as exc:  # a bug: keep the traceback
            log.exception("unexpected error while writing %d events", len(batch))
            reason = f"{type(exc).__name__}: {exc}"
        self.planner.restore(saved)
        if len(batch) > 1:
            log.debug("a batch of %d events failed (%s); splitting it", len(batch), reason)
            middle = len(batch) // 2
            await self.write(batch[:middle], writer_id)
            await self.write(batch[middle:], writer_id)
            return
        self._give_up(batch, reason)

    async def _write_with_retries(self, batch: list[Queued], writer_id: int | None) -> None:
        """Write, retrying transient errors (locked, disk, connection refused or lost:
        ``storage.errors.is_transient``) for ``retry_s`` (once only while writes keep failing).
        Raises _GiveUp, or what the write raised."""
        deadline = time.monotonic() + (0.0 if self.failing else self.retry_s)
        delay = 0.05
        while True:
            saved = self.planner.snapshot()
            try:
                await self._write_once(batch, writer_id)
                self.failing = False
                return
            except Exception as exc:
                self.stats.write_errors += 1
                if not is_transient(exc):
                    raise
                self.planner.restore(saved)
                error = self.db.error(exc)
                # A full disk or a read-only file stays so until someone acts: no retries.
                permanent = isinstance(error, DatabaseFull | DatabaseReadOnly)
                if permanent or time.monotonic() + delay > deadline:
                    self.failing = True
                    raise _GiveUp(str(error)) from exc
                log.error("writing %d events failed (%s); retrying", len(batch), error)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _give_up(self, batch: list[Queued], reason: str) -> None:
        """Forget the events of a batch that cannot be written; mark its matches aborted
        (with the next write that succeeds)."""
        self.last_error = reason
        to_abort = self.planner.to_abort
        if not batch:  # only marks were to be written: the next start's recovery does it
            log.error("could not mark %d match(es) aborted (%s)", len(to_abort), reason)
            to_abort.clear()
            return
        touched = self.planner.give_up(batch)
        self.stats.lost_matches += len(touched)
        log.error(
            "could not store %d event(s) of %d match(es) (%s); those matches will be stored "
            "as aborted",
            len(batch),
            len(touched),
            reason,
        )

    async def _write_once(self, batch: list[Queued], writer_id: int | None) -> None:
        started = time.perf_counter()
        plan = self.planner.plan(batch, writer_id)
        aborts = dict(self.planner.to_abort)
        try:
            await self.encoder.encode(plan)
            marked, new_policies = await self._commit(plan, aborts)
        except BaseException:
            plan.undo_counts()
            raise
        self.policy_ids.update(new_policies)
        self.planner.committed(plan, aborts)
        self.encoder.remember(plan)
        stats = self.stats
        stats.marked_aborted += marked
        stats.lost_matches += plan.lost
        stats.events += plan.events
        stats.ignored += plan.ignored
        stats.batches += 1
        stats.max_batch = max(stats.max_batch, plan.events)
        stats.matches_started += len(plan.matches)
        stats.matches_ended += plan.ended
        stats.turns += plan.turns
        stats.write_s += time.perf_counter() - started

    async def _commit(self, plan: Plan, aborts: dict[str, str]) -> tuple[int, dict[PolicyKey, int]]:
        """Write ``plan`` in one transaction; return the matches marked aborted and the
        policies created."""
        new_policies: dict[PolicyKey, int] = {}
        async with self.db.writes.begin() as session:
            for run_id, created in plan.runs.items():
                await self._ensure_run(session, run_id, created)
            seat_rows = []
            for seats in plan.seats.values():
                for row in seats:
                    key = row["policy_id"]
                    policy_id = self.policy_ids.get(key) or new_policies.get(key)
                    if policy_id is None:
                        policy_id = await self._ensure_policy(session, key)
                        new_policies[key] = policy_id
                    seat_rows.append({**row, "policy_id": policy_id})
            # Core statements on the mapped tables: the ORM's bulk paths cost several
            # times more per row, and this runs on the event loop the games share.
            conn = await session.connection()
            await self._insert(conn, MATCHES, list(plan.matches.values()))
            await self._insert(conn, SEATS, seat_rows)
            made: dict[str, int] = {}
            for game_id, data in plan.new_dictionaries.items():
                made[game_id] = await conn.scalar(
                    insert(DICTIONARIES)
                    .values(game_id=game_id, created_at=time.time(), data=data)
                    .returning(DICTIONARIES.c.id)
                )
            if made:  # (once per game in a database's life)
                plan.rows = [
                    (*row[:-1], made[block.game_id]) if block.game_id in made else row
                    for block, row in zip(plan.blocks, plan.rows, strict=True)
                ]
            await self.db.insert_many(conn, BLOCKS, BLOCK_COLUMNS, plan.rows)
            if plan.ends:
                await conn.execute(_MATCH_END, plan.ends)
            if plan.seat_ends:
                await conn.execute(_SEAT_END, plan.seat_ends)
            marked = await self._abort(session, aborts) if aborts else 0
        return marked, new_policies

    async def _insert(
        self, conn: AsyncConnection, table: Table, rows: list[dict[str, Any]]
    ) -> None:
        """Insert ``rows`` (dicts with the same keys, in order) into ``table``."""
        if rows:
            columns = tuple(rows[0])
            await self.db.insert_many(conn, table, columns, [tuple(r.values()) for r in rows])

    # Runs and policies are created with INSERT ... ON CONFLICT DO NOTHING: on PostgreSQL
    # another process may create the same one at the same time (SQLite's write lock keeps
    # writers apart, PostgreSQL's row locks do not).
    async def _ensure_run(self, session: AsyncSession, run_id: str, created: float) -> None:
        found = await session.scalar(select(Run.id).where(Run.id == run_id))
        if found is None:
            await session.execute(
                self.db.insert_new(Run).values(
                    id=run_id, name=run_id, created_at=created, config=None
                )
            )

    async def _ensure_policy(self, session: AsyncSession, key: PolicyKey) -> int:
        kind, name, run_id = key
        query = select(Policy.id).where(Policy.kind == kind, Policy.name == name)
        query = query.where(Policy.run_id.is_(None) if run_id is None else Policy.run_id == run_id)
        found = await session.scalar(query)
        if found is not None:
            return int(found)
        checkpoint = checkpoint_of(name) if kind == PolicyKind.CHECKPOINT else None
        step = checkpoint.step if checkpoint else None
        if run_id is not None and kind == PolicyKind.CHECKPOINT:
            await self._ensure_run(session, run_id, time.time())
        await session.execute(
            self.db.insert_new(Policy).values(
                kind=kind, name=name, run_id=run_id, checkpoint_step=step
            )
        )
        return int((await session.execute(query)).scalar_one())

    async def _abort(self, session: AsyncSession, aborts: dict[str, str]) -> int:
        by_reason: dict[str, list[str]] = {}
        for match_id, reason in aborts.items():
            by_reason.setdefault(reason, []).append(match_id)
        now = time.time()
        marked = 0
        for reason, ids in by_reason.items():
            for start in range(0, len(ids), 500):  # stay under bound-parameter limits
                result = await session.execute(
                    update(Match)
                    .where(Match.id.in_(ids[start : start + 500]))
                    .where(Match.status == MatchStatus.LIVE)
                    .values(
                        status=MatchStatus.ABORTED,
                        reason=reason,
                        ended_at=now,
                        num_turns=STORED_TURNS,
                    )
                )
                marked += max(0, getattr(result, "rowcount", 0) or 0)
        if marked:
            log.error("marked %d match(es) aborted: %s", marked, "; ".join(sorted(by_reason)))
        return marked
