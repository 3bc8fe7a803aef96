"""`arena train --sft-from`: recorded answers taught before RL. A `db:` query gives each
chosen seat's prompts exactly as a learner of the run sees them (the learner's own prompts,
in the full and the compact view) and its moves, weighted on the answer alone; an export
file gives the same datums in the full view; bad sources get one line; a short run logs
`sft/loss` per step, its loss falls, and a resumed run does not teach again."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from tinker import types

from arena.envs import MatchGroupBuilder
from arena.eventbus import default_bus
from arena.events import MatchStarted, TurnPlayed
from arena.match import MatchSettings
from arena.play import play_matches
from arena.policies import RandomMovePolicy
from arena.renderers import ByteTokenizer, RendererConfig, prompt_tokens
from arena.rollouts import do_group_rollout
from arena.seatview import SeatView
from arena.types import TokensWithLogprobs
from arena_cli import main
from games.api import GameMessage
from storage import Recorder, open_database, save_run
from storage.export import ExportQuery, export_rows
from storage.exportwrite import write_jsonl, write_parquet
from tests.conftest import no_hang
from trainer.config import TrainConfig
from trainer.sft import SftData, sft_datums
from trainer.train import Trainer

TTT = "TicTacToe-v0"
OPTIMAL = f"db:game={TTT},player=optimal"


class CompactCells:
    """Answers a random empty cell of tic-tac-toe's compact view (``U:012M4T678``)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.tokenizer = ByteTokenizer()

    async def __call__(self, ob: types.ModelInput, stop: object) -> TokensWithLogprobs:
        text = self.tokenizer.decode(prompt_tokens(ob))
        view = text.rsplit("U:", 1)[-1].split("\n", 1)[0]
        cell = self.rng.choice([c for c in view if c.isdigit()])
        tokens = [*self.tokenizer.encode(cell), ByteTokenizer.EOS]
        return TokensWithLogprobs(tokens=tokens, maybe_logprobs=None)


Example = tuple[tuple[int, ...], tuple[int, ...]]
"""A prompt's tokens and an answer's."""


@dataclasses.dataclass
class Recorded:
    path: str
    turns: dict[str, list[TurnPlayed]]
    """The bots' matches' turns as published, by match id."""
    players: dict[str, tuple[str, ...]]
    """Who played each of those matches."""
    learner: dict[str, list[Example]]
    """By observation format: what the learner was prompted and answered, each move."""


async def _learner_games(fmt: str, policy: object, run: str) -> list[Example]:
    """Four games of a learner (seat 0) against the random bot in the ``fmt`` view, as run
    ``run``: each move's prompt and answer, as the learner's env gave and took them."""
    settings = MatchSettings(TTT, observation_format=fmt)  # type: ignore[arg-type]
    builder = MatchGroupBuilder(
        settings, learner_seats=(0,), opponents=("random",), group_size=4, seed=7, run_id=run
    )
    group = await no_hang(do_group_rollout(builder, policy))  # type: ignore[arg-type]
    return [
        (tuple(prompt_tokens(t.ob)), tuple(t.ac.tokens))
        for trajectory in group.trajectories_G
        for t in trajectory.transitions
    ]


async def _record(path: str) -> Recorded:
    bus = default_bus()  # the learner's envs publish there
    seen = bus.subscribe(max_queue=1_000_000, name="test")
    db = await open_database(path)
    learner: dict[str, list[Example]] = {}
    try:
        async with Recorder(db, bus):
            await play_matches(TTT, ["optimal", "random"], 4, seed=0, bus=bus)
            await play_matches(TTT, ["random", "optimal"], 4, seed=50, bus=bus)
            learner["full"] = await _learner_games("full", RandomMovePolicy(3, TTT), "run-full")
            learner["compact"] = await _learner_games("compact", CompactCells(4), "run-compact")
    finally:
        seen.close()
    await save_run(db, "run-full", name="full")
    await save_run(db, "run-compact", name="compact")
    await db.close()
    recorded = Recorded(path, {}, {}, learner)
    while (event := seen.get_nowait()) is not None:
        if isinstance(event, MatchStarted) and event.run_id is None:
            recorded.players[event.match_id] = event.players
        elif isinstance(event, TurnPlayed) and event.match_id in recorded.players:
            recorded.turns.setdefault(event.match_id, []).append(event)
    return recorded


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    yield asyncio.run(_record(str(tmp_path_factory.mktemp("sft") / "arena.db")))


def config_for(recorded: Recorded, fmt: str = "compact", **more: object) -> TrainConfig:
    """The built-in model's run (bytes renderer) in the ``fmt`` view, reading ``recorded``."""
    return TrainConfig(observation_format=fmt, db=recorded.path, **more)  # type: ignore[arg-type]


def datums_of(source: str, config: TrainConfig) -> SftData:
    return asyncio.run(sft_datums(source, config, RendererConfig()))


def examples(data: SftData) -> list[Example]:
    """Each datum split into its prompt and its answer (the tokens weighted 1), after
    checking that the weights are 0 on the prompt and 1 on the answer."""
    out = []
    for datum in data.datums:
        targets = datum.loss_fn_inputs["target_tokens"].data
        weights = datum.loss_fn_inputs["weights"].data
        tokens = [*datum.model_input.to_ints(), targets[-1]]
        taught = int(sum(weights))
        assert taught >= 2 and weights == [0.0] * (len(weights) - taught) + [1.0] * taught
        out.append((tuple(tokens[: len(tokens) - taught]), tuple(tokens[len(tokens) - taught :])))
    return out


def seen_by(turns: Sequence[TurnPlayed], player_seats: set[int], fmt: str) -> list[Example]:
    """What each of ``player_seats`` was shown at each valid move, rebuilt from the
    published turns (each seat's transcript: what it was shown since its last move, turn
    after turn), rendered in the ``fmt`` view, and the move it answered."""
    renderer = RendererConfig().build()
    transcripts: dict[int, list[GameMessage]] = {}
    views: dict[int, SeatView] = {}
    out = []
    for turn in turns:
        transcript = transcripts.setdefault(turn.seat, [])
        new_from = len(transcript)
        transcript += turn.seen or ()
        if turn.seat not in player_seats or not turn.valid:
            continue
        view = views.setdefault(turn.seat, SeatView(turn.seat, TTT, renderer, fmt))  # type: ignore[arg-type]
        prompt = view.prompt(transcript, new_from, turn.legal_moves)
        out.append((tuple(prompt_tokens(prompt)), tuple(view.answer_tokens(turn.action))))
    return out


@pytest.mark.parametrize("fmt", ["full", "compact"])
def test_a_db_query_teaches_the_learners_own_prompts_and_answers(
    recorded: Recorded, fmt: str
) -> None:
    data = datums_of(f"db:run={fmt},player=learner", config_for(recorded, fmt))
    assert sorted(examples(data)) == sorted(recorded.learner[fmt])
    assert (data.seats, data.matches, data.left_out) == (4, 4, 0)


@pytest.mark.parametrize("fmt", ["full", "compact"])
def test_a_player_query_teaches_that_players_seats_alone(recorded: Recorded, fmt: str) -> None:
    data = datums_of(OPTIMAL, config_for(recorded, fmt))
    expected = []
    for match_id, turns in recorded.turns.items():
        seats = {s for s, name in enumerate(recorded.players[match_id]) if name == "optimal"}
        expected += seen_by(turns, seats, fmt)
    assert sorted(examples(data)) == sorted(expected)
    assert data.answers == len(expected) and (data.seats, data.matches) == (8, 8)
    answers = {answer for _, answer in examples(data)}
    if fmt == "compact":  # a bare cell, then the end of the answer
        assert all(len(a) == 2 and a[-1] == ByteTokenizer.EOS for a in answers)


def test_the_seats_and_results_options_choose_whose_answers(recorded: Recorded) -> None:
    randoms = datums_of(OPTIMAL, config_for(recorded, sft_seats=("bot:random@1",)))
    expected = []
    for match_id, turns in recorded.turns.items():
        seats = {s for s, name in enumerate(recorded.players[match_id]) if name == "random"}
        expected += seen_by(turns, seats, "compact")
    assert sorted(examples(randoms)) == sorted(expected) and randoms.seats == 8
    assert datums_of(OPTIMAL, config_for(recorded, sft_results=("loss",))).answers == 0
    wins = datums_of(OPTIMAL, config_for(recorded, sft_results=("win",)))
    draws = datums_of(OPTIMAL, config_for(recorded, sft_results=("draw",)))
    every = datums_of(OPTIMAL, config_for(recorded))
    assert wins.seats and draws.seats and wins.seats + draws.seats == every.seats == 8
    assert sorted(examples(wins) + examples(draws)) == sorted(examples(every))


@pytest.mark.parametrize("name", ["optimal.jsonl", "optimal.jsonl.gz", "optimal.parquet"])
def test_an_export_file_gives_the_same_datums_in_the_full_view(
    recorded: Recorded, tmp_path: Path, name: str
) -> None:
    async def export() -> None:
        db = await open_database(recorded.path, read_only=True)
        query = ExportQuery(games=(TTT,), players=("optimal",), seat_player=True)
        try:
            write = write_parquet if name.endswith(".parquet") else write_jsonl
            await write(export_rows(db, query), tmp_path / name, shard_rows=3)
        finally:
            await db.close()

    asyncio.run(export())
    config = config_for(recorded, "full")
    from_db = datums_of(OPTIMAL, config)
    for source in (str(tmp_path / name), str(tmp_path / name.replace("optimal", "optimal-*"))):
        from_file = datums_of(source, config)  # the shards of the name, or a pattern
        assert examples(from_file) == examples(from_db)
        assert (from_file.seats, from_file.matches) == (8, 8)


@pytest.mark.parametrize(
    ("source", "fmt", "says"),
    [
        ("db:gme=TicTacToe-v0", "compact", "unknown key 'gme'"),
        ("db:limit=many", "compact", "limit 'many' is not a whole number"),
        ("db:game=ConnectFour-v0", "compact", "ConnectFour-v0 is not a game of this run"),
        ("db:", "compact", "an empty query"),
        ("db:status=over", "compact", "unknown status 'over'"),
        ("nowhere.parquet", "full", "there is no file 'nowhere.parquet'"),
        ("games.csv", "full", "cannot tell the format of 'games.csv'"),
        ("{file}", "compact", "an export file holds the full chat"),
    ],
)
def test_a_bad_source_is_one_line_saying_what_to_do(
    recorded: Recorded, tmp_path: Path, source: str, fmt: str, says: str
) -> None:
    file = tmp_path / "rows.jsonl"
    file.write_text("")
    with pytest.raises(ValueError) as caught:
        config_for(recorded, fmt, sft_from=source.format(file=file)).validate()
    message = str(caught.value)
    assert message.startswith("--sft-from ") and says in message and "\n" not in message


async def test_a_source_that_names_no_stored_player_is_refused_before_the_run(
    recorded: Recorded, tmp_path: Path
) -> None:
    source = f"db:game={TTT},player=nobody"
    with pytest.raises(ValueError) as caught:
        await sft_datums(source, config_for(recorded), RendererConfig())
    assert str(caught.value).startswith(f"--sft-from {source!r}: no stored player")
    run = tmp_path / "run"
    config = config_for(recorded, sft_from=source, log_dir=str(run), eval_every=0)
    with pytest.raises(ValueError, match=r"^--sft-from .*: no stored player .*nobody"):
        await Trainer(config).run()
    assert not (run / "config.json").exists()  # nothing was set up: the same run may start


def test_a_file_that_is_not_an_export_fails_in_one_line(recorded: Recorded) -> None:
    config = config_for(recorded, "full")
    with pytest.raises(ValueError, match=r"^--sft-from .*is not an exported row"):
        bad = Path(recorded.path).with_name("bad.jsonl")
        bad.write_text('{"messages": []}\n')
        datums_of(str(bad), config)


def test_arena_train_refuses_a_bad_source_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["train", "--sft-from", "db:gme=x", "--log-dir", str(tmp_path / "r"), "--no-serve"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2
    assert err[-1].startswith("arena train: error: --sft-from 'db:gme=x': unknown key 'gme'")
    with pytest.raises(ValueError, match="choose what --sft-from teaches"):
        TrainConfig(sft_seats=("optimal",)).validate()


def test_a_query_is_read_from_its_text_with_the_export_commands_keys(recorded: Recorded) -> None:
    query = ExportQuery.parse(
        "game=TicTacToe-v0, game=Kuhn-v0,player=optimal,since=2025-01-31,status=truncated,"
        "status=finished,result=win,limit=5"
    )
    assert query == ExportQuery(
        games=(TTT, "Kuhn-v0"),
        players=("optimal",),
        since=1738281600.0,
        statuses=("truncated", "finished"),
        results=("win",),
        limit=5,
    )
    assert ExportQuery.parse("player=optimal", games=(TTT,)).games == (TTT,)
    first = datums_of(f"{OPTIMAL},limit=3", config_for(recorded))
    assert (first.seats, first.matches) == (3, 3)


def test_sft_skips_the_warmup_unless_it_is_asked_for() -> None:
    assert TrainConfig().resolved_warmup_steps() == 1200
    assert TrainConfig(sft_from=OPTIMAL).resolved_warmup_steps() == 0
    assert TrainConfig(sft_from=OPTIMAL, warmup_steps=30).resolved_warmup_steps() == 30


def read_metrics(run: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


async def test_a_short_run_learns_the_answers_logs_each_step_and_does_not_redo_them(
    recorded: Recorded, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    settings = {
        "log_dir": str(run),
        "num_batches": 1,
        "batch_size": 2,
        "group_size": 2,
        "eval_every": 0,
        "save_every": 1,
        "db": recorded.path,
        "sft_from": OPTIMAL,
        "sft_steps": 3,
        "sft_batch": 16,
        "sft_learning_rate": 3e-3,
        "warmup_steps": 2,  # given: the warm-up runs first
        "warmup_games": 4,
        "run_name": "sft",
    }
    lines: list[str] = []
    await Trainer(TrainConfig(**settings), report=lines.append).run()  # type: ignore[arg-type]
    rows = read_metrics(run)
    steps = [r["step"] for r in rows]
    assert steps == sorted(steps) and steps[:4] == [-4, -3, -2, -1]
    assert "warmup/loss_final" in rows[0]
    sft = [r for r in rows if "sft/loss" in r]
    assert [r["step"] for r in sft] == [-3, -2, -1]
    assert all(r["sft/examples"] == 16 and r["sft/tokens"] == 32 for r in sft)  # "4" + end
    assert sft[-1]["sft/loss"] < sft[0]["sft/loss"]
    assert any(
        line.startswith("sft: ") and " answers of 8 seats in 8 matches" in line for line in lines
    )
    await Trainer(
        TrainConfig(**{**settings, "num_batches": 2}),
        report=lines.append,  # type: ignore[arg-type]
    ).run(resume=True)
    again = read_metrics(run)
    assert [r["step"] for r in again if "sft/loss" in r] == [-3, -2, -1]
    assert any(r["step"] == 1 and "time/total" in r for r in again)
