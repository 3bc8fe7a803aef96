"""Writing exported rows (``storage.exportschema.ExportRow``) as a dataset: JSON Lines
(``.jsonl``, or gzip-compressed ``.jsonl.gz``) or Parquet (``.parquet``), the formats
Hugging Face ``datasets`` and most of the ecosystem read.

Rows are written as they come, so an export of any size holds only a little of it at a
time: a JSON line is written per row; Parquet rows are turned into Arrow data
``ARROW_BATCH_ROWS`` at a time and written as a row group once ``ROW_GROUP_ROWS`` of them
(or ``ROW_GROUP_BYTES`` of Arrow data) are buffered.

A file is written under a temporary name beside it and renamed once complete: an export
that fails, is interrupted, or has no rows leaves no file behind. With ``shard_rows`` the
rows are split into files of at most that many rows, named as Hugging Face datasets
names its shards: ``NAME-00000-of-00003.parquet`` for ``NAME.parquet``.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

import orjson

from arena.text import encodable
from storage.exportschema import FIELDS, ExportRow, arrow_schema, row_dict

if TYPE_CHECKING:
    import pyarrow.parquet

ROW_GROUP_ROWS = 10_000
"""Most rows in one Parquet row group (a reader's unit: ``datasets`` streams a Parquet
file row group by row group)."""
ROW_GROUP_BYTES = 64 * 1024 * 1024
"""A Parquet row group is written once its buffered Arrow data reaches this size, with
fewer than ``ROW_GROUP_ROWS`` rows if need be (rows of long matches are large)."""
ARROW_BATCH_ROWS = 1_000
"""Rows held as Python objects before they are turned into (compact) Arrow data."""
GZIP_LEVEL = 6
"""gzip's compression level for ``.jsonl.gz`` (its default)."""
WRITE_BUFFER_BYTES = 1024 * 1024
"""The JSON Lines file's write buffer (fewer, larger writes)."""
SHARD_DIGITS = 5
"""Digits of a shard's number and count in its name (``-00000-of-00003``)."""

FORMATS: dict[str, str] = {".jsonl": "jsonl", ".jsonl.gz": "jsonl", ".parquet": "parquet"}
"""The output suffixes, and the format each writes."""

Rows = AsyncIterable[ExportRow] | Iterable[ExportRow]


@dataclass(frozen=True)
class Written:
    """What a writer wrote."""

    paths: tuple[Path, ...]
    """The files, in order (none when there were no rows)."""
    rows: int


def output_suffix(path: str | os.PathLike[str]) -> str:
    """The suffix of ``path`` that names its format (a key of ``FORMATS``). Raises
    ValueError naming the suffixes that are."""
    name = Path(path).name.lower()
    for suffix in sorted(FORMATS, key=len, reverse=True):
        if name.endswith(suffix) and len(name) > len(suffix):
            return suffix
    raise ValueError(
        f"cannot tell the format of {str(path)!r}: name a file ending in {', '.join(FORMATS)}"
    )


def check_output(path: str | os.PathLike[str]) -> str:
    """The format of ``path`` (``jsonl`` or ``parquet``), once its folder exists. Raises
    ValueError."""
    suffix = output_suffix(path)
    folder = Path(path).parent
    if not folder.is_dir():
        raise ValueError(f"cannot write {str(path)!r}: there is no folder {str(folder)!r}")
    if Path(path).is_dir():
        raise ValueError(f"cannot write {str(path)!r}: it is a folder")
    return FORMATS[suffix]


async def _each(rows: Rows) -> AsyncIterator[ExportRow]:
    if isinstance(rows, AsyncIterable):
        async for row in rows:
            yield row
    else:
        for row in rows:
            yield row


class _Outputs:
    """The files of one export: written under temporary names, renamed at the end."""

    def __init__(self, path: str | os.PathLike[str], shard_rows: int | None) -> None:
        if shard_rows is not None and shard_rows < 1:
            raise ValueError(f"shard_rows must be 1 or more, not {shard_rows}")
        self.path = Path(path)
        self.suffix = output_suffix(path)
        self.shard_rows = shard_rows
        self.parts: list[Path] = []

    def next_part(self) -> Path:
        """A new temporary file's path (the next shard)."""
        part = self.path.with_name(f".{self.path.name}.{len(self.parts)}.{os.getpid()}.partial")
        self.parts.append(part)
        return part

    def full(self, rows_in_part: int) -> bool:
        """True when the current shard holds all the rows it may."""
        return self.shard_rows is not None and rows_in_part >= self.shard_rows

    def finish(self) -> tuple[Path, ...]:
        """Rename the parts to their final names."""
        if self.shard_rows is None:
            names = [self.path] if self.parts else []
        else:
            stem = self.path.name[: -len(self.suffix)]
            count = len(self.parts)
            names = [
                self.path.with_name(
                    f"{stem}-{i:0{SHARD_DIGITS}d}-of-{count:0{SHARD_DIGITS}d}{self.suffix}"
                )
                for i in range(count)
            ]
        for part, name in zip(self.parts, names, strict=True):
            os.replace(part, name)
        self.parts = []
        return tuple(names)

    def discard(self) -> None:
        """Remove the parts written so far."""
        for part in self.parts:
            part.unlink(missing_ok=True)
        self.parts = []


def _open(path: Path, compressed: bool) -> IO[bytes]:
    """``path`` opened to write bytes (through gzip if ``compressed``)."""
    if compressed:
        return cast(IO[bytes], gzip.open(path, "wb", GZIP_LEVEL))
    return open(path, "wb", buffering=WRITE_BUFFER_BYTES)


def _json_line(row: ExportRow) -> bytes:
    """The row as one JSON line (text no JSON may hold, lone surrogates, as U+FFFD)."""
    try:
        return orjson.dumps(row) + b"\n"
    except TypeError:
        text = json.dumps(row_dict(row), ensure_ascii=False)
        return encodable(text).encode() + b"\n"


async def write_jsonl(
    rows: Rows, path: str | os.PathLike[str], *, shard_rows: int | None = None
) -> Written:
    """Write ``rows`` as JSON Lines at ``path`` (``.jsonl``; ``.jsonl.gz``: gzip), one
    object per row, its keys the columns in order; in shards of ``shard_rows`` if given.
    Nothing is left at ``path`` when there are no rows or writing fails.

    Raises ValueError (a bad path or shard size), OSError."""
    outputs = _Outputs(path, shard_rows)
    compressed = outputs.suffix.endswith(".gz")
    out: IO[bytes] | None = None
    count = in_part = 0
    try:
        async for row in _each(rows):
            if out is None or outputs.full(in_part):
                if out is not None:
                    out.close()
                part = outputs.next_part()
                out = _open(part, compressed)
                in_part = 0
            out.write(_json_line(row))
            count += 1
            in_part += 1
        if out is not None:
            out.close()
            out = None
        return Written(outputs.finish(), count)
    finally:
        if out is not None:
            out.close()
        outputs.discard()


class _ParquetPart:
    """One Parquet file being written: Arrow batches buffered into row groups."""

    def __init__(self, path: Path, row_group_rows: int) -> None:
        import pyarrow.parquet as pq

        self.schema = arrow_schema()
        self.writer: pyarrow.parquet.ParquetWriter = pq.ParquetWriter(path, self.schema)
        self.row_group_rows = row_group_rows
        self.pending: list[ExportRow] = []
        self.batches: list[Any] = []
        self.buffered_rows = 0
        self.buffered_bytes = 0

    def add(self, row: ExportRow) -> None:
        """Buffer one row; write a row group when enough are buffered."""
        self.pending.append(row)
        if len(self.pending) >= min(ARROW_BATCH_ROWS, self.row_group_rows):
            self._convert()

    def _convert(self) -> None:
        import pyarrow as pa

        if self.pending:
            columns = {name: [getattr(r, name) for r in self.pending] for name in FIELDS}
            batch = pa.RecordBatch.from_pydict(columns, schema=self.schema)
            self.pending = []
            self.batches.append(batch)
            self.buffered_rows += batch.num_rows
            self.buffered_bytes += batch.nbytes
        if self.buffered_rows >= self.row_group_rows or self.buffered_bytes >= ROW_GROUP_BYTES:
            self._write()

    def _write(self) -> None:
        import pyarrow as pa

        if self.batches:
            table = pa.Table.from_batches(self.batches, schema=self.schema)
            self.writer.write_table(table, row_group_size=self.row_group_rows)
        self.batches = []
        self.buffered_rows = self.buffered_bytes = 0

    def close(self) -> None:
        """Write what is buffered and close the file."""
        self._convert()
        self._write()
        self.writer.close()


async def write_parquet(
    rows: Rows,
    path: str | os.PathLike[str],
    *,
    shard_rows: int | None = None,
    row_group_rows: int = ROW_GROUP_ROWS,
) -> Written:
    """Write ``rows`` as Parquet at ``path`` (schema ``storage.exportschema.arrow_schema``)
    in row groups of at most ``row_group_rows`` rows (see the module's docstring); in
    shards of ``shard_rows`` if given. Nothing is left at ``path`` when there are no rows
    or writing fails.

    Raises ValueError (a bad path or size), OSError."""
    if row_group_rows < 1:
        raise ValueError(f"row_group_rows must be 1 or more, not {row_group_rows}")
    outputs = _Outputs(path, shard_rows)
    part: _ParquetPart | None = None
    count = in_part = 0
    try:
        async for row in _each(rows):
            if part is None or outputs.full(in_part):
                if part is not None:
                    part.close()
                part = _ParquetPart(outputs.next_part(), row_group_rows)
                in_part = 0
            part.add(row)
            count += 1
            in_part += 1
        if part is not None:
            part.close()
            part = None
        return Written(outputs.finish(), count)
    finally:
        if part is not None:
            part.writer.close()
        outputs.discard()


async def write_dataset(
    rows: Rows, path: str | os.PathLike[str], *, shard_rows: int | None = None
) -> Written:
    """``write_jsonl`` or ``write_parquet``, as ``path``'s suffix says (``FORMATS``).
    Raises ValueError, OSError."""
    if FORMATS[output_suffix(path)] == "parquet":
        return await write_parquet(rows, path, shard_rows=shard_rows)
    return await write_jsonl(rows, path, shard_rows=shard_rows)
