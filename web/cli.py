"""``arena serve`` and ``arena agent``: the web server, and a remote agent that plays on one.

``serve_command`` opens the database (the live matches another process records are left
alone: they have an owner with a lease), follows it for live matches, charts the training
runs it finds, records the matches people play against bots in the browser, and serves
until Ctrl-C. ``agent_command`` connects to such a server as a remote agent
(``web.agents.AgentClient``) and plays with a bot, a checkpoint or a Tinker sampler.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from arena.identity import BadPolicyRef
from games.bots import UnknownBot
from games.console import EXIT_FAILED, EXIT_OK, EXIT_USAGE, fail
from games.registry import GameUnavailable, UnknownGame
from storage.cli import add_db_option
from storage.errors import DatabaseUnavailable, SchemaOutdated, StorageError
from storage.rundir import DEFAULT_RUN_SOURCES, UnknownCheckpoint
from web.limits import ServerLimits
from web.pages.hosts import DEFAULT_HOST, DEFAULT_PORT, is_loopback

if TYPE_CHECKING:  # the server's modules load when a command serves
    from arena.eventbus import EventBus
    from matchmaking.seek import MatchmakerConfig
    from storage import Database
    from web.agents import AgentClient, MatchResult

_BAD_INPUT = (UnknownGame, GameUnavailable, UnknownBot, UnknownCheckpoint, BadPolicyRef, ValueError)


def serve_command(
    db: str | None = None,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    runs: Sequence[str] = DEFAULT_RUN_SOURCES,
    follow: bool = True,
    record: bool = True,
    poll_interval_s: float = 0.5,
    limits: ServerLimits | None = None,
    allowed_hosts: Sequence[str] = (),
    matchmaker: MatchmakerConfig | None = None,
    fill: Sequence[str] | None = None,
    runs_dir: str = "runs",
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Serve the web UI for database ``db`` (a path or URL; None: ``ARENA_DB`` or
    ``arena.db``) on ``host``:``port`` until Ctrl-C (or SIGTERM); returns the exit code.

    ``runs``: training log dirs, metrics files or globs to chart. ``follow``: poll the
    database for matches other processes play. ``record``: store the matches played in
    the browser. ``allowed_hosts``: host names the server answers to besides its address
    (requests naming any other ``Host`` are refused: DNS rebinding). A ``host`` other than
    loopback prints a warning: anyone who can reach it can watch every match and play. Bad
    input (an unusable database, an address in use, a malformed host name) prints one line
    on ``err`` and returns 2; it raises nothing else.
    """
    out = out or sys.stdout
    err = err or sys.stderr
    if not is_loopback(host):
        print(
            f"arena: warning: serving on {host}, not loopback: anyone who can reach this "
            "address can watch every match and start matches; there is no login",
            file=err,
        )
    try:
        return asyncio.run(
            _serve(
                db,
                host,
                port,
                runs,
                follow,
                record,
                poll_interval_s,
                limits,
                allowed_hosts,
                matchmaker,
                fill,
                runs_dir,
                out,
                err,
            )
        )
    except (StorageError, ValueError) as exc:
        print(f"arena: error: {exc}", file=err)
    except OSError as exc:
        hint = (
            " (another server? choose another with --port)" if exc.errno == errno.EADDRINUSE else ""
        )
        print(
            f"arena serve: error: cannot serve on {host}:{port}: {exc.strerror or exc}{hint}",
            file=err,
        )
    except KeyboardInterrupt:
        return EXIT_OK
    return EXIT_USAGE


async def _serve(
    db_spec: str | None,
    host: str,
    port: int,
    runs: Sequence[str],
    follow: bool,
    record: bool,
    poll_interval_s: float,
    limits: ServerLimits | None,
    allowed_hosts: Sequence[str],
    matchmaker: MatchmakerConfig | None,
    fill: Sequence[str] | None,
    runs_dir: str,
    out: TextIO,
    err: TextIO,
) -> int:
    from arena.runtime import freeze_heap
    from matchmaking.recording import Recording
    from storage import open_database
    from web.hub import WebHub

    try:
        db = await open_database(db_spec)  # matches whose recording process is gone: aborted
    except DatabaseUnavailable as exc:  # a read-only file, folder or disk: serve what it holds
        try:
            db = await open_database(db_spec, read_only=True)
        except SchemaOutdated:  # it says what to run; a reader never upgrades
            raise
        except StorageError:
            raise exc from None
        record = False
        print(f"arena: warning: {exc}; serving it read-only, browser matches are not recorded",
              file=err)  # fmt: skip
    recording: Recording | None = None
    hub = WebHub(
        db,
        None,
        limits=limits,
        follow_db=follow,
        poll_interval_s=poll_interval_s,
        run_sources=runs,
        allowed_hosts=allowed_hosts,
        matchmaker=matchmaker,
        fill=fill,
        runs_dir=runs_dir,
    )
    try:
        if record:
            try:
                # a read-only database fails here
                recording = await Recording.start(db, hub.bus, name="web-recorder")
            except StorageError as exc:
                print(f"arena: warning: browser matches are not recorded: {exc}", file=err)
        await hub.start(host, port)
        print(f"Arena is served at {hub.url}  (Ctrl-C stops it)", file=out, flush=True)
        # Set-up is done: without this, each full garbage collection walks every module's
        # objects and stalls every match and connection for 0.1 s or more.
        freeze_heap()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        print("stopping", file=out, flush=True)
    finally:
        await hub.close()
        if recording is not None:
            await recording.close()
        await db.close()
    return EXIT_OK


@contextlib.asynccontextmanager
async def live_view(
    database: Database | None, bus: EventBus, host: str, port: int, runs: list[str]
) -> AsyncIterator[str | None]:
    """Serve the browser view of ``bus`` (live matches, the runs in ``runs``) while the
    body runs (``arena train``); yields its URL, or None when the address is in use (a
    line says so, and the work goes on without it)."""
    from web.hub import serve

    try:
        hub = await serve(database, bus, host, port, follow_db=False, run_sources=runs)
    except OSError as exc:
        print(
            f"arena: not serving the browser view ({exc}); the work goes on "
            "(use --port, or --no-serve)",
            file=sys.stderr,
        )
        yield None
        return
    print(f"watch it live: http://{host}:{port}/", flush=True)
    try:
        yield f"http://{host}:{port}/"
    finally:
        await hub.close()


async def agent_policy(
    policy: str,
    game_id: str,
    *,
    runs_dir: str = "runs",
    model: str | None = None,
    renderer: str | None = None,
    observation_format: str = "full",
    max_tokens: int | None = None,
    temperature: float = 1.0,
) -> Any:
    """The ``web.agents`` policy factory ``policy`` names: any player a command seats
    (``matchmaking.players.player_spec``: a bot, ``run:NAME@STEP``, ``model:NAME``,
    ``openai:BASE_URL#MODEL``), its weights loaded now, or a Tinker sampler path
    (``tinker://...``; needs ``model``, the base model, for its tokenizer and renderer).
    Raises UnknownBot, BadPolicyRef, UnknownCheckpoint, ModelNotFound, ValueError, or
    BackendError (no Tinker credential)."""
    from arena.identity import WeightsKind, WeightsRef
    from arena.renderers import OBSERVATION_FORMATS, RendererConfig, recommended_renderer
    from matchmaking.agents import load_weights, preload
    from matchmaking.players import player_spec
    from web.agents import model_policy, seat_policy

    if WeightsRef.parse(policy).kind is WeightsKind.TINKER:
        if not model:
            raise ValueError(
                "a tinker:// sampler needs --model BASE (the base model it was trained from), "
                "for its tokenizer and renderer"
            )
        if observation_format not in OBSERVATION_FORMATS:
            raise ValueError(
                f"unknown observation format {observation_format!r}; choose "
                + ", ".join(OBSERVATION_FORMATS)
            )
        client = await load_weights(policy)
        config = RendererConfig(name=renderer or recommended_renderer(model), tokenizer_path=model)
        return model_policy(
            client, config, observation_format, max_tokens=max_tokens or 64, temperature=temperature
        )
    spec = player_spec(policy, runs_dir=runs_dir, temperature=temperature, max_tokens=max_tokens)
    spec.check(game_id)
    await preload([spec])  # a model's weights load now, not under the first move's clock
    return seat_policy(spec)


def agent_command(
    server: str,
    token: str,
    game_id: str,
    policy: str,
    *,
    games: int = 1,
    rated: bool = True,
    opponents: Sequence[str] | None = None,
    players: int | None = None,
    concurrency: int = 1,
    runs_dir: str = "runs",
    model: str | None = None,
    renderer: str | None = None,
    observation_format: str = "full",
    max_tokens: int | None = None,
    temperature: float = 1.0,
    reconnect_s: float = 60.0,
    as_json: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """``arena agent``: play ``games`` matches of ``game_id`` on the server at ``server``
    as the agent whose token is ``token``, with ``policy`` (see ``agent_policy``), and
    every seat the server gives back (a match left by an earlier run); prints each result
    and the totals. Returns 0, 1 when the server was lost mid-run, 2 after one line on
    ``err`` for bad input (a wrong token, an unknown game or policy)."""
    from web.agents import AgentError

    out = out or sys.stdout
    err = err or sys.stderr

    async def run() -> list[MatchResult]:
        factory = await agent_policy(
            policy,
            game_id,
            runs_dir=runs_dir,
            model=model,
            renderer=renderer,
            observation_format=observation_format,
            max_tokens=max_tokens,
            temperature=temperature,
        )
        client = _printing_client(
            server, token, factory, reconnect_s=reconnect_s, as_json=as_json, out=out
        )
        return await _connect_and_play(
            client,
            game_id,
            games,
            as_json=as_json,
            out=out,
            rated=rated,
            opponents=opponents,
            players=players,
            concurrency=concurrency,
        )

    try:
        from games.registry import get_spec

        get_spec(game_id)
        results = asyncio.run(run())
    except AgentError as exc:
        print(f"arena agent: {exc.message} ({exc.code})", file=err)
        return EXIT_USAGE
    except ConnectionError as exc:
        print(f"arena agent: {exc}", file=err)
        return EXIT_FAILED
    except OSError as exc:
        print(f"arena agent: cannot reach {server}: {exc.strerror or exc}", file=err)
        return EXIT_USAGE
    except (*_BAD_INPUT, StorageError, RuntimeError) as exc:
        print(f"arena agent: {exc}", file=err)
        return EXIT_USAGE
    if not as_json:
        _print_totals(results, out)
    return EXIT_OK


def _printing_client(
    server: str, token: str, factory: Any, *, reconnect_s: float, as_json: bool, out: TextIO
) -> AgentClient:
    """``arena agent``'s client: it prints each pairing and each result on ``out`` (with
    ``as_json``, one JSON line per result and nothing else)."""
    from web.agents import AgentClient, MatchInfo

    class Printing(AgentClient):
        def on_paired(self, match: MatchInfo) -> None:
            if not as_json:
                others = ", ".join(p for i, p in enumerate(match.players) if i != match.seat)
                kind = "rated" if match.rated else "casual"
                print(f"match {match.match_id[:12]}: seat {match.seat} against {others} "
                      f"({kind})", file=out, flush=True)  # fmt: skip

        def on_ended(self, result: MatchResult) -> None:
            if as_json:
                print(json.dumps(result.__dict__), file=out, flush=True)
                return
            reward = "" if result.reward is None else f" ({result.reward:+g})"
            why = f": {result.reason}" if result.reason else ""
            print(f"match {result.match_id[:12]}: {result.result}{reward}{why}",
                  file=out, flush=True)  # fmt: skip

    return Printing(server, token, factory, reconnect_s=reconnect_s)


async def _connect_and_play(
    client: AgentClient, game_id: str, games: int, *, as_json: bool, out: TextIO, **play: Any
) -> list[MatchResult]:
    """Connect ``client``, say so on ``out`` (not with ``as_json``), and play ``games``
    matches of ``game_id`` (``play``: ``AgentClient.play``'s options); closed after."""
    await client.connect()
    if not as_json:
        print(f"playing {game_id} on {client.url} as {client.agent}", file=out, flush=True)
    from arena.runtime import freeze_heap

    freeze_heap()  # the policy is loaded: keep full collections from stalling its moves
    try:
        return await client.play(game_id, games, **play)
    finally:
        await client.close()


def _print_totals(results: Sequence[MatchResult], out: TextIO) -> None:
    """``arena agent``'s last line: how its matches went."""
    wins = sum(r.result == "win" for r in results)
    draws = sum(r.result == "draw" for r in results)
    losses = sum(r.result == "loss" for r in results)
    aborted = sum(r.result == "aborted" for r in results)
    print(f"{len(results)} matches: {wins} won, {draws} drawn, {losses} lost, "
          f"{aborted} aborted", file=out)  # fmt: skip


# -- the arena command ---
def cmd_serve(args: argparse.Namespace) -> int:
    """Serve the browser UI."""
    from matchmaking.seek import MatchmakerConfig

    try:
        limits = ServerLimits(
            agent_move_timeout_s=args.agent_move_timeout_s,
            agent_reconnect_grace_s=args.reconnect_grace_s,
            max_agent_matches=args.max_agent_matches,
        )
        matchmaker = MatchmakerConfig(fill_after_s=None if args.no_fill else args.fill_after_s)
    except ValueError as exc:
        fail("arena serve", str(exc))
    return serve_command(
        args.db,
        args.host,
        args.port,
        runs=args.runs or DEFAULT_RUN_SOURCES,
        follow=not args.no_follow,
        record=not args.no_record,
        allowed_hosts=args.allow_host or (),
        limits=limits,
        matchmaker=matchmaker,
        fill=() if args.no_fill else args.fill,
        runs_dir=args.runs_dir,
    )


def cmd_agent(args: argparse.Namespace) -> int:
    """Play as a remote agent."""

    token = args.token or os.environ.get("ARENA_AGENT_TOKEN", "")
    if args.token_file:
        try:
            with open(args.token_file, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as exc:
            fail("arena agent", f"cannot read --token-file {args.token_file}: {exc.strerror}")
    if not token:
        fail("arena agent", "give the agent's token: --token-file FILE, $ARENA_AGENT_TOKEN or "
              "--token (`arena agents create NAME` prints one)")  # fmt: skip
    opponents = (
        [o.strip() for o in args.opponents.split(",") if o.strip()] if args.opponents else None
    )
    return agent_command(
        args.server,
        token,
        args.game,
        args.policy,
        games=args.games,
        rated=not args.casual,
        opponents=opponents,
        players=args.players,
        concurrency=args.concurrency,
        runs_dir=args.runs_dir,
        model=args.model,
        renderer=args.renderer,
        observation_format=args.observation_format,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        reconnect_s=args.reconnect_s,
        as_json=args.json,
    )


def register(sub: Any) -> None:
    """Add ``serve`` and ``agent`` to the ``arena`` command."""
    _register_serve(sub)
    _register_agent(sub)


def _register_serve(sub: Any) -> None:
    """``arena serve``'s options."""
    serve = sub.add_parser(
        "serve",
        help="watch matches in a browser: live, replayed, and the training curves",
        description="Serve the browser UI: the lobby, live matches, replays, training "
        "dashboards, and seats to play against a bot. Bound to loopback unless --host.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765, help="port (default: 8765)")
    serve.add_argument(
        "--runs",
        action="append",
        help="training log dirs or metrics.jsonl globs to chart (default: runs/*/metrics.jsonl)",
    )
    serve.add_argument(
        "--no-follow", action="store_true", help="do not poll the database for other processes"
    )
    serve.add_argument(
        "--no-record", action="store_true", help="do not store the matches played in the browser"
    )
    serve.add_argument(
        "--allow-host",
        action="append",
        metavar="NAME",
        help="a host name the server answers to besides its address (repeatable; requests "
        "naming any other Host are refused, against DNS rebinding)",
    )
    serve.add_argument(
        "--agent-move-timeout-s",
        type=float,
        default=60.0,
        help="seconds a remote agent has per move; then it loses on time (default: 60)",
    )
    serve.add_argument(
        "--reconnect-grace-s",
        type=float,
        default=60.0,
        help="seconds a disconnected agent has to come back before its seats forfeit (default: 60)",
    )
    serve.add_argument(
        "--max-agent-matches",
        type=int,
        default=16,
        help="matches (and seeks) one agent may have at once (default: 16)",
    )
    serve.add_argument(
        "--fill",
        action="append",
        metavar="PLAYER",
        help="a bot, run:NAME@STEP, model:smollm2 (model:FILE.gguf, model:DIR) or "
        "openai:BASE_URL#MODEL that fills empty seats of sought games (repeatable; "
        "default: each game's own bots)",
    )
    serve.add_argument(
        "--fill-after-s",
        type=float,
        default=3.0,
        help="seconds a seek waits for other seekers before fill-ins take the seats (default: 3)",
    )
    serve.add_argument("--no-fill", action="store_true", help="seeks wait for other seekers only")
    serve.add_argument(
        "--runs-dir",
        default="runs",
        help="where stored checkpoints (run:NAME@STEP) are found: --fill's, and the play "
        "page's opponents (default: runs)",
    )
    add_db_option(serve)
    serve.set_defaults(func=cmd_serve)


def _register_agent(sub: Any) -> None:
    """``arena agent``'s options."""
    agent = sub.add_parser(
        "agent",
        help="play matches on an arena serve server as a remote agent",
        description="Connect to a server as an agent (its token from --token-file, "
        "$ARENA_AGENT_TOKEN or --token), seek --games matches of --game, and play them with "
        "--policy: a bot, a stored checkpoint (run:NAME@STEP) or a Tinker sampler "
        "(tinker://...). Seats the server gives back (a match an earlier run left) are "
        "played too.",
    )
    agent.add_argument("--server", required=True, help="the server, e.g. http://127.0.0.1:8765")
    agent.add_argument("--token", help="the agent's token (visible to other users in ps: prefer "
                       "--token-file or $ARENA_AGENT_TOKEN)")  # fmt: skip
    agent.add_argument("--token-file", help="a file holding the agent's token")
    agent.add_argument("--game", required=True, help="game id, e.g. TicTacToe-v0")
    agent.add_argument(
        "--policy",
        required=True,
        help="a bot (random, optimal...), run:NAME@STEP, model:NAME, openai:BASE_URL#MODEL "
        "or tinker://SAMPLER-PATH",
    )
    agent.add_argument("--games", type=int, default=1, help="matches to play (default: 1)")
    agent.add_argument("--concurrency", type=int, default=1, help="matches at once (default: 1)")
    agent.add_argument("--casual", action="store_true", help="unrated matches")
    agent.add_argument(
        "--opponents",
        help="comma-separated kinds to accept: agent, human, bot, checkpoint (default: all)",
    )
    agent.add_argument("--players", type=int, help="seats of the match (default: the game's least)")
    agent.add_argument("--runs-dir", default="runs", help="where run:NAME looks (default: runs)")
    agent.add_argument("--model", help="the base model of a tinker:// sampler")
    agent.add_argument("--renderer", help="renderer of a tinker:// sampler (default: the model's)")
    agent.add_argument(
        "--observation-format",
        default="full",
        help="prompt format of a tinker:// sampler: full, last or compact (default: full)",
    )
    agent.add_argument("--max-tokens", type=int, help="tokens per move (default: the checkpoint's)")
    agent.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    agent.add_argument(
        "--reconnect-s",
        type=float,
        default=60.0,
        help="seconds to keep reconnecting after the connection drops (default: 60)",
    )
    agent.add_argument("--json", action="store_true", help="one JSON line per match")
    agent.set_defaults(func=cmd_agent)
