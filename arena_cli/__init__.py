"""The ``arena`` command: one dispatcher over the packages' own commands.

Each package owns its commands (``games.cli``, ``matchmaking.cli``, ``trainer.cli``,
``web.cli``, ``storage.cli``: each a ``register(subparsers)``); this module only gathers
them, and wires what crosses packages: the trainer's checkpoint loader for every command
that may seat a checkpoint, and the web package's live view for ``arena train`` and
``arena cookbook``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from games.console import EXIT_USAGE


def _cookbook(args: argparse.Namespace) -> int:
    from trainer.cookbook import cli_main, use_live_view
    from web.cli import live_view

    use_live_view(live_view)
    return cli_main(list(args.chz_args))


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``arena``: every package's commands."""
    import games.cli
    import matchmaking.cli
    import storage.cli
    import trainer.cli
    import web.cli

    parser = argparse.ArgumentParser(
        prog="arena",
        description="Self-play RL on multiplayer text games: play, train, watch, rate.",
        allow_abbrev=False,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    games.cli.register(sub)
    matchmaking.cli.register(sub)
    trainer.cli.register(sub, live_view=web.cli.live_view)
    cookbook = sub.add_parser(
        "cookbook",
        help="the Tinker cookbook's RL trainer on an arena game (key=value options)",
        description="Run tinker_cookbook.rl.train on an arena game, recorded, with the live "
        "view at serve_port=PORT. Options are key=value, as `python -m trainer.cookbook "
        "--help` lists them.",
    )
    cookbook.add_argument("chz_args", nargs=argparse.REMAINDER, help="key=value options")
    cookbook.set_defaults(func=_cookbook)
    web.cli.register(sub)
    storage.cli.register(sub)
    for command in sub.choices.values():  # `--player` must not pass for `--players`
        command.allow_abbrev = False
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``arena``."""
    from trainer.loaders import install

    install()  # checkpoints (run:NAME@STEP) may sit in any command's seats
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Any = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(func(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `arena ... | head`: stop quietly
        sys.stderr.close()
        return 0
