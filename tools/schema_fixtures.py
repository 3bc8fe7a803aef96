"""Make the schema fixtures: databases written by each earlier schema version's own code.

For every schema version that has shipped (``VERSIONS``: the last commit of the main line
that wrote it), this checks that commit out in a temporary git worktree and runs its own
``arena`` commands there (with this checkout's Python environment): a short ``arena
train`` (a run, its learner and checkpoints, sampled tokens and logprobs, invalid moves,
evaluation matches against the bots), ``arena play`` of tic-tac-toe, Connect Four and
Kuhn poker (hidden cards), and, where the version has them, an agent account. What it
records goes to ``tests/fixtures/schema/v<N>.db`` (an SQLite file, checkpointed and
vacuumed into small pages) and, from version 4 on (the first that could use PostgreSQL), to
``v<N>.pg.sql.gz``: a plain SQL dump (``pg_dump --inserts``) of the same commands recorded
into a private PostgreSQL server (``tools.pgserver``). ``tests/test_migrations.py``
upgrades each of them and reads the matches back.

    python -m tools.schema_fixtures [--versions 1,2,3] [--no-postgres]
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

from tools.pgserver import SUPERUSER, PostgresServer, find_binaries, start_server

VERSIONS = {
    1: "93ff55f0e0e05d81600112e71658267c225a1658",
    2: "cf14ba79116dba7658c7e1024c48edf45506e496",
    3: "0cb71b384e4d59b2c89101ed011b945b4d9ff6ec",
    4: "b3a4c5133e15192cbe7653bbbf23bd16a168a385",
    5: "cd2ead4aa2449c01e50a23c49819f3df27f853b2",
    6: "9f48a279cfa377fa9fd16921e6283bfc501c665b",
}
"""Schema version -> the last commit of the main line that wrote it."""
FIRST_POSTGRES_VERSION = 4
"""PostgreSQL support arrived with schema version 4."""
AGENTS_VERSION = 5
"""Agent accounts arrived with schema version 5."""
ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "schema"
PAGE_SIZE = 1024
"""Page size of the fixture files (SQLite's default is 4096)."""
COMMAND_TIMEOUT_S = 600.0
"""Longest one recorded command may take."""


def commands(version: int) -> list[list[str]]:
    """The ``arena`` commands that record version ``version``'s fixture (``--db`` added)."""
    runs = [
        [
            "train", "--game", "TicTacToe-v0", "--num-batches", "2", "--batch-size", "1",
            "--group-size", "2", "--warmup-steps", "2", "--warmup-games", "8",
            "--eval-every", "2", "--eval-games", "1", "--edge-eval-games", "0", "--seed", "7",
            "--no-serve", "--quiet",
            "--log-dir", "runs/fixture", "--run-name", "fixture",
        ],
        ["play", "--game", "TicTacToe-v0", "--players", "random,optimal", "--games", "2",
         "--seed", "1", "--quiet"],
        ["play", "--game", "ConnectFour-v0", "--players", "random,random", "--games", "1",
         "--seed", "2", "--quiet"],
        ["play", "--game", "KuhnPoker-v0", "--players", "random,random", "--games", "2",
         "--seed", "3", "--quiet"],
    ]  # fmt: skip
    if version >= AGENTS_VERSION:
        runs.append(["agents", "create", "fixture-agent"])
    return runs


def record(worktree: Path, db: str, version: int, work: Path) -> None:
    """Run version ``version``'s commands from ``worktree`` into ``db``. Raises
    CalledProcessError when one fails."""
    env = {k: v for k, v in os.environ.items() if k not in ("ARENA_DB", "PYTHONPATH")}
    env["PYTHONPATH"] = str(worktree)
    for args in commands(version):
        print(f"  v{version}: arena {' '.join(args[:3])} ...", flush=True)
        subprocess.run(
            [sys.executable, "-m", "arena.cli", *args, "--db", db],
            cwd=work,
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            timeout=COMMAND_TIMEOUT_S,
        )


def compact(path: Path) -> None:
    """Checkpoint the WAL into ``path`` and vacuum it into pages of ``PAGE_SIZE`` bytes (a
    smaller file: every table and index takes a page or more); it stays in WAL mode."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA journal_mode = DELETE")  # the page size of a WAL file is fixed
        conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
        conn.execute("VACUUM")
        conn.execute("PRAGMA journal_mode = WAL")
    finally:
        conn.close()
    for suffix in ("-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)


def dump(server: PostgresServer, name: str, target: Path) -> None:
    """``pg_dump --inserts`` of database ``name`` on ``server``, gzipped into ``target``."""
    pg_dump = find_binaries() / "pg_dump"
    out = subprocess.run(
        [
            str(pg_dump), "--inserts", "--no-owner", "--no-privileges", "--no-comments",
            "-h", server.host, "-p", str(server.port), "-U", SUPERUSER, name,
        ],
        check=True,
        capture_output=True,
        timeout=COMMAND_TIMEOUT_S,
    ).stdout  # fmt: skip
    with open(target, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        f.write(out)


def make(version: int, server: PostgresServer | None) -> None:
    """Record version ``version``'s fixtures."""
    commit = VERSIONS[version]
    with tempfile.TemporaryDirectory(prefix=f"schema-v{version}-") as tmp:
        worktree = Path(tmp) / "checkout"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(worktree), commit],
            check=True,
            capture_output=True,
        )
        try:
            work = Path(tmp) / "sqlite"
            work.mkdir()
            db = work / "arena.db"
            record(worktree, str(db), version, work)
            compact(db)
            shutil.copy(db, FIXTURES / f"v{version}.db")
            if server is not None and version >= FIRST_POSTGRES_VERSION:
                name = f"fixture_v{version}"
                url = server.create_database(name)
                work = Path(tmp) / "postgres"
                work.mkdir()
                record(worktree, url, version, work)
                dump(server, name, FIXTURES / f"v{version}.pg.sql.gz")
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)],
                check=True,
                capture_output=True,
            )


def main() -> None:
    """Make the fixtures of the versions asked for (all by default)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", help="comma-separated versions (default: all)")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite fixtures only")
    args = parser.parse_args()
    versions = [int(v) for v in args.versions.split(",")] if args.versions else sorted(VERSIONS)
    FIXTURES.mkdir(parents=True, exist_ok=True)
    server = None if args.no_postgres else start_server()
    try:
        for version in versions:
            print(f"schema version {version}: {VERSIONS[version][:10]}", flush=True)
            make(version, server)
    finally:
        if server is not None:
            server.stop()
    for path in sorted(FIXTURES.iterdir()):
        print(f"{path.relative_to(ROOT)}: {path.stat().st_size // 1024} kB")


if __name__ == "__main__":
    main()
