"""Writer leases: which processes record into a database, and which of them are gone.

A recording process registers itself as a writer (``register_writer``) and renews its
lease while it records (``renew_lease``); its live matches name it. A process that opens
the database later marks aborted the live matches whose writer is gone
(``recover_orphaned_matches``), and an upgrade of the schema waits until no writer is
left (``storage.migrations.upgrade_schema``).
"""

from __future__ import annotations

import os
import socket
import time

from sqlalchemy import select, update

from storage.db import Database
from storage.models import STORED_TURNS, Match, MatchStatus, Writer

RECOVERED_REASON = "process ended while the match was live"
"""The reason given to live matches whose recording process is gone, when a new process
opens the database."""


def process_alive(pid: int) -> bool:
    """True when a process with id ``pid`` exists on this machine."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    except OSError:
        return False
    return True


def writer_gone(host: str, pid: int, lease_until: float, now: float) -> bool:
    """Whether a recording process has gone: its lease expired, or it ran on this host and
    its process no longer exists."""
    if lease_until < now:
        return True
    return host == socket.gethostname() and not process_alive(pid)


async def recover_orphaned_matches(db: Database, reason: str = RECOVERED_REASON) -> int:
    """Mark ``aborted`` with ``reason`` every live match whose writer is gone (see
    ``writer_gone``; a match without a writer counts as orphaned); return how many.

    Run by ``storage.connect.open_database(recover=True)``. Matches that another running
    process records are left alone: their writer's lease is fresh and its process alive.
    Raises SQLAlchemy errors (``open_database`` translates them).
    """
    now = time.time()
    async with db.writes.begin() as session:
        owners = (
            await session.execute(
                select(Writer.id, Writer.host, Writer.pid, Writer.lease_until).where(
                    Writer.id.in_(
                        select(Match.writer_id)
                        .where(Match.status == MatchStatus.LIVE, Match.writer_id.is_not(None))
                        .distinct()
                    )
                )
            )
        ).all()
        gone = [w for w, host, pid, lease in owners if writer_gone(host, pid, lease, now)]
        orphaned = (Match.writer_id.is_(None)) | (Match.writer_id.in_(gone))
        result = await session.execute(
            update(Match)
            .where(Match.status == MatchStatus.LIVE, orphaned)
            .values(
                status=MatchStatus.ABORTED, reason=reason, ended_at=None, num_turns=STORED_TURNS
            )
        )
    return max(0, getattr(result, "rowcount", 0) or 0)


async def register_writer(db: Database, name: str, lease_s: float) -> int:
    """Record this process as a writer holding a lease of ``lease_s`` seconds; return its
    id. This is a real write: it fails at once on a read-only or full database.

    Raises SQLAlchemy errors.
    """
    now = time.time()
    async with db.writes.begin() as session:
        writer = Writer(
            host=socket.gethostname(),
            pid=os.getpid(),
            name=name[:64],
            started_at=now,
            lease_until=now + lease_s,
        )
        session.add(writer)
        await session.flush()
        return writer.id


async def renew_lease(db: Database, writer_id: int, lease_until: float) -> None:
    """Set the writer's lease to ``lease_until`` (its heartbeat; the past: it is gone).

    Raises SQLAlchemy errors.
    """
    async with db.writes.begin() as session:
        await session.execute(
            update(Writer).where(Writer.id == writer_id).values(lease_until=lease_until)
        )
