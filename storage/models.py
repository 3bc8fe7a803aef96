"""The schema: training runs, policies, matches, seats, turns, and the schema version.

Times are Unix seconds (UTC, float: double precision on every database), as the events
carry them. Text columns hold exactly what they were given, except what no database can
store (``storable``: lone surrogates, and NUL characters on PostgreSQL, become U+FFFD).
What the game and the seats exchanged (messages, moves, tokens, logprobs, views) is in
``turn_blocks`` (``storage.turnlog``), where only lone surrogates are replaced. The same
schema serves SQLite and PostgreSQL.

Bump ``SCHEMA_VERSION`` whenever a change here would make an older Arena misread a newer
database or the other way round, and add the step that upgrades the previous version
(``storage.migrations``) with its fixture. ``storage.migrations.upgrade_schema`` upgrades an
older database when a writer opens it (readers refuse it: ``SchemaOutdated``); a newer one
is refused (``SchemaVersionError``).
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    ForeignKey,
    Index,
    LargeBinary,
    String,
    Text,
    func,
    select,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator, TypeEngine

from arena.text import REPLACEMENT, encodable

SCHEMA_VERSION = 7
"""The version of the schema this code reads and writes. 2: ``writers`` (who owns each live
match, with a lease) and ``turns.move`` (the parsed move spectators see live). 3: the live
ratings (``ratings``, ``rating_history``). 4: the structured boards
(``matches.start_board``, ``matches.start_full_board``, ``turns.board``,
``turns.full_board``). 5: ``agent_accounts`` (remote agents and their hashed tokens). 6:
``matches.rated`` (casual matches are stored unrated). 7: ``turn_blocks`` (what each turn
added, compressed in blocks) instead of ``turns`` (every seat's observation in full) and
of the matches' start and final views."""

SCHEMA_VERSION_KEY = "schema_version"


def storable(value: object, dialect: Dialect) -> str:
    """``value`` as text that ``dialect``'s database can store: lone surrogates become
    U+FFFD (``arena.text.encodable``) everywhere, and so do NUL characters on PostgreSQL,
    whose text type cannot hold them (SQLite stores them as they are)."""
    text = encodable(str(value))
    if dialect.name == "postgresql" and "\x00" in text:
        text = text.replace("\x00", REPLACEMENT)
    return text


def storable_json(value: Any) -> str | None:
    """A JSON column's value as the text stored (the engine's JSON serializer)."""
    # Lone surrogates (a board's text from a plugin) become U+FFFD, as in text columns,
    # rather than "\\udc80" escapes that decode back to unencodable text.
    return None if value is None else encodable(json.dumps(value, ensure_ascii=False))


class SafeText(TypeDecorator[str]):
    """A text column that stores any ``str`` (see ``storable``: lone surrogates, and NUL
    characters on PostgreSQL, are replaced on the way in). Same DDL as ``Text``. Values
    compared with the column in a query are made storable the same way, so they match."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        """The value as stored."""
        return None if value is None else storable(value, dialect)


class SafeString(TypeDecorator[str]):
    """``SafeText`` for names and ids: ``String(length)`` in the DDL. The length documents
    the expected size; it is enforced nowhere, so that a long name is stored whole on every
    database: SQLite ignores it, and on PostgreSQL the column is an unbounded VARCHAR."""

    impl = String
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        """Unbounded VARCHAR on PostgreSQL, ``String(length)`` elsewhere."""
        if dialect.name == "postgresql":
            return dialect.type_descriptor(String())
        return dialect.type_descriptor(self.impl_instance)

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        """The value as stored."""
        return None if value is None else storable(value, dialect)


class Base(DeclarativeBase):
    """Declarative base of every Arena table."""


class MatchStatus(StrEnum):
    """Where a stored match stands (the values of ``games.session.Status``)."""

    LIVE = "live"
    FINISHED = "finished"
    TRUNCATED = "truncated"
    ABORTED = "aborted"


class SchemaMeta(Base):
    """Facts about the database itself; ``schema_version`` is the one that matters."""

    __tablename__ = "schema_meta"

    key: Mapped[str] = mapped_column(SafeString(64), primary_key=True)
    value: Mapped[str] = mapped_column(SafeText)


class Run(Base):
    """A training run (matches of plain bot play have none)."""

    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(SafeString(64), primary_key=True)
    """The run id the trainer gives its matches (``MatchStarted.run_id``)."""
    name: Mapped[str] = mapped_column(SafeString(200))
    created_at: Mapped[float]
    config: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    """The run's configuration, as the trainer serialised it."""


class Policy(Base):
    """Something that plays seats: a bot, a learner of a run, a checkpoint, a person."""

    __tablename__ = "policies"

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(SafeString(16))
    """One of ``arena.identity.PolicyKind``."""
    name: Mapped[str] = mapped_column(SafeString(200))
    run_id: Mapped[str | None] = mapped_column(ForeignKey("runs.id"))
    checkpoint_step: Mapped[int | None]


# One policy per (kind, name, run). NULLs are distinct in plain unique constraints, so the
# run id is coalesced: bots (no run) are unique by name too.
Index(
    "uq_policies_kind_name_run",
    Policy.kind,
    Policy.name,
    func.coalesce(Policy.run_id, ""),
    unique=True,
)


class Writer(Base):
    """A recording process (one ``Recorder``): the owner of the live matches it records.

    It renews ``lease_until`` every heartbeat while it runs and ends it when it closes. A
    live match is only marked aborted (by the next process that opens the database) once
    its writer is gone: its lease has expired, or it ran on this host and its process no
    longer exists.
    """

    __tablename__ = "writers"

    id: Mapped[int] = mapped_column(primary_key=True)
    host: Mapped[str] = mapped_column(SafeString(255))
    """The machine it runs on (``socket.gethostname()``)."""
    pid: Mapped[int]
    name: Mapped[str] = mapped_column(SafeString(64))
    """The recorder's name (``recorder``, ``web-recorder``)."""
    started_at: Mapped[float]
    lease_until: Mapped[float]
    """Unix time until which it holds its live matches (renewed every heartbeat)."""


class Match(Base):
    """One game, from start to its end (or to the crash that ended it)."""

    __tablename__ = "matches"

    id: Mapped[str] = mapped_column(SafeString(64), primary_key=True)
    """The coordinator's match id (a uuid4 hex)."""
    game_id: Mapped[str] = mapped_column(SafeString(100))
    seed: Mapped[int] = mapped_column(BigInteger)
    """The game's seed (64 bits: any seed a caller passes)."""
    num_players: Mapped[int]
    status: Mapped[str] = mapped_column(SafeString(16))
    """One of ``MatchStatus``."""
    reason: Mapped[str] = mapped_column(SafeText, default="")
    """How it ended, in words (the game's outcome text, or why it was aborted)."""
    started_at: Mapped[float]
    ended_at: Mapped[float | None]
    run_id: Mapped[str | None] = mapped_column(ForeignKey("runs.id"))
    group_id: Mapped[str | None] = mapped_column(SafeString(64))
    rated: Mapped[bool] = mapped_column(default=True)
    """False for a casual match: its result moves no rating (``MatchStarted.rated``)."""
    num_turns: Mapped[int] = mapped_column(default=0)
    """Turns played (the start, the turns and the final state are in ``turn_blocks``)."""
    writer_id: Mapped[int | None] = mapped_column(ForeignKey("writers.id"))
    """The process that records it (None: unknown, treated as gone)."""

    __table_args__ = (
        Index("ix_matches_started", "started_at"),
        Index("ix_matches_game_started", "game_id", "started_at"),
        Index("ix_matches_run_started", "run_id", "started_at"),
        Index("ix_matches_status_started", "status", "started_at"),
    )


class Seat(Base):
    """One seat of a match: who played it and how it did."""

    __tablename__ = "seats"

    match_id: Mapped[str] = mapped_column(
        ForeignKey("matches.id", ondelete="CASCADE"), primary_key=True
    )
    seat: Mapped[int] = mapped_column(primary_key=True)
    policy_id: Mapped[int] = mapped_column(ForeignKey("policies.id"))
    reward: Mapped[float | None]
    """Final reward; None while live and for aborted matches (they carry none)."""
    moves: Mapped[int] = mapped_column(default=0)
    """Moves this seat made, invalid ones included."""
    invalid_moves: Mapped[int] = mapped_column(default=0)
    forfeited: Mapped[bool] = mapped_column(default=False)
    """True when the seat lost by invalid moves."""

    __table_args__ = (Index("ix_seats_policy_match", "policy_id", "match_id"),)


class BlockDictionary(Base):
    """What the turn blocks of one game are compressed against (a raw-content Zstandard
    dictionary; zlib's preset dictionary for blocks of the older format): text a game
    repeats in every match (its rules, its boards), stored once instead of once per match.
    Made by a recorder from the first blocks it writes of the game, when the database has
    none for it yet (``storage.turnlog``)."""

    __tablename__ = "block_dictionaries"

    id: Mapped[int] = mapped_column(primary_key=True)
    game_id: Mapped[str] = mapped_column(SafeString(100), index=True)
    created_at: Mapped[float]
    data: Mapped[bytes] = mapped_column(LargeBinary)
    """At most ``storage.turnlog.MAX_DICTIONARY_BYTES``."""


class TurnBlock(Base):
    """Consecutive turns of one match, stored together (``storage.turnlog``): what each
    move added (its messages, the move, the views after it), never a seat's whole
    observation, which is rebuilt from the messages. A match's first block also holds its
    start (first messages and views), its last one its all-seeing final state."""

    __tablename__ = "turn_blocks"

    match_id: Mapped[str] = mapped_column(
        ForeignKey("matches.id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(primary_key=True)
    """0-based number of the block in its match."""
    first: Mapped[int]
    """Index of its first turn (0-based move number, invalid moves included)."""
    count: Mapped[int]
    """Turns it holds (0: only the match's start, or its end)."""
    data: Mapped[bytes] = mapped_column(LargeBinary)
    """``storage.turnlog``'s format byte, then compressed JSON (Zstandard; zlib in older
    blocks)."""
    dictionary_id: Mapped[int | None] = mapped_column(ForeignKey("block_dictionaries.id"))
    """The dictionary ``data`` was compressed against (None: none)."""


STORED_TURNS = (
    select(func.coalesce(func.sum(TurnBlock.count), 0))
    .where(TurnBlock.match_id == Match.id)
    .scalar_subquery()
)
"""The turns stored of the match a statement updates: what a match marked aborted after
its process died played (its ``num_turns`` was to be written at its end)."""


class Rating(Base):
    """A policy's live rating in one game (openskill Plackett-Luce), kept by
    ``matchmaking.live.RatingKeeper`` from every rated match as it ends."""

    __tablename__ = "ratings"

    game_id: Mapped[str] = mapped_column(SafeString(100), primary_key=True)
    policy: Mapped[str] = mapped_column(SafeString(200), primary_key=True)
    """The policy key (``bot:random@1``, ``checkpoint:run@120``)."""
    mu: Mapped[float]
    sigma: Mapped[float]
    games: Mapped[int] = mapped_column(default=0)
    """Rated matches it played."""
    updated_at: Mapped[float]


class RatingChange(Base):
    """A rating after one rated match: the history behind ``Rating``."""

    __tablename__ = "rating_history"

    id: Mapped[int] = mapped_column(primary_key=True)
    match_id: Mapped[str] = mapped_column(SafeString(64), index=True)
    game_id: Mapped[str] = mapped_column(SafeString(100))
    policy: Mapped[str] = mapped_column(SafeString(200))
    mu: Mapped[float]
    sigma: Mapped[float]
    time: Mapped[float]


Index("ix_rating_history_game_policy", RatingChange.game_id, RatingChange.policy, RatingChange.time)


class AgentAccount(Base):
    """A remote agent's account: it plays seats as ``agent:NAME`` through the server's
    agent protocol, authenticated by a secret token that is stored only hashed
    (``storage.agents``)."""

    __tablename__ = "agent_accounts"

    name: Mapped[str] = mapped_column(SafeString(64), primary_key=True)
    """The account's name: its policy key is ``agent:NAME``."""
    key_id: Mapped[str] = mapped_column(SafeString(32), unique=True)
    """The public part of its token, which finds the account (not a secret)."""
    token_hash: Mapped[str] = mapped_column(SafeString(128))
    """SHA-256 (hex) of the token's secret part; the token itself is never stored."""
    created_at: Mapped[float]
    revoked_at: Mapped[float | None]
    """When ``arena agents revoke`` revoked it (its token then authenticates nothing)."""
    last_seen_at: Mapped[float | None]
    """When it last authenticated."""
