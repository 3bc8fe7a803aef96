"""The storage commands of the ``arena`` CLI, as plain functions returning an exit code.

``arena matches`` lists stored matches, ``arena show`` prints one as each seat saw it,
``arena results`` prints per-policy results, ``arena export`` writes them as a dataset
(``storage.exportcli``). Bad input (a missing, corrupt or locked database, a missing
driver, an unknown match id, a bad filter) prints one line on stderr and returns 2; these
commands only read (``open_database(read_only=True)``), so they work on a read-only file,
folder or disk, and never create a database, upgrade one or mark matches. ``arena db
upgrade`` upgrades a database of an older schema version in place.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from games.console import EXIT_OK, EXIT_USAGE
from storage.errors import DEFAULT_BUSY_TIMEOUT_S, StorageError
from storage.exportcli import add_export_parser

if TYPE_CHECKING:  # the commands load SQLAlchemy when they run, not for `arena --help`
    from storage.db import Database, SchemaUpgrade
    from storage.queries import MatchDetail, MatchSummary, PolicyResults

ID_WIDTH = 12
"""Characters of a match id shown in tables (``arena show`` takes 8 or more)."""

T = TypeVar("T")


def _fail(message: str, err: TextIO | None) -> int:
    print(f"arena: error: {message}", file=err or sys.stderr)
    return EXIT_USAGE


def _run(
    db: str | None,
    busy_timeout_s: float,
    query: Callable[[Database], Awaitable[T]],
    *,
    read_only: bool = True,
) -> T:
    """Open ``db`` (for reading; ``read_only=False``: for writing, creating it if needed),
    run ``query``, close. Raises StorageError, ValueError."""
    from sqlalchemy.exc import SQLAlchemyError

    from storage.connect import open_database, resolve_url
    from storage.errors import translate_error

    async def go() -> T:
        database = await open_database(db, read_only=read_only, busy_timeout_s=busy_timeout_s)
        try:
            return await query(database)
        except (SQLAlchemyError, OSError) as exc:
            raise database.error(exc) from exc
        finally:
            await database.close()

    try:
        return asyncio.run(go())
    except (SQLAlchemyError, OSError) as exc:  # raised before a Database existed
        raise translate_error(exc, str(resolve_url(db)), busy_timeout_s) from exc


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t is not None else "-"


def _reward(r: float | None) -> str:
    return "-" if r is None else f"{r:+g}"


def _table(matches: list[MatchSummary]) -> str:
    lines = [
        f"{'ID':<{ID_WIDTH}}  {'GAME':<18} {'STATUS':<9} {'TURNS':>5}  {'STARTED':<19}  "
        "PLAYERS (REWARD)"
    ]
    for m in matches:
        players = ", ".join(f"{s.policy} ({_reward(s.reward)})" for s in m.seats)
        lines.append(
            f"{m.id[:ID_WIDTH]:<{ID_WIDTH}}  {m.game_id:<18} {m.status:<9} {m.num_turns:>5}  "
            f"{_when(m.started_at):<19}  {players}"
        )
    return "\n".join(lines)


def matches_command(
    db: str | None,
    game: str | None,
    run: str | None,
    policy: str | None,
    status: str | None,
    limit: int,
    offset: int,
    as_json: bool,
    *,
    busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """``arena matches``: print stored matches, newest first, as a table or a JSON list.

    Filters: game id, run id, a player's policy name, status; ``limit`` matches from
    ``offset``. Returns 0, or 2 after one line on ``err`` for bad input.
    """
    from storage.queries import check_status, list_matches

    try:
        check_status(status)

        async def query(database: Database) -> list[MatchSummary]:
            return await list_matches(
                database,
                game=game,
                run=run,
                policy=policy,
                status=status,
                limit=limit,
                offset=offset,
            )

        matches = _run(db, busy_timeout_s, query)
    except (StorageError, ValueError) as exc:
        return _fail(str(exc), err)
    stream = out or sys.stdout
    if as_json:
        print(json.dumps([m.as_dict() for m in matches]), file=stream)
    elif not matches:
        filtered = any(f is not None for f in (game, run, policy, status))
        print("no matches" + (" pass these filters" if filtered else " yet"), file=stream)
    else:
        print(_table(matches), file=stream)
    return EXIT_OK


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.splitlines()) if text else prefix + "(nothing)"


HIDDEN = "(hidden while the match is live)"


def spectator_view(detail: MatchDetail) -> MatchDetail:
    """``detail`` as a spectator may see it: while the match is live, what each seat saw
    and played (private information in many games) is replaced by ``HIDDEN`` and the
    messages and all-seeing boards are left out; only the public state and board after
    each move stay."""
    from storage.models import MatchStatus

    if detail.match.status != MatchStatus.LIVE:
        return detail
    turns = tuple(
        replace(
            t,
            observation=HIDDEN,
            action=HIDDEN,
            tokens=None,
            logprobs=None,
            messages=None,
            legal_moves=None,
            full_board=None,
        )
        for t in detail.turns
    )
    return replace(
        detail,
        turns=turns,
        full_state=None,
        start_full_board=None,
        start_messages=None,
        log=None,
    )


def transcript(detail: MatchDetail) -> str:
    """The match as each seat saw it: per turn, the observation then the action (while it
    is live, only the public state after each move)."""
    from storage.models import MatchStatus

    detail = spectator_view(detail)
    live = detail.match.status == MatchStatus.LIVE
    m = detail.match
    names = {s.seat: s.policy for s in m.seats}
    lines = [
        f"match {m.id}  {m.game_id}  seed {m.seed}  {m.num_players} players",
        f"status: {m.status}" + (f" ({m.reason})" if m.reason else ""),
        f"started {_when(m.started_at)}, ended {_when(m.ended_at)}, {m.num_turns} turns"
        + (f", run {m.run_id}" if m.run_id else ""),
        "seats: " + ", ".join(f"{s.seat} {s.policy} ({s.kind})" for s in m.seats),
    ]
    for t in detail.turns:
        lines.append("")
        who = f"seat {t.seat} ({names.get(t.seat, '?')})"
        mark = "" if t.valid else f"   <- INVALID: {t.reason or 'refused by the game'}"
        if live:
            lines.append(f"--- turn {t.index}: {who} moved{mark}; then the board showed:")
            lines.append(_indent(t.public_state or ""))
            continue
        lines.append(f"--- turn {t.index}: {who} saw:")
        lines.append(_indent(t.observation or ""))
        cut = "  (cut to the length cap)" if t.truncated else ""
        lines.append(f"  > {t.action}{cut}{mark}")
    if live:
        lines.append("\n(live: what each seat saw and played is shown once the match ends)")
    lines.append("")
    lines.append("final rewards:")
    for s in m.seats:
        extra = f", {s.invalid_moves} invalid" if s.invalid_moves else ""
        extra += ", forfeited" if s.forfeited else ""
        lines.append(f"  seat {s.seat} {s.policy}: {_reward(s.reward)}{extra}")
    if detail.full_state:
        lines.append("")
        lines.append("final state:")
        lines.append(_indent(detail.full_state))
    return "\n".join(lines)


def show_command(
    db: str | None,
    match_id: str,
    as_json: bool,
    *,
    busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """``arena show``: print one match (id or 8+ character prefix) as each seat saw it,
    or as JSON. Returns 0, or 2 after one line on ``err`` for bad input."""
    from storage.queries import get_match

    async def query(database: Database) -> MatchDetail:
        return await get_match(database, match_id.strip())

    try:
        detail = _run(db, busy_timeout_s, query)
    except (StorageError, ValueError) as exc:
        return _fail(str(exc), err)
    stream = out or sys.stdout
    if as_json:
        print(json.dumps(spectator_view(detail).as_dict()), file=stream)
    else:
        print(transcript(detail), file=stream)
    return EXIT_OK


def results_command(
    db: str | None,
    game: str | None,
    run: str | None,
    as_json: bool,
    *,
    busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """``arena results``: games, wins, draws, losses, mean reward and invalid-move rate
    per policy.
    Returns 0, or 2 after one line on ``err`` for bad input."""
    from storage.queries import policy_results

    async def query(database: Database) -> list[PolicyResults]:
        return await policy_results(database, game=game, run=run)

    try:
        results = _run(db, busy_timeout_s, query)
    except (StorageError, ValueError) as exc:
        return _fail(str(exc), err)
    stream = out or sys.stdout
    if as_json:
        print(json.dumps([r.as_dict() for r in results]), file=stream)
        return EXIT_OK
    rows: list[tuple[Any, ...]] = [
        ("POLICY", "KIND", "GAMES", "WINS", "DRAWS", "LOSSES", "REWARD", "INVALID/MOVE")
    ]
    for r in results:
        rows.append(
            (
                r.policy if r.run_id is None else f"{r.policy} [{r.run_id}]",
                r.kind,
                r.games,
                r.wins,
                r.draws,
                r.losses,
                f"{r.mean_reward:+.3f}",
                f"{r.invalid_rate:.3f}",
            )
        )
    if len(rows) == 1:
        print("no finished matches", file=stream)
        return EXIT_OK
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = [
            str(c).ljust(w) if i < 2 else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        print("  ".join(cells), file=stream)
    print(
        "a seat wins above every other seat's reward, draws level with the best other; "
        "REWARD: mean final reward per game",
        file=stream,
    )
    return EXIT_OK


def _run_writing(db: str | None, work: Callable[[Database], Awaitable[T]]) -> T:
    """Open ``db`` for writing (creating it if needed), run ``work``, close. Raises
    StorageError."""
    return _run(db, DEFAULT_BUSY_TIMEOUT_S, work, read_only=False)


def agents_command(
    action: str,
    name: str | None,
    db: str | None,
    *,
    as_json: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """``arena agents create NAME | list | revoke NAME``: remote agents' accounts.

    ``create`` prints the new token once (it is stored only hashed: keep it; a lost token
    means a new account); ``revoke`` makes its token authenticate nothing (a running
    server forfeits the agent's live seats); ``list`` shows every account, never a token.
    Returns 0, or 2 after one line on ``err`` for bad input.
    """
    from storage.agents import AgentInfo, create_agent, list_agents, revoke_agent

    stream = out or sys.stdout

    def as_dict(info: AgentInfo) -> dict[str, Any]:
        return {
            "name": info.name,
            "policy": info.key,
            "created_at": info.created_at,
            "revoked_at": info.revoked_at,
            "last_seen_at": info.last_seen_at,
        }

    try:
        if action == "create":
            if not name:
                raise ValueError("arena agents create NAME: give the new agent's name")
            info, token = _run_writing(db, lambda d: create_agent(d, name))
            if as_json:
                print(json.dumps({**as_dict(info), "token": token}), file=stream)
            else:
                print(f"created {info.key}; its token (shown only this once, keep it secret):",
                      file=stream)  # fmt: skip
                print(token, file=stream)
            return EXIT_OK
        if action == "revoke":
            if not name:
                raise ValueError("arena agents revoke NAME: give the agent's name")
            info = _run_writing(db, lambda d: revoke_agent(d, name))
            if as_json:
                print(json.dumps(as_dict(info)), file=stream)
            else:
                print(f"revoked {info.key}: its token authenticates nothing now", file=stream)
            return EXIT_OK
        if action == "list":
            agents = _run(db, DEFAULT_BUSY_TIMEOUT_S, list_agents)
            if as_json:
                print(json.dumps([as_dict(a) for a in agents]), file=stream)
            elif not agents:
                print("no agents yet: `arena agents create NAME` makes one", file=stream)
            else:
                print(f"{'AGENT':<24} {'STATUS':<8} {'CREATED':<19}  LAST SEEN", file=stream)
                for a in agents:
                    status = "revoked" if a.revoked else "active"
                    print(f"{a.name:<24} {status:<8} {_when(a.created_at):<19}  "
                          f"{_when(a.last_seen_at)}", file=stream)  # fmt: skip
            return EXIT_OK
        raise ValueError(f"unknown action {action!r}; use create, list or revoke")
    except (StorageError, ValueError) as exc:
        return _fail(str(exc), err)


def db_upgrade_command(
    db: str | None,
    *,
    busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """``arena db upgrade``: upgrade an existing database to this Arena's schema version in
    place (``storage.migrations.upgrade_schema``: an SQLite file is copied beside it
    first), or say that it has that version already. It creates no SQLite file and marks no
    match. Returns 0, or 2 after one line on ``err`` (a missing, damaged, read-only or newer
    database, another process still recording into it)."""
    from sqlalchemy.exc import SQLAlchemyError

    from storage.connect import open_database, resolve_url
    from storage.errors import translate_error
    from storage.models import SCHEMA_VERSION

    async def upgrade() -> tuple[str, SchemaUpgrade | None]:
        database = await open_database(
            db, recover=False, must_exist=True, notice=None, busy_timeout_s=busy_timeout_s
        )
        try:
            return database.where, database.upgraded
        finally:
            await database.close()

    try:
        where, done = asyncio.run(upgrade())
    except StorageError as exc:
        return _fail(str(exc), err)
    except (SQLAlchemyError, OSError) as exc:
        return _fail(str(translate_error(exc, str(resolve_url(db)), busy_timeout_s)), err)
    stream = out or sys.stdout
    if done is None:
        print(f"{where} has schema version {SCHEMA_VERSION} already: nothing to do", file=stream)
    else:
        kept = f"; the old file is kept as {done.backup}" if done.backup is not None else ""
        print(
            f"upgraded {where} from schema version {done.found} to {done.version}{kept}",
            file=stream,
        )
    return EXIT_OK


# -- the arena command -----------------------------------------------------------------------
def add_db_option(parser: argparse.ArgumentParser) -> None:
    """The ``--db`` option every command that reads or writes the database takes."""
    parser.add_argument(
        "--db",
        help="database: an SQLite path, sqlite+aiosqlite:///PATH or "
        "postgresql+asyncpg://USER:PASSWORD@HOST:PORT/DATABASE (default: $ARENA_DB, else "
        "./arena.db)",
    )


def cmd_agents(args: argparse.Namespace) -> int:
    """Remote agents' accounts."""
    return agents_command(args.action, args.name, args.db, as_json=args.json)


def cmd_matches(args: argparse.Namespace) -> int:
    """List stored matches."""
    return matches_command(
        args.db, args.game, args.run, args.policy, args.status, args.limit, args.offset, args.json
    )


def cmd_show(args: argparse.Namespace) -> int:
    """Print one stored match."""
    return show_command(args.db, args.match_id, args.json)


def cmd_results(args: argparse.Namespace) -> int:
    """Per-policy results."""
    return results_command(args.db, args.game, args.run, args.json)


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    """Upgrade a database to this Arena's schema."""
    return db_upgrade_command(args.db)


def register(sub: Any) -> None:
    """Add ``agents``, ``matches``, ``show``, ``results``, ``export`` and ``db upgrade``
    to the ``arena`` command."""
    agents = sub.add_parser(
        "agents",
        help="remote agents' accounts: create (prints a token once), list, revoke",
        description="Accounts of remote agents, which play on `arena serve` through the agent "
        "protocol (docs/protocol.md). A token is printed once and stored only hashed.",
    )
    agents.add_argument("action", choices=["create", "list", "revoke"])
    agents.add_argument("name", nargs="?", help="the agent's name (create, revoke)")
    agents.add_argument("--json", action="store_true", help="print JSON")
    add_db_option(agents)
    agents.set_defaults(func=cmd_agents)

    matches = sub.add_parser(
        "matches", help="list stored matches", description="List stored matches, newest first."
    )
    matches.add_argument("--game", help="only this game id")
    matches.add_argument("--run", help="only matches of this training run")
    matches.add_argument("--policy", help="only matches where this policy played a seat")
    matches.add_argument("--status", help="only this status: live, finished, truncated or aborted")
    matches.add_argument("--limit", type=int, default=20, help="how many (default: 20)")
    matches.add_argument("--offset", type=int, default=0, help="skip this many first")
    matches.add_argument("--json", action="store_true", help="print JSON")
    add_db_option(matches)
    matches.set_defaults(func=cmd_matches)

    show = sub.add_parser(
        "show",
        help="print one stored match as each seat saw it",
        description="Print a stored match: every turn as its seat saw it, and the result.",
    )
    show.add_argument("match_id", help="the match id, or its first 8+ characters")
    show.add_argument("--json", action="store_true", help="print JSON")
    add_db_option(show)
    show.set_defaults(func=cmd_show)

    results = sub.add_parser(
        "results",
        help="wins, draws, losses and invalid-move rate per policy",
        description="Per-policy results over the stored matches.",
    )
    results.add_argument("--game", help="only this game id")
    results.add_argument("--run", help="only this training run")
    results.add_argument("--json", action="store_true", help="print JSON")
    add_db_option(results)
    results.set_defaults(func=cmd_results)

    add_db_option(add_export_parser(sub))

    database = sub.add_parser(
        "db",
        help="upgrade a database to this Arena's schema",
        description="Database maintenance.",
    )
    database_sub = database.add_subparsers(dest="db_command", metavar="COMMAND", required=True)
    upgrade = database_sub.add_parser(
        "upgrade",
        help="upgrade a database of an older schema version in place",
        description="Upgrade a database recorded by an older Arena to this one's schema, in "
        "place and in one transaction; an SQLite file is first copied beside it "
        "(NAME.v<N>-backup). Commands that record (play, train, serve, ...) do this "
        "themselves; those that only read never do.",
    )
    add_db_option(upgrade)
    upgrade.set_defaults(func=cmd_db_upgrade)
