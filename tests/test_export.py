"""`arena export`: stored matches as a dataset, each seat's row exactly what it saw and
answered; the filters select what they say; JSON Lines and Parquet load back through
Hugging Face `datasets` as the same rows; bad input gets one line and exit code 2, an
empty selection exit code 1 and no file."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest

from arena.eventbus import EventBus
from arena.eventformat import format_messages
from arena.events import MatchAborted, MatchEnded, MatchStarted, TurnPlayed
from arena.identity import policy_key
from arena.play import play_matches
from arena_cli import main
from games.api import MessageKind
from games.outcome import result_of
from storage import Recorder, open_database, save_run
from storage.export import BadQuery, ExportQuery, export_rows
from storage.exportschema import FIELDS, ExportRow, features, row_dict
from storage.exportwrite import write_jsonl, write_parquet

TTT = "TicTacToe-v0"
OLD = 86_400.0 * 365
"""Start time of the hand-made matches: 1971-01-01 (UTC), before every played one."""


@dataclasses.dataclass
class Recorded:
    path: str
    turns: dict[str, list[TurnPlayed]]
    """The played matches' turns as the coordinator published them, by match id."""
    started: dict[str, MatchStarted]
    ended: dict[str, MatchEnded]


def _hand_made(bus: EventBus) -> None:
    """Matches stored as text only (no messages), with an invalid move, a run, an aborted
    one, and three that start at the same instant."""
    when = OLD
    for event in (
        MatchStarted(
            "feedface0001", "Counting-v0", 0, 2, ("learner", "random"), time=when, run_id="run-1"
        ),
        TurnPlayed("feedface0001", 0, 0, "Say [0].", "[7]", False, reason="wrong", time=when),
        TurnPlayed("feedface0001", 1, 0, "Try again: say [0].", "[0]", True, time=when),
        TurnPlayed("feedface0001", 2, 1, "Say [1].", "[1]", True, time=when),
        MatchEnded("feedface0001", "finished", (1.0, -1.0), (1, 0), (), "", 3, time=when + 1),
        MatchStarted("abort0000001", "Counting-v0", 0, 2, ("random", "random"), time=when),
        TurnPlayed("abort0000001", 0, 0, "Say [0].", "[0]", True, time=when),
        MatchAborted("abort0000001", "a seat failed", 1, time=when + 1),
    ):
        bus.publish(event)
    for n in (2, 0, 1):  # the same start time: pages break the tie by id, not by arrival
        match_id = f"tie{n:09d}"
        bus.publish(
            MatchStarted(match_id, "Counting-v0", 0, 2, ("random", "random"), time=when + 2)
        )
        bus.publish(TurnPlayed(match_id, 0, 1, "Say [0].", "[0]", True, time=when + 2))
        bus.publish(MatchEnded(match_id, "truncated", (0.0, 0.0), (0, 0), (), "", 1))


async def _record(path: str) -> Recorded:
    bus = EventBus()
    seen = bus.subscribe(max_queue=1_000_000, name="test")
    db = await open_database(path)
    async with Recorder(db, bus):
        await play_matches(TTT, ["random", "optimal"], 4, bus=bus)
        await play_matches(TTT, ["random", "random"], 3, seed=10, bus=bus)
        await play_matches("LowestUnique-v0", ["random"] * 3, 2, bus=bus)
        _hand_made(bus)
    await save_run(db, "run-1", name="alpha")
    await db.close()
    recorded = Recorded(path, {}, {}, {})
    while (event := seen.get_nowait()) is not None:
        if isinstance(event, TurnPlayed) and event.messages is not None:
            recorded.turns.setdefault(event.match_id, []).append(event)
        elif isinstance(event, MatchStarted):
            recorded.started[event.match_id] = event
        elif isinstance(event, MatchEnded):
            recorded.ended[event.match_id] = event
    return recorded


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    path = str(tmp_path_factory.mktemp("export") / "arena.db")
    yield asyncio.run(_record(path))


def rows_of(path: str, query: ExportQuery, page_matches: int = 500) -> list[ExportRow]:
    async def go() -> list[ExportRow]:
        db = await open_database(path, read_only=True)
        try:
            return [r async for r in export_rows(db, query, page_matches=page_matches)]
        finally:
            await db.close()

    return asyncio.run(go())


def expected_chat(turns: list[TurnPlayed], seat: int) -> list[dict[str, str]]:
    """What ``seat`` was shown before each of its moves (less the echo of its own previous
    move), then the move as it was sent; the rules leading its first observation as the
    system message."""
    chat: list[dict[str, str]] = []
    for event in (t for t in turns if t.seat == seat):
        shown = [
            m for m in event.seen or () if not (m.sender == seat and m.kind is MessageKind.ACTION)
        ]
        if not chat:
            rules = [m for m in shown if m.kind is MessageKind.PROMPT]
            assert shown[: len(rules)] == rules
            if rules:
                chat.append({"role": "system", "content": format_messages(rules)})
                shown = shown[len(rules) :]
        if shown:
            chat.append({"role": "user", "content": format_messages(shown)})
        chat.append({"role": "assistant", "content": event.action})
    return chat


@pytest.mark.parametrize("game", [TTT, "LowestUnique-v0"])
def test_each_row_is_what_its_seat_was_shown_and_answered(recorded: Recorded, game: str) -> None:
    rows = rows_of(recorded.path, ExportQuery(games=(game,)))
    by_match = {m: e for m, e in recorded.started.items() if e.game_id == game}
    assert {r.match_id for r in rows} == set(by_match)
    for row in rows:
        turns = recorded.turns[row.match_id]
        started, ended = recorded.started[row.match_id], recorded.ended[row.match_id]
        mine = [t for t in turns if t.seat == row.seat]
        assert row.messages == expected_chat(turns, row.seat)
        first = [m["content"] for m in row.messages if m["role"] != "assistant"][:2]
        if row.messages[0]["role"] == "system":  # the rules and what followed: one observation
            assert "\n".join(first) == mine[0].observation
        assert row.legal_moves == [
            None if t.legal_moves is None else list(t.legal_moves) for t in mine
        ]
        assert row.invalid == [not t.valid for t in mine]
        assert row.reward == ended.rewards[row.seat]
        assert row.result == str(result_of(row.seat, ended.rewards))
        assert row.players == list(started.players) and row.num_players == started.num_players
        assert row.player == started.players[row.seat]
        assert row.policy == policy_key(row.player, "bot") == f"bot:{row.player}@1"
        assert (row.status, row.game_id, row.run_id, row.rated) == ("finished", game, None, True)
        assert row.started_at == started.time and row.ended_at == ended.time
    if game == TTT:  # the rules come as the system message, the legal moves are listed
        assert all(r.messages[0]["role"] == "system" for r in rows)
        assert all(moves is not None for r in rows for moves in r.legal_moves)
    assert len(rows) == sum(len({t.seat for t in recorded.turns[m]}) for m in by_match)


def test_a_turn_stored_as_text_gives_its_text_and_every_seat_row_its_fields(
    recorded: Recorded,
) -> None:
    rows = rows_of(recorded.path, ExportQuery(games=("Counting-v0",), run="alpha"))
    assert [(r.match_id, r.seat) for r in rows] == [("feedface0001", 0), ("feedface0001", 1)]
    learner, other = rows
    assert learner.messages == [
        {"role": "user", "content": "Say [0]."},
        {"role": "assistant", "content": "[7]"},
        {"role": "user", "content": "Try again: say [0]."},
        {"role": "assistant", "content": "[0]"},
    ]
    assert learner.invalid == [True, False] and learner.legal_moves == [None, None]
    assert (learner.result, learner.reward, other.result) == ("win", 1.0, "loss")
    assert (learner.policy, other.policy) == ("learner:learner", "bot:random@1")
    assert learner.run_id == "run-1" and learner.started_at == OLD


def test_the_filters_select_what_they_say(recorded: Recorded) -> None:
    ttt = [m for m, e in recorded.started.items() if e.game_id == TTT]
    with_optimal = {m for m in ttt if "optimal" in recorded.started[m].players}
    rows = rows_of(recorded.path, ExportQuery(games=(TTT,), players=("optimal",)))
    assert {r.match_id for r in rows} == with_optimal and len(with_optimal) == 4
    assert {r.player for r in rows} == {"random", "optimal"}
    seats = rows_of(
        recorded.path, ExportQuery(games=(TTT,), players=("bot:optimal@1",), seat_player=True)
    )
    assert {r.match_id for r in seats} == with_optimal and {r.player for r in seats} == {"optimal"}
    wins = rows_of(recorded.path, ExportQuery(games=(TTT,), results=("win", "draw")))
    assert wins and {r.result for r in wins} <= {"win", "draw"}
    assert len(rows_of(recorded.path, ExportQuery(games=(TTT,), limit=2))) == 4  # 2 matches
    old = rows_of(recorded.path, ExportQuery(games=(TTT, "Counting-v0"), until=OLD + 1))
    assert {r.match_id for r in old} == {"feedface0001"}
    aborted = rows_of(recorded.path, ExportQuery(games=("Counting-v0",), statuses=("aborted",)))
    assert [(r.match_id, r.seat, r.reward, r.result) for r in aborted] == [
        ("abort0000001", 0, None, None)  # seat 1 never moved: no row
    ]
    new = rows_of(recorded.path, ExportQuery(games=(TTT, "Counting-v0"), since=OLD + 10))
    assert {r.match_id for r in new} == set(ttt)


def test_pages_read_every_match_once_in_start_order_ties_by_id(recorded: Recorded) -> None:
    query = ExportQuery(games=("Counting-v0", TTT), statuses=("finished", "truncated"))
    whole = rows_of(recorded.path, query)
    assert rows_of(recorded.path, query, page_matches=1) == whole
    matches = list(dict.fromkeys((r.game_id, r.match_id) for r in whole))
    assert [m for g, m in matches if g == "Counting-v0"] == [
        "feedface0001",
        "tie000000000",
        "tie000000001",
        "tie000000002",
    ]
    assert [g for g, _ in matches] == ["Counting-v0"] * 4 + [TTT] * 7
    starts = [r.started_at for r in whole if r.game_id == TTT]
    assert starts == sorted(starts)


def test_bad_queries_are_refused_before_anything_is_read(recorded: Recorded) -> None:
    for query, words in (
        (ExportQuery(games=("Nope-v9",)), "unknown game 'Nope-v9'"),
        (ExportQuery(games=(TTT,), players=("nobody",)), "no stored player"),
        (ExportQuery(games=(TTT,), run="nope"), "no stored run"),
        (ExportQuery(games=(TTT,), statuses=("live",)), "unknown status 'live'"),
        (ExportQuery(games=(TTT,), results=("won",)), "unknown result 'won'"),
        (ExportQuery(games=(TTT,), seat_player=True), "needs a player"),
        (ExportQuery(games=()), "at least one game"),
    ):
        with pytest.raises(BadQuery, match=words):
            rows_of(recorded.path, query)


def load(kind: str, files: list[Path], cache: Path) -> datasets.Dataset:
    extra = {"features": features()} if kind == "json" else {}
    loaded = datasets.load_dataset(
        kind, data_files=[str(f) for f in files], split="train", cache_dir=str(cache), **extra
    )
    assert isinstance(loaded, datasets.Dataset)
    return loaded


def test_both_formats_load_in_datasets_as_the_same_rows(recorded: Recorded, tmp_path: Path) -> None:
    query = ExportQuery(games=(TTT, "Counting-v0"), statuses=("finished", "aborted"))
    rows = rows_of(recorded.path, query)
    jsonl, gz, parquet = tmp_path / "d.jsonl", tmp_path / "d.jsonl.gz", tmp_path / "d.parquet"
    written = [
        asyncio.run(write_jsonl(rows, jsonl)),
        asyncio.run(write_jsonl(rows, gz)),
        asyncio.run(write_parquet(rows, parquet, row_group_rows=4)),
    ]
    assert [w.rows for w in written] == [len(rows)] * 3
    assert pq.ParquetFile(parquet).num_row_groups == -(-len(rows) // 4)
    assert list(json.loads(jsonl.read_text().splitlines()[0])) == list(FIELDS)
    want = [row_dict(r) for r in rows]
    for kind, path in (("json", jsonl), ("json", gz), ("parquet", parquet)):
        loaded = load(kind, [path], tmp_path / "cache")
        assert loaded.features == features()
        assert loaded.to_list() == want


def test_shards_are_named_as_datasets_names_them(recorded: Recorded, tmp_path: Path) -> None:
    rows = rows_of(recorded.path, ExportQuery(games=(TTT,)))
    for suffix, kind in ((".parquet", "parquet"), (".jsonl", "json")):
        written = asyncio.run(
            (write_parquet if kind == "parquet" else write_jsonl)(
                rows, tmp_path / f"train{suffix}", shard_rows=5
            )
        )
        count = -(-len(rows) // 5)
        assert [p.name for p in written.paths] == [
            f"train-{i:05d}-of-{count:05d}{suffix}" for i in range(count)
        ]
        loaded = load(kind, list(written.paths), tmp_path / "cache")
        assert loaded.to_list() == [row_dict(r) for r in rows]
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == sorted(
        [f"train-{i:05d}-of-{count:05d}{s}" for i in range(count) for s in (".parquet", ".jsonl")]
    )


def test_the_command_writes_the_file_and_says_what_it_wrote(
    recorded: Recorded, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ttt.parquet"
    code = main(
        [
            "export",
            "--db",
            recorded.path,
            "--game",
            TTT,
            "--player",
            "optimal",
            "--seat-player",
            "--result",
            "win",
            "--result",
            "draw",
            str(out),
        ]
    )
    assert code == 0
    printed, progress = capsys.readouterr()
    table = pq.read_table(out)
    assert printed.startswith(f"wrote {table.num_rows} rows") and str(out) in printed
    assert "turns" in progress  # the progress bar, on stderr
    assert set(table.column("player").to_pylist()) == {"optimal"}
    assert set(table.column("result").to_pylist()) <= {"win", "draw"}
    assert [p.name for p in tmp_path.iterdir()] == ["ttt.parquet"]  # no temporary file left


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--game", "TicTacToe-v9"], "unknown game 'TicTacToe-v9'. Did you mean TicTacToe-v0"),
        (["--game", TTT, "--since", "2025-02-30"], "--since '2025-02-30' is not an ISO date"),
        (["--game", TTT, "--player", "nobody"], "no stored player is named or keyed 'nobody'"),
        (["--game", TTT, "--status", "live"], "unknown status 'live'"),
        (["--game", TTT, "--limit", "0"], "the limit must be 1 or more"),
        (["--game", TTT, "--shard-rows", "0"], "--shard-rows must be 1 or more"),
        (["--game", TTT, "--until", "2020-01-01", "--since", "2021-01-01"], "must come before"),
    ],
)
def test_bad_input_gets_one_line_and_exit_code_2(
    recorded: Recorded,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    words: str,
) -> None:
    out = tmp_path / "d.jsonl"
    assert main(["export", "--db", recorded.path, "--quiet", *args, str(out)]) == 2
    printed, err = capsys.readouterr()
    assert printed == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith("arena export: error: ") and words in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("output", "words"),
    [
        ("d.csv", "cannot tell the format of"),
        ("d.parquet.bak", "name a file ending in .jsonl, .jsonl.gz, .parquet"),
        ("missing/d.jsonl", "there is no folder"),
    ],
)
def test_an_output_without_a_format_or_folder_is_refused(
    recorded: Recorded,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    output: str,
    words: str,
) -> None:
    code = main(["export", "--db", recorded.path, "--game", TTT, str(tmp_path / output)])
    assert code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("arena export: error: ")
    assert words in err and list(tmp_path.iterdir()) == []


def test_an_empty_selection_exits_1_and_leaves_no_file(
    recorded: Recorded, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for args in (["--game", "ConnectFour-v0"], ["--game", TTT, "--until", "1970-06-01"]):
        assert main(["export", "--db", recorded.path, *args, str(tmp_path / "d.parquet")]) == 1
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err.startswith("arena export: no stored match passes these filters")
        assert list(tmp_path.iterdir()) == []


def test_a_missing_database_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "none.db")
    assert main(["export", "--db", db, "--game", TTT, str(tmp_path / "d.jsonl")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("arena export: error: ")
    assert list(tmp_path.iterdir()) == []


def test_the_benchmark_stores_the_turns_it_says_and_exports_them_all(tmp_path: Path) -> None:
    from bench.export import build, export_in_child, stored_turns

    db = str(tmp_path / "bench.db")
    built = asyncio.run(build(db, 300, 10))
    assert built["played_matches"] == 10 and built["stored_turns"] >= 300
    assert asyncio.run(stored_turns(db)) == built["stored_turns"]
    figures = export_in_child(db, str(tmp_path / "out.parquet"))
    assert figures["turns"] == built["stored_turns"]
    assert (
        figures["matches"]
        == built["stored_matches"]
        == pq.read_metadata(tmp_path / "out.parquet").num_rows / 2
    )
    assert figures["peak_mb"] >= figures["base_mb"] > 0
