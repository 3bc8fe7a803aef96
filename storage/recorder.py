"""The match recorder: every event on the bus, written to the database by one writer task.

Publishing only appends to the recorder's queue; one writer task drains whatever is queued
(up to ``batch_size`` events) into one write transaction. A match's turns are written in
the same transaction as its end or before it, so a match stored as finished always has all
its turns.

Nothing acknowledged is lost. When ``pressure`` events are queued, the bus is congested and
the games wait before their next move until the recorder has caught up (bounded
back-pressure, ``arena.events``): under load, play slows to what the database can store.
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
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession

from arena.events import (
    EventBus,
    InvalidMove,
    MatchAborted,
    MatchEnded,
    MatchEvent,
    MatchStarted,
    SubscriberDropped,
    Subscription,
    TurnPlayed,
    board_json,
)
from arena.identity import PolicyKind, checkpoint_of, player_kind
from storage.db import STORED_TURNS, Database, is_transient, register_writer, renew_lease
from storage.errors import DatabaseFull, DatabaseReadOnly, StorageError
from storage.models import (
    Base,
    BlockDictionary,
    Match,
    MatchStatus,
    Policy,
    Run,
    Seat,
    TurnBlock,
)
from storage.turnlog import (
    MAX_BLOCK_TURNS,
    Block,
    compress,
    make_dictionary,
)

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

LOST_EVENTS_REASON = "the recorder fell behind and lost this match's events"
FAILED_WRITE_REASON = "the recorder could not store this match's events"


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


@dataclass(slots=True)
class _Live:
    """A match being recorded: moves and invalid moves per seat so far."""

    num_players: int
    moves: list[int]
    invalid: list[int]
    next_seq: int = 0
    """The number its next turn block gets."""
    next_index: int = 0
    """The lowest index its next turn may have (indexes only go up)."""
    game_id: str = ""


class _Gap:
    """Marks, in the event stream, where events were lost."""


_GAP = _Gap()

# Plain strings: looking up enum members per event costs more than the rest of planning.
_LIVE, _ABORTED = MatchStatus.LIVE.value, MatchStatus.ABORTED.value
_LEARNER = PolicyKind.LEARNER.value

_MATCHES = Base.metadata.tables[Match.__tablename__]
_SEATS = Base.metadata.tables[Seat.__tablename__]
_BLOCKS = Base.metadata.tables[TurnBlock.__tablename__]
_BLOCK_COLUMNS = ("match_id", "seq", "first", "count", "data", "dictionary_id")
_DICTIONARIES = Base.metadata.tables[BlockDictionary.__tablename__]
_MATCH_END = (
    update(_MATCHES)
    .where(_MATCHES.c.id == bindparam("m_id"))
    .values(
        status=bindparam("status"),
        reason=bindparam("reason"),
        ended_at=bindparam("ended_at"),
        num_turns=bindparam("num_turns"),
    )
)
_SEAT_END = (
    update(_SEATS)
    .where(_SEATS.c.match_id == bindparam("m_id"), _SEATS.c.seat == bindparam("s_seat"))
    .values(
        reward=bindparam("reward"),
        moves=bindparam("moves"),
        invalid_moves=bindparam("invalid_moves"),
        forfeited=bindparam("forfeited"),
    )
)
_PolicyKey = tuple[str, str, str | None]


@dataclass
class _Plan:
    """The rows one batch of events turns into, in write order."""

    runs: dict[str, float] = field(default_factory=dict)
    """Runs to create (id -> first seen)."""
    matches: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Matches that started in this batch (inserted as they stand at its end)."""
    seats: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Their seats; ``policy_id`` holds the policy key until it is resolved."""
    blocks: list[Block] = field(default_factory=list)
    """New turn blocks (``storage.turnlog``), in order."""
    open_blocks: dict[str, Block] = field(default_factory=dict)
    """The block of each match that the batch's next turns of it go to."""
    turns: int = 0
    """Turns in those blocks."""
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    """The blocks as rows, in ``_BLOCK_COLUMNS`` order, once encoded (the dictionary id
    of a dictionary made in this batch is filled in by ``_commit``)."""
    new_dictionaries: dict[str, bytes] = field(default_factory=dict)
    """Dictionaries to store with this batch, by game."""
    ends: list[dict[str, Any]] = field(default_factory=list)
    """Ends of matches that started in an earlier batch (updates)."""
    seat_ends: list[dict[str, Any]] = field(default_factory=list)
    events: int = 0
    ended: int = 0
    ignored: int = 0
    lost: int = 0
    """Matches whose events a gap lost."""
    counted: list[tuple[_Live, int, bool]] = field(default_factory=list)
    """Moves counted into live matches (undone if the batch is not written)."""
    numbered: dict[int, tuple[_Live, int, int]] = field(default_factory=dict)
    """Live matches whose next block number or turn index this plan moved, and what they
    were (by ``id`` of the match's state)."""

    def undo_counts(self) -> None:
        """Take back the moves and block numbers this plan counted."""
        for state, seat, valid in reversed(self.counted):
            state.moves[seat] -= 1
            if not valid:
                state.invalid[seat] -= 1
        self.counted.clear()
        for state, seq, index in self.numbered.values():
            state.next_seq, state.next_index = seq, index
        self.numbered.clear()

    def touch(self, state: _Live) -> None:
        """Keep what ``undo_counts`` restores of ``state``, before it first changes."""
        if id(state) not in self.numbered:
            self.numbered[id(state)] = (state, state.next_seq, state.next_index)

    def new_block(self, state: _Live, match_id: str, first: int) -> Block:
        """Open the match's next block, at turn index ``first``."""
        self.touch(state)
        block = Block(match_id, state.next_seq, first, state.game_id)
        state.next_seq += 1
        self.blocks.append(block)
        self.open_blocks[match_id] = block
        return block


def _compress_all(jobs: list[tuple[bytes, bytes | None]]) -> list[bytes]:
    return [compress(body, dictionary) for body, dictionary in jobs]


class _Unstorable(Exception):
    """An event that cannot be stored as it is (a turn index that went back); the
    batch is split until it is found, and its match is stored aborted."""


class _GiveUp(Exception):
    """A write failed for good; its matches are marked aborted."""


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
        self._backlog: deque[MatchEvent | _Gap] = deque()
        self._progress = asyncio.Event()
        self._live: dict[str, _Live] = {}
        self._lost: set[str] = set()
        self._to_abort: dict[str, str] = {}
        self._policy_ids: dict[_PolicyKey, int] = {}
        self._runs: set[str] = set()
        self._kinds: dict[str, str] = {}
        self._dictionaries: dict[str, tuple[int, bytes] | None] = {}
        """Each game's block dictionary (id, data); None: the database had none."""
        self._failing = False
        self._busy = False
        self.writer_id: int | None = None
        """This recorder's row in ``writers`` (None until registered)."""
        self.last_error: str | None = None
        """The last write error that lost matches, in words."""
        self._next_heartbeat = 0.0
        self._last_checkpoint = time.monotonic()
        self._heartbeat_failing = False

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
            self.last_error = str(error)
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
        pending_aborts = bool(self._to_abort) and not self._failing
        return bool(queued or self._backlog or self._busy or pending_aborts)

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

    async def _next_batch(self) -> list[MatchEvent | _Gap] | None:
        """Up to ``batch_size`` queued events; waits for one when none is queued; None
        once closed and drained."""
        while True:
            sub = self._sub
            if sub is not None and sub.dropped:
                sub = self._resubscribe(sub)
            batch: list[MatchEvent | _Gap] = []
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
            if self._to_abort and not self._failing:
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
        self._backlog.append(_GAP)
        self._sub = (
            None
            if self._closing
            else self.bus.subscribe(self.max_queue, self.name, pressure=self.pressure)
        )
        return self._sub

    # -- planning (no I/O) ---------------------------------------------------------------
    def _plan(self, batch: Iterable[MatchEvent | _Gap]) -> _Plan:
        plan = _Plan()
        try:
            self._plan_into(plan, batch)
        except BaseException:
            plan.undo_counts()
            raise
        return plan

    def _plan_into(self, plan: _Plan, batch: Iterable[MatchEvent | _Gap]) -> None:
        live, lost = self._live, self._lost
        for event in batch:
            plan.events += 1
            if isinstance(event, TurnPlayed):
                state = live.get(event.match_id)
                if state is None:
                    plan.ignored += 1
                    continue
                if event.index < state.next_index:
                    raise _Unstorable(
                        f"match {event.match_id}: turn {event.index} came after turn "
                        f"{state.next_index - 1}"
                    )
                plan.touch(state)
                state.next_index = event.index + 1
                block = plan.open_blocks.get(event.match_id)
                if (
                    block is None
                    or block.first + len(block.turns) != event.index
                    or len(block.turns) >= MAX_BLOCK_TURNS
                ):
                    block = plan.new_block(state, event.match_id, event.index)
                block.add_turn(event)
                plan.turns += 1
                if 0 <= event.seat < state.num_players:
                    state.moves[event.seat] += 1
                    if not event.valid:
                        state.invalid[event.seat] += 1
                    plan.counted.append((state, event.seat, event.valid))
            elif isinstance(event, InvalidMove):
                continue  # also reported as a TurnPlayed
            elif isinstance(event, MatchStarted):
                self._plan_start(event, plan)
            elif isinstance(event, MatchEnded | MatchAborted):
                self._plan_end(event, plan)
            elif isinstance(event, _Gap):
                plan.events -= 1
                for match_id in live:
                    self._to_abort[match_id] = LOST_EVENTS_REASON
                    lost.add(match_id)
                plan.lost += len(live)
                live.clear()

    def _plan_start(self, event: MatchStarted, plan: _Plan) -> None:
        match_id = event.match_id
        if match_id in self._live or match_id in self._lost:
            log.warning("match %s started twice; the second start is ignored", match_id)
            plan.ignored += 1
            return
        if event.run_id is not None and event.run_id not in self._runs:
            plan.runs.setdefault(event.run_id, event.time)
        plan.matches[match_id] = {
            "id": match_id,
            "game_id": event.game_id,
            "seed": event.seed,
            "num_players": event.num_players,
            "status": _LIVE,
            "reason": "",
            "started_at": event.time,
            "ended_at": None,
            "run_id": event.run_id,
            "group_id": event.group_id,
            "rated": event.rated,
            "num_turns": 0,
            "writer_id": self.writer_id,
        }
        seats = []
        for seat in range(event.num_players):
            name = event.players[seat] if seat < len(event.players) else f"seat-{seat}"
            kind = self._kinds.get(name)
            if kind is None:
                kind = self._kinds[name] = str(self.policy_kind(name))
            checkpoint = checkpoint_of(name)
            run = event.run_id if kind == _LEARNER else checkpoint.name if checkpoint else None
            seats.append(
                {
                    "match_id": match_id,
                    "seat": seat,
                    "policy_id": (kind, name, run),  # a policy key until written
                    "reward": None,
                    "moves": 0,
                    "invalid_moves": 0,
                    "forfeited": False,
                }
            )
        plan.seats[match_id] = seats
        zeros = [0] * event.num_players
        state = self._live[match_id] = _Live(
            event.num_players, zeros, list(zeros), game_id=event.game_id
        )
        boards = board_json(event.board), board_json(event.full_board)
        plan.new_block(state, match_id, 0).set_start(event.messages, event.public_state, *boards)

    def _plan_end(self, event: MatchEnded | MatchAborted, plan: _Plan) -> None:
        match_id = event.match_id
        state = self._live.pop(match_id, None)
        if state is None:
            self._lost.discard(match_id)  # its events stop here
            plan.ignored += 1
            return
        plan.ended += 1
        if isinstance(event, MatchEnded):
            status, full_state = event.status, event.full_state
        else:
            status, full_state = _ABORTED, None
        end = {
            "status": status,
            "reason": event.reason,
            "ended_at": event.time,
            "num_turns": event.num_turns,
        }
        block = plan.open_blocks.pop(match_id, None)
        if full_state is not None:
            if block is None:
                block = plan.new_block(state, match_id, event.num_turns)
                del plan.open_blocks[match_id]
            block.end = (full_state,)
        new_row = plan.matches.get(match_id)
        if new_row is not None:  # started in this batch: insert it finished
            new_row.update(end)
        else:
            plan.ends.append({"m_id": match_id, **end})
        new_seats = plan.seats.get(match_id)
        for seat in range(state.num_players):
            if isinstance(event, MatchEnded):
                reward: float | None = (
                    float(event.rewards[seat]) if seat < len(event.rewards) else None
                )
                invalid = (
                    event.invalid_moves[seat]
                    if seat < len(event.invalid_moves)
                    else state.invalid[seat]
                )
                forfeited = seat in event.forfeited
            else:
                reward, invalid, forfeited = None, state.invalid[seat], False
            values = {
                "reward": reward,
                "moves": state.moves[seat],
                "invalid_moves": invalid,
                "forfeited": forfeited,
            }
            if new_seats is not None:
                new_seats[seat].update(values)
            else:
                plan.seat_ends.append({"m_id": match_id, "s_seat": seat, **values})

    # -- writing -------------------------------------------------------------------------
    async def _write(self, batch: list[MatchEvent | _Gap]) -> None:
        """Write one batch; never raises (errors are logged and end in aborted matches).

        A batch that fails for another reason than the database being unavailable is
        split in halves, in order, until the events that cannot be stored are found.
        """
        saved = (dict(self._live), set(self._lost), dict(self._to_abort))
        try:
            await self._write_with_retries(batch)
            return
        except _GiveUp as exc:
            self._live, self._lost, self._to_abort = saved
            self._give_up(batch, str(exc))
            return
        except SQLAlchemyError as exc:
            reason = str(self.db.error(exc))
        except _Unstorable as exc:
            reason = str(exc)
        except Exception as exc:  # a bug: keep the traceback
            log.exception("unexpected error while writing %d events", len(batch))
            reason = f"{type(exc).__name__}: {exc}"
        self._live, self._lost, self._to_abort = saved
        if len(batch) > 1:
            log.debug("a batch of %d events failed (%s); splitting it", len(batch), reason)
            middle = len(batch) // 2
            await self._write(batch[:middle])
            await self._write(batch[middle:])
            return
        self._give_up(batch, reason)

    async def _write_with_retries(self, batch: list[MatchEvent | _Gap]) -> None:
        """Write, retrying transient errors (locked, disk, connection refused or lost:
        ``storage.db.is_transient``) for ``retry_s`` (once only while writes keep failing).
        Raises _GiveUp, or what the write raised."""
        deadline = time.monotonic() + (0.0 if self._failing else self.retry_s)
        delay = 0.05
        while True:
            saved = (dict(self._live), set(self._lost), dict(self._to_abort))
            try:
                await self._write_once(batch)
                self._failing = False
                return
            except Exception as exc:
                self.stats.write_errors += 1
                if not is_transient(exc):
                    raise
                self._live, self._lost, self._to_abort = saved
                error = self.db.error(exc)
                # A full disk or a read-only file stays so until someone acts: no retries.
                permanent = isinstance(error, DatabaseFull | DatabaseReadOnly)
                if permanent or time.monotonic() + delay > deadline:
                    self._failing = True
                    raise _GiveUp(str(error)) from exc
                log.error("writing %d events failed (%s); retrying", len(batch), error)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _give_up(self, batch: list[MatchEvent | _Gap], reason: str) -> None:
        """Forget the events of a batch that cannot be written; mark its matches aborted
        (with the next write that succeeds)."""
        self.last_error = reason
        if not batch:  # only marks were to be written: the next start's recovery does it
            log.error("could not mark %d match(es) aborted (%s)", len(self._to_abort), reason)
            self._to_abort.clear()
            return
        ended = {e.match_id for e in batch if isinstance(e, MatchEnded | MatchAborted)}
        touched = {
            e.match_id: FAILED_WRITE_REASON
            for e in batch
            if not isinstance(e, _Gap) and e.match_id not in self._lost  # (counted already)
        }
        if any(isinstance(e, _Gap) for e in batch):
            for match_id in self._live:
                touched.setdefault(match_id, LOST_EVENTS_REASON)
        self.stats.lost_matches += len(touched)
        log.error(
            "could not store %d event(s) of %d match(es) (%s); those matches will be stored "
            "as aborted",
            len(batch),
            len(touched),
            reason,
        )
        for match_id, why in touched.items():
            self._live.pop(match_id, None)
            self._to_abort[match_id] = why
            if match_id in ended:
                self._lost.discard(match_id)
            else:
                self._lost.add(match_id)

    async def _write_once(self, batch: list[MatchEvent | _Gap]) -> None:
        started = time.perf_counter()
        plan = self._plan(batch)
        aborts = dict(self._to_abort)
        try:
            # Encoded here, compressed on another thread (Zstandard lets the games run
            # meanwhile), before the write transaction holds the database's lock.
            bodies = [block.body() for block in plan.blocks]
            dictionaries = await self._dictionaries_for(plan, bodies)
            chosen = [dictionaries.get(b.game_id, (None, None)) for b in plan.blocks]
            jobs = [(body, data) for body, (_, data) in zip(bodies, chosen, strict=True)]
            datas = await asyncio.to_thread(_compress_all, jobs) if jobs else []
            plan.rows = [
                (b.match_id, b.seq, b.first, len(b.turns), data, dictionary_id)
                for b, data, (dictionary_id, _) in zip(plan.blocks, datas, chosen, strict=True)
            ]
            marked, new_policies = await self._commit(plan, aborts)
        except BaseException:
            plan.undo_counts()
            raise
        self._policy_ids.update(new_policies)
        self._runs.update(plan.runs)
        for block, row in zip(plan.blocks, plan.rows, strict=True):
            if block.game_id in plan.new_dictionaries:
                self._dictionaries[block.game_id] = (row[-1], plan.new_dictionaries[block.game_id])
        for match_id in aborts:
            self._to_abort.pop(match_id, None)
        self.stats.marked_aborted += marked
        self.stats.lost_matches += plan.lost
        self.stats.events += plan.events
        self.stats.ignored += plan.ignored
        self.stats.batches += 1
        self.stats.max_batch = max(self.stats.max_batch, plan.events)
        self.stats.matches_started += len(plan.matches)
        self.stats.matches_ended += plan.ended
        self.stats.turns += plan.turns
        self.stats.write_s += time.perf_counter() - started

    async def _commit(
        self, plan: _Plan, aborts: dict[str, str]
    ) -> tuple[int, dict[_PolicyKey, int]]:
        """Write ``plan`` in one transaction; return the matches marked aborted and the
        policies created."""
        new_policies: dict[_PolicyKey, int] = {}
        async with self.db.writes.begin() as session:
            for run_id, created in plan.runs.items():
                await self._ensure_run(session, run_id, created)
            seat_rows = []
            for seats in plan.seats.values():
                for row in seats:
                    key = row["policy_id"]
                    policy_id = self._policy_ids.get(key) or new_policies.get(key)
                    if policy_id is None:
                        policy_id = await self._ensure_policy(session, key)
                        new_policies[key] = policy_id
                    seat_rows.append({**row, "policy_id": policy_id})
            # Core statements on the mapped tables: the ORM's bulk paths cost several
            # times more per row, and this runs on the event loop the games share.
            conn = await session.connection()
            if plan.matches:
                columns = tuple(next(iter(plan.matches.values())))
                rows = [tuple(m.values()) for m in plan.matches.values()]
                await self.db.insert_many(conn, _MATCHES, columns, rows)
            if seat_rows:
                columns = tuple(seat_rows[0])
                rows = [tuple(r.values()) for r in seat_rows]
                await self.db.insert_many(conn, _SEATS, columns, rows)
            made: dict[str, int] = {}
            for game_id, data in plan.new_dictionaries.items():
                made[game_id] = await conn.scalar(
                    insert(_DICTIONARIES)
                    .values(game_id=game_id, created_at=time.time(), data=data)
                    .returning(_DICTIONARIES.c.id)
                )
            if made:  # (once per game in a database's life)
                plan.rows = [
                    (*row[:-1], made[block.game_id]) if block.game_id in made else row
                    for block, row in zip(plan.blocks, plan.rows, strict=True)
                ]
            await self.db.insert_many(conn, _BLOCKS, _BLOCK_COLUMNS, plan.rows)
            if plan.ends:
                await conn.execute(_MATCH_END, plan.ends)
            if plan.seat_ends:
                await conn.execute(_SEAT_END, plan.seat_ends)
            marked = await self._abort(session, aborts) if aborts else 0
        return marked, new_policies

    async def _dictionaries_for(
        self, plan: _Plan, bodies: list[bytes]
    ) -> dict[str, tuple[int | None, bytes]]:
        """The dictionary each game of ``plan`` compresses against: the newest one the
        database holds for the game, else one made now from this batch's blocks of it
        (stored with the batch: ``plan.new_dictionaries``; its id is None until then)."""
        out: dict[str, tuple[int | None, bytes]] = {}
        games = {b.game_id for b in plan.blocks}
        for game_id in games:
            if game_id not in self._dictionaries:
                self._dictionaries[game_id] = await self._stored_dictionary(game_id)
            known = self._dictionaries[game_id]
            if known is not None:
                out[game_id] = known
                continue
            sample = [
                body for b, body in zip(plan.blocks, bodies, strict=True) if b.game_id == game_id
            ]
            plan.new_dictionaries[game_id] = data = make_dictionary(sample)
            out[game_id] = (None, data)
        return out

    async def _stored_dictionary(self, game_id: str) -> tuple[int, bytes] | None:
        try:
            async with self.db.sessions() as session:
                row = (
                    await session.execute(
                        select(BlockDictionary.id, BlockDictionary.data)
                        .where(BlockDictionary.game_id == game_id)
                        .order_by(BlockDictionary.id.desc())
                        .limit(1)
                    )
                ).first()
        except (SQLAlchemyError, OSError) as exc:  # the write will say what is wrong
            log.debug("could not read the block dictionary of %s: %s", game_id, exc)
            return None
        return None if row is None else (int(row[0]), bytes(row[1]))

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

    async def _ensure_policy(self, session: AsyncSession, key: _PolicyKey) -> int:
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
