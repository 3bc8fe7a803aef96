"""Console conventions every package's commands share: exit codes and the one-line error.

Each package owns its commands (``<package>/cli.py``: a ``register(subparsers)`` that adds
them); the ``arena`` command (``arena_cli``) only gathers them. Bad input always gets one
line, ``arena <command>: error: <what was wrong and what to do>``, and exit code 2.
"""

from __future__ import annotations

import sys
from typing import NoReturn

EXIT_OK = 0
EXIT_FAILED = 1
"""The command ran but did not do everything it should: a check failed, or what it played
could not all be stored."""
EXIT_USAGE = 2
"""Bad input: an unknown game, bot or flag value; nothing was done."""


class UsageError(Exception):
    """Bad input found while a command sets up: printed as one line, exit code 2."""


def fail(prog: str, message: str) -> NoReturn:
    """Print ``prog: error: message`` on stderr and exit with ``EXIT_USAGE``."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_USAGE)
