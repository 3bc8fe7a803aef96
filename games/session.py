"""The one place that guards a game: limits, turn order, invalid moves, failures.

Everything a game does goes through ``GameSession``. It caps the length of actions, the
number of moves and the wall time of each call into the game; refuses moves out of turn
and after the end; turns every exception from the game into ``GameError``; keeps the
game's prints out of our output; applies the invalid-move policy; and keeps each seat's
transcript (what that seat, and only that seat, was shown).

TextArena seeds and draws from the global ``random`` module. The session gives each game a
private copy of that state, swapped in before every call into the game, so a game replays
the same from the same seed however many other games run interleaved on the thread, and
whatever other code draws from ``random`` between moves.

Threads. A session may be called from any thread (the web server runs browser matches on
a game thread, off its event loop), but game code never runs on two threads at once: every
guarded call holds ``GAME_LOCK``, because the ``random`` state and ``sys.stdout`` that the
guard swaps are the process's. While a guarded call runs, ``sys.stdout`` drops only what
the calling thread writes; other threads' output goes through.
"""

from __future__ import annotations

import contextlib
import logging
import random
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, TypeVar

from games.api import Game, GameMessage, MessageKind
from games.watchdog import StepTimeout, call_with_deadline

T = TypeVar("T")

log = logging.getLogger("games.session")
_view_failures_logged: set[tuple[str, str]] = set()
"""(game id, view) pairs whose failure was logged: a broken view is logged once per
process, not once per move."""


class InvalidMovePolicy(StrEnum):
    """What an invalid move costs."""

    FORFEIT = "forfeit"
    """The first invalid move loses the game (the default: a clean training signal)."""
    RETRY = "retry"
    """TextArena's rule: ``retry_allowance`` invalid moves in a row may be retried."""


@dataclass(frozen=True)
class SessionLimits:
    """Limits and rules a session enforces. Every field has a safe default."""

    max_action_chars: int = 2_000
    """Longer actions are cut to this many characters before the game sees them."""
    max_turns: int = 1_000
    """Moves applied (valid or not) before the game is stopped as a draw ("truncated")."""
    step_timeout_s: float | None = 5.0
    """Wall time one call into the game may take; past it the game is aborted."""
    reset_timeout_s: float | None = 30.0
    """Wall time the game's set-up may take (some puzzles take seconds to generate)."""
    invalid_move_policy: InvalidMovePolicy | str = InvalidMovePolicy.FORFEIT
    retry_allowance: int = 1
    """Invalid moves in a row a seat may retry under the ``retry`` policy."""
    invalid_move_penalty: float = -1.0
    """Final reward of a seat that lost by invalid moves (overrides the game's)."""

    def __post_init__(self) -> None:
        if self.max_action_chars < 1:
            raise ValueError("max_action_chars must be at least 1")
        if self.max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        for name in ("step_timeout_s", "reset_timeout_s"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive (or None for no limit)")
        if self.retry_allowance < 0:
            raise ValueError("retry_allowance must be 0 or more")
        object.__setattr__(self, "invalid_move_policy", InvalidMovePolicy(self.invalid_move_policy))

    @property
    def allowance(self) -> int:
        """Invalid moves in a row a seat may retry under this policy."""
        if self.invalid_move_policy == InvalidMovePolicy.FORFEIT:
            return 0
        return self.retry_allowance


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


@dataclass
class Outcome:
    """How a game ended."""

    status: Status
    rewards: dict[int, float]
    """Final reward per seat (all 0.0 when aborted or truncated)."""
    reason: str = ""
    forfeited: set[int] = field(default_factory=set)
    """Seats that lost by invalid moves."""


MAX_MOVE_CHARS = 100
"""Longest parsed move kept (``TurnRecord.move``)."""

GAME_LOCK = threading.RLock()
"""Held by every call into game code, on whatever thread: game code shares the process's
``random`` state and ``sys.stdout`` (see the module's docstring). Callers on an event loop
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


class GameSession:
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
        self._rng_state: Any = random.Random(seed).getstate()
        self._outcome: Outcome | None = None
        self._started = False
        self._current = 0

    # -- guarded calls -------------------------------------------------------------------
    def _guard(
        self,
        fn: Callable[[], T],
        what: str,
        timeout: float | Literal["step"] | None = "step",
        uses_random: bool = False,
        fatal: bool = True,
    ) -> T:
        """Call into the game with the limits, holding ``GAME_LOCK``. ``uses_random``: swap
        in the game's private ``random`` state (only moves and resets draw from it; reads do
        not). ``fatal``: a failure aborts the game (False for views only spectators use)."""
        limit = self.limits.step_timeout_s if timeout == "step" else timeout
        with GAME_LOCK:
            if uses_random:
                random.setstate(self._rng_state)
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
                reason = f"{self.game_id} raised during {what}: {type(exc).__name__}: {exc}"
                raise (self._fail(reason) if fatal else GameError(reason)) from exc
            finally:
                if sys.stdout is quiet:  # else code elsewhere replaced it meanwhile: keep that
                    sys.stdout = stdout
                if uses_random:
                    self._rng_state = random.getstate()

    def _fail(self, reason: str) -> GameError:
        self.abort(reason)
        return GameError(reason)

    def _collect(self) -> None:
        for message in self.game.drain_messages():
            if message.to is None:
                self._public_messages.append(message)
                for seat_log in self._seat_messages:
                    seat_log.append(message)
            elif 0 <= message.to < self.num_players:
                self._seat_messages[message.to].append(message)

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        """Reset the game. Raises ValueError for an unsupported player count, GameError
        when the game fails."""
        if self._started:
            raise SessionError("session already started")
        self._started = True
        self.game.set_invalid_move_allowance(self.limits.allowance)

        def reset() -> tuple[bool, int, dict[int, float] | None, set[int]]:
            self.game.reset(self.num_players, self.seed)
            return self._read_state()

        try:
            state = self._guard(reset, "reset", self.limits.reset_timeout_s, uses_random=True)
        except GameError as exc:
            if isinstance(exc.__cause__, ValueError):
                raise ValueError(str(exc.__cause__)) from None
            raise
        self._collect()
        self._apply_state(*state)

    def _read_state(self) -> tuple[bool, int, dict[int, float] | None, set[int]]:
        """Inside a guarded call: (done, current seat, rewards if done, forfeited seats)."""
        if self.game.is_done():
            return True, -1, self.game.rewards(), self.game.forfeited()
        return False, self.game.current_player(), None, set()

    def _apply_state(
        self, done: bool, current: int, rewards: dict[int, float] | None, forfeited: set[int]
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
        if not isinstance(current, int) or not 0 <= current < self.num_players:
            raise self._fail(
                f"{self.game_id} named seat {current!r} to move; it has {self.num_players} seats"
            )
        self._current = current

    @property
    def outcome(self) -> Outcome | None:
        """The outcome once the game is over, else None."""
        return self._outcome

    @property
    def done(self) -> bool:
        """True once the game is over (finished, truncated or aborted)."""
        return self._outcome is not None

    def current_player(self) -> int:
        """The seat that must move. Raises GameOver after the end."""
        if self._outcome is not None:
            raise GameOver(f"{self.game_id} is over ({self._outcome.status.value})")
        return self._current

    def step(self, seat: int, action: str) -> TurnRecord:
        """Apply ``seat``'s move.

        Raises NotYourTurn, GameOver, TypeError for a non-text action, or GameError (the
        game failed; the session is then aborted).
        """
        if not self._started:
            raise SessionError("call start() first")
        current = self.current_player()
        if seat != current:
            raise NotYourTurn(f"seat {seat} moved, but it is seat {current}'s turn")
        if not isinstance(action, str):
            raise TypeError(f"an action is text, got {type(action).__name__}")
        cap = self.limits.max_action_chars
        truncated = len(action) > cap
        text = action[:cap] if truncated else action

        def apply() -> tuple[Any, Any, tuple[bool, int, dict[int, float] | None, set[int]]]:
            listed = self.game.legal_moves(seat)
            result = self.game.step(text)
            return result, self.game.parse_move(text, listed), self._read_state()

        result, move, state = self._guard(apply, "step", uses_random=True)
        self._collect()
        if not result.valid:
            self.invalid_moves[seat] += 1
        self._apply_state(*state)
        if self._outcome is None and len(self.turns) + 1 >= self.limits.max_turns:
            self._outcome = Outcome(
                status=Status.TRUNCATED,
                rewards={s: 0.0 for s in range(self.num_players)},
                reason=f"stopped at the {self.limits.max_turns}-move limit",
            )
        record = TurnRecord(
            index=len(self.turns),
            seat=seat,
            action=text,
            truncated=truncated,
            valid=bool(result.valid),
            reason=result.reason,
            done=self._outcome is not None,
            move=move[:MAX_MOVE_CHARS] if isinstance(move, str) else None,
        )
        self.turns.append(record)
        return record

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

    # -- views ---------------------------------------------------------------------------
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
        """The public state as JSON-encodable data for a browser board (``PublicBoard``:
        grid, cards, pot, chips, scores), or None when the game has none or it fails (a
        game that raises here is void, as for any call into it)."""
        try:
            board = self._guard(self.game.public_board, "public_board")
        except GameError:
            return None
        return board.as_dict() if board is not None else None

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
        key = (self.game_id, view)
        if key not in _view_failures_logged:
            _view_failures_logged.add(key)
            log.warning("%s; spectators get a plain-text view instead (logged once)", exc)
