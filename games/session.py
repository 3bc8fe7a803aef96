"""The one place that guards a game: limits, turn order, invalid moves, failures.

Everything a game does goes through ``GameSession``. It caps the length of actions, the
number of moves and the wall time of each call into the game; refuses moves out of turn
and after the end; turns every exception from the game into ``GameError``; keeps the
game's prints out of our output; applies the invalid-move policy; and keeps each seat's
transcript (what that seat, and only that seat, was shown).

TextArena seeds and draws from the global ``random`` module. The session gives each game a
private generator, which ``random``'s functions use during every move and reset of that
game (``games.rng``), so a game replays the same from the same seed however many other
games run interleaved, and whatever other code draws from ``random`` meanwhile, on any
thread.

Threads. A session may be called from any thread (the web server runs browser matches on
a game thread, off its event loop), but game code never runs on two threads at once: every
guarded call holds ``GAME_LOCK``, because ``sys.stdout``, which the guard swaps, is the
process's. While a guarded call runs, ``sys.stdout`` drops only what
the calling thread writes; other threads' output goes through.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import random
import sys
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import orjson

from games import rng as game_rng
from games.api import Game, GameMessage, MessageKind, MoveResult, PublicBoard, SimultaneousGame
from games.limits import SessionLimits
from games.watchdog import StepTimeout, call_with_deadline

T = TypeVar("T")
game_rng.install()

log = logging.getLogger("games.session")
_view_failures_logged: set[tuple[str, str]] = set()
"""(game id, view) pairs whose failure was logged: a broken view is logged once per
process, not once per move."""


class SessionError(Exception):
    """Base of the errors a session raises."""


class GameError(SessionError):
    """The game itself failed (raised or ran past its time limit); the match is void."""


class NotYourTurn(SessionError):
    """A seat tried to move out of turn."""


class GameOver(SessionError):
    """A move was submitted after the game ended."""


class Status(StrEnum):
    """Where a game stands."""

    LIVE = "live"
    FINISHED = "finished"
    """Ended by its own rules."""
    TRUNCATED = "truncated"
    """Stopped at ``max_turns``; scored as a draw."""
    ABORTED = "aborted"
    """Void: a seat or the game failed. No rewards."""


@dataclass(frozen=True)
class TurnRecord:
    """One move as the session applied it."""

    index: int
    """0-based count of moves applied in this game (invalid ones included)."""
    seat: int
    action: str
    """The text the game received (cut to ``max_action_chars``)."""
    truncated: bool
    """True when the submitted action was longer than the cap."""
    valid: bool
    reason: str | None
    """Why the move was invalid."""
    done: bool
    """True when the game ended with this move."""
    move: str | None = None
    """The move the game read from ``action`` (``Game.parse_move``): what spectators of a
    live match may see; None when none could be read."""
    messages: tuple[GameMessage, ...] = ()
    """The messages the game sent because of this move, public and private, in order
    (those to a seat the game does not have are dropped). A simultaneous round's messages
    are all on its last record: the game sent them once the round's moves were applied."""
    private: bool = False
    """True when the game showed this move to some seats only (its echo of the move, a
    ``MessageKind.ACTION`` message from the seat, went to single seats, never to all):
    spectators of the live match never see it, whatever the game was registered with."""
    round: int | None = None
    """The simultaneous round (1-based) this move was made in, None for a move in turn
    (``SimultaneousGame``): the moves of a round are applied together, in seat order."""


@dataclass
class Outcome:
    """How a game ended."""

    status: Status
    rewards: dict[int, float]
    """Final reward per seat (all 0.0 when aborted or truncated)."""
    reason: str = ""
    forfeited: set[int] = field(default_factory=set)
    """Seats that lost by invalid moves."""


_State = tuple[bool, tuple[int, ...], dict[int, float] | None, set[int]]
"""What the game says after a reset or a move: (done, seats to move, rewards if done,
forfeited seats)."""


def _shown_privately(messages: Sequence[GameMessage], seat: int) -> bool:
    """True when the game echoed ``seat``'s move (an ``ACTION`` message from it) only to
    single seats, never to every seat."""
    echoes = [m for m in messages if m.kind is MessageKind.ACTION and m.sender == seat]
    return bool(echoes) and all(m.to is not None for m in echoes)


MAX_MOVE_CHARS = 100
"""Longest parsed move kept (``TurnRecord.move``)."""

MAX_BOARD_CHARS = 65_536
"""Longest board kept, as compact JSON (a 12 x 15 Connect Four grid takes about 1,000
characters); a longer one is dropped (logged once) and the text view is shown instead."""


@dataclass(frozen=True)
class SpectatorViews:
    """What the game shows after a move (``GameSession.views``). The boards are kept as
    the compact JSON text they were checked as (``board_text``): whoever stores them needs
    no second encoding, and ``board`` decodes them only when asked."""

    public_state: str | None
    """The public text state (``public_state``, or its plain-text fallback)."""
    board_text: str | None
    """The public board (``PublicBoard.as_dict()``) as compact JSON, or None."""
    full_board_text: str | None
    """The all-seeing board as compact JSON, only when it differs from ``board_text``
    (show it after the match)."""

    @property
    def board(self) -> dict[str, Any] | None:
        """The public board as data (decoded from ``board_text``: a fresh copy each time)."""
        return None if self.board_text is None else _decoded(self.board_text)

    @property
    def full_board(self) -> dict[str, Any] | None:
        """The all-seeing board as data, when it differs from ``board``."""
        return None if self.full_board_text is None else _decoded(self.full_board_text)


def _decoded(text: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(text)
    return data


_BOARD_JSON = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
"""Encodes the boards orjson does not (``_board_json``)."""


def game_line(exc: BaseException) -> str:
    """Where ``exc`` was raised, as ``file.py:LINE`` (the innermost frame of its
    traceback), or "" when it carries none: the line a game's author needs to fix."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames or frames[-1].filename == __file__:
        return ""  # raised by the guard itself (a wrong return type), not by the game
    frame = frames[-1]
    return f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}"


def _raised(exc: BaseException) -> str:
    """``KeyError: 7 (game.py:88)``: the exception and the game's line that raised it."""
    where = game_line(exc)
    return f"{type(exc).__name__}: {exc}" + (f" ({where})" if where else "")


class RoundError(SessionError):
    """The moves given for a simultaneous round are not those of the seats to move."""


GAME_LOCK = threading.RLock()
"""Held by every call into game code, on whatever thread: game code shares the process's
``sys.stdout`` (see the module's docstring). Callers on an event loop
take it with ``acquire(blocking=False)`` and hand the call to a game thread when it is busy
(``arena.gamethread``), so the loop never waits for it."""


class _QuietStdout:
    """``sys.stdout`` during a guarded call: swallows the guarded thread's writes (a game's
    prints), passes every other thread's on to the stream it replaced."""

    def __init__(self) -> None:
        self.target: Any = None
        self.owner = 0

    def write(self, text: str) -> int:
        if threading.get_ident() == self.owner:
            return len(text)
        return int(self.target.write(text))

    def flush(self) -> None:
        if threading.get_ident() != self.owner:
            self.target.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.target, name)


_quiet = threading.local()


def _quiet_stdout() -> _QuietStdout:
    quiet = getattr(_quiet, "stdout", None)
    if quiet is None:
        quiet = _quiet.stdout = _QuietStdout()
        quiet.owner = threading.get_ident()
    return quiet


def _finite(value: Any) -> bool:
    """False when ``value`` (plain data: ``PublicBoard.as_dict()``'s) holds a float NaN
    or infinity."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list | tuple):
        return all(_finite(v) for v in value)
    return True


_FLOAT_FIELDS = ("pot", "chips", "scores", "extra")
"""The fields of ``PublicBoard.as_dict()`` that may hold floats."""


def _board_json(board: Any, what: str) -> str | None:
    """``board`` (a ``PublicBoard`` or None) as compact JSON text. Raises TypeError or
    ValueError for what is not a board, holds what JSON cannot or is too long.

    orjson encodes it (a board is read at every move someone watches or records, and the
    standard library's encoder takes several times longer) once the only fields that may
    hold floats are known to be finite (orjson would write NaN as null); what orjson
    refuses (a lone surrogate, an integer over 64 bits, a key that is not text) goes to
    the standard library's encoder, which decides as it always did."""
    if board is None:
        return None
    if not isinstance(board, PublicBoard):
        raise TypeError(f"{what} returned {type(board).__name__}, not a PublicBoard")
    data = board.as_dict()
    text: str | None = None
    finite = True
    for key in _FLOAT_FIELDS:  # (a loop: a generator costs more than these few checks)
        if key in data and not _finite(data[key]):
            finite = False
            break
    if finite:
        try:
            text = orjson.dumps(data).decode()
        except TypeError:
            text = None
    if text is None:
        try:  # TypeError names what JSON cannot hold (a set, an object)
            text = _BOARD_JSON.encode(data)
        except ValueError:
            raise ValueError("the board holds NaN or an infinity: JSON cannot") from None
    if len(text) > MAX_BOARD_CHARS:
        raise ValueError(
            f"the board is {len(text)} characters as JSON, over MAX_BOARD_CHARS ({MAX_BOARD_CHARS})"
        )
    return text


def _wrong_round_results(game_id: str, results: Any, movers: Sequence[int]) -> str:
    """What is wrong with what a game's ``step_round`` returned for the seats that moved
    (``movers``), or "" when it is a ``MoveResult`` for each of them."""
    if not isinstance(results, Mapping) or set(results) != set(movers):
        got = sorted(results) if isinstance(results, Mapping) else type(results).__name__
        return (
            f"{game_id}'s step_round returned results for {got}, not for the "
            f"seats that moved ({list(movers)})"
        )
    for seat in movers:
        if not isinstance(results[seat], MoveResult):
            return (
                f"{game_id}'s step_round gave seat {seat} "
                f"{type(results[seat]).__name__}, not MoveResult"
            )
    return ""


class SessionViews:
    """The reads of a session (``GameSession`` is one): each seat's transcript, the legal
    moves, and what spectators see (the text state and the boards). A view never changes
    the game: one that fails is logged once and replaced (see ``public_state``)."""

    game: Game
    game_id: str
    log_view_failures: bool
    view_failures: dict[str, str]
    _outcome: Outcome | None
    _seat_messages: list[list[GameMessage]]
    _public_messages: list[GameMessage]

    if TYPE_CHECKING:  # (the session's own: see there)

        def _guard(
            self,
            fn: Callable[[], T],
            what: str,
            timeout: float | Literal["step"] | None = "step",
            uses_random: bool = False,
            fatal: bool = True,
        ) -> T: ...

        def _cached_moves(self, seat: int) -> tuple[bool, list[str] | None]: ...

    def seat_messages(self, seat: int) -> list[GameMessage]:
        """Every message ``seat`` received, in order (its private ones included)."""
        return list(self._seat_messages[seat])

    def public_messages(self) -> list[GameMessage]:
        """The messages every seat received."""
        return list(self._public_messages)

    def legal_moves(self, seat: int) -> list[str] | None:
        """The moves the game lists for ``seat`` now, if it lists them."""
        if self._outcome is not None:
            return None
        cached, moves = self._cached_moves(seat)
        if cached:
            return None if moves is None else list(moves)
        return self._guard(lambda: self.game.legal_moves(seat), "legal_moves")

    def public_state(self) -> str | None:
        """What a spectator may see now.

        Only spectators use it (it is read only when someone listens), so a game whose
        ``public_state`` fails goes on as if nothing happened: the failure is logged once
        and the view falls back to ``text_view()``. Recording a match never changes it.
        """
        try:
            value = self._guard(self.game.public_state, "public_state", fatal=False)
        except GameError as exc:
            self._view_failed("public_state", exc)
            return self.text_view()
        return value if value is None or isinstance(value, str) else str(value)

    def public_board(self) -> dict[str, Any] | None:
        """The public state as JSON data for a browser board (``PublicBoard.as_dict()``:
        grid, cards, pot, chips, scores), or None when the game has none.

        Like ``public_state``, a failure never changes the game: a board that raises, is
        not a ``PublicBoard``, holds what JSON cannot (NaN, a set) or is longer than
        ``MAX_BOARD_CHARS`` as JSON is logged once and replaced by None (browsers then
        show the text view)."""
        text = self._board_text(self.game.public_board, "public_board")
        return None if text is None else _decoded(text)

    def full_board(self) -> dict[str, Any] | None:
        """The all-seeing board (hidden cards face up, ``Game.full_board``); show it only
        after the match. None when the game has none; failures as for ``public_board``."""
        text = self._board_text(self.game.full_board, "full_board")
        return None if text is None else _decoded(text)

    def views(self) -> SpectatorViews:
        """What is shown of the game now: the public text state, the
        public board and, only where it differs, the all-seeing board. Never raises for a
        failing view (see ``public_state`` and ``public_board``).

        One guarded call reads all three (a call into the game has a fixed cost that
        matters at every move); when one of them fails, each is read again on its own, so
        that one failure costs only its own view."""

        def read() -> tuple[str | None, str | None, str | None]:
            state = self.game.public_state()
            if state is not None and not isinstance(state, str):
                state = str(state)
            board = _board_json(self.game.public_board(), "public_board")
            return state, board, _board_json(self.game.full_board(), "full_board")

        try:
            state, board, full = self._guard(read, "views", fatal=False)
        except GameError:
            state = self.public_state()
            board = self._board_text(self.game.public_board, "public_board")
            full = self._board_text(self.game.full_board, "full_board")
        return SpectatorViews(state, board, full if full != board else None)

    def _board_text(self, read: Callable[[], Any], what: str) -> str | None:
        try:
            return self._guard(lambda: _board_json(read(), what), what, fatal=False)
        except GameError as exc:
            self._view_failed(what, exc)
            return None

    def full_state(self) -> str | None:
        """The all-seeing state; show it only after the match. Like ``public_state``, a
        failure never changes the game: it is logged once and None is returned."""
        try:
            value = self._guard(self.game.full_state, "full_state", fatal=False)
        except GameError as exc:
            self._view_failed("full_state", exc)
            return None
        return value if value is None or isinstance(value, str) else str(value)

    def text_view(self) -> str | None:
        """The newest public board message (else the newest public message), or None: a
        plain-text public view that needs no game code."""
        fallback = None
        for message in reversed(self._public_messages):
            if message.kind is MessageKind.BOARD:
                return message.text
            if fallback is None:
                fallback = message.text
        return fallback

    def _view_failed(self, view: str, exc: GameError) -> None:
        cause = exc.__cause__
        self.view_failures.setdefault(view, _raised(cause) if cause is not None else str(exc))
        if not self.log_view_failures:
            return
        key = (self.game_id, view)
        if key not in _view_failures_logged:
            _view_failures_logged.add(key)
            fallback = "the text view" if view.endswith("board") else "a plain-text view"
            log.warning("%s; spectators get %s instead (logged once)", exc, fallback)


class GameSession(SessionViews):
    """A guarded game. Synchronous and single-threaded: async callers live in ``arena``."""

    def __init__(
        self,
        game: Game,
        game_id: str,
        num_players: int,
        seed: int,
        limits: SessionLimits | None = None,
    ) -> None:
        self.game = game
        self.game_id = game_id
        self.num_players = num_players
        self.seed = seed
        self.limits = limits or SessionLimits()
        self.turns: list[TurnRecord] = []
        self.invalid_moves = [0] * num_players
        self._seat_messages: list[list[GameMessage]] = [[] for _ in range(num_players)]
        self._public_messages: list[GameMessage] = []
        self.start_messages: tuple[GameMessage, ...] = ()
        """The messages the game sent as it started (reset), public and private."""
        self._rng = random.Random(seed)
        """The game's own generator (see the module's docstring)."""
        self._outcome: Outcome | None = None
        self._started = False
        self._movers: tuple[int, ...] = (0,)
        self._listed: tuple[int, dict[int, list[str] | None]] | None = None
        """(turn index, seat -> moves): the legal moves of the seats to move, read in the
        same guarded call as the move before (the state has not changed since)."""
        self.simultaneous = isinstance(game, SimultaneousGame)
        """True for a game whose seats move at once in rounds (``SimultaneousGame``)."""
        self.rounds = 0
        """Simultaneous rounds begun so far."""
        self.round_over = True
        """False while a simultaneous round waits for seats that retry an invalid move (the
        round's valid moves are applied, not yet revealed)."""
        self.log_view_failures = True
        """Log a view's first failure (once per game and view in this process); the
        conformance kit turns it off and reports the failures itself."""
        self.view_failures: dict[str, str] = {}
        """View (``public_state``, ``public_board``, ...) -> how it first failed
        (``KeyError: 'x' (game.py:40)``): views never stop a game, but the conformance
        kit fails a game whose views fail."""

    # -- guarded calls -------------------------------------------------------------------
    def _guard(
        self,
        fn: Callable[[], T],
        what: str,
        timeout: float | Literal["step"] | None = "step",
        uses_random: bool = False,
        fatal: bool = True,
    ) -> T:
        """Call into the game with the limits, holding ``GAME_LOCK``. ``uses_random``: the
        game's ``random`` draws come from its own generator (only moves and resets draw;
        reads do not). ``fatal``: a failure aborts the game (False for views only spectators
        use)."""
        limit = self.limits.step_timeout_s if timeout == "step" else timeout
        with GAME_LOCK:
            previous = game_rng.swap(self._rng) if uses_random else None
            quiet = _quiet_stdout()
            quiet.target = stdout = sys.stdout
            sys.stdout = quiet
            try:
                return call_with_deadline(fn, limit)
            except StepTimeout as exc:
                reason = f"{self.game_id} {what} timed out: {exc}"
                raise (self._fail(reason) if fatal else GameError(reason)) from exc
            except SessionError:
                raise
            except Exception as exc:
                reason = f"{self.game_id} raised during {what}: {_raised(exc)}"
                raise (self._fail(reason) if fatal else GameError(reason)) from exc
            finally:
                if sys.stdout is quiet:  # else code elsewhere replaced it meanwhile: keep that
                    sys.stdout = stdout
                if uses_random:
                    game_rng.swap(previous)

    def _fail(self, reason: str) -> GameError:
        self.abort(reason)
        return GameError(reason)

    def _collect(self) -> tuple[GameMessage, ...]:
        """Deliver the game's new messages to the seats' transcripts; return them (those to
        a seat the game does not have are dropped)."""
        kept = []
        for message in self.game.drain_messages():
            if message.to is None:
                self._public_messages.append(message)
                for seat_log in self._seat_messages:
                    seat_log.append(message)
            elif 0 <= message.to < self.num_players:
                self._seat_messages[message.to].append(message)
            else:
                continue
            kept.append(message)
        return tuple(kept)

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        """Reset the game. Raises ValueError for an unsupported player count, GameError
        when the game fails."""
        if self._started:
            raise SessionError("session already started")
        self._started = True
        self.game.set_invalid_move_allowance(self.limits.allowance)

        def reset() -> _State:
            self.game.reset(self.num_players, self.seed)
            state = self._read_state()
            self._list_moves(0, state)
            return state

        try:
            state = self._guard(reset, "reset", self.limits.reset_timeout_s, uses_random=True)
        except GameError as exc:
            if isinstance(exc.__cause__, ValueError):
                raise ValueError(str(exc.__cause__)) from None
            raise
        self.start_messages = self._collect()
        self._apply_state(*state)

    def _list_moves(self, turn: int, state: _State) -> None:
        """Inside a guarded call, after a reset or a move: keep the next seats' legal moves
        (the turn's ``legal_moves()`` and the next move's ``parse_move`` read them)."""
        done, movers, _rewards, _forfeited = state
        if done or not isinstance(movers, tuple):
            self._listed = None
            return
        listed = {}
        for seat in movers:
            if isinstance(seat, int):
                listed[seat] = self.game.legal_moves(seat)
        self._listed = (turn, listed)

    def _cached_moves(self, seat: int) -> tuple[bool, list[str] | None]:
        listed = self._listed
        if listed is not None and listed[0] == len(self.turns) and seat in listed[1]:
            return True, listed[1][seat]
        return False, None

    def _read_state(self) -> _State:
        """Inside a guarded call: (done, seats to move, rewards if done, forfeited seats)."""
        if self.game.is_done():
            return True, (), self.game.rewards(), self.game.forfeited()
        if self.simultaneous:
            assert isinstance(self.game, SimultaneousGame)
            movers = self.game.movers()
            return False, tuple(movers) if isinstance(movers, list | tuple) else movers, None, set()
        return False, (self.game.current_player(),), None, set()

    def _apply_state(
        self,
        done: bool,
        movers: tuple[int, ...],
        rewards: dict[int, float] | None,
        forfeited: set[int],
    ) -> None:
        if done:
            final = {
                seat: float((rewards or {}).get(seat, 0.0)) for seat in range(self.num_players)
            }
            for seat in forfeited:
                if 0 <= seat < self.num_players:
                    final[seat] = self.limits.invalid_move_penalty
            self._outcome = Outcome(
                status=Status.FINISHED,
                rewards=final,
                reason="invalid move" if forfeited else "",
                forfeited={s for s in forfeited if 0 <= s < self.num_players},
            )
            return
        if not isinstance(movers, tuple) or not movers:
            raise self._fail(f"{self.game_id} named no seat to move ({movers!r})")
        for seat in movers:
            if not isinstance(seat, int) or not 0 <= seat < self.num_players:
                raise self._fail(
                    f"{self.game_id} named seat {seat!r} to move; it has {self.num_players} seats"
                )
        if len(set(movers)) != len(movers):
            raise self._fail(f"{self.game_id} named seats {list(movers)} to move: one repeats")
        self._movers = tuple(sorted(movers))

    @property
    def outcome(self) -> Outcome | None:
        """The outcome once the game is over, else None."""
        return self._outcome

    @property
    def done(self) -> bool:
        """True once the game is over (finished, truncated or aborted)."""
        return self._outcome is not None

    def current_player(self) -> int:
        """The seat that must move (in a simultaneous round, the first of ``movers()``).
        Raises GameOver after the end."""
        return self.movers()[0]

    def movers(self) -> tuple[int, ...]:
        """The seats that must move now, in seat order: one for a game played in turns,
        the seats of the round for a simultaneous game. Raises GameOver after the end."""
        if self._outcome is not None:
            raise GameOver(f"{self.game_id} is over ({self._outcome.status.value})")
        return self._movers

    def step(self, seat: int, action: str) -> TurnRecord:
        """Apply ``seat``'s move.

        Raises NotYourTurn, GameOver, TypeError for a non-text action, or GameError (the
        game failed; the session is then aborted).
        """
        if not self._started:
            raise SessionError("call start() first")
        movers = self.movers()
        if self.simultaneous and movers == (seat,):
            return self.step_round({seat: action})[0]
        if len(movers) > 1 and seat in movers:
            raise NotYourTurn(
                f"seats {', '.join(map(str, movers))} move together in this round: give "
                "their moves to step_round"
            )
        current = movers[0]
        if seat != current:
            raise NotYourTurn(f"seat {seat} moved, but it is seat {current}'s turn")
        if not isinstance(action, str):
            raise TypeError(f"an action is text, got {type(action).__name__}")
        cap = self.limits.max_action_chars
        truncated = len(action) > cap
        text = action[:cap] if truncated else action

        turn = len(self.turns)
        cached, known = self._cached_moves(seat)
        self._listed = None  # the game changes now (even if the move fails)

        def apply() -> tuple[Any, Any, _State]:
            listed = known if cached else self.game.legal_moves(seat)
            result = self.game.step(text)
            move = self.game.parse_move(text, listed)
            state = self._read_state()
            self._list_moves(turn + 1, state)
            return result, move, state

        result, move, state = self._guard(apply, "step", uses_random=True)
        if not isinstance(result, MoveResult):
            raise self._fail(
                f"{self.game_id}'s step returned {type(result).__name__}, not MoveResult"
            )
        messages = self._collect()
        private = _shown_privately(messages, seat)
        if not result.valid:
            self.invalid_moves[seat] += 1
        self._apply_state(*state)
        self._stop_at_move_cap(1)
        record = TurnRecord(
            index=len(self.turns),
            seat=seat,
            action=text,
            truncated=truncated,
            valid=bool(result.valid),
            reason=result.reason,
            done=self._outcome is not None,
            move=move[:MAX_MOVE_CHARS] if isinstance(move, str) else None,
            messages=messages,
            private=private,
        )
        self.turns.append(record)
        return record

    def step_round(self, actions: Mapping[int, str]) -> list[TurnRecord]:
        """Apply the moves of every seat of ``movers()`` together: a simultaneous round
        (``SimultaneousGame.step_round``), or the one move of a game played in turns. The
        records are in seat order, with consecutive indices; ``round_over`` says whether
        the round is over (False while seats retry an invalid move).

        Raises RoundError when ``actions`` is not one move for each seat of ``movers()``,
        GameOver, TypeError for a non-text action, or GameError (the game failed; the
        session is then aborted).
        """
        if not self._started:
            raise SessionError("call start() first")
        movers = self.movers()
        if set(actions) != set(movers):
            raise RoundError(
                f"seats {', '.join(map(str, movers))} must move now; got moves for "
                f"{', '.join(map(str, sorted(actions))) or 'none'}"
            )
        if not self.simultaneous:
            return [self.step(movers[0], actions[movers[0]])]
        for action in actions.values():
            if not isinstance(action, str):
                raise TypeError(f"an action is text, got {type(action).__name__}")
        cap = self.limits.max_action_chars
        texts = {seat: actions[seat][:cap] for seat in movers}
        first = len(self.turns)
        known = {seat: self._cached_moves(seat) for seat in movers}
        self._listed = None
        game = self.game
        assert isinstance(game, SimultaneousGame)

        def apply() -> tuple[Any, dict[int, Any], _State]:
            listed = {
                seat: moves if cached else game.legal_moves(seat)
                for seat, (cached, moves) in known.items()
            }
            results = game.step_round(dict(texts))
            parsed = {seat: game.parse_move(texts[seat], listed[seat]) for seat in movers}
            state = self._read_state()
            self._list_moves(first + len(movers), state)
            return results, parsed, state

        results, parsed, state = self._guard(apply, "step_round", uses_random=True)
        wrong = _wrong_round_results(self.game_id, results, movers)
        if wrong:
            raise self._fail(wrong)
        messages = self._collect()
        if self.round_over:
            self.rounds += 1
        for seat in movers:
            if not results[seat].valid:
                self.invalid_moves[seat] += 1
        self._apply_state(*state)
        retrying = {s for s in movers if not results[s].valid}
        self.round_over = self._outcome is not None or not (retrying & set(self._movers))
        if self._stop_at_move_cap(len(movers)):
            self.round_over = True
        records = []
        for seat in movers:
            move = parsed[seat]
            records.append(
                TurnRecord(
                    index=len(self.turns),
                    seat=seat,
                    action=texts[seat],
                    truncated=len(actions[seat]) > cap,
                    valid=bool(results[seat].valid),
                    reason=results[seat].reason,
                    done=self._outcome is not None,
                    move=move[:MAX_MOVE_CHARS] if isinstance(move, str) else None,
                    messages=messages if seat == movers[-1] else (),
                    round=self.rounds,
                )
            )
            self.turns.append(records[-1])
        return records

    def _stop_at_move_cap(self, moves: int) -> bool:
        """End the game as truncated when the ``moves`` being applied reach the move cap
        (``max_turns``) and it is not over; True when it did."""
        if self._outcome is None and len(self.turns) + moves >= self.limits.max_turns:
            self._outcome = Outcome(
                status=Status.TRUNCATED,
                rewards={s: 0.0 for s in range(self.num_players)},
                reason=f"stopped at the {self.limits.max_turns}-move limit",
            )
            return True
        return False

    def reseed(self, seed: int) -> None:
        """Draw the game's chance from ``seed`` from now on (a branch of the game redraws
        what is still to be dealt; what was dealt stays)."""
        self._rng = random.Random(seed)

    def forfeit(self, seat: int, reason: str) -> None:
        """End the game now as decided (``finished``): ``seat`` loses with
        ``invalid_move_penalty`` and the other seats share its loss equally (+1 for the
        other seat of a two-seat game), whatever the game's state. For a seat that lost
        on time, disconnected or resigned: unlike an invalid move, it works in every game,
        whatever text the game would accept. Does nothing when the game is already over.
        Raises ValueError for a seat the game does not have."""
        if not 0 <= seat < self.num_players:
            raise ValueError(f"seat {seat} forfeited; the game has {self.num_players} seats")
        if self._outcome is not None:
            return
        penalty = self.limits.invalid_move_penalty
        share = -penalty / (self.num_players - 1) if self.num_players > 1 else 0.0
        self._outcome = Outcome(
            status=Status.FINISHED,
            rewards={s: penalty if s == seat else share for s in range(self.num_players)},
            reason=reason,
            forfeited={seat},
        )

    def abort(self, reason: str) -> None:
        """End the game as void (no rewards). Does nothing when it is already over."""
        if self._outcome is None:
            self._outcome = Outcome(
                status=Status.ABORTED,
                rewards={s: 0.0 for s in range(self.num_players)},
                reason=reason,
            )

    def close(self) -> None:
        """Release the game; safe to call more than once and after failures."""
        with contextlib.suppress(GameError):
            self._guard(self.game.close, "close", fatal=False)


def calls_of(turns: Sequence[TurnRecord]) -> list[list[TurnRecord]]:
    """``turns`` grouped as the game received them: one move per call of a game in turns;
    a simultaneous round's moves (or a retry's, within its round) together."""
    calls: list[list[TurnRecord]] = []
    for record in turns:
        previous = calls[-1][-1] if calls else None
        if (
            previous is None
            or record.round is None
            or previous.round != record.round
            or previous.seat >= record.seat
        ):
            calls.append([record])
        else:
            calls[-1].append(record)
    return calls


def replay_turns(session: GameSession, turns: Sequence[TurnRecord]) -> None:
    """Play ``turns`` (another session's record, from its start) again on the started
    ``session`` of the same game and deal: the same moves, grouped in the same calls, so
    the game's own generator draws the same chance and the game ends up where the other
    stood. Raises SessionError when a recorded move does not fit (another game or deal)."""
    for call in calls_of(turns):
        if session.done:
            raise SessionError(
                f"the game is over at move {len(session.turns)}; the record goes on to "
                f"move {turns[-1].index}: it is not this game's"
            )
        movers = session.movers()
        seats = tuple(record.seat for record in call)
        if seats != movers:
            raise SessionError(
                f"the record has seats {list(seats)} moving at move {call[0].index}; "
                f"the game asks {list(movers)}"
            )
        session.step_round({record.seat: record.action for record in call})
