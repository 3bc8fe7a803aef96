"""``python -m games.conformance``: run the kit on every built-in game, in parallel, and
(with ``--write``) store the verdicts and the table (``make games-table``)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

from games.conformance.report import DEFAULT_EPISODES, Report
from games.conformance.results import RESULTS_PATH, TABLE_PATH, write
from games.conformance.runner import candidates, check_all


def build_parser() -> argparse.ArgumentParser:
    """The options of ``python -m games.conformance``."""
    parser = argparse.ArgumentParser(
        prog="python -m games.conformance",
        description="Run the conformance kit on every game available here.",
    )
    parser.add_argument("--write", action="store_true", help="write the results and the table")
    parser.add_argument("--only", nargs="+", metavar="ID", help="check only these games")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--episodes", type=int, default=DEFAULT_EPISODES, help="per game")
    parser.add_argument("--table", type=Path, default=TABLE_PATH, help=argparse.SUPPRESS)
    parser.add_argument("--results", type=Path, default=RESULTS_PATH, help=argparse.SUPPRESS)
    return parser


def progress(report: Report) -> None:
    """One line per game checked: ok or FAIL, its score, time and why it failed."""
    mark = "ok  " if report.passed else "FAIL"
    why = (
        ""
        if report.passed
        else " " + "; ".join(f"{k}: {v}" for k, v in report.failures().items())[:150]
    )
    print(f"{mark} {report.game_id} {report.score()} {report.seconds:.1f}s{why}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m games.conformance``: run the kit on every built-in game."""
    parser = build_parser()
    args = parser.parse_args(argv)
    ids = candidates()
    if args.only:
        unknown = sorted(set(args.only) - set(ids))
        if unknown:
            parser.error(f"not built-in games available here: {', '.join(unknown)}")
        ids = list(args.only)
    started = time.monotonic()
    reports = check_all(ids, jobs=args.jobs, episodes=args.episodes, progress=progress)
    elapsed = time.monotonic() - started
    failed = [r for r in reports if not r.passed]
    print(f"{len(reports)} games in {elapsed:.0f} s: {len(reports) - len(failed)} pass")
    if args.write:
        write(reports, args.results, args.table, merge=bool(args.only))
        print(f"wrote {args.results} and {args.table}")
    return 0
