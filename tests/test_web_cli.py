"""``arena serve`` (``web.cli.serve_command``): serves until interrupted, refuses bad input."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.conftest import HANG_GUARD_S
from web.cli import EXIT_USAGE, serve_command

ROOT = Path(__file__).resolve().parents[1]


def test_serve_command_refuses_an_unusable_database_and_warns_off_loopback(
    tmp_path: Path,
) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = serve_command(str(tmp_path / "missing" / "arena.db"), "0.0.0.0", 0, out=out, err=err)
    assert code == EXIT_USAGE
    lines = err.getvalue().splitlines()
    assert lines[0].startswith("arena: warning: serving on 0.0.0.0, not loopback")
    assert lines[1].startswith("arena: error: cannot create a database")


def test_serve_command_serves_until_interrupted(tmp_path: Path) -> None:
    script = (
        "import sys; from web.cli import serve_command; "
        f"sys.exit(serve_command({str(tmp_path / 'arena.db')!r}, '127.0.0.1', 0, runs=()))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("Arena is served at http://127.0.0.1:"), line
        url = line.split()[4]
        with urllib.request.urlopen(url, timeout=HANG_GUARD_S) as response:
            assert response.status == 200 and b"Live matches" in response.read()
        with urllib.request.urlopen(url + "api/status", timeout=HANG_GUARD_S) as response:
            assert response.status == 200
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=HANG_GUARD_S) == 0
        assert (tmp_path / "arena.db").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_command_serves_a_database_in_a_read_only_folder(tmp_path: Path) -> None:
    import asyncio

    from arena.eventbus import EventBus
    from arena.play import play_matches
    from storage import Recorder, open_database
    from tests.conftest import read_only_copy

    async def record() -> None:
        db = await open_database(str(tmp_path / "arena.db"))
        bus = EventBus()
        async with Recorder(db, bus):
            await play_matches("TicTacToe-v0", ["random", "random"], 3, bus=bus)
        await db.close()

    asyncio.run(record())
    with read_only_copy([tmp_path / "arena.db"], tmp_path / "ro") as folder:
        script = (
            "import sys; from web.cli import serve_command; "
            f"sys.exit(serve_command({str(folder / 'arena.db')!r}, '127.0.0.1', 0, runs=()))"
        )
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen(
            [sys.executable, "-c", script],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.startswith("Arena is served at"), line
            url = line.split()[4]
            with urllib.request.urlopen(url + "api/matches", timeout=HANG_GUARD_S) as response:
                assert response.status == 200
                assert len(json.loads(response.read())["matches"]) == 3
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=HANG_GUARD_S) == 0
            assert proc.stderr is not None and "read-only" in proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_serve_command_refuses_a_malformed_allowed_host(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = serve_command(
        str(tmp_path / "arena.db"), "127.0.0.1", 0, allowed_hosts=["bad host"], out=out, err=err
    )
    assert code == EXIT_USAGE
    assert err.getvalue().count("\n") == 1 and "not a host name" in err.getvalue()
