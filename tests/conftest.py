"""Shared helpers for the tests: small scripted games and seat drivers.

The suite runs on the built-in catalogue only: plugins the user installed (a tutorial's
game in .venv) are not loaded (``ARENA_PLUGINS=off``; the tests that install their own
plugins point it at their folder), and plugin verdicts go to a cache of the run's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from arena.clock import Clock
from arena.coordinator import GameCoordinator
from arena.envs import PlayerEnv
from arena.eventbus import EventBus
from arena.renderers import ByteRenderer
from arena.seats import SeatAgent
from games.api import GAME, Game, GameMessage, MessageKind, MoveResult
from games.limits import DEFAULT_JOIN_TIMEOUT_S, SessionLimits
from games.session import GameSession
from tools.pgserver import PostgresServer, PostgresUnavailable, start_server

os.environ["ARENA_PLUGINS"] = "off"
os.environ["ARENA_CACHE_DIR"] = tempfile.mkdtemp(prefix="arena-test-cache-")
os.environ.pop("ARENA_ALLOW_FAILING", None)


class CountingGame(Game):
    """N seats say numbers in turn order; the game ends after ``rounds`` full rounds.

    A move is valid when it contains ``[k]`` with k the move number. Hooks let tests make
    the game raise or hang on a given move. Each seat privately gets a secret.
    """

    def __init__(
        self,
        rounds: int = 2,
        raise_on_move: int | None = None,
        hang_on_move: int | None = None,
    ) -> None:
        self.rounds = rounds
        self.raise_on_move = raise_on_move
        self.hang_on_move = hang_on_move
        self._messages: list[GameMessage] = []
        self._allowance = 1

    def reset(self, num_players: int, seed: int) -> None:
        self.n = num_players
        self.move = 0
        self.turn = 0
        self.errors = 0
        self.done = False
        self.out: set[int] = set()
        for seat in range(num_players):
            self._messages.append(
                GameMessage(GAME, f"You are seat {seat}. secret-{seat}", MessageKind.PROMPT, seat)
            )
        self._prompt()

    def _prompt(self) -> None:
        self._messages.append(
            GameMessage(
                GAME, f"Say [{self.move}]. Available moves: [{self.move}]", MessageKind.BOARD
            )
        )

    def set_invalid_move_allowance(self, allowance: int) -> None:
        self._allowance = allowance

    def current_player(self) -> int:
        return self.turn

    def step(self, action: str) -> MoveResult:
        if self.raise_on_move == self.move:
            raise RuntimeError("the game broke")
        if self.hang_on_move == self.move:
            while True:
                pass
        self._messages.append(GameMessage(self.turn, action, MessageKind.ACTION))
        found = re.search(r"\[(\d+)\]", action)
        if not found or int(found.group(1)) != self.move:
            self.errors += 1
            if self.errors > self._allowance:
                self.out.add(self.turn)
                self.done = True
            return MoveResult(False, "wrong number")
        self.errors = 0
        self.move += 1
        self.turn = (self.turn + 1) % self.n
        if self.move >= self.rounds * self.n:
            self.done = True
        else:
            self._prompt()
        return MoveResult(True)

    def is_done(self) -> bool:
        return self.done

    def rewards(self) -> dict[int, float]:
        if self.out:
            return {s: (-1.0 if s in self.out else 1.0) for s in range(self.n)}
        return {s: 0.0 for s in range(self.n)}

    def forfeited(self) -> set[int]:
        return set(self.out)

    def drain_messages(self) -> list[GameMessage]:
        out, self._messages = self._messages, []
        return out

    def legal_moves(self, seat: int) -> list[str] | None:
        return [f"[{self.move}]"]

    def public_state(self) -> str:
        return f"move {self.move}"


def counting_session(
    num_players: int = 2, limits: SessionLimits | None = None, **game_kwargs: object
) -> GameSession:
    session = GameSession(CountingGame(**game_kwargs), "Counting-v0", num_players, 0, limits)  # type: ignore[arg-type]
    session.start()
    return session


def make_match(
    session: GameSession,
    agents: dict[int, SeatAgent] | None = None,
    bus: EventBus | None = None,
    move_timeout_s: float | None = 5.0,
    clock: Clock | None = None,
    join_timeout_s: float | None = DEFAULT_JOIN_TIMEOUT_S,
) -> tuple[GameCoordinator, list[PlayerEnv]]:
    # The clocks are the session's limits (a harness's shortcut: set them on the session).
    session.limits = dataclasses.replace(
        session.limits, move_timeout_s=move_timeout_s, join_timeout_s=join_timeout_s
    )
    coordinator = GameCoordinator(session, agents or {}, bus=bus, clock=clock)
    renderer = ByteRenderer()
    envs = [PlayerEnv(coordinator, seat, renderer) for seat in coordinator.learner_seats]
    return coordinator, envs


HANG_GUARD_S = 60.0
"""How long a test waits for something that must happen before calling it a hang. Tests
drive time with a ``ManualClock`` or wait on events, so this is never what decides a
verdict; it only turns a deadlock into a clear failure instead of a stuck suite."""

_T = TypeVar("_T")


async def no_hang(awaitable: Awaitable[_T], what: str = "the awaited step") -> _T:
    """Await ``awaitable``; fail the test with a clear message if it has not finished
    within ``HANG_GUARD_S`` (a deadlock, never a slow machine)."""
    try:
        return await asyncio.wait_for(awaitable, HANG_GUARD_S)
    except TimeoutError:
        pytest.fail(f"{what} did not finish within {HANG_GUARD_S:g} s: it hangs")


async def spin(rounds: int = 50) -> None:
    """Let the event loop run what is ready, ``rounds`` times over, without letting any
    time pass on a ``ManualClock``: what can happen without a timer has happened after it
    (everything here runs on the loop, so the count is deterministic, not a delay)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


def encode(text: str) -> list[int]:
    """Byte tokens of ``text`` followed by the stop token."""
    return [*text.encode("utf-8"), ByteRenderer().tokenizer.EOS]  # type: ignore[attr-defined]


def decode_ob(ob: object) -> str:
    return ByteRenderer().tokenizer.decode(ob.to_ints())  # type: ignore[attr-defined]


class ScriptedAgent:
    """A seat agent that answers with a function of the turn."""

    def __init__(self, fn: Callable[..., object], name: str = "scripted") -> None:
        self.fn = fn
        self.name = name

    async def act(self, turn: object) -> str:
        result = self.fn(turn)
        if hasattr(result, "__await__"):
            result = await result  # type: ignore[misc]
        return result  # type: ignore[return-value]


@pytest.fixture
def bus() -> EventBus:
    return EventBus()


@pytest.fixture(autouse=True)
def _database_in_tmp(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands that default to ``./arena.db`` record into the test's tmp_path instead of
    the working tree (a test may still set ``ARENA_DB`` or pass ``--db``)."""
    monkeypatch.setenv("ARENA_DB", str(tmp_path) + "/arena.db")


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


@contextlib.contextmanager
def read_only_copy(files: list[Path], folder: Path) -> Iterator[Path]:
    """``folder`` holding copies of ``files``, folder and files read-only for real: by
    permissions for a normal user; as root (whom permission bits do not stop) on a tmpfs
    remounted read-only. Skips the test when neither can be done here."""
    folder.mkdir()
    if os.geteuid() != 0:
        for f in files:
            shutil.copy(f, folder / f.name)
            (folder / f.name).chmod(0o444)
        folder.chmod(0o555)
        try:
            yield folder
        finally:
            folder.chmod(0o755)
        return
    if not _mount("-t", "tmpfs", "-o", "size=64m", "tmpfs", str(folder)):
        pytest.skip("cannot mount a tmpfs here to make a read-only folder")
    try:
        for f in files:
            shutil.copy(f, folder / f.name)
        if not _mount("-o", "remount,ro", str(folder)):
            pytest.skip("cannot remount a tmpfs read-only here")
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


@contextlib.contextmanager
def small_disk(folder: Path, size: str) -> Iterator[Path]:
    """``folder`` as a real filesystem of ``size`` (a tmpfs, e.g. ``"2m"``) that fills up.
    Needs root (mount); skips the test otherwise."""
    folder.mkdir()
    if os.geteuid() != 0 or not _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)):
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


@contextlib.contextmanager
def read_only_file(path: Path) -> Iterator[Path]:
    """``path`` made read-only for real (its folder stays writable): by permissions for a
    normal user, with the immutable attribute as root. Skips the test when neither works."""
    if os.geteuid() != 0:
        path.chmod(0o444)
        try:
            yield path
        finally:
            path.chmod(0o644)
        return
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("cannot make a file immutable here (chattr)")
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], capture_output=True)


# -- databases: SQLite files and a private PostgreSQL server ---------------------------------
BACKENDS = ("sqlite", "postgresql")
_postgres_skipped: list[str] = []


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A private PostgreSQL server for the whole session (``tools.pgserver``), started
    when a test first needs it. Where none can start here, the tests that need it are
    skipped, and the end of the run says why."""
    try:
        server = start_server()
    except PostgresUnavailable as exc:
        _postgres_skipped.append(str(exc))
        pytest.skip(f"PostgreSQL tests skipped: {exc}")
    try:
        yield server
    finally:
        server.stop()


def new_postgres_database(server: PostgresServer) -> str:
    """The URL of a new, empty database on ``server``. Its name is unique on its own: test
    modules import this file as ``tests.conftest``, a second copy beside pytest's
    ``conftest``, so a counter here would count twice from 0."""
    return server.create_database(f"arena_test_{uuid.uuid4().hex}")


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a test's new, empty database lives: an SQLite file in ``tmp_path``, or a new
    database on the private PostgreSQL server (the test runs once on each)."""
    if request.param == "sqlite":
        return str(tmp_path / "arena.db")
    return new_postgres_database(request.getfixturevalue("postgres_server"))


async def postgres_connection(url: str) -> Any:
    """A plain asyncpg connection to the database at ``url`` (a ``postgresql+asyncpg://``
    URL): another program's connection, outside Arena."""
    import asyncpg

    return await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://", 1))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say loudly, at the end of the run, that the PostgreSQL tests did not run."""
    if _postgres_skipped:
        terminalreporter.write_sep(
            "!", f"PostgreSQL tests SKIPPED: {_postgres_skipped[0]}", yellow=True, bold=True
        )


# The tests seat checkpoints as the `arena` commands do: with the trainer's loader.
from trainer.loaders import install as _install_checkpoint_loader  # noqa: E402

_install_checkpoint_loader()
