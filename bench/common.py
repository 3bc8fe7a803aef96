"""Helpers shared by the benchmarks."""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from collections.abc import Callable


def parser(description: str) -> argparse.ArgumentParser:
    """An argument parser with the options every benchmark takes."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--json", action="store_true", help="end with one JSON line of results")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (median is kept)")
    return p


def timed(fn: Callable[[], int]) -> float:
    """Run ``fn`` (which returns how many items it did) and return items per second."""
    started = time.perf_counter()
    count = fn()
    return count / (time.perf_counter() - started)


def median(values: list[float]) -> float:
    """The median, for a few noisy samples."""
    return statistics.median(values)


def emit(results: dict[str, object], as_json: bool) -> None:
    """Print the results; with ``--json`` the last line is one JSON object."""
    if as_json:
        print(json.dumps(results, sort_keys=True))


def raise_open_files() -> int:
    """Raise the open-files limit to its hard limit; return the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    return soft
