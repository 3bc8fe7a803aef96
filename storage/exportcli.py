"""``arena export``: stored matches written as a dataset (JSON Lines or Parquet), a thin
layer over ``storage.export`` (which matches, which rows) and ``storage.exportwrite``
(the files).

Bad input (an unknown game, player or run, a date that does not parse, an output whose
suffix names no format, a database that cannot be read) prints one line, ``arena export:
error: ...``, and returns 2 before anything is written; a selection without a row prints
a line saying so and returns 1, leaving no file.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING, Any, TextIO

from games.console import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from storage.errors import DEFAULT_BUSY_TIMEOUT_S, StorageError
from storage.exportschema import EXPORT_STATUSES, RESULTS

if TYPE_CHECKING:  # loaded when the command runs, not for `arena --help`
    from storage.export import ExportQuery
    from storage.exportwrite import Written

PROG = "arena export"


def _fail(message: str, err: TextIO | None) -> int:
    print(f"{PROG}: error: {message}", file=err or sys.stderr)
    return EXIT_USAGE


def _count(n: int, noun: str) -> str:
    """``1 match``, ``2,000 matches``."""
    plural = noun + ("es" if noun.endswith("ch") else "s")
    return f"{n:,} {noun if n == 1 else plural}"


class _Progress:
    """The progress bar on stderr: matches read (of those selected) and their turns."""

    def __init__(self, total: int, quiet: bool, err: TextIO | None) -> None:
        from tqdm import tqdm

        self.turns = 0
        self.matches = 0
        self.bar = tqdm(
            total=total,
            unit=" matches",
            file=err or sys.stderr,
            disable=quiet,
            dynamic_ncols=True,
            desc="export",
        )

    def match(self, turns: int) -> None:
        """One more match read, with ``turns`` turns."""
        self.matches += 1
        self.turns += turns
        self.bar.update(1)
        self.bar.set_postfix_str(f"{self.turns:,} turns", refresh=False)

    def close(self) -> None:
        """Close the bar (its last state stays on the terminal)."""
        self.bar.close()


async def _export(
    db: str | None,
    query: ExportQuery,
    output: str,
    shard_rows: int | None,
    progress: Any,
    busy_timeout_s: float,
) -> tuple[Written, _Progress]:
    """Open ``db`` for reading, write the rows ``query`` selects to ``output``. Raises
    BadQuery, StorageError, ValueError, OSError."""
    from sqlalchemy.exc import SQLAlchemyError

    from storage.connect import open_database, resolve_url
    from storage.errors import translate_error
    from storage.export import count_selected, export_rows
    from storage.exportwrite import write_dataset

    try:
        database = await open_database(db, read_only=True, busy_timeout_s=busy_timeout_s)
    except (SQLAlchemyError, OSError) as exc:
        raise translate_error(exc, str(resolve_url(db)), busy_timeout_s) from exc
    try:
        total = await count_selected(database, query)
        if query.limit is not None and not query.results:
            total = min(total, query.limit)
        bar = progress(total)
        try:
            rows = export_rows(database, query, on_match=bar.match)
            written = await write_dataset(rows, output, shard_rows=shard_rows)
        finally:
            bar.close()
        return written, bar
    except SQLAlchemyError as exc:
        raise database.error(exc) from exc
    finally:
        await database.close()


def export_command(
    db: str | None,
    query: ExportQuery,
    output: str,
    *,
    shard_rows: int | None = None,
    quiet: bool = False,
    busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """``arena export``: write the rows ``query`` selects to ``output`` (its suffix says
    the format), with a progress bar on ``err`` unless ``quiet``, and one line on ``out``
    saying what was written. Returns 0; 1 when no row was selected (nothing written); 2
    after one line on ``err`` for bad input."""
    from storage.export import BadQuery
    from storage.exportwrite import check_output

    try:
        query.check()
        check_output(output)
        if shard_rows is not None and shard_rows < 1:
            raise ValueError(f"--shard-rows must be 1 or more, not {shard_rows}")
        written, progress = asyncio.run(
            _export(
                db,
                query,
                output,
                shard_rows,
                lambda total: _Progress(total, quiet, err),
                busy_timeout_s,
            )
        )
    except (BadQuery, StorageError, ValueError) as exc:
        return _fail(str(exc), err)
    except OSError as exc:
        return _fail(f"cannot write {output!r}: {exc.strerror or exc}", err)
    if not written.rows:
        read = f" ({_count(progress.matches, 'match')} read, no seat kept)" * bool(progress.matches)
        print(
            f"{PROG}: no stored match passes these filters{read}; nothing was written",
            file=err or sys.stderr,
        )
        return EXIT_FAILED
    paths = [str(p) for p in written.paths]
    files = ", ".join(paths) if len(paths) <= 3 else f"{paths[0]} ... {paths[-1]}"
    print(
        f"wrote {_count(written.rows, 'row')} ({_count(progress.matches, 'match')}, "
        f"{_count(progress.turns, 'turn')}) to {files}",
        file=out or sys.stdout,
    )
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    """Write stored matches as a dataset."""
    from storage.export import BadQuery, ExportQuery, parse_time

    try:
        query = ExportQuery(
            games=tuple(args.game),
            players=tuple(args.player or ()),
            seat_player=args.seat_player,
            run=args.run,
            since=None if args.since is None else parse_time(args.since, "--since"),
            until=None if args.until is None else parse_time(args.until, "--until"),
            statuses=tuple(args.status or ("finished",)),
            results=tuple(args.result or ()),
            limit=args.limit,
        )
    except BadQuery as exc:
        return _fail(str(exc), None)
    return export_command(args.db, query, args.output, shard_rows=args.shard_rows, quiet=args.quiet)


def add_export_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``arena export`` to the ``arena`` command (the caller adds ``--db``)."""
    export = sub.add_parser(
        "export",
        help="write stored matches as a dataset (JSON Lines or Parquet)",
        description="Write stored matches as a dataset: one row per seat that moved, with the "
        "chat it saw and answered, its reward and result (docs/datasets.md). The output's "
        "suffix gives the format: .jsonl, .jsonl.gz or .parquet.",
    )
    export.add_argument("output", help="the file to write: NAME.jsonl, NAME.jsonl.gz, NAME.parquet")
    export.add_argument(
        "--game", action="append", required=True, help="a game id (repeat for several)"
    )
    export.add_argument(
        "--player",
        action="append",
        metavar="POLICY",
        help="only matches this player played in: a recorded name (random, learner) or a "
        "policy key (bot:random@1); repeat for several",
    )
    export.add_argument(
        "--seat-player", action="store_true", help="keep only the seats the --player played"
    )
    export.add_argument("--run", metavar="NAME", help="only matches of this training run")
    export.add_argument(
        "--since", metavar="DATE", help="only matches started at or after this ISO date (UTC)"
    )
    export.add_argument(
        "--until", metavar="DATE", help="only matches started before this ISO date (UTC)"
    )
    export.add_argument(
        "--status",
        action="append",
        metavar="STATUS",
        help=f"only matches that ended so: {', '.join(EXPORT_STATUSES)} (default: finished; "
        "repeat for several)",
    )
    export.add_argument(
        "--result",
        action="append",
        metavar="RESULT",
        help=f"only the seats with this result: {', '.join(RESULTS)} (repeat for several)",
    )
    export.add_argument("--limit", type=int, metavar="N", help="at most N matches")
    export.add_argument(
        "--shard-rows",
        type=int,
        metavar="N",
        help="split into files of N rows: NAME-00000-of-0000K.parquet",
    )
    export.add_argument("--quiet", action="store_true", help="no progress bar")
    export.set_defaults(func=cmd_export)
    return export
