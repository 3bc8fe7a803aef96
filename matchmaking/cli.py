"""``arena leaderboard`` and ``arena tournament``: plain functions returning exit codes.

Bad input (an unknown game, player or checkpoint, an unusable database) prints one line
and returns 2; nothing else is raised.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from arena.identity import BadPolicyRef, PolicyKind, PolicyRef
from games.bots import UnknownBot
from games.registry import GameUnavailable, UnknownGame
from matchmaking.leaderboard import Method, leaderboard
from matchmaking.live import RatingKeeper
from matchmaking.match import player_specs
from matchmaking.tournament import TournamentResult, round_robin
from storage.errors import StorageError
from storage.rundir import UnknownCheckpoint

EXIT_OK = 0
EXIT_USAGE = 2

_BAD_INPUT = (UnknownGame, GameUnavailable, UnknownBot, UnknownCheckpoint, BadPolicyRef, ValueError)


def _label(key: str) -> str:
    try:
        return PolicyRef.parse(key).label
    except ValueError:
        return key


def format_leaderboard(board: dict[str, object]) -> str:
    """The leaderboard as an aligned text table."""
    rows = board["rows"]
    assert isinstance(rows, list)
    lines = [f"{board['game']}: {board['matches']} rated matches ({board['method']})"]
    if board["method"] == "openskill":
        lines.append(f"{'#':>3}  {'policy':<32} {'ordinal':>8} {'mu':>7} {'sigma':>6} {'games':>6}")
        for i, r in enumerate(rows, 1):
            lines.append(
                f"{i:>3}  {r['label']:<32} {r['ordinal']:>8.2f} {r['mu']:>7.2f} "
                f"{r['sigma']:>6.2f} {r['games']:>6}"
            )
    else:
        lines.append(f"{'rank':>4}  {'policy':<32} {'rating':>7} {'95% interval':>16} {'games':>6}")
        for r in rows:
            interval = f"{r['lower']:.0f}..{r['upper']:.0f}"
            lines.append(
                f"{r['rank']:>4}  {r['label']:<32} {r['rating']:>7.0f} {interval:>16} "
                f"{r['games']:>6}"
            )
    seat = board.get("seat0_score")
    if isinstance(seat, dict):
        lines.append(
            f"first-mover advantage: seat 0 scores {seat['score']:.3f} "
            f"(95% {seat['lower']:.3f}..{seat['upper']:.3f}) over {seat['games']} games"
        )
    for note in board.get("notes") or []:  # type: ignore[attr-defined]
        lines.append(f"note: {note}")
    return "\n".join(lines)


def leaderboard_command(
    game_id: str,
    db: str | None = None,
    *,
    method: Method = "openskill",
    rebuild: bool = False,
    as_json: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Print the leaderboard of ``game_id`` from database ``db``; returns the exit code.
    ``rebuild`` first recomputes the game's live ratings from its stored results."""
    out = out or sys.stdout
    err = err or sys.stderr

    async def run() -> dict[str, object]:
        from storage import open_database

        database = await open_database(db, recover=False, must_exist=True, read_only=not rebuild)
        try:
            if rebuild:
                from matchmaking.live import rebuild_ratings

                rated = await rebuild_ratings(database, game_id)
                print(f"rebuilt the ratings from {rated} rated matches", file=err)
            board = await leaderboard(database, game_id, method)
        finally:
            await database.close()
        return board.as_dict()

    try:
        from games.registry import get_spec

        get_spec(game_id)
        board = asyncio.run(run())
    except (*_BAD_INPUT, StorageError) as exc:
        print(f"arena leaderboard: error: {exc}", file=err)
        return EXIT_USAGE
    print(json.dumps(board) if as_json else format_leaderboard(board), file=out)
    return EXIT_OK


def format_tournament(result: TournamentResult) -> str:
    """The cross-table and the ratings as text."""
    rows = result.cross_table()
    labels = [_label(c) if i else c for i, c in enumerate(rows[0])]
    width = max(10, *(len(label) for label in labels)) + 1
    lines = [f"{result.game_id}: score of row against column (win 1, draw 1/2)"]
    lines.append("".join(f"{c:>{width}}" for c in labels))
    for row in rows[1:]:
        lines.append("".join(f"{(_label(c) if i == 0 else c):>{width}}" for i, c in enumerate(row)))
    lines.append("")
    lines.append(f"{'policy':<32} {'ordinal':>8} {'mu':>7}  {'BT':>6} {'95% interval':>14}")
    bt = result.bradley_terry
    for key in sorted(result.ratings, key=lambda k: -result.ratings[k].ordinal):
        r = result.ratings[key]
        line = f"{_label(key):<32} {r.ordinal:>8.2f} {r.mu:>7.2f}"
        if bt is not None and key in bt.ratings:
            line += f"  {bt.ratings[key]:>6.0f} {bt.lower[key]:>6.0f}..{bt.upper[key]:<6.0f}"
        lines.append(line)
    aborted = sum(s.aborted for s in result.table.values()) // 2
    if aborted:
        lines.append(f"aborted games: {aborted} (first reasons: {result.aborted_reasons[:3]})")
    return "\n".join(lines)


def tournament_command(
    game_id: str,
    players: Sequence[str],
    games_per_pair: int,
    db: str | None = None,
    *,
    seed: int = 0,
    concurrency: int = 32,
    runs_dir: str = "runs",
    record: bool = True,
    as_json: bool = False,
    quiet: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Play a round robin between ``players`` (bots or ``run:NAME@STEP``), record it in
    ``db`` unless ``record`` is False, and print the cross-table and ratings."""
    out = out or sys.stdout
    err = err or sys.stderr

    async def run() -> TournamentResult:
        from arena.events import EventBus
        from storage import Recorder, open_database

        specs = player_specs(players, runs_dir=runs_dir)
        bus = EventBus()
        total = games_per_pair * len(specs) * (len(specs) - 1) // 2
        from tqdm import tqdm

        bar = tqdm(total=total, desc="tournament", unit="game", disable=quiet or None, file=err)
        try:
            if not record:
                return await round_robin(
                    game_id, specs, games_per_pair, seed=seed, concurrency=concurrency,
                    bus=bus, on_game=lambda: bar.update(1),
                )  # fmt: skip
            database = await open_database(db)
            try:
                async with Recorder(database, bus) as recorder, RatingKeeper(database, bus):
                    result = await round_robin(
                        game_id, specs, games_per_pair, seed=seed, concurrency=concurrency,
                        bus=bus, on_game=lambda: bar.update(1),
                    )  # fmt: skip
                    await recorder.flush()
                if recorder.stats.lost_matches:
                    raise StorageError(
                        f"{recorder.stats.lost_matches} match(es) could not be stored"
                    )
            finally:
                await database.close()
            return result
        finally:
            bar.close()

    try:
        result = asyncio.run(run())
    except (*_BAD_INPUT, StorageError) as exc:
        print(f"arena tournament: error: {exc}", file=err)
        return EXIT_USAGE
    print(json.dumps(result.as_dict()) if as_json else format_tournament(result), file=out)
    return EXIT_OK


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
    """The ``arena.client`` policy factory ``policy`` names: a bot (``random``), a stored
    checkpoint (``run:NAME@STEP``, its weights loaded now: local, or through Tinker for a
    ``tinker://`` checkpoint), or a Tinker sampler path (``tinker://...``; needs ``model``,
    the base model, for its tokenizer and renderer). Raises UnknownBot, BadPolicyRef,
    UnknownCheckpoint, ValueError, or BackendError (no Tinker credential)."""
    from arena.client import bot_policy, model_policy
    from arena.renderers import OBSERVATION_FORMATS, RendererConfig, recommended_renderer
    from games.bots import check_bot
    from games.registry import get_spec
    from matchmaking.agents import default_loader, resolve_checkpoint

    if policy.startswith("tinker://"):
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
        from trainer.backend import tinker_service_client

        client = await tinker_service_client().create_sampling_client(model_path=policy)
        config = RendererConfig(name=renderer or recommended_renderer(model), tokenizer_path=model)
        return model_policy(
            client, config, observation_format, max_tokens=max_tokens or 64, temperature=temperature
        )
    ref = PolicyRef.parse(policy)
    if ref.kind is PolicyKind.BOT:
        check_bot(ref.name, get_spec(game_id))
        return bot_policy(ref.name)
    if ref.kind is PolicyKind.CHECKPOINT:
        info = resolve_checkpoint(ref, runs_dir=runs_dir)
        client = await default_loader(info.sampler_path)
        return model_policy(
            client,
            info.renderer,
            info.observation_format,
            max_tokens=max_tokens or info.max_tokens,
            temperature=temperature,
        )
    raise BadPolicyRef(f"{policy!r} cannot play here: give a bot, run:NAME@STEP or tinker://...")


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
    from arena.client import AgentClient, AgentError, MatchInfo, MatchResult

    out = out or sys.stdout
    err = err or sys.stderr

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
        client = Printing(server, token, factory, reconnect_s=reconnect_s)
        await client.connect()
        if not as_json:
            print(f"playing {game_id} on {client.url} as {client.agent}", file=out, flush=True)
        from arena.runtime import freeze_heap

        freeze_heap()  # the policy is loaded: keep full collections from stalling its moves
        try:
            return await client.play(
                game_id,
                games,
                rated=rated,
                opponents=opponents,
                players=players,
                concurrency=concurrency,
            )
        finally:
            await client.close()

    try:
        from games.registry import get_spec

        get_spec(game_id)
        results = asyncio.run(run())
    except AgentError as exc:
        print(f"arena agent: {exc.message} ({exc.code})", file=err)
        return EXIT_USAGE
    except ConnectionError as exc:
        print(f"arena agent: {exc}", file=err)
        return 1
    except OSError as exc:
        print(f"arena agent: cannot reach {server}: {exc.strerror or exc}", file=err)
        return EXIT_USAGE
    except (*_BAD_INPUT, StorageError, RuntimeError) as exc:
        print(f"arena agent: {exc}", file=err)
        return EXIT_USAGE
    if not as_json:
        wins = sum(r.result == "win" for r in results)
        draws = sum(r.result == "draw" for r in results)
        losses = sum(r.result == "loss" for r in results)
        aborted = sum(r.result == "aborted" for r in results)
        print(f"{len(results)} matches: {wins} won, {draws} drawn, {losses} lost, "
              f"{aborted} aborted", file=out)  # fmt: skip
    return EXIT_OK
