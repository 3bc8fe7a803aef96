"""``arena games``, ``arena check-game`` and ``arena new-game``: the catalogue, the conformance
kit and the scaffold of a new game."""

from __future__ import annotations

import argparse
import json
from typing import Any

from games.console import EXIT_FAILED, EXIT_OK, fail


# -- arena games ---------------------------------------------------------------------------
def cmd_games(args: argparse.Namespace) -> int:
    """Print the catalogue."""
    from games import catalogue
    from games.bots import bots_for

    specs = catalogue(available_only=args.available)
    if args.players is not None:
        specs = [s for s in specs if s.supports(args.players)]
    if args.json:
        rows = [
            {
                "id": s.game_id,
                "players": s.players_text,
                "min_players": s.min_players,
                "max_players": s.max_players,
                "available": s.available,
                "reason": s.reason,
                "source": s.source,
                "package": s.package,
                "version": s.version,
                "hidden_information": s.hidden_information,
                "simultaneous": s.simultaneous,
                "legal_moves": s.legal_moves,
                "bots": bots_for(s) if s.available else [],
            }
            for s in specs
        ]
        print(json.dumps(rows, indent=1))
        return 0
    header = ("GAME", "PLAYERS", "AVAILABLE", "HIDDEN", "BOTS", "PACKAGE", "NOTE")
    rows_t = [
        (
            s.game_id,
            s.players_text,
            "yes" if s.available else "no",
            "yes" if s.hidden_information else "",
            _bots_text(bots_for(s) if s.available else []),
            " ".join(x for x in (s.package or s.source, s.version) if x),
            s.reason or s.description,
        )
        for s in specs
    ]
    widths = [max(len(r[i]) for r in [header, *rows_t]) for i in range(len(header) - 1)]
    for row in [header, *rows_t]:
        cells = [c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)]
        note = row[-1] if len(row[-1]) <= 70 or args.long else row[-1][:67] + "..."
        print("  ".join([*cells, note]).rstrip())
    available = sum(s.available for s in specs)
    print(f"\n{len(specs)} games, {available} available here.")
    print("BOTS: the bots that can play it (random: the game lists its legal moves).")
    return EXIT_OK


def _bots_text(names: list[str]) -> str:
    """``random, alphabeta-1..5``: numbered bots collapsed into a range."""
    out: list[str] = []
    numbered: dict[str, list[int]] = {}
    for name in names:
        stem, _, number = name.rpartition("-")
        if stem and number.isdigit():
            numbered.setdefault(stem, []).append(int(number))
        else:
            out.append(name)
    for stem, numbers in numbered.items():
        low, high = min(numbers), max(numbers)
        out.append(f"{stem}-{low}" if low == high else f"{stem}-{low}..{high}")
    return ", ".join(out)


# -- what fails the kit stays out --------------------------------------------------------------
ALLOW_FAILING_HELP = (
    "play the game even though it fails the conformance kit (a plugin game is checked "
    "on its first use after each change of its source)"
)


def add_allow_failing(parser: Any) -> None:
    """The ``--allow-failing`` option of a command that plays a game."""
    parser.add_argument("--allow-failing", action="store_true", help=ALLOW_FAILING_HELP)


def vouch(prog: str, game_id: str, allow: bool) -> None:
    """Before ``prog`` plays ``game_id``: check a plugin game not checked at its current
    source, and refuse a game that fails the kit (one line, exit 2) unless ``allow``
    (``games.conformance.vouch.vouch_for``). Unknown games are left to the command's own
    error."""
    from games.conformance.vouch import vouch_for
    from games.registry import UnknownGame

    try:
        vouch_for(game_id, allow=allow)
    except UnknownGame:
        return
    except ValueError as exc:
        fail(prog, str(exc))


# -- arena check-game --------------------------------------------------------------------------
def cmd_check_game(args: argparse.Namespace) -> int:
    """Run the conformance kit on one game; exit 1 when a check fails."""
    from games.conformance import check_game
    from games.registry import UnknownGame

    try:
        report = check_game(
            args.game_id,
            num_players=args.num_players,
            episodes=args.episodes,
            seed=args.seed,
            time_budget_s=args.time_budget_s,
        )
    except (UnknownGame, ValueError) as exc:
        fail("arena check-game", str(exc))
    from games import verdicts
    from games.registry import get_spec, plugin_digest

    if get_spec(args.game_id).source == "plugin":  # remembered: play and train read it
        verdicts.record(args.game_id, plugin_digest(args.game_id), report.as_record())
    if args.json:
        print(json.dumps({"game_id": report.game_id, **report.as_record()}, indent=1))
    else:
        print(report.summary())
    return EXIT_OK if report.passed else EXIT_FAILED


# -- arena new-game ----------------------------------------------------------------------------
def cmd_new_game(args: argparse.Namespace) -> int:
    """Write a game package from the template."""
    from games.scaffold import ScaffoldError, write_package

    try:
        written = write_package(args.name, args.dir, game_id=args.game_id, force=args.force)
    except ScaffoldError as exc:
        fail("arena new-game", str(exc))
    print(f"wrote {written.root}: the game {written.game_id} in {written.game_file}")
    print("next:")
    print(f"  pip install -e {written.root}")
    print(f"  pytest {written.root}              # the conformance kit on your game")
    print(f"  arena games | grep {written.game_id}")
    print(f"  arena play --game {written.game_id} --players random --games 10 --no-record")
    return EXIT_OK


def register(sub: Any) -> None:
    """Add the games' commands to the ``arena`` command's subparsers."""
    games = sub.add_parser("games", help="list the games and whether they run here")
    games.add_argument("--available", action="store_true", help="only games available here")
    games.add_argument("--players", type=int, help="only games for this many players")
    games.add_argument("--json", action="store_true", help="print JSON instead of a table")
    games.add_argument("--long", action="store_true", help="do not cut the notes")
    games.set_defaults(func=cmd_games)

    check = sub.add_parser(
        "check-game",
        help="run the conformance kit on one game",
        description="Run the conformance kit (games.conformance) on one game: seeded "
        "replays, interleaving, hidden information, legal and invalid moves, endings, "
        "rewards, pickling. Exit code 1 when a check fails.",
    )
    check.add_argument("game_id", help="the game id, e.g. TicTacToe-v0 (see `arena games`)")
    check.add_argument("--num-players", type=int, help="seats (default: the game's minimum)")
    check.add_argument("--episodes", type=int, default=2, help="random episodes (default: 2)")
    check.add_argument("--seed", type=int, default=0, help="seed of the first episode")
    check.add_argument(
        "--time-budget-s",
        type=float,
        default=60.0,
        help="seconds of CPU time for all checks (default: 60)",
    )
    check.add_argument("--json", action="store_true", help="print JSON")
    check.set_defaults(func=cmd_check_game)

    new = sub.add_parser(
        "new-game",
        help="write a package with a new game, its test and its entry point",
        description="Write a Python package for a new game: one game file (a working "
        "two-player game to edit), a test that runs the conformance kit on it, and the "
        "arena.games entry point. After `pip install -e DIR` the game shows in "
        "`arena games`, plays in `arena play` and trains with `arena train --game`.",
    )
    new.add_argument("name", help="the package name, e.g. my-game (a Python name is derived)")
    new.add_argument("--dir", default=".", help="where to create it (default: here)")
    new.add_argument("--game-id", help="the game id (default: from the name, e.g. MyGame-v0)")
    new.add_argument("--force", action="store_true", help="overwrite an existing directory")
    new.set_defaults(func=cmd_new_game)
