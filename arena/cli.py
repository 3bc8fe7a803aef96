"""The ``arena`` command line.

Every command has ``--help``. Bad input (an unknown game, a player count the game does not
take, an unknown bot) gets one line naming the valid choices, and exit code 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import typing
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from arena.coordinator import SeatAgent, SeatTurn
    from arena.events import EventBus
    from arena.play import PlayStats
    from games.session import SessionLimits

EXIT_USAGE = 2
EXIT_NOT_STORED = 1
"""Exit code when the command ran but could not store everything it played."""


class CliError(Exception):
    """A user error: printed as one line, exit code 2."""


class NotStored(Exception):
    """The command ran, but the database does not hold everything it played: printed as one
    line, exit code 1."""


def _fail(prog: str, message: str) -> NoReturn:
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_USAGE)


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
    return 0


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
        _fail("arena check-game", str(exc))
    if args.json:
        print(json.dumps({"game_id": report.game_id, **report.as_record()}, indent=1))
    else:
        print(report.summary())
    return 0 if report.passed else 1


# -- arena new-game ----------------------------------------------------------------------------
def cmd_new_game(args: argparse.Namespace) -> int:
    """Write a game package from the template."""
    from games.scaffold import ScaffoldError, write_package

    try:
        written = write_package(args.name, args.dir, game_id=args.game_id, force=args.force)
    except ScaffoldError as exc:
        _fail("arena new-game", str(exc))
    print(f"wrote {written.root}: the game {written.game_id} in {written.game_file}")
    print("next:")
    print(f"  pip install -e {written.root}")
    print(f"  pytest {written.root}              # the conformance kit on your game")
    print(f"  arena games | grep {written.game_id}")
    print(f"  arena play --game {written.game_id} --players random --games 10 --no-record")
    return 0


# -- arena play ----------------------------------------------------------------------------
def _players(args: argparse.Namespace) -> list[str]:
    from games.registry import get_spec

    names = [p.strip() for p in args.players.split(",") if p.strip()]
    if not names:
        raise CliError("--players needs at least one bot name, e.g. random,optimal")
    spec = get_spec(args.game)
    if len(names) == 1:
        count = args.num_players if args.num_players is not None else spec.min_players
        return names * count
    if args.num_players is not None and args.num_players != len(names):
        raise CliError(
            f"--num-players {args.num_players} but --players names {len(names)} bots; "
            "give one name per seat, or one name for all seats"
        )
    return names


class _PacedAgent:
    """Slows a bot down so a person can follow the live view."""

    def __init__(self, agent: SeatAgent, delay: float) -> None:
        self.agent = agent
        self.name = agent.name
        self.delay = delay

    async def act(self, turn: SeatTurn) -> str:
        await asyncio.sleep(self.delay)
        return await self.agent.act(turn)


async def _watch_one(
    args: argparse.Namespace, players: Sequence[typing.Any], limits: SessionLimits, bus: EventBus
) -> None:
    """Play one game alone (seed SEED-1), printing each move as it happens."""
    from arena.events import MatchAborted, MatchEnded, MatchStarted, TurnPlayed
    from arena.play import play_matches

    sub = bus.subscribe(name="terminal")

    async def printer() -> None:
        async for event in sub:
            if isinstance(event, MatchStarted):
                line = ", ".join(f"seat {i}: {p}" for i, p in enumerate(event.players))
                print(f"== {event.game_id} (seed {event.seed}) {line}")
                if event.public_state:
                    print(event.public_state)
            elif isinstance(event, TurnPlayed):
                mark = "" if event.valid else f"  INVALID ({event.reason})"
                print(
                    f"\n-- move {event.index + 1}: seat {event.seat} plays {event.action!r}{mark}"
                )
                if event.public_state:
                    print(event.public_state)
            elif isinstance(event, MatchEnded):
                print(f"\n== {event.status}: rewards {list(event.rewards)} {event.reason}".rstrip())
                sub.close()
            elif isinstance(event, MatchAborted):
                print(f"\n== aborted: {event.reason}")
                sub.close()

    task = asyncio.create_task(printer())
    try:
        await play_matches(
            args.game,
            players,
            1,
            seed=args.seed - 1,
            limits=limits,
            bus=bus,
            agent_wrapper=lambda seat, agent: _PacedAgent(agent, args.watch_delay),
        )
        await task
    finally:  # play raised or was cancelled: the printer must not outlive it
        sub.close()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def cmd_play(args: argparse.Namespace) -> int:
    """Play bot matches and print a summary."""
    from tqdm import tqdm

    from arena.play import play_matches, validate_players
    from games.bots import UnknownBot
    from games.registry import GameUnavailable, UnknownGame
    from games.session import SessionLimits

    try:
        from arena.identity import BadPolicyRef
        from matchmaking.match import player_specs
        from storage.rundir import UnknownCheckpoint

        # Bot names, or stored checkpoints as run:NAME@STEP (loaded on their first move).
        players = player_specs(_players(args), runs_dir=args.runs_dir)
        validate_players(args.game, players)
        limits = SessionLimits(
            invalid_move_policy=args.invalid_move_policy,
            max_turns=args.max_turns,
            max_action_chars=args.max_action_chars,
        )
    except (
        UnknownGame,
        GameUnavailable,
        UnknownBot,
        UnknownCheckpoint,
        BadPolicyRef,
        CliError,
        ValueError,
    ) as exc:
        _fail("arena play", str(exc))
    if args.games < 1:
        _fail("arena play", "--games must be at least 1")

    async def play(bus: EventBus) -> PlayStats:
        if args.watch:
            await _watch_one(args, players, limits, bus)
        bar = tqdm(total=args.games, desc=args.game, unit="game", disable=args.quiet or None)
        stats = await play_matches(
            args.game,
            players,
            args.games,
            seed=args.seed,
            limits=limits,
            concurrency=args.concurrency,
            bus=bus,
            on_match_done=lambda _c: bar.update(1),
        )
        bar.close()
        return stats

    not_stored: list[str] = []

    async def run() -> PlayStats:
        from arena.events import EventBus

        bus = EventBus()
        if args.no_record:
            return await play(bus)
        from storage import Recorder, open_database

        database = await open_database(args.db)
        try:
            from matchmaking.live import RatingKeeper

            # Registering is a first write: a read-only or full database fails here.
            async with Recorder(database, bus) as recorder, RatingKeeper(database, bus):
                stats = await play(bus)
            if recorder.problem:
                not_stored.append(f"{recorder.problem} (of {stats.games} played)")
            return stats
        finally:
            await database.close()

    from storage.errors import StorageError

    try:
        stats = asyncio.run(run())
    except StorageError as exc:
        _fail("arena play", str(exc))
    code = _report_play(args, stats)
    if not_stored:  # the results above stand, but the database does not hold them all
        print(f"arena play: error: {not_stored[0]}", file=sys.stderr)
        return EXIT_NOT_STORED
    return code


def _report_play(args: argparse.Namespace, stats: PlayStats) -> int:
    """Print the summary of ``arena play``."""
    if args.json:
        print(json.dumps(stats.as_dict()))
        return 0
    print(
        f"{stats.game_id}: {stats.games} games in {stats.seconds:.2f} s "
        f"({stats.games_per_s:.1f} games/s), {stats.turns} moves; "
        f"finished {stats.finished}, truncated {stats.truncated}, aborted {stats.aborted}"
    )
    head = ("SEAT", "PLAYER", "WIN", "DRAW", "LOSS", "REWARD", "INVALID", "FORFEIT")
    width = max(10, *(len(s.player) for s in stats.seats))
    print(
        f"{head[0]:<5} {head[1]:<{width}} "
        + "{:>6} {:>6} {:>6} {:>7} {:>8} {:>8}".format(*head[2:])
    )
    for i, s in enumerate(stats.seats):
        print(
            f"{i:<5} {s.player:<{width}} {s.wins:>6} {s.draws:>6} {s.losses:>6} "
            f"{s.mean_reward:>+7.3f} {s.invalid_moves:>8} {s.forfeits:>8}"
        )
    print("REWARD: mean final reward per game (chips or points where the game has them)")
    for reason in stats.abort_reasons:
        print(f"aborted: {reason}")
    return 0


# -- arena train ---------------------------------------------------------------------------
_TRAIN_HELP = {
    "game_id": "game id, see `arena games` (default: TicTacToe-v0)",
    "backend": "local (a small model trained here; the default) or tinker (the hosted "
    "service: needs TINKER_API_KEY, TINKER_CREDENTIAL_CMD or `tinker auth login`)",
    "model": "local: a Hugging Face model directory (default: built-in small GPT-2); "
    "tinker: the base model name, e.g. Qwen/Qwen3-4B-Instruct-2507",
    "renderer": "prompt format: a cookbook renderer (qwen3_instruct, llama3, ...), chat "
    "(the tokenizer's template) or bytes (default: bytes for the built-in model, the "
    "cookbook's choice for a hosted model, else chat)",
    "lora_rank": "LoRA rank of the hosted model's adapter",
    "sample_timeout_s": "time limit of one sampling call, in seconds",
    "move_timeout_s": "seconds any seat may take to answer before its match is aborted",
    "max_steps_off_policy": "1: the next step's games play while this one trains; 0: on policy",
    "rollout_workers": "processes that play the groups (0: this process)",
    "executor": "dask://HOST:PORT: play the groups on a Dask cluster",
    "rollout_retries": "failed games (a seat raised, the match aborted) replayed per group",
    "kl_penalty_coef": "KL penalty against the model as training started (0: off)",
    "kl_discount_factor": "discount of the KL penalty's future sum (0: per token)",
    "log_dir": "where config.json, metrics.jsonl and checkpoints go (default: runs/<game>-<time>)",
    "db": "database for the matches (default: $ARENA_DB, else ./arena.db; '' = off)",
    "num_players": "seats per game",
    "steps": "RL steps (batches)",
    "groups_per_batch": "env groups per step",
    "games_per_group": "games per group (rewards are centred within a group)",
    "learning_rate": "Adam learning rate of the RL steps",
    "loss_fn": "policy-gradient loss",
    "max_tokens": "longest sampled action, in tokens",
    "temperature": "sampling temperature (training and evaluation)",
    "drop_constant_reward_groups": "skip groups whose rewards are all equal (no signal)",
    "baseline": "seat: reward minus the mean of its seat in the group; group: minus the "
    "group mean (the cookbook's); role: minus an EMA per game and seat",
    "role_baseline_decay": "EMA decay of the role baseline",
    "invalid_move_penalty": "final reward of a seat that loses by an invalid move",
    "invalid_move_policy": "forfeit: the first invalid move loses; retry: TextArena's retry",
    "opponents": "league: the latest self, past checkpoints (PFSP) and bots; self: pure self-play",
    "league_past_share": "league: share of groups against past checkpoints",
    "league_bot_share": "league: share of groups against bots",
    "league_bots": "league: bots to play (default: every bot that can play the game)",
    "league_snapshot_every": "league: steps between checkpoints joining the pool",
    "league_pool_size": "league: most past checkpoints in the pool",
    "pfsp_weighting": "league: hard (1-x)^2, var x(1-x) or uniform, x the learner's score",
    "bot_fraction": "self: share of groups where the learner plays bots instead of itself",
    "bots": "self: bots for the bot_fraction groups",
    "observation_format": "what a seat is shown (default: compact for the local model, "
    "full otherwise)",
    "eval_every": "steps between evaluations against the bots (0: never)",
    "eval_games": "games per evaluation opponent, half in each seat",
    "edge_eval_games": "games per opponent for the first and final evaluation",
    "time_budget_s": "stop after this many seconds of RL",
    "eval_opponents": "bots to evaluate against (default: every bot that can play the game)",
    "save_every": "steps between checkpoints (one is always saved at the end)",
    "warmup_steps": "format warm-up steps of the local default model (0: skip)",
    "warmup_games": "random games that provide the warm-up examples",
    "warmup_learning_rate": "learning rate of the warm-up",
    "seed": "seed of the games, the model and the sampler",
    "run_name": "the run's name: its checkpoints are run:NAME@STEP (default: the log dir's "
    "name; a resumed run keeps its own; a name stored for another run is refused)",
}


def _add_train_options(parser: argparse.ArgumentParser) -> None:
    import dataclasses
    import typing

    from trainer.config import TrainConfig

    hints = typing.get_type_hints(TrainConfig)
    for f in dataclasses.fields(TrainConfig):
        flag = "--" + ("game" if f.name == "game_id" else f.name.replace("_", "-"))
        hint = hints[f.name]
        default = f.default
        help_text = _TRAIN_HELP.get(f.name, "")
        if "(default" not in help_text:
            help_text += f" (default: {default})"
        origin = typing.get_origin(hint)
        args = typing.get_args(hint)
        if any(typing.get_origin(a) is tuple for a in args):  # an optional tuple
            origin = tuple
        if hint is bool:
            parser.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=default, help=help_text
            )
        elif origin is tuple:
            parser.add_argument(
                flag,
                type=lambda v: tuple(x.strip() for x in v.split(",") if x.strip()),
                default=default,
                help=help_text + " (comma-separated)",
            )
        else:
            literals = [a for a in args if isinstance(a, str)]
            choices = None
            if origin is typing.Literal:
                choices = list(args)
            elif any(typing.get_origin(a) is typing.Literal for a in args):
                choices = [
                    x
                    for a in args
                    if typing.get_origin(a) is typing.Literal
                    for x in typing.get_args(a)
                ]
            kind: type = str
            for candidate in (int, float):
                if hint is candidate or candidate in args:
                    kind = candidate
                    break
            parser.add_argument(
                flag,
                dest=f.name,
                type=kind,
                choices=choices or (literals or None),
                default=default,
                help=help_text,
            )


def cmd_train(args: argparse.Namespace) -> int:
    """Self-play training with a progress bar and a line per step."""
    import dataclasses
    import signal
    import time as _time

    from tqdm import tqdm

    from storage.rundir import RunInUse
    from trainer.backend import BackendError
    from trainer.config import TrainConfig
    from trainer.train import Trainer

    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    values = {k: v for k, v in vars(args).items() if k in fields}
    if values.get("log_dir") in (None, "runs/latest"):
        stamp = _time.strftime("%Y%m%d-%H%M%S")
        values["log_dir"] = f"runs/{values.get('game_id', 'game')}-{stamp}"
    try:
        config = TrainConfig(**values)
        bar = tqdm(total=config.steps, desc="train", unit="step", disable=args.quiet or None)

        def progress(step: int, metrics: dict[str, float]) -> None:
            bar.update(1)
            parts = [f"step {step}"]
            for key, label in (
                ("env/all/reward/total", "reward"),
                ("env/all/win", "win"),
                ("env/all/invalid_moves", "invalid/game"),
                ("optim/loss", "loss"),
                ("test/random/win", "vs random win"),
                ("test/optimal/draw", "vs optimal draw"),
                ("time/total", "s"),
            ):
                if key in metrics:
                    parts.append(f"{label} {metrics[key]:.3f}")
            tqdm.write("  ".join(parts))

        from trainer.progress import no_bars, tqdm_bars

        bars = no_bars if args.quiet else tqdm_bars
        trainer = Trainer(config, report=tqdm.write, progress=progress, bars=bars)
    except (BackendError, ValueError) as exc:
        _fail("arena train", str(exc))

    async def run() -> None:
        loop = asyncio.get_running_loop()
        stops = 0

        def on_sigint() -> None:
            nonlocal stops
            stops += 1
            if stops == 1:
                tqdm.write("stopping after this step (Ctrl-C again to abort without saving)")
                trainer.request_stop()
            else:
                raise KeyboardInterrupt

        loop.add_signal_handler(signal.SIGINT, on_sigint)
        db = args.db if config.db is None else config.db
        view = None if args.no_serve else (args.host, args.port, config.log_dir)

        async def work(database: object) -> object:
            trainer.database = database
            return await trainer.run(args.resume)

        await _with_recorder(db, work, serve=view)

    from storage.errors import StorageError

    not_stored = None
    try:
        asyncio.run(run())
    except (BackendError, ValueError, StorageError, RunInUse) as exc:
        _fail("arena train", str(exc))
    except NotStored as exc:
        not_stored = str(exc)
    finally:
        bar.close()
    print(f"logs: {config.log_dir}/metrics.jsonl; checkpoints: {config.log_dir}/checkpoints.jsonl")
    if not_stored:
        print(f"arena train: error: {not_stored}", file=sys.stderr)
        return EXIT_NOT_STORED
    return 0


async def _with_recorder(
    db: str | None,
    work: typing.Callable[[typing.Any], typing.Awaitable[object]],
    serve: tuple[str, int, str] | None = None,
) -> object:
    """Run ``work`` while the default bus is recorded to ``db`` ("" = not recorded) and,
    with ``serve`` = (host, port, run log dir), shown live in the browser.

    Raises StorageError when the database cannot be opened or written, NotStored (after
    ``work``) when the recorder could not store everything."""
    from arena.events import default_bus

    database = None
    recorder = None
    if db != "":
        from storage import open_database

        database = await open_database(db)
    try:
        async with contextlib.AsyncExitStack() as stack:
            if database is not None:
                from storage import Recorder

                recorder = Recorder(database, default_bus())
                await stack.enter_async_context(recorder)
                from matchmaking.live import RatingKeeper

                # Rated matches (bots, checkpoints, people) update the ratings as they end.
                await stack.enter_async_context(RatingKeeper(database, default_bus()))
            if serve is not None:
                from web.hub import serve as start_hub

                try:
                    host, port, log_dir = serve
                    hub = await start_hub(
                        database,
                        default_bus(),
                        host,
                        port,
                        follow_db=False,
                        run_sources=[log_dir],
                    )
                except OSError as exc:
                    print(
                        f"arena train: not serving the browser view ({exc}); "
                        "training goes on (use --port, or --no-serve)",
                        file=sys.stderr,
                    )
                else:
                    stack.push_async_callback(hub.close)
                    print(f"watch it live: http://{host}:{port}/", flush=True)
            result = await work(database)
        if recorder is not None and recorder.problem:
            raise NotStored(recorder.problem)
        return result
    finally:
        if database is not None:
            await database.close()


# -- stored matches --------------------------------------------------------------------------
def _add_db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        help="database: an SQLite path, sqlite+aiosqlite:///PATH or "
        "postgresql+asyncpg://USER:PASSWORD@HOST:PORT/DATABASE (default: $ARENA_DB, else "
        "./arena.db)",
    )


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve the browser UI."""
    from matchmaking.seek import MatchmakerConfig
    from storage.rundir import DEFAULT_RUN_SOURCES
    from web.cli import serve_command
    from web.limits import ServerLimits

    try:
        limits = ServerLimits(
            agent_move_timeout_s=args.agent_move_timeout_s,
            agent_reconnect_grace_s=args.reconnect_grace_s,
            max_agent_matches=args.max_agent_matches,
        )
        matchmaker = MatchmakerConfig(fill_after_s=None if args.no_fill else args.fill_after_s)
    except ValueError as exc:
        _fail("arena serve", str(exc))
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


def cmd_agents(args: argparse.Namespace) -> int:
    """Remote agents' accounts."""
    from storage.cli import agents_command

    return agents_command(args.action, args.name, args.db, as_json=args.json)


def cmd_agent(args: argparse.Namespace) -> int:
    """Play as a remote agent."""
    import os

    from matchmaking.cli import agent_command

    token = args.token or os.environ.get("ARENA_AGENT_TOKEN", "")
    if args.token_file:
        try:
            with open(args.token_file, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as exc:
            _fail("arena agent", f"cannot read --token-file {args.token_file}: {exc.strerror}")
    if not token:
        _fail("arena agent", "give the agent's token: --token-file FILE, $ARENA_AGENT_TOKEN or "
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


def cmd_matches(args: argparse.Namespace) -> int:
    """List stored matches."""
    from storage.cli import matches_command

    return matches_command(
        args.db, args.game, args.run, args.policy, args.status, args.limit, args.offset, args.json
    )


def cmd_show(args: argparse.Namespace) -> int:
    """Print one stored match."""
    from storage.cli import show_command

    return show_command(args.db, args.match_id, args.json)


def cmd_results(args: argparse.Namespace) -> int:
    """Per-policy results."""
    from storage.cli import results_command

    return results_command(args.db, args.game, args.run, args.json)


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    """Upgrade a database to this Arena's schema."""
    from storage.cli import db_upgrade_command

    return db_upgrade_command(args.db)


# -- parser ----------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``arena``."""
    parser = argparse.ArgumentParser(
        prog="arena",
        description="Self-play RL on multiplayer text games: play, train, watch.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

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
        "--time-budget-s", type=float, default=60.0, help="seconds for all checks (default: 60)"
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

    play = sub.add_parser(
        "play",
        help="play bot matches and print the results",
        description="Play bot matches (game i uses seed SEED+i) and print wins, draws, losses.",
    )
    play.add_argument(
        "--game", required=True, help="game id, e.g. TicTacToe-v0 (see `arena games`)"
    )
    play.add_argument(
        "--players",
        default="random",
        help="comma-separated player per seat: a bot (random, optimal, ...) or a stored "
        "checkpoint run:NAME@STEP; one name fills every seat (default: random)",
    )
    play.add_argument("--runs-dir", default="runs", help="where run:NAME looks (default: runs)")
    play.add_argument("--num-players", type=int, help="seats, when --players gives one name")
    play.add_argument("--games", type=int, default=100, help="number of games (default: 100)")
    play.add_argument("--seed", type=int, default=0, help="seed of the first game (default: 0)")
    play.add_argument(
        "--concurrency", type=int, default=32, help="games played at once (default: 32)"
    )
    play.add_argument(
        "--invalid-move-policy",
        choices=["forfeit", "retry"],
        default="forfeit",
        help="forfeit: the first invalid move loses (default); retry: TextArena's one retry",
    )
    play.add_argument(
        "--max-turns", type=int, default=1_000, help="moves before a game is stopped as a draw"
    )
    play.add_argument(
        "--max-action-chars",
        type=int,
        default=2_000,
        help="longer moves are cut to this many characters (default: 2000)",
    )
    play.add_argument("--watch", action="store_true", help="show game 0 move by move first")
    play.add_argument(
        "--watch-delay", type=float, default=0.4, help="seconds between moves in --watch"
    )
    play.add_argument("--json", action="store_true", help="print the summary as JSON")
    play.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_db(play)
    play.add_argument(
        "--no-record", action="store_true", help="do not store the matches in the database"
    )
    play.set_defaults(func=cmd_play)

    train = sub.add_parser(
        "train",
        help="self-play training on a game (local model by default)",
        description="Train a model by self-play. Every match is recorded; metrics and "
        "checkpoints go to --log-dir. Ctrl-C stops after the current step and saves.",
    )
    _add_train_options(train)
    train.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    train.add_argument("--no-serve", action="store_true", help="do not start the browser view")
    train.add_argument("--host", default="127.0.0.1", help="browser view address")
    train.add_argument("--port", type=int, default=8765, help="browser view port (default: 8765)")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.set_defaults(func=cmd_train)

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
        help="a bot or run:NAME@STEP that fills empty seats of sought games (repeatable; "
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
        "--runs-dir", default="runs", help="where --fill run:NAME looks (default: runs)"
    )
    _add_db(serve)
    serve.set_defaults(func=cmd_serve)

    agents = sub.add_parser(
        "agents",
        help="remote agents' accounts: create (prints a token once), list, revoke",
        description="Accounts of remote agents, which play on `arena serve` through the agent "
        "protocol (docs/protocol.md). A token is printed once and stored only hashed.",
    )
    agents.add_argument("action", choices=["create", "list", "revoke"])
    agents.add_argument("name", nargs="?", help="the agent's name (create, revoke)")
    agents.add_argument("--json", action="store_true", help="print JSON")
    _add_db(agents)
    agents.set_defaults(func=cmd_agents)

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
        help="a bot (random, optimal...), run:NAME@STEP or tinker://SAMPLER-PATH",
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
    _add_db(matches)
    matches.set_defaults(func=cmd_matches)

    show = sub.add_parser(
        "show",
        help="print one stored match as each seat saw it",
        description="Print a stored match: every turn as its seat saw it, and the result.",
    )
    show.add_argument("match_id", help="the match id, or its first 8+ characters")
    show.add_argument("--json", action="store_true", help="print JSON")
    _add_db(show)
    show.set_defaults(func=cmd_show)

    results = sub.add_parser(
        "results",
        help="wins, draws, losses and invalid-move rate per policy",
        description="Per-policy results over the stored matches.",
    )
    results.add_argument("--game", help="only this game id")
    results.add_argument("--run", help="only this training run")
    results.add_argument("--json", action="store_true", help="print JSON")
    _add_db(results)
    results.set_defaults(func=cmd_results)

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
    _add_db(upgrade)
    upgrade.set_defaults(func=cmd_db_upgrade)

    board = sub.add_parser(
        "leaderboard",
        help="ratings of bots, checkpoints, people and agents on a game",
        description="The leaderboard of a game: openskill (Plackett-Luce, kept live as "
        "matches end) or Bradley-Terry with bootstrap 95%% intervals from the stored results "
        "(the random bot anchored at 1000). Learner seats and self-play are not rated.",
    )
    board.add_argument("--game", required=True, help="game id, e.g. TicTacToe-v0")
    board.add_argument("--method", choices=["openskill", "bt"], default="openskill")
    board.add_argument(
        "--rebuild", action="store_true", help="recompute the live ratings from the stored results"
    )
    board.add_argument("--json", action="store_true", help="print JSON")
    _add_db(board)
    board.set_defaults(func=cmd_leaderboard)

    tour = sub.add_parser(
        "tournament",
        help="round robin between bots and checkpoints, recorded, with ratings",
        description="Every pair of players plays --games-per-pair games (seats swapped, "
        "concurrently, recorded); prints the cross-table and the ratings.",
    )
    tour.add_argument("--game", required=True, help="game id (two seats), e.g. TicTacToe-v0")
    tour.add_argument(
        "--players",
        required=True,
        help="comma-separated: bot names (random, optimal) and checkpoints run:NAME@STEP",
    )
    tour.add_argument("--games-per-pair", type=int, default=20, help="(default: 20)")
    tour.add_argument("--seed", type=int, default=0, help="seed of the first game")
    tour.add_argument("--concurrency", type=int, default=32, help="games at once (default: 32)")
    tour.add_argument("--runs-dir", default="runs", help="where run:NAME looks (default: runs)")
    tour.add_argument("--no-record", action="store_true", help="do not store the matches")
    tour.add_argument("--json", action="store_true", help="print JSON")
    tour.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_db(tour)
    tour.set_defaults(func=cmd_tournament)
    return parser


def cmd_leaderboard(args: argparse.Namespace) -> int:
    """``arena leaderboard``."""
    from matchmaking.cli import leaderboard_command

    return leaderboard_command(
        args.game, args.db, method=args.method, rebuild=args.rebuild, as_json=args.json
    )


def cmd_tournament(args: argparse.Namespace) -> int:
    """``arena tournament``."""
    from matchmaking.cli import tournament_command

    players = [p.strip() for p in args.players.split(",") if p.strip()]
    return tournament_command(
        args.game,
        players,
        args.games_per_pair,
        args.db,
        seed=args.seed,
        concurrency=args.concurrency,
        runs_dir=args.runs_dir,
        record=not args.no_record,
        as_json=args.json,
        quiet=args.quiet,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``arena``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `arena ... | head`: stop quietly
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
