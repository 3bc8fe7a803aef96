"""Bulk inserts: a table's INSERT compiled once per column list, fed plain tuples.

``Database.insert_many`` runs one of these per (table, columns): the recorder's batches go
to the driver without SQLAlchemy's per-row parameter processing, on SQLite as multi-row
statements of a few fixed sizes.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from itertools import chain
from typing import Any

from sqlalchemy import JSON, Table, insert
from sqlalchemy.ext.asyncio import AsyncConnection

from arena.text import REPLACEMENT, encodable
from storage.models import SafeString, SafeText, storable_json

MAX_ROWS_PER_INSERT = 1000
"""Rows one multi-row INSERT statement writes on SQLite (see ``Database.insert_many``)."""
STATEMENT_SIZE_FACTOR = 8
"""Smaller INSERT statements hold 1, 8, 64, 512... rows (see ``CompiledInsert.sizes``)."""
# Bound parameters one SQLite statement may take (32766 since SQLite 3.32, 999 before).
_MAX_VARIABLES = 32766 if sqlite3.sqlite_version_info >= (3, 32) else 999


class CompiledInsert:
    """An INSERT compiled from the model for one column list: on SQLite in multi-row form,
    on PostgreSQL one row, which asyncpg's executemany sends for every row in one pipeline.

    Python's sqlite3 takes the GIL back after every row of an executemany; while the games
    keep the GIL busy, each take waits for a thread switch (milliseconds), so a batch of
    thousands of rows crawls. One statement inserting ``rows_per_statement`` rows at once
    takes it back once per statement instead. The multi-row text repeats the VALUES group
    SQLAlchemy compiled (SQLAlchemy's own multi-row compilation costs ~0.2 ms a row).
    """

    def __init__(self, table: Table, columns: tuple[str, ...], dialect: Any) -> None:
        compiled = insert(table).compile(dialect=dialect, column_keys=list(columns))
        if not compiled.positional or compiled.positiontup is None:
            raise ValueError(f"{dialect.name} does not take positional parameters")
        sql = str(compiled)
        head, _, group = sql.rpartition(" VALUES ")
        placeholders = group.strip("(?, )") if dialect.name == "sqlite" else _pg_binds(group)
        if not head or placeholders:
            raise ValueError(f"unexpected INSERT form: {sql}")
        self._head, self._group = head + " VALUES ", group
        self._sql: dict[int, str] = {}
        order = list(compiled.positiontup)
        self.positions = [columns.index(name) for name in order]
        self.reorder = self.positions != list(range(len(columns)))
        self.json = [i for i, name in enumerate(order) if isinstance(table.c[name].type, JSON)]
        self.text = [
            i
            for i, name in enumerate(order)
            if isinstance(table.c[name].type, SafeText | SafeString)
        ]
        """Text columns: their values are made storable here, as ``SafeText`` would (these
        tuples bypass SQLAlchemy's bind processing)."""
        self.nul_free = dialect.name == "postgresql"
        """Text may hold no NUL character (``models.storable``)."""
        per_statement = _MAX_VARIABLES // len(order) if dialect.name == "sqlite" else 1
        self.rows_per_statement = max(1, min(MAX_ROWS_PER_INSERT, per_statement))
        self.sizes = [self.rows_per_statement]
        """The statement shapes used: the full size, then powers of 8 below it. A batch is
        cut greedily into these, so a long run uses at most a handful of statement texts
        (each one is compiled and cached by the driver; one text per leftover size would
        grow the cache by about a megabyte per size)."""
        size = 1
        while size < self.rows_per_statement:
            self.sizes.insert(1, size)
            size *= STATEMENT_SIZE_FACTOR

    def sql(self, rows: int) -> str:
        """The statement inserting ``rows`` rows (one of ``sizes``: compiled once each)."""
        text = self._sql.get(rows)
        if text is None:
            text = self._sql[rows] = self._head + ", ".join([self._group] * rows)
        return text

    def parameters(self, rows: Sequence[Sequence[Any]]) -> list[Sequence[Any]]:
        """``rows`` in the statement's column order, JSON columns serialised, text made
        encodable."""
        if self.reorder:
            rows = [tuple([row[i] for i in self.positions]) for row in rows]
        json_at, text_at, nul_free = self.json, self.text, self.nul_free
        out = []
        for row in rows:
            if json_at and any(row[i] is not None for i in json_at):
                row = tuple(storable_json(v) if i in json_at else v for i, v in enumerate(row))
            for i in text_at:
                value = row[i]
                if value is None:
                    continue
                if (not value.isascii() and encodable(value) is not value) or (
                    nul_free and "\x00" in value
                ):
                    row = tuple(
                        _storable(v, nul_free) if j in text_at and v is not None else v
                        for j, v in enumerate(row)
                    )
                    break
            out.append(row)
        return out

    async def run(self, conn: AsyncConnection, rows: Sequence[Sequence[Any]]) -> None:
        """Insert ``rows``: for each size in ``sizes``, largest first, as many statements of
        that size as fit, in one executemany."""
        params = self.parameters(rows)
        if self.rows_per_statement == 1:
            await conn.exec_driver_sql(self.sql(1), params)
            return
        start = 0
        for size in self.sizes:
            count = (len(params) - start) // size
            if not count:
                continue
            end = start + count * size
            chunks = [
                tuple(chain.from_iterable(params[i : i + size])) for i in range(start, end, size)
            ]
            await conn.exec_driver_sql(self.sql(size), chunks)
            start = end


_PG_BIND = re.compile(r"\$\d+(::\w+)?")


def _pg_binds(group: str) -> str:
    """What a PostgreSQL VALUES group holds besides its ``$n::TYPE`` placeholders."""
    return _PG_BIND.sub("", group).strip("(, )")


def _storable(value: str, nul_free: bool) -> str:
    text = encodable(value)
    return text.replace("\x00", REPLACEMENT) if nul_free else text
