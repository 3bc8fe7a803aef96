"""The match recorder: every event on the bus, written to the database by one writer task.

Publishing only appends to the recorder's queue; one writer task drains whatever is queued
(up to ``batch_size`` events) into one write transaction. A match's turns are written in
the same transaction as its end or before it, so a match stored as finished always has all
its turns.

Nothing acknowledged is lost. When ``pressure`` events are queued, the bus is congested and
the games wait before their next move until the recorder has caught up (bounded
back-pressure, ``arena.eventbus``): under load, play slows to what the database can store.
Only if the recorder falls ``max_queue`` events behind all the same does the bus drop it;
it then logs an error, subscribes again at once, and marks every match whose events it may
have lost as aborted (events of matches that started while it was away are ignored). A
write that keeps failing is retried for ``retry_s`` seconds, then its matches are marked
aborted the same way. Every such loss is counted (``stats.lost_matches``) and described by
``problem``, so that a command can say what it could not store and fail. Nothing here
raises into the games.

Ownership. The recorder registers itself as a writer of the database (``writers``: host,
process id, a lease of ``lease_s`` renewed every ``heartbeat_s``); every match it records
names it. A killed process loses what was still queued: those matches are missing, or left
live, and marked aborted by the next ``open_database`` once the lease has run out or the
process is seen dead; a process that starts meanwhile leaves them alone.

The WAL file stays bounded: after a commit, once ``checkpoint_s`` has passed or the WAL has
grown past ``wal_limit_bytes``, the recorder checkpoints it (``Database.checkpoint``).

    async with Recorder(db, bus):
        await play_matches("TicTacToe-v0", ["random", "random"], 100, bus=bus)
    # leaving the block (normally, on error or on cancellation) writes what is queued

Where the work is done: ``storage.recordplan`` decides which rows each batch of events
becomes (no I/O), ``storage.recordencode`` encodes and compresses the turn blocks, and
``storage.recordwrite`` writes a batch in one transaction (retries, splitting, giving up).
This module takes the events off the bus in batches and runs the writer task.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from types import TracebackType

from sqlalchemy.exc import SQLAlchemyError

from arena.eventbus import EventBus, SubscriberDropped, Subscription
from arena.identity import PolicyKind, player_kind
from storage.db import Database
from storage.errors import StorageError
from storage.leases import register_writer, renew_lease
from storage.recordplan import (
    FAILED_WRITE_REASON,
    GAP,
    LOST_EVENTS_REASON,
    Queued,
    RecordPlanner,
)
from storage.recordwrite import BatchWriter, RecorderStats

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_CHECKPOINT_S",
    "DEFAULT_HEARTBEAT_S",
    "DEFAULT_LEASE_S",
    "DEFAULT_MAX_QUEUE",
    "DEFAULT_PRESSURE",
    "DEFAULT_RETRY_S",
    "DEFAULT_WAL_LIMIT_BYTES",
    "FAILED_WRITE_REASON",
    "LOST_EVENTS_REASON",
    "Recorder",
    "RecorderStats",
]

log = logging.getLogger("storage.recorder")

DEFAULT_BATCH_SIZE = 20_000
"""Events written per transaction at most. Large on purpose: a transaction costs about 15
round trips to the database thread, each one a full turn of the event loop the games keep
busy, so small batches cannot keep up with fast self-play."""
DEFAULT_MAX_QUEUE = 100_000
"""Events the recorder may fall behind before the bus drops it (a few seconds of the
busiest self-play; each queued event holds its observation text)."""
DEFAULT_RETRY_S = 30.0
"""How long a write that fails with an operational error (locked, disk, connection) is
retried before its matches are given up as aborted."""
DEFAULT_PRESSURE = 20_000
"""Events queued at which the games wait for the recorder (back-pressure)."""
DEFAULT_LEASE_S = 60.0
"""How long the recorder's ownership of its live matches lasts without a heartbeat."""
DEFAULT_HEARTBEAT_S = 10.0
"""How often the recorder renews its lease."""
DEFAULT_CHECKPOINT_S = 30.0
"""Longest time between two WAL checkpoints while the recorder writes."""
DEFAULT_WAL_LIMIT_BYTES = 64 * 1024 * 1024
"""WAL size past which the recorder checkpoints at once."""


class Recorder:
    """Records every match published on ``bus`` into ``db``.

    ``batch_size``: events written per transaction at most. ``pressure``: events queued at
    which the games wait (None: never). ``max_queue``: events the recorder may fall behind
    before the bus drops it. ``retry_s``: how long a failing write is retried.
    ``lease_s``, ``heartbeat_s``: its ownership of its live matches. ``checkpoint_s``,
    ``wal_limit_bytes``: when the WAL is checkpointed. ``policy_kind``: maps a seat's player
    name to its policy kind. ``close_db``: also close ``db`` in ``close()``.

    Start it before the games start: ``async with`` (which first registers the recorder as
    a writer and raises ``StorageError`` when the database cannot be written), or
    ``start()``. Stop it with ``close()``, which writes everything queued first. Neither
    ``start()`` nor ``close()`` raises on database errors: they are logged, counted in
    ``stats``, the affected matches marked aborted, and ``problem`` says what was lost.
    """

    def __init__(
        self,
        db: Database,
        bus: EventBus,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        pressure: int | None = DEFAULT_PRESSURE,
        max_queue: int = DEFAULT_MAX_QUEUE,
        retry_s: float = DEFAULT_RETRY_S,
        lease_s: float = DEFAULT_LEASE_S,
        heartbeat_s: float = DEFAULT_HEARTBEAT_S,
        checkpoint_s: float = DEFAULT_CHECKPOINT_S,
        wal_limit_bytes: int = DEFAULT_WAL_LIMIT_BYTES,
        policy_kind: Callable[[str], PolicyKind] = player_kind,
        close_db: bool = False,
        name: str = "recorder",
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if max_queue < 1:
            raise ValueError("max_queue must be at least 1")
        if pressure is not None and pressure < 1:
            raise ValueError("pressure must be at least 1 (or None)")
        if not 0 < heartbeat_s < lease_s:
            raise ValueError("heartbeat_s must be positive and shorter than lease_s")
        if checkpoint_s <= 0 or wal_limit_bytes < 1:
            raise ValueError("checkpoint_s and wal_limit_bytes must be positive")
        self.db = db
        self.bus = bus
        self.batch_size = batch_size
        self.pressure = None if pressure is None else min(pressure, max_queue)
        self.max_queue = max_queue
        self.retry_s = retry_s
        self.lease_s = lease_s
        self.heartbeat_s = heartbeat_s
        self.checkpoint_s = checkpoint_s
        self.wal_limit_bytes = wal_limit_bytes
        self.policy_kind = policy_kind
        self.close_db = close_db
        self.name = name
        self.stats = RecorderStats()
        self._sub: Subscription | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._backlog: deque[Queued] = deque()
        self._progress = asyncio.Event()
        self._writer = BatchWriter(db, RecordPlanner(policy_kind), self.stats, retry_s)
        self._busy = False
        self.writer_id: int | None = None
        """This recorder's row in ``writers`` (None until registered)."""
        self._next_heartbeat = 0.0
        self._last_checkpoint = time.monotonic()
        self._heartbeat_failing = False

    @property
    def last_error(self) -> str | None:
        """The last write error that lost matches, in words."""
        return self._writer.last_error

    # -- life cycle ----------------------------------------------------------------------
    async def register(self) -> None:
        """Register as a writer of the database (idempotent). It is a real write: it
        raises ``StorageError`` (``DatabaseReadOnly``, ``DatabaseFull``...) when nothing
        could be stored."""
        if self.writer_id is not None:
            return
        try:
            self.writer_id = await register_writer(self.db, self.name, self.lease_s)
        except (SQLAlchemyError, OSError) as exc:
            error = self.db.error(exc)
            self._writer.last_error = str(error)
            raise error from exc
        self._next_heartbeat = time.monotonic() + self.heartbeat_s

    def start(self) -> None:
        """Subscribe to the bus and start the writer task (idempotent; needs a running
        loop); the task registers the recorder first if ``register`` was not awaited.
        Raises RuntimeError after ``close()``."""
        if self._closing:
            raise RuntimeError("this recorder was closed; make a new one")
        if self._task is None:
            self._sub = self.bus.subscribe(
                max_queue=self.max_queue, name=self.name, pressure=self.pressure
            )
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"arena-{self.name}"
            )

    @property
    def problem(self) -> str | None:
        """One line saying what could not be stored, or None when everything was."""
        lost = self.stats.lost_matches
        if not lost and self.writer_id is not None:
            return None
        if not lost:
            return f"nothing can be stored in {self.db.where}: {self.last_error}"
        why = self.last_error or LOST_EVENTS_REASON
        return f"{lost} match(es) could not be stored in {self.db.where}: {why}"

    async def flush(self) -> None:
        """Wait until every event published so far is written (or given up).

        Raises RuntimeError when the recorder is not running.
        """
        if self._task is None:
            raise RuntimeError("the recorder is not running: call start() first")
        while self._work_left():
            if self._task.done():
                raise RuntimeError("the recorder's writer task has stopped")
            self._progress.clear()
            waiter = asyncio.ensure_future(self._progress.wait())
            try:
                await asyncio.wait({waiter, self._task}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()

    def _work_left(self) -> bool:
        queued = self._sub.pending() if self._sub is not None else 0
        return bool(queued or self._backlog or self._busy or self._writer.aborts_pending())

    async def close(self) -> None:
        """Stop listening, write everything already queued, then stop (idempotent).

        Cancelling the caller does not interrupt the drain: ``close()`` finishes writing,
        then re-raises the cancellation.
        """
        self._closing = True
        cancelled = False
        task = self._task
        if self._sub is not None:
            self._sub.close()
        if task is not None:
            while not task.done():
                try:
                    await asyncio.shield(task)
                except asyncio.CancelledError:
                    me = asyncio.current_task()
                    if not task.done() or (me is not None and me.cancelling()):
                        cancelled = True
            if not task.cancelled() and task.exception() is not None:
                log.error("the recorder's writer failed", exc_info=task.exception())
        ending = asyncio.ensure_future(self._end_lease())
        while not ending.done():
            try:
                await asyncio.shield(ending)
            except asyncio.CancelledError:
                cancelled = True
        if self.close_db:
            await self.db.close()
        if cancelled:
            raise asyncio.CancelledError

    async def __aenter__(self) -> Recorder:
        await self.register()
        self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- the writer ----------------------------------------------------------------------
    async def _run(self) -> None:
        cancelled = False
        if self.writer_id is None:
            try:
                await self.register()
            except StorageError as exc:  # every write will fail the same way: counted
                log.error("the recorder cannot write: %s", exc)
            except asyncio.CancelledError:
                cancelled = self._closing = True
        while True:
            try:
                batch = await self._next_batch()
            except asyncio.CancelledError:
                # Cancelled while waiting: stop listening, but write what is queued.
                cancelled = self._closing = True
                if self._sub is not None:
                    self._sub.close()
                continue
            if batch is None:
                break
            self._busy = True
            write = asyncio.ensure_future(self._write(batch))
            while not write.done():
                try:
                    await asyncio.shield(write)
                except asyncio.CancelledError:
                    cancelled = self._closing = True
                    if self._sub is not None:
                        self._sub.close()
            self._busy = False
            self._progress.set()
            try:
                await asyncio.shield(self._maintain())
            except asyncio.CancelledError:
                cancelled = self._closing = True
                if self._sub is not None:
                    self._sub.close()
        self._progress.set()
        if cancelled:
            raise asyncio.CancelledError

    async def _maintain(self) -> None:
        """Between batches: renew the lease and checkpoint the WAL when due."""
        now = time.monotonic()
        if self.writer_id is not None and now >= self._next_heartbeat:
            self._next_heartbeat = now + self.heartbeat_s
            try:
                await renew_lease(self.db, self.writer_id, time.time() + self.lease_s)
            except (SQLAlchemyError, OSError) as exc:
                if not self._heartbeat_failing:
                    log.warning("could not renew the recorder's lease: %s", self.db.error(exc))
                self._heartbeat_failing = True
            else:
                self._heartbeat_failing = False
        if (
            now - self._last_checkpoint >= self.checkpoint_s
            or self.db.wal_bytes() > self.wal_limit_bytes
        ):
            self._last_checkpoint = now
            try:
                await self.db.checkpoint()
                self.stats.checkpoints += 1
            except StorageError as exc:
                log.warning("WAL checkpoint failed: %s", exc)

    async def _end_lease(self) -> None:
        """On close: give up the lease (its live matches, if any, are now orphans) and
        checkpoint once more, so that a closed database leaves a small WAL."""
        if self.writer_id is None:
            return
        try:
            await renew_lease(self.db, self.writer_id, time.time())
            await self.db.checkpoint()
        except (SQLAlchemyError, OSError, StorageError) as exc:
            log.warning("could not end the recorder's lease: %s", self.db.error(exc))

    async def _next_batch(self) -> list[Queued] | None:
        """Up to ``batch_size`` queued events; waits for one when none is queued; None
        once closed and drained."""
        while True:
            sub = self._sub
            if sub is not None and sub.dropped:
                sub = self._resubscribe(sub)
            batch: list[Queued] = []
            while self._backlog and len(batch) < self.batch_size:
                batch.append(self._backlog.popleft())
            if sub is not None:
                self.stats.max_pending = max(self.stats.max_pending, sub.pending())
            while sub is not None and len(batch) < self.batch_size:
                event = sub.get_nowait()
                if event is None:
                    break
                batch.append(event)
            if batch:
                return batch
            if self._writer.aborts_pending():
                return []  # nothing queued, but matches to mark aborted
            self._progress.set()
            if sub is None:
                return None
            wait = max(0.01, self._next_heartbeat - time.monotonic())
            try:
                event = await asyncio.wait_for(sub.get(), wait if self.writer_id else None)
            except TimeoutError:
                return []  # idle: time for the heartbeat
            except StopAsyncIteration:
                return None
            except SubscriberDropped:
                continue
            self._backlog.append(event)

    def _resubscribe(self, old: Subscription) -> Subscription | None:
        """Take what the dropped subscription still holds, mark the gap, and (unless
        closing) subscribe again."""
        self.stats.drops += 1
        log.error(
            "the bus dropped the recorder: it fell %d events behind; the matches in flight "
            "lose events and will be stored as aborted (raise max_queue or batch_size, or "
            "use a faster database)",
            old.max_queue,
        )
        while (event := old.get_nowait()) is not None:
            self._backlog.append(event)
        self._backlog.append(GAP)
        self._sub = (
            None
            if self._closing
            else self.bus.subscribe(self.max_queue, self.name, pressure=self.pressure)
        )
        return self._sub

    async def _write(self, batch: list[Queued]) -> None:
        """Write one batch (``storage.recordwrite``); never raises."""
        await self._writer.write(batch, self.writer_id)
