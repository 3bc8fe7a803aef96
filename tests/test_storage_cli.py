"""The storage commands: `arena matches`, `arena show`, `arena results`, and their bad input.

Each bad input (unwritable, corrupt or locked database, missing driver, unknown match id,
another schema version) gives exit code 2 and one line on stderr, never a traceback.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import update

from arena.eventbus import EventBus
from arena.events import MatchEnded, MatchStarted, TurnPlayed
from arena.play import play_matches
from storage import Recorder, open_database
from storage.cli import matches_command, results_command, show_command
from storage.errors import DatabaseUnavailable
from storage.models import SCHEMA_VERSION, SchemaMeta
from tests.conftest import read_only_copy, read_only_file, small_disk


async def _record(path: str) -> None:
    bus = EventBus()
    db = await open_database(path)
    async with Recorder(db, bus):
        await play_matches("TicTacToe-v0", ["random", "optimal"], 3, bus=bus)
        await play_matches("LowestUnique-v0", ["random"] * 3, 2, bus=bus)
        for event in (
            MatchStarted("feedface0001", "Counting-v0", 0, 2, ("learner", "random")),
            TurnPlayed("feedface0001", 0, 0, "Say [0].", "[7]", False, reason="wrong number"),
            TurnPlayed("feedface0001", 1, 0, "Try again: say [0].", "[0]", True),
            TurnPlayed("feedface0001", 2, 1, "Say [1].", "[1]", True),
            MatchEnded("feedface0001", "finished", (1.0, -1.0), (1, 0), (), "seat 0 won", 3),
        ):
            bus.publish(event)
        bus.publish(MatchStarted("11ve0000aa", "Poker-v0", 0, 2, ("random", "random")))
        bus.publish(
            TurnPlayed("11ve0000aa", 0, 0, "Your card: ace", "[raise]", True, public_state="pot 2")
        )
    await db.close()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = str(tmp_path_factory.mktemp("cli") / "arena.db")
    asyncio.run(_record(path))
    yield path


def one_error_line(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("arena: error: ")
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0]
    return lines[0]


def test_matches_prints_a_table_newest_first(
    recorded: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert matches_command(recorded, None, None, None, None, 50, 0, False) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["ID", "GAME", "STATUS"]
    assert len(lines) == 1 + 7
    assert lines[1].startswith("11ve0000aa") and "live" in lines[1]
    assert lines[2].startswith("feedface0001") and "learner (+1)" in lines[2]
    assert sum("TicTacToe-v0" in line for line in lines) == 3


def test_matches_filters_and_prints_json(recorded: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert matches_command(recorded, "LowestUnique-v0", None, None, "finished", 1, 1, True) == 0
    page = json.loads(capsys.readouterr().out)
    assert len(page) == 1
    assert page[0]["game_id"] == "LowestUnique-v0" and len(page[0]["seats"]) == 3
    assert matches_command(recorded, None, None, "optimal", None, 50, 0, True) == 0
    assert len(json.loads(capsys.readouterr().out)) == 3
    assert matches_command(recorded, "Nope-v0", None, None, None, 50, 0, False) == 0
    assert "no matches" in capsys.readouterr().out


def test_show_prints_what_each_seat_saw_then_its_move(
    recorded: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert show_command(recorded, "feedface", False) == 0  # an 8-character prefix
    out = capsys.readouterr().out
    assert "match feedface0001  Counting-v0" in out
    saw, moved = out.index("Say [0]."), out.index("> [7]")
    assert saw < moved < out.index("Try again") < out.index("> [0]") < out.index("> [1]")
    assert "> [7]   <- INVALID: wrong number" in out
    assert "seat 0 learner: +1, 1 invalid" in out and "seat 1 random: -1" in out


def test_show_hides_what_seats_saw_while_the_match_is_live(
    recorded: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert show_command(recorded, "11ve0000", False) == 0
    out = capsys.readouterr().out
    assert "ace" not in out and "raise" not in out
    assert "pot 2" in out and "shown once the match ends" in out
    assert show_command(recorded, "11ve0000", True) == 0
    out = capsys.readouterr().out
    assert "ace" not in out and "raise" not in out and "pot 2" in out


def test_show_json_has_every_turn(recorded: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert show_command(recorded, "feedface0001", True) == 0
    detail = json.loads(capsys.readouterr().out)
    assert [t["action"] for t in detail["turns"]] == ["[7]", "[0]", "[1]"]
    assert detail["match"]["status"] == "finished"


def test_results_per_policy(recorded: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert results_command(recorded, "TicTacToe-v0", None, True) == 0
    results = {r["policy"]: r for r in json.loads(capsys.readouterr().out)}
    assert results["optimal"]["games"] == 3 and results["optimal"]["losses"] == 0
    assert results_command(recorded, "Counting-v0", None, False) == 0
    table = capsys.readouterr().out
    assert "learner" in table and "0.500" in table  # 1 invalid move in 2


# -- bad input -----------------------------------------------------------------------------
def test_unknown_match_id(recorded: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert show_command(recorded, "0123456789abcdef", False) == 2
    one_error_line(capsys, "no stored match", "0123456789abcdef", "arena matches")


def test_bad_filters(recorded: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert matches_command(recorded, None, None, None, "done", 50, 0, False) == 2
    one_error_line(capsys, "unknown status 'done'", "finished")
    assert matches_command(recorded, None, None, None, None, 0, 0, False) == 2
    one_error_line(capsys, "limit")


def test_missing_or_unwritable_database_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert matches_command(str(tmp_path / "none.db"), None, None, None, None, 50, 0, False) == 2
    one_error_line(capsys, "no database at", "none.db")
    (tmp_path / "file").write_text("not a folder")
    beneath_a_file = str(tmp_path / "file" / "arena.db")
    assert show_command(beneath_a_file, "feedface", False) == 2
    one_error_line(capsys, "file/arena.db")
    with pytest.raises(DatabaseUnavailable, match="folder"):  # recording there
        asyncio.run(open_database(beneath_a_file))


def test_corrupt_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "corrupt.db"
    path.write_bytes(b"this is not SQLite " * 500)
    assert matches_command(str(path), None, None, None, None, 50, 0, False) == 2
    one_error_line(capsys, "not a readable database", "corrupt.db")


def test_database_locked_by_another_program(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(tmp_path / "locked.db")
    asyncio.run(_record(path))
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("PRAGMA locking_mode = EXCLUSIVE")
        other.execute("BEGIN EXCLUSIVE")
        other.execute("DELETE FROM turn_blocks WHERE match_id = 'feedface0001'")
        code = matches_command(path, None, None, None, None, 50, 0, False, busy_timeout_s=0.2)
        assert code == 2
        one_error_line(capsys, "locked by another program", "0.2 s")
    finally:
        other.close()


def test_url_of_a_driver_that_is_not_installed(capsys: pytest.CaptureFixture[str]) -> None:
    if importlib.util.find_spec("asyncpg") is not None:
        pytest.skip("asyncpg is installed here")
    url = "postgresql+asyncpg://arena@localhost/arena"
    assert matches_command(url, None, None, None, None, 50, 0, False) == 2
    one_error_line(capsys, "not installed", "pip install asyncpg")
    assert show_command("mysql://arena@localhost/arena", "feedface", False) == 2
    one_error_line(capsys, "async driver")


def test_database_of_another_schema_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(tmp_path / "future.db")

    async def make() -> None:
        db = await open_database(path)
        async with db.writes.begin() as session:
            await session.execute(update(SchemaMeta).values(value="99"))
        await db.close()

    asyncio.run(make())
    assert matches_command(path, None, None, None, None, 50, 0, False) == 2
    one_error_line(capsys, "schema version 99", f"version {SCHEMA_VERSION}")


# -- nothing acknowledged is lost: read-only, full and damaged databases ------------------------
def _play(db: Path, games: int = 50) -> int:
    from arena_cli import main

    args = ["play", "--game", "TicTacToe-v0", "--games", str(games), "--quiet", "--db", str(db)]
    try:
        return main(args)
    except SystemExit as exc:
        return int(exc.code or 0)


def test_play_into_a_read_only_database_fails_at_once_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "arena.db"
    asyncio.run(_record(str(path)))
    with read_only_file(path):
        assert _play(path) == 2
    out, err = capsys.readouterr()
    assert "finished" not in out  # nothing is played that could not be stored
    assert err.count("\n") == 1 and "read-only" in err and "Traceback" not in err


def test_readers_work_on_a_database_in_a_read_only_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "arena.db"
    asyncio.run(_record(str(path)))
    with read_only_copy([path], tmp_path / "ro") as folder:
        copy = str(folder / "arena.db")
        assert matches_command(copy, None, None, None, None, 50, 0, False) == 0
        assert "feedface0001" in capsys.readouterr().out
        assert show_command(copy, "feedface0001", False) == 0
        assert "seat 0 won" in capsys.readouterr().out
        assert results_command(copy, None, None, False) == 0
        assert "learner" in capsys.readouterr().out
        assert sorted(p.name for p in folder.iterdir()) == ["arena.db"]  # nothing written


def test_play_fails_with_one_line_when_the_disk_fills_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with small_disk(tmp_path / "disk", "1m") as disk:
        code = _play(disk / "arena.db", games=3000)
    out, err = capsys.readouterr()
    assert code == 1
    assert "finished 3000" in out  # the games were played...
    last = err.strip().splitlines()[-1]  # ...and the one line says they were not all stored
    assert last.startswith("arena play: error: ") and "could not be stored" in last
    assert "disk is full" in last and "of 3000 played" in last


def test_a_damaged_database_is_refused_not_appended_to(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "arena.db"
    assert _play(path, games=200) == 0
    page = 4096
    with path.open("r+b") as f:  # a b-tree page in the middle of the file, overwritten
        f.seek(page * (path.stat().st_size // page // 2))
        f.write(b"\xff" * page)
    capsys.readouterr()
    before = path.read_bytes()
    assert _play(path) == 2
    out, err = capsys.readouterr()
    assert "finished" not in out and err.count("\n") == 1
    assert "not a readable database" in err or "damaged" in err
    assert path.read_bytes() == before
