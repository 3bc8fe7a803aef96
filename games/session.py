"""The one place that guards a game: limits, turn order, invalid moves, failures.

Everything a game does goes through ``GameSession``. It caps the length of actions, the
number of moves and the wall time of each call into the game; refuses moves out of turn
and after the end; turns every exception from the game into ``GameError``; keeps the
game's prints out of our output (``games.stdoutguard``); applies the invalid-move policy;
and keeps each seat's transcript (what that seat, and only that seat, was shown; the reads
are ``games.sessionviews``).

TextArena seeds and draws from the global ``random`` module. The session gives each game a
private generator, which ``random``'s functions use during every move and reset of that
game (``games.rng``), so a game replays the same from the same seed however many other
games run interleaved, and whatever other code draws from ``random`` meanwhile, on any
thread.

Threads. A session may be called from any thread, but game code never runs on two threads
at once: every guarded call holds ``games.stdoutguard.GAME_LOCK``.
"""

from __future__ import annotations

import contextlib
import random
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, TypeVar

from games import rng as game_rng
from games.api import Game, GameMessage, MessageKind, MoveResult, SimultaneousGame
from games.limits import SessionLimits
from games.sessionerrors import (
    GameError,
    GameOver,
    NotYourTurn,
    RoundError,
    SessionError,
    failure_text,
)
from games.sessionviews import SessionViews
from games.stdoutguard import GAME_LOCK, quiet_stdout
from games.turnrecord import TurnRecord
from games.watchdog import StepTimeout, call_with_deadline

T = TypeVar("T")
game_rng.install()


class Status(StrEnum):
    """Where a game stands."""

    LIVE = "live"
    FINISHED = "finished"
    """Ended by its own rules."""
    TRUNCATED = "truncated"
    """Stopped at ``max_turns``; scored as a draw."""
    ABORTED = "aborted"
    """Void: a seat or the game failed. No rewards."""


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
            quiet = quiet_stdout()
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
                reason = f"{self.game_id} raised during {what}: {failure_text(exc)}"
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
