"""``arena eval``: models and bots on a list of games, each against the game's yardstick bots.

Each player (``model:smollm2``, a checkpoint ``run:NAME@STEP``, a bot) plays every game
against the opponents evaluation plays (``trainer.evaluate.default_opponents``: ``random``
and the bots of the game's yardstick, or its strongest bot), its games spread evenly over
the seats, all of a game's line-ups at once (so a model's sampler answers them in shared
batches). The matches are recorded and rated like ``arena play``'s. A row per player, game
and opponent gives the share of wins, draws and losses, and the player's invalid moves per
move; the game's yardstick (``non_loss_vs_optimal``, ``exploitability``, ...) is computed
from those results, or for a model also from its answers at the yardstick's positions
(exactly, from its probability of each move, where the yardstick reads probabilities).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from arena.eventbus import EventBus
from arena.play import play_matches
from arena.seats import AgentSpec, SeatAgent, SeatTurn
from games.limits import SessionLimits
from games.registry import get_spec

EVAL_GAMES: tuple[str, ...] = (
    "TicTacToe-v0",
    "ConnectFour-v0",
    "Kuhn-v0",
    "Goofspiel-v0",
    "LowestUnique-v0",
    "Haggle-v0",
    "RockPaperScissors-v0",
)
"""``--games all``: the games of the README's learning table (arena's own games and the
TextArena games arena ships bots and yardsticks for), and rock-paper-scissors."""

MODEL_PROBE_SAMPLES = 16
"""Answers a model gives at each of a yardstick's positions where its answers cannot be
scored exactly (``trainer.scoring``; the yardstick's own number, 1,024 for Kuhn poker,
would take most of an evaluation's time on a CPU)."""

EVAL_MOVE_TIMEOUT_S = 600.0
"""The move clock of an evaluation game: a model on a CPU answers a whole game's batch at
once, which can take minutes; the model seat's own sampling limit comes first."""


@dataclass
class PairResult:
    """One player against one opponent on one game, over both seats."""

    player: str
    game_id: str
    opponent: str
    games: int = 0
    wins: int = 0
    draws: int = 0
    losses: int = 0
    aborted: int = 0
    moves: int = 0
    """Answers the player gave (each counts, valid or not)."""
    invalid_moves: int = 0
    abort_reasons: list[str] = field(default_factory=list)
    """The distinct reasons its aborted games were aborted for."""

    def rate(self, count: int) -> float:
        """``count`` per decided (non-aborted) game."""
        decided = self.games - self.aborted
        return count / decided if decided else 0.0

    @property
    def invalid_rate(self) -> float:
        """Invalid moves per answer."""
        return self.invalid_moves / self.moves if self.moves else 0.0

    def as_dict(self) -> dict[str, Any]:
        """The result as JSON-ready numbers (rates per decided game)."""
        return {
            "player": self.player,
            "game": self.game_id,
            "opponent": self.opponent,
            "games": self.games,
            "aborted": self.aborted,
            "win": self.rate(self.wins),
            "draw": self.rate(self.draws),
            "loss": self.rate(self.losses),
            "invalid_move_rate": self.invalid_rate,
        }


@dataclass
class Scorecard:
    """What ``arena eval`` measured."""

    pairs: list[PairResult] = field(default_factory=list)
    yardsticks: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)
    """(player, game) -> the yardstick's figures (empty for a game without one)."""
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """The scorecard as JSON."""
        return {
            "seconds": round(self.seconds, 2),
            "results": [p.as_dict() for p in self.pairs],
            "yardsticks": [
                {"player": player, "game": game, **figures}
                for (player, game), figures in self.yardsticks.items()
            ],
        }

    def rows(self) -> list[list[str]]:
        """The table's cells, a header first: one row per player, game and opponent; the
        yardstick's headline figure on the first row of each player and game (every figure
        is in ``as_dict``)."""
        rows = [
            ["PLAYER", "GAME", "OPPONENT", "GAMES", "WIN", "DRAW", "LOSS", "INVALID", "YARDSTICK"]
        ]
        shown: set[tuple[str, str]] = set()
        for p in self.pairs:
            key = (p.player, p.game_id)
            yardstick = ""
            if key not in shown:
                shown.add(key)
                figures = self.yardsticks.get(key, {})
                head = _headline(p.game_id)
                yardstick = f"{head} {figures[head]:.3f}" if head in figures else "-"
            rows.append(
                [
                    p.player,
                    p.game_id,
                    p.opponent,
                    str(p.games - p.aborted) + (f" (+{p.aborted} aborted)" if p.aborted else ""),
                    f"{p.rate(p.wins):.2f}",
                    f"{p.rate(p.draws):.2f}",
                    f"{p.rate(p.losses):.2f}",
                    f"{p.invalid_rate:.2f}",
                    yardstick,
                ]
            )
        return rows

    def text(self) -> str:
        """The table as aligned text, with what its columns mean."""
        rows = self.rows()
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = [
            "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
        ]
        lines.append(
            "WIN/DRAW/LOSS: share of the decided games, both seats; INVALID: invalid moves per "
            "answer of the player; YARDSTICK: the game's own measure "
            f"({len(self.pairs)} pairings in {self.seconds:.0f} s)"
        )
        return "\n".join(lines)

    def write_png(self, path: str | Path) -> None:
        """Draw the table into a PNG file (needs matplotlib: the ``dev`` extra)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        rows = self.rows()
        fig, ax = plt.subplots(figsize=(11, 0.6 + 0.32 * len(rows)))
        ax.axis("off")
        table = ax.table(cellText=rows[1:], colLabels=rows[0], loc="center", cellLoc="left")
        table.auto_set_font_size(False)
        table.set_fontsize(8)
        table.auto_set_column_width(list(range(len(rows[0]))))
        ax.set_title(f"arena eval ({self.seconds:.0f} s)", fontsize=10)
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)


def _headline(game_id: str) -> str | None:
    """The name of the game's headline yardstick figure (the table shows it alone)."""
    from games.registry import game_kit

    yardstick = game_kit(game_id).yardstick
    return yardstick.figure if yardstick is not None else None


class _Counted:
    """A seat agent that counts the answers it gives."""

    def __init__(self, agent: SeatAgent, counter: list[int]) -> None:
        self.agent = agent
        self.name = getattr(agent, "name", "")
        self.counter = counter

    async def act(self, turn: SeatTurn) -> str:
        self.counter[0] += 1
        return await self.agent.act(turn)


def _name(spec: AgentSpec | str) -> str:
    return spec if isinstance(spec, str) else spec.name


async def evaluate_player(
    player: AgentSpec | str,
    game_id: str,
    games_per_pair: int,
    *,
    opponents: Sequence[str] | None = None,
    seed: int = 0,
    bus: EventBus | None = None,
    limits: SessionLimits | None = None,
    concurrency: int = 32,
    on_game: Callable[[], None] | None = None,
) -> tuple[list[PairResult], dict[str, float]]:
    """``player`` on ``game_id`` against each opponent (default: ``default_opponents``),
    ``games_per_pair`` games each, spread evenly over the seats; and the yardstick's
    figures from those results (and, for a model seat, its exact probabilities at the
    yardstick's positions, or where they cannot be scored ``MODEL_PROBE_SAMPLES`` answers
    at each). Raises ValueError for too few games or an unknown game."""
    from games.api import MatchRecord
    from trainer.evaluate import default_opponents, yardstick_opponents

    spec = get_spec(game_id)
    seats = spec.min_players
    if games_per_pair < seats:
        raise ValueError(f"--games-per-pair must be at least {seats} for {game_id} (a game a seat)")
    chosen = list(opponents) if opponents is not None else default_opponents(game_id)
    chosen += [o for o in yardstick_opponents(game_id) if o not in chosen]
    name = _name(player)
    results = {o: PairResult(name, game_id, o) for o in chosen}
    clocked = dataclasses.replace(limits or SessionLimits(), move_timeout_s=EVAL_MOVE_TIMEOUT_S)

    async def one(opponent: str, seat: int, count: int, offset: int) -> None:
        lineup: list[AgentSpec | str] = [opponent] * seats
        lineup[seat] = player
        counter = [0]

        def wrap(index: int, agent: SeatAgent) -> SeatAgent:
            return _Counted(agent, counter) if index == seat else agent

        stats = await play_matches(
            game_id, lineup, count, seed=seed + offset, limits=clocked, bus=bus,
            concurrency=concurrency, agent_wrapper=wrap,
            on_match_done=(lambda _c: on_game()) if on_game else None,
        )  # fmt: skip
        result = results[opponent]
        mine = stats.seats[seat]
        result.games += stats.games
        result.aborted += stats.aborted
        result.abort_reasons += [r for r in stats.abort_reasons if r not in result.abort_reasons]
        result.wins += mine.wins
        result.draws += mine.draws
        result.losses += mine.losses
        result.invalid_moves += mine.invalid_moves
        result.moves += counter[0]

    jobs = []
    offset = 0
    for opponent in chosen:
        for seat in range(seats):
            count = games_per_pair // seats + (seat < games_per_pair % seats)
            jobs.append(one(opponent, seat, count, offset))
            offset += count
    await asyncio.gather(*jobs)
    pairs = list(results.values())
    figures = await _yardstick(player, game_id, pairs, MatchRecord)
    return pairs, figures


async def _yardstick(
    player: AgentSpec | str, game_id: str, pairs: list[PairResult], record: Any
) -> dict[str, float]:
    from games.registry import game_kit
    from matchmaking.agents import ModelSeat, default_pool

    yardstick = game_kit(game_id).yardstick
    if yardstick is None:
        return {}
    figures: dict[str, float] = {}
    if yardstick.from_matches is not None:
        played = {p.opponent: record(p.wins, p.draws, p.losses) for p in pairs}
        figures.update(yardstick.from_matches(played))
    if yardstick.from_answers is not None and yardstick.probes is not None:
        if not isinstance(player, ModelSeat):
            return {k: float(v) for k, v in figures.items()}  # a bot gives no token answers
        from arena.policies import SamplerPolicy
        from trainer.evaluate import ask_probes
        from trainer.scoring import exact_figures

        client = await default_pool().get(player.sampler_path)
        policy = SamplerPolicy(
            client, player.max_tokens, player.temperature, timeout_s=player.sample_timeout_s
        )
        exact = await exact_figures(
            policy, game_id, yardstick, player.renderer, player.observation_format
        )
        if exact is not None:  # the model's own probabilities: no answer to sample
            figures.update(exact)
            return {k: float(v) for k, v in figures.items()}
        probes = yardstick.probes(game_id)
        samples = min(yardstick.samples, MODEL_PROBE_SAMPLES)
        # Every position at once: the sampler answers them in shared batches.
        asked = await asyncio.gather(
            *(
                ask_probes(
                    policy,
                    game_id,
                    {key: probe},
                    samples,
                    player.renderer,
                    player.observation_format,
                )
                for key, probe in probes.items()
            )
        )
        answers = {key: texts for one in asked for key, texts in one.items()}
        figures.update(yardstick.from_answers(answers))
    return {k: float(v) for k, v in figures.items()}


async def run_scorecard(
    players: Sequence[AgentSpec | str],
    games: Sequence[str],
    games_per_pair: int,
    *,
    seed: int = 0,
    bus: EventBus | None = None,
    limits: SessionLimits | None = None,
    concurrency: int = 32,
    on_game: Callable[[], None] | None = None,
    report: Callable[[str], None] | None = None,
) -> Scorecard:
    """Every player on every game (``evaluate_player``), one game after another."""
    card = Scorecard()
    started = time.perf_counter()
    for game_id in games:
        game_started = time.perf_counter()
        for player in players:
            pairs, figures = await evaluate_player(
                player, game_id, games_per_pair, seed=seed, bus=bus, limits=limits,
                concurrency=concurrency, on_game=on_game,
            )  # fmt: skip
            card.pairs += pairs
            card.yardsticks[(_name(player), game_id)] = figures
        if report is not None:
            report(f"{game_id}: {time.perf_counter() - game_started:.0f} s")
    card.seconds = time.perf_counter() - started
    return card


def resolve_games(text: str) -> list[str]:
    """The games ``--games`` names: ``all`` (``EVAL_GAMES``) or a comma-separated list.
    Raises UnknownGame or GameUnavailable for a game that is not here."""
    from games.registry import GameUnavailable

    names = list(EVAL_GAMES) if text.strip() == "all" else [g.strip() for g in text.split(",")]
    names = [n for n in names if n]
    if not names:
        raise ValueError("--games needs a game id, or all")
    for name in names:
        spec = get_spec(name)
        if not spec.available:
            raise GameUnavailable(f"{name} is not available here: {spec.reason}")
    return names


def eval_command(
    players: Sequence[str],
    games: str,
    games_per_pair: int,
    *,
    db: str | None = None,
    record: bool = True,
    png: str | None = None,
    seed: int = 0,
    max_tokens: int | None = None,
    temperature: float = 1.0,
    concurrency: int = 32,
    runs_dir: str = "runs",
    as_json: bool = False,
    quiet: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """``arena eval``: play, record, print the table (or JSON) and write the PNG. When every
    game was aborted there is no table: one line on ``err`` says why (EXIT_FAILED)."""
    import sys

    from games.console import EXIT_FAILED, EXIT_OK, EXIT_USAGE
    from games.registry import GameUnavailable
    from matchmaking.tokenusage import token_usage, usage_dict, usage_lines, usage_since
    from storage.errors import StorageError

    out = out or sys.stdout
    err = err or sys.stderr
    try:
        game_ids, specs = _eval_lineup(
            players, games, games_per_pair, runs_dir, temperature, max_tokens
        )
    except (ValueError, LookupError, GameUnavailable) as exc:
        print(f"arena eval: error: {exc}", file=err)
        return EXIT_USAGE
    before = token_usage()
    try:
        card, not_stored = asyncio.run(
            _play_eval(
                specs,
                game_ids,
                games_per_pair,
                db=db if record else "",
                seed=seed,
                concurrency=concurrency,
                quiet=quiet,
                err=err,
            )
        )
    except (StorageError, ValueError) as exc:
        print(f"arena eval: error: {exc}", file=err)
        return EXIT_FAILED
    usage = usage_since(before)
    played = sum(p.games for p in card.pairs)
    if played and sum(p.aborted for p in card.pairs) == played:  # say why, once
        from arena.play import all_aborted

        if as_json:
            print(json.dumps({**card.as_dict(), **usage_dict(usage)}), file=out)
        reasons = "; ".join(dict.fromkeys(r for p in card.pairs for r in p.abort_reasons))
        print(f"arena eval: error: {all_aborted(played, reasons)}", file=err)
        return EXIT_FAILED
    if as_json:
        print(json.dumps({**card.as_dict(), **usage_dict(usage)}), file=out)
    else:
        print("\n".join([card.text(), *usage_lines(usage)]), file=out)
    if png:
        card.write_png(png)
        if not as_json:
            print(f"table: {png}", file=out)
    if not_stored is not None:
        print(f"arena eval: error: {not_stored}", file=err)
        return EXIT_FAILED
    return EXIT_OK


def _eval_lineup(
    players: Sequence[str],
    games: str,
    games_per_pair: int,
    runs_dir: str,
    temperature: float,
    max_tokens: int | None,
) -> tuple[list[str], tuple[AgentSpec, ...]]:
    """``arena eval``'s games and players, checked before anything plays: raises
    ValueError, LookupError or GameUnavailable for a bad option, an unknown player or game,
    or a bot that cannot play one of the games."""
    from arena.seats import agent_spec
    from matchmaking.players import player_specs

    if not players:
        raise ValueError("--players needs at least one player")
    game_ids = resolve_games(games)
    specs = player_specs(players, runs_dir=runs_dir, temperature=temperature, max_tokens=max_tokens)
    if games_per_pair < 1:
        raise ValueError("--games-per-pair must be at least 1")
    for game_id in game_ids:  # a bot that cannot play a game: now, not half-way
        for player in specs:
            agent_spec(player).check(game_id)
    return game_ids, specs


async def _play_eval(
    specs: Sequence[AgentSpec | str],
    game_ids: Sequence[str],
    games_per_pair: int,
    *,
    db: str | None,
    seed: int,
    concurrency: int,
    quiet: bool,
    err: TextIO,
) -> tuple[Scorecard, str | None]:
    """Load the models, then play and record ``arena eval``'s games (``db`` "": not
    recorded) with a progress bar on ``err``: the scorecard, and why its matches were not
    stored (None when they were)."""
    from tqdm import tqdm

    from matchmaking.agents import ModelSeat, preload
    from matchmaking.recording import NotStored, recording
    from matchmaking.served import close_clients

    started = time.perf_counter()
    await preload(specs)  # the weights load before any move clock runs
    if not quiet and any(isinstance(p, ModelSeat) for p in specs):
        print(f"models loaded in {time.perf_counter() - started:.1f} s", file=err)
    bus = EventBus()
    bar = tqdm(desc="eval", unit="game", disable=quiet or None, file=err)
    card: Scorecard | None = None
    not_stored = None
    try:
        async with recording(db, bus):
            card = await run_scorecard(
                specs, game_ids, games_per_pair, seed=seed, bus=bus,
                concurrency=concurrency, on_game=lambda: bar.update(1),
                report=None if quiet else (lambda line: bar.write(line, file=err)),
            )  # fmt: skip
    except NotStored as exc:
        not_stored = str(exc)
    finally:
        bar.close()
        await close_clients()
    assert card is not None
    card.seconds = time.perf_counter() - started
    return card, not_stored
