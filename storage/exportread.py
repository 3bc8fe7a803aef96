"""Reading an exported dataset back (``arena export``'s files) as ``ExportRow``s: JSON
Lines (``.jsonl``, ``.jsonl.gz``) and Parquet (``.parquet``), one file or its shards.

Rows are read as they come (a JSON line at a time; Parquet ``READ_BATCH_ROWS`` rows at a
time), so a file of any size is read in bounded memory. ``dataset_files`` finds the files a
name stands for: the file itself, else the shards ``storage.exportwrite`` wrote for it
(``NAME-00000-of-00003.parquet`` for ``NAME.parquet``), or every file a glob pattern
(``kuhn-*.parquet``) matches.
"""

from __future__ import annotations

import glob
import gzip
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, cast

import orjson

from storage.exportschema import FIELDS, ExportRow
from storage.exportwrite import FORMATS, output_suffix

READ_BATCH_ROWS = 1_000
"""Parquet rows turned into Python objects at a time."""


def dataset_files(name: str | os.PathLike[str]) -> list[Path]:
    """The files ``name`` stands for, in order: the file itself; else, when it does not
    exist, the shards written for it (``NAME-00000-of-00003.parquet``); a name with a glob
    pattern (``*``, ``?``, ``[``), every file it matches. Raises ValueError for a name whose
    suffix names no format (``FORMATS``) and when no file is found."""
    text = str(name)
    suffix = output_suffix(text)
    if glob.has_magic(text):
        found = sorted(Path(p) for p in glob.glob(text) if Path(p).is_file())
        where = f"no file matches {text!r}"
    elif Path(text).is_file():
        return [Path(text)]
    else:
        stem = glob.escape(text[: -len(suffix)])
        found = sorted(Path(p) for p in glob.glob(f"{stem}-*-of-*{suffix}"))
        where = f"there is no file {text!r} (nor shards of it)"
    if not found:
        raise ValueError(where)
    odd = [p for p in found if output_suffix(p) != suffix]
    if odd:
        raise ValueError(f"{str(odd[0])!r} is not a {suffix} file like the others")
    return found


def _row(values: dict[str, Any], where: str) -> ExportRow:
    """An ``ExportRow`` from a row's columns. Raises ValueError for a missing column."""
    try:
        return ExportRow(**{name: values[name] for name in FIELDS})
    except KeyError as exc:
        raise ValueError(f"{where} is not an exported row: it has no {exc.args[0]!r}") from None


def _open(path: Path) -> IO[bytes]:
    """``path`` opened to read bytes (through gzip for ``.gz``)."""
    if path.name.lower().endswith(".gz"):
        return cast(IO[bytes], gzip.open(path, "rb"))
    return open(path, "rb")


def _json_rows(path: Path) -> Iterator[ExportRow]:
    with _open(path) as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"{path}, line {number}"
            try:
                values = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise ValueError(f"{where} is not JSON: {exc}") from None
            if not isinstance(values, dict):
                raise ValueError(f"{where} is not an exported row (not a JSON object)")
            yield _row(values, where)


def _parquet_rows(path: Path) -> Iterator[ExportRow]:
    import pyarrow
    import pyarrow.parquet as pq

    try:
        reader = pq.ParquetFile(path)
        for batch in reader.iter_batches(batch_size=READ_BATCH_ROWS):
            for values in batch.to_pylist():
                yield _row(values, str(path))
    except pyarrow.ArrowException as exc:
        raise ValueError(f"{path} cannot be read as Parquet: {exc}") from None


def read_rows(name: str | os.PathLike[str]) -> Iterator[ExportRow]:
    """The rows of the dataset ``name`` stands for (``dataset_files``), file by file, in
    order. Raises ValueError (no such file, a file that is not an export), OSError."""
    for path in dataset_files(name):
        if FORMATS[output_suffix(path)] == "parquet":
            yield from _parquet_rows(path)
        else:
            yield from _json_rows(path)
