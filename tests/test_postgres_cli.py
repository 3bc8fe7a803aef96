"""The `arena` command on PostgreSQL: play, read back and serve through a
``postgresql+asyncpg://`` URL, each command its own process, as a user runs them; and a bad
URL (no server there, no such database, a wrong password) gives one line with the password
masked and a nonzero exit, never a traceback.

The server is the session's private one (``tests.conftest.postgres_server``); where none can
start, these tests are skipped and the run's summary says why.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import HANG_GUARD_S, new_postgres_database
from tools.pgserver import PostgresServer, free_port

ROOT = Path(__file__).resolve().parents[1]
PASSWORD = "hunter2-secret"
"""A password that must never be printed."""


def arena(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``arena ARGS`` in a new process (this checkout's code), in ``cwd``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("ARENA_DB", None)
    return subprocess.run(
        [sys.executable, "-m", "arena_cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=env,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    """The command's stdout, once it is known to have succeeded."""
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


def test_play_into_postgresql_then_matches_show_results_and_serve_read_it_back(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    url = new_postgres_database(postgres_server)
    play = ["play", "--game", "TicTacToe-v0", "--players", "random,optimal", "--games", "3"]
    summary = json.loads(ok(arena(*play, "--quiet", "--json", "--db", url, cwd=tmp_path)))
    assert summary["finished"] == 3 and summary["seats"][1]["losses"] == 0

    listed = json.loads(ok(arena("matches", "--json", "--db", url, cwd=tmp_path)))
    assert len(listed) == 3 and {m["status"] for m in listed} == {"finished"}
    assert all(m["num_turns"] > 0 and len(m["seats"]) == 2 for m in listed)
    ids = {m["id"] for m in listed}

    first = listed[0]
    shown = ok(arena("show", first["id"][:8], "--db", url, cwd=tmp_path))  # by prefix
    assert f"match {first['id']}" in shown and "TicTacToe-v0" in shown
    assert "seat 0 random: -1" in shown and "seat 1 optimal: +1" in shown
    detail = json.loads(ok(arena("show", first["id"], "--json", "--db", url, cwd=tmp_path)))
    assert len(detail["turns"]) == first["num_turns"]

    results = json.loads(ok(arena("results", "--json", "--db", url, cwd=tmp_path)))
    by_policy = {r["policy"]: r for r in results}
    assert by_policy["optimal"]["games"] == 3 and by_policy["optimal"]["wins"] == 3
    assert by_policy["random"]["losses"] == 3

    served = _serve_and_get(url, tmp_path, "api/matches")
    assert {m["id"] for m in served["matches"]} == ids


def _serve_and_get(url: str, cwd: Path, route: str) -> dict[str, object]:
    """Start ``arena serve --db URL`` on a free loopback port, GET ``route`` from it,
    stop it with Ctrl-C (it must exit 0), and return the JSON it answered."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("ARENA_DB", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "arena_cli", "serve", "--port", "0", "--db", url],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline()
        if not line.startswith("Arena is served at http://127.0.0.1:"):
            proc.kill()
            raise AssertionError(f"arena serve did not start: {line!r} {proc.stderr.read()}")
        base = line.split()[4]
        with urllib.request.urlopen(base + route, timeout=HANG_GUARD_S) as response:
            assert response.status == 200
            answer = json.loads(response.read())
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=HANG_GUARD_S) == 0, proc.stderr.read()
        assert isinstance(answer, dict)
        return answer
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- bad URLs ------------------------------------------------------------------------------------
_users = itertools.count()
PLAY = ("play", "--game", "TicTacToe-v0", "--games", "2", "--quiet")


@pytest.mark.parametrize(
    ("problem", "command", "needle"),
    [
        pytest.param(
            "no server", ("matches",), "cannot reach the PostgreSQL server", id="no-server-matches"
        ),
        pytest.param("no server", PLAY, "cannot reach the PostgreSQL server", id="no-server-play"),
        pytest.param(
            "no server",
            ("leaderboard", "--game", "TicTacToe-v0"),
            "cannot reach the PostgreSQL server",
            id="no-server-leaderboard",
        ),
        pytest.param(
            "no such database",
            ("results",),
            "the server has no database 'arena_missing'",
            id="no-database-results",
        ),
        pytest.param(
            "no such database",
            ("serve", "--port", "0"),
            "the server has no database 'arena_missing'",
            id="no-database-serve",
        ),
        pytest.param(
            "wrong password", ("show", "feedface"), "cannot log in", id="wrong-password-show"
        ),
        pytest.param("wrong password", PLAY, "cannot log in", id="wrong-password-play"),
    ],
)
def test_a_bad_postgresql_url_gets_one_line_with_the_password_masked(
    problem: str,
    command: tuple[str, ...],
    needle: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    if problem == "no server":  # a free port: nothing listens there, no server is needed
        url = f"postgresql+asyncpg://arena:{PASSWORD}@127.0.0.1:{free_port()}/arena"
    else:
        server: PostgresServer = request.getfixturevalue("postgres_server")
        if problem == "no such database":
            url = server.url("arena_missing", password=PASSWORD)
        else:
            user = f"login_{next(_users)}"
            server.create_password_user(user, "the-right-one")
            url = server.url(user=user, password=PASSWORD)
    result = arena(*command, "--db", url, cwd=tmp_path)
    assert result.returncode == 2  # bad input: nothing was started
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert re.match(r"arena( \w+)?: error: ", lines[0]), lines[0]
    assert needle in lines[0]
    assert PASSWORD not in result.stderr + result.stdout and ":***@" in lines[0]
    assert "finished" not in result.stdout  # nothing was played that could not be stored
    assert list(tmp_path.iterdir()) == []  # and no SQLite file was made instead
