"""A supervised warm start from recorded games (``arena train --sft-from SOURCE``): the
chosen seats' answers, each after the prompt that seat saw as this run renders prompts,
taught by cross-entropy before RL (after or instead of the format warm-up).

``sft_datums`` turns a source (``trainer.sftsource.SftSource``: a ``db:`` query or an
``arena export`` file) into datums, one per valid move of each chosen seat in a finished
match: the prompt, weighted 0, then the answer's tokens (``SeatView.answer_tokens``),
weighted 1, as the format warm-up builds its datums (``trainer.warmup.answer_datum``).

- A ``db:`` query rebuilds each turn from the stored game messages (``storage.turnlog``)
  with the run's renderer and observation format (``arena.seatview.SeatView``): the
  prompts are byte for byte the ones a learner seat of this run would be given at those
  positions, in any view (``full``, ``last``, ``compact``).
- An export file holds each seat's chat as text, not the game's messages: it is rendered
  with the run's renderer in the ``full`` view (a run in another view is refused when its
  settings are checked; a ``db:`` query serves it).

``supervised_warm_start`` runs the steps: ``sft_steps`` Adam steps at ``sft_learning_rate``
on batches of ``sft_batch`` datums taken in shuffled passes over them.

    data = await sft_datums("db:game=TicTacToe-v0,player=optimal", config, renderer, database=db)
    print(len(data.datums), data.seats, data.matches)
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from tinker import types

from arena.identity import policy_key
from arena.renderers import Message, ObservationFormat, Renderer, RendererConfig, prompt_tokens
from arena.seatview import SeatView
from storage import turnlog
from storage.db import Database
from storage.export import BadQuery, ExportQuery, count_selected, export_matches
from storage.exportread import read_rows
from storage.exportschema import ExportRow
from trainer.backend import TrainingClientLike
from trainer.config import TrainConfig
from trainer.data import weighted_tokens
from trainer.progress import Progress, ProgressFactory, no_bars
from trainer.sftsource import SftSource
from trainer.warmup import answer_datum, cross_entropy_steps

T = TypeVar("T")

SFT_MAX_EXAMPLES = 100_000
"""Most datums held: a source with more answers gives a uniform sample of this many
(reservoir sampling, seeded by the run's seed), so memory stays bounded whatever it holds."""


@dataclass
class SftData:
    """What a source gave: the datums, and what they were taken from."""

    datums: list[types.Datum] = dataclasses.field(default_factory=list)
    """One per answer taught (at most ``SFT_MAX_EXAMPLES``)."""
    answers: int = 0
    """Valid answers of the chosen seats found (more than ``datums`` when sampled down)."""
    seats: int = 0
    """Seats (rows) they came from."""
    matches: int = 0
    """Matches they came from."""
    left_out: int = 0
    """Turns of the chosen seats not taught: invalid moves, turns stored as text only."""


class AnswerSample(Generic[T]):
    """What is kept of a source's answers: every answer up to ``most``, then a uniform
    sample of ``most`` (reservoir sampling, seeded); each kept as ``make`` builds it from
    the prompt's tokens, the answer's and the row (seat) it came from. ``data`` counts."""

    def __init__(
        self,
        most: int,
        seed: int,
        make: Callable[[list[int], list[int], ExportRow], T],
        data: SftData | None = None,
    ) -> None:
        self.data = data if data is not None else SftData()
        self.most = most
        self.rng = random.Random(seed)
        self.make = make
        self.kept: list[T] = []

    def add(self, prompt: list[int], answer: list[int], row: ExportRow) -> None:
        """Count one answer, and keep it while it belongs to the sample."""
        self.data.answers += 1
        if len(self.kept) < self.most:
            self.kept.append(self.make(prompt, answer, row))
            return
        at = self.rng.randrange(self.data.answers)
        if at < self.most:  # built only when kept
            self.kept[at] = self.make(prompt, answer, row)


@dataclass(frozen=True)
class Pick:
    """Which recorded answers a setting reads: its option (for errors), its SOURCE, and
    whose answers (recorded names or policy keys) ending how."""

    option: str
    text: str | None
    seats: tuple[str, ...] = ()
    results: tuple[str, ...] = ()


def picks(config: TrainConfig) -> tuple[Pick, Pick]:
    """The run's two readers of recorded answers: the supervised warm start's
    (``sft_from``) and RL's off-policy data (``offpolicy_from``, with a share)."""
    off = config.offpolicy_from if config.offpolicy_share > 0 else None
    return (
        Pick("--sft-from", config.sft_from, config.sft_seats, config.sft_results),
        Pick("--offpolicy-from", off, config.offpolicy_seats),
    )


def _chosen(
    config: TrainConfig, statuses: Sequence[str], pick: Pick
) -> Callable[[ExportRow], bool]:
    """Which rows (seats) teach: those of ``pick.seats`` (a recorded name or policy key, as
    ``arena export --player`` reads it), with a result of ``pick.results``, of the run's
    games, in a match that ended with one of ``statuses``."""
    wanted = {text for name in pick.seats for text in (name, policy_key(name))}
    results = set(pick.results)
    games = set(config.games)

    def keep(row: ExportRow) -> bool:
        if wanted and row.player not in wanted and row.policy not in wanted:
            return False
        if results and row.result not in results:
            return False
        return row.game_id in games and row.status in statuses

    return keep


def _db_query(query: ExportQuery, pick: Pick) -> ExportQuery:
    """The query's seats: the ``player``'s own unless ``pick.seats`` names others."""
    return dataclasses.replace(
        query,
        seat_player=bool(query.players) and not pick.seats,
        results=query.results or pick.results,
    )


def _match_examples(
    log: turnlog.MatchLog,
    row: ExportRow,
    renderer: Renderer,
    fmt: ObservationFormat,
    views: Sequence[turnlog.SeatView | None],
) -> Iterator[tuple[list[int], list[int]] | None]:
    """Each turn of ``row``'s seat: its prompt rebuilt in the run's view and its answer's
    tokens, or None for a turn that is not taught (invalid, stored as text only)."""
    view = SeatView(row.seat, row.game_id, renderer, fmt)
    for turn, shown in zip(log.turns, views, strict=True):
        if turn.seat != row.seat:
            continue
        if shown is None or not turn.valid:
            yield None
            continue
        prompt = view.prompt(shown.messages, shown.new_from, shown.legal_moves)
        yield prompt_tokens(prompt), view.answer_tokens(turn.action)


@asynccontextmanager
async def _opened(
    config: TrainConfig, database: Database | None, option: str = "--sft-from"
) -> AsyncIterator[Database]:
    """``database``, else the run's (``db``) opened to read."""
    if database is not None:
        yield database
        return
    if config.db == "":
        raise ValueError(
            f"{option} db:...: this run records no database (--db ''); give --db PATH, "
            "the database to read the query from"
        )
    from storage.connect import open_database

    opened = await open_database(config.db, read_only=True)
    try:
        yield opened
    finally:
        await opened.close()


async def _from_database(
    query: ExportQuery,
    config: TrainConfig,
    renderer: Renderer,
    database: Database | None,
    sample: AnswerSample[Any],
    pick: Pick,
    progress: ProgressFactory,
) -> None:
    keep = _chosen(config, query.statuses, pick)
    fmt = config.resolved_format()
    data = sample.data
    label = f"{pick.option.removeprefix('--').removesuffix('-from')} data"
    async with _opened(config, database, pick.option) as db:
        query = _db_query(query, pick)
        total = await count_selected(db, query)
        bar = progress(label, min(total, query.limit or total), "match")

        def one_more(turns: int) -> None:  # a match read
            bar.update(1)

        try:
            read = export_matches(db, query, on_match=one_more)
            async with aclosing(read) as matches:
                async for match in matches:
                    rows = [row for row in match.rows if keep(row)]
                    views = turnlog.seat_views(match.log, rows[0].num_players) if rows else []
                    for row in rows:
                        for example in _match_examples(match.log, row, renderer, fmt, views):
                            if example is None:
                                data.left_out += 1
                            else:
                                sample.add(*example, row)
                    data.seats += len(rows)
                    data.matches += bool(rows)
        finally:
            bar.close()


def row_examples(
    row: ExportRow, renderer: Renderer
) -> Iterator[tuple[list[int], list[int]] | None]:
    """Each answer of an exported row as the run's learner would have been prompted in the
    ``full`` view: the chat before it rendered as a generation prompt (the system message
    and the first user message joined, as arena's own chat holds them), and the answer's
    tokens; None for an answer that is not taught (an invalid move)."""
    view = SeatView(row.seat, row.game_id, renderer, "full")
    chat: list[Message] = []
    rules: str | None = None
    answered = 0
    for message in row.messages:
        role, content = message["role"], message["content"]
        if role == "system":
            rules = content
            continue
        if rules is not None:
            if role == "user":
                content = f"{rules}\n{content}"
            else:
                chat.append({"role": "user", "content": rules})
            rules = None
        if role == "assistant":
            invalid = answered < len(row.invalid) and row.invalid[answered]
            answered += 1
            if invalid:
                yield None
            else:
                prompt = renderer.build_generation_prompt(chat)
                yield prompt_tokens(prompt), view.answer_tokens(content)
        chat.append({"role": "assistant" if role == "assistant" else "user", "content": content})


def _from_files(
    source: SftSource,
    config: TrainConfig,
    renderer: Renderer,
    sample: AnswerSample[Any],
    pick: Pick,
    bar: Progress,
) -> None:
    keep = _chosen(config, ("finished",), pick)  # a file's rows: of finished matches alone
    data = sample.data
    matches: set[str] = set()
    for path in source.files:
        for row in read_rows(path):
            if not keep(row):
                continue
            for example in row_examples(row, renderer):
                if example is None:
                    data.left_out += 1
                else:
                    sample.add(*example, row)
            data.seats += 1
            matches.add(row.match_id)
        bar.update(1)
    data.matches = len(matches)


async def read_answers(
    source: SftSource,
    config: TrainConfig,
    renderer: Renderer,
    sample: AnswerSample[Any],
    pick: Pick,
    *,
    database: Database | None = None,
    progress: ProgressFactory = no_bars,
) -> None:
    """Add to ``sample`` each valid answer of ``pick``'s seats in ``source`` (see the
    module's docstring), its prompt rendered by ``renderer`` as the run ``config``
    describes. A ``db:`` query reads ``database``, else the config's ``db`` opened to read.

    Raises ValueError (one line starting with ``pick.option``), StorageError, OSError."""
    try:
        if source.query is not None:
            await _from_database(source.query, config, renderer, database, sample, pick, progress)
        else:
            bar = progress(f"{pick.option.removeprefix('--')} data", len(source.files), "file")
            try:
                _from_files(source, config, renderer, sample, pick, bar)
            finally:
                bar.close()
    except ValueError as exc:  # BadQuery too
        if str(exc).startswith(pick.option):
            raise
        raise ValueError(f"{pick.option} {source.text!r}: {exc}") from None


async def sft_datums(
    source: SftSource | str,
    config: TrainConfig,
    renderer: RendererConfig | Renderer,
    *,
    database: Database | None = None,
    progress: ProgressFactory = no_bars,
    max_examples: int = SFT_MAX_EXAMPLES,
) -> SftData:
    """The datums of ``source`` (a ``SftSource`` or its text, ``db:KEY=VALUE,...`` or an
    export file) for the run ``config`` describes, its prompts rendered by ``renderer``
    (the run's: ``trainer.service.renderer_for``): each valid answer of the chosen seats
    (``sft_seats``, ``sft_results``, see the module's docstring), at most ``max_examples``
    of them (a uniform sample beyond). A ``db:`` query reads ``database``, else the
    config's ``db`` opened to read.

    Raises ValueError (one line starting with ``--sft-from``: a bad source, an unknown
    player or run, a file that is not an export), StorageError, OSError.
    """
    if isinstance(source, str):
        source = SftSource.parse(source, config.games)
    built = renderer.build() if isinstance(renderer, RendererConfig) else renderer

    def make(prompt: list[int], answer: list[int], row: ExportRow) -> types.Datum:
        return answer_datum(prompt, answer)

    sample = AnswerSample(max_examples, config.seed, make)
    pick = picks(config)[0]
    await read_answers(source, config, built, sample, pick, database=database, progress=progress)
    sample.data.datums = sample.kept
    return sample.data


async def check_source(config: TrainConfig, database: Database | None = None) -> None:
    """Check that ``config``'s ``db:`` sources (``sft_from``, ``offpolicy_from``) can be
    read (the database opens, its players and run are stored), before a run starts: a
    mistyped name is refused in one line before any work, not after the run is set up.
    Nothing to check for a file (``TrainConfig.validate`` found it) or without a source.
    Raises ValueError, StorageError."""
    for pick in picks(config):
        if pick.text is None:
            continue
        source = SftSource.parse(pick.text, config.games, pick.option)
        if source.query is None:
            continue
        async with _opened(config, database, pick.option) as db:
            try:
                await count_selected(db, _db_query(source.query, pick))
            except BadQuery as exc:
                raise ValueError(f"{pick.option} {source.text!r}: {exc}") from None


def _batches(datums: list[types.Datum], size: int, seed: int) -> Iterator[list[types.Datum]]:
    """Batches of ``size`` datums (all of them when fewer), in shuffled passes over them."""
    rng = random.Random(seed)
    size = min(size, len(datums))
    order: list[int] = []
    while True:
        if len(order) < size:
            more = list(range(len(datums)))
            rng.shuffle(more)
            order += more
        yield [datums[i] for i in order[:size]]
        del order[:size]


StepHook = Callable[[int, dict[str, float]], None]
"""``(i, metrics)`` after supervised step ``i`` (0-based): ``sft/loss``, ``sft/examples``,
``sft/tokens``."""


async def supervised_warm_start(
    config: TrainConfig,
    client: TrainingClientLike,
    renderer: RendererConfig | Renderer,
    *,
    database: Database | None = None,
    report: Callable[[str], None] = lambda line: None,
    bars: ProgressFactory = no_bars,
    on_step: StepHook | None = None,
) -> list[float]:
    """Teach ``client`` the answers of ``config.sft_from`` (``sft_datums``): ``sft_steps``
    cross-entropy steps of ``sft_batch`` datums at ``sft_learning_rate`` (None: the
    warm-up's), reported in a line before and after; ``on_step`` gets each step's
    metrics. Returns the loss per answer token of each step.

    Raises ValueError (no source in the config, a bad source, no answer to teach) and what
    ``sft_datums`` and the backend raise."""
    if config.sft_from is None:
        raise ValueError("no --sft-from in this run's settings")
    started = time.perf_counter()
    data = await sft_datums(config.sft_from, config, renderer, database=database, progress=bars)
    if not data.datums:
        raise ValueError(
            f"--sft-from {config.sft_from!r}: no answer to teach (no valid move of a chosen "
            "seat in a finished match of this run's games); check --sft-seats, --sft-results"
        )
    rate = config.sft_learning_rate or config.warmup_learning_rate
    sampled = f", a sample of {len(data.datums):,}" if len(data.datums) < data.answers else ""
    report(
        f"sft: {data.answers:,} answers of {data.seats:,} seats in {data.matches:,} matches "
        f"from {config.sft_from}{sampled}; {config.sft_steps} steps of {config.sft_batch} "
        f"at learning rate {rate:g}"
    )

    def step_done(i: int, batch: list[types.Datum], loss: float) -> None:
        if on_step is not None:
            metrics = {"sft/loss": loss, "sft/examples": float(len(batch))}
            metrics["sft/tokens"] = weighted_tokens(batch)
            on_step(i, metrics)

    losses = await cross_entropy_steps(
        client,
        _batches(data.datums, config.sft_batch, config.seed),
        steps=config.sft_steps,
        learning_rate=rate,
        progress=bars,
        label="sft",
        on_step=step_done,
    )
    seconds = time.perf_counter() - started
    report(f"sft: {len(losses)} steps, loss {losses[0]:.3f} -> {losses[-1]:.3f} in {seconds:.0f} s")
    return losses
