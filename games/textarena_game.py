"""TextArena games behind the registry's game API.

Each game gets a fresh, unwrapped TextArena env (``<id>-raw``): TextArena's observation
wrappers keep history across resets and flatten messages to text, while arena keeps each
seat's transcript itself, with every message marked public or private.

TextArena's ``State.add_observation`` and ``set_invalid_move`` are wrapped once, at import,
to report into the game that is currently being called on this thread (one game object is
only ever touched by one session on one thread).

The adapter is generic. What arena knows about one TextArena game (its legal moves read
from the game state, its public board, how to redraw its hidden cards, its compact view and
bots) lives in that game's small module in ``games.textarena_games``, as a
``TextArenaExtras``, which the registry hands to the adapter.

TextArena's values are coerced here, at the adapter, so that the rest of arena sees the
types the game API promises: a message's text is a ``str`` and its sender an ``int`` (some
games pass numbers or enums), and a reward is a ``float``. Some single-player games
(Countdown, Cryptarithm, Slitherlink, ThreeCardMonte) call ``set_invalid_move(progress,
reason)`` with the arguments swapped, so their "reward" is the reason text: the reason is
taken from whichever argument is text, and a reward that is not a number counts as 0 (the
session then applies its invalid-move penalty to the seat that forfeited).
"""

from __future__ import annotations

import copy
import functools
import inspect
import math
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import textarena as ta
import textarena.state as ta_state

from games.api import GAME, Game, GameKit, GameMessage, MessageKind, MoveResult, PublicBoard
from games.legal import extract_legal_moves

StateMoves = Callable[[Any, int], "list[str] | None"]
"""``(raw TextArena env, seat) -> the seat's legal moves``, read from the game state."""
StateBoard = Callable[[Any], "PublicBoard | None"]
"""``(raw TextArena env) -> the public board``."""
HiddenRedraw = Callable[[Any, int, random.Random], bool]
"""``(a copy of the raw env, seat, rng) -> True`` after redrawing, in place, everything the
env hides from ``seat``; False when there is nothing to redraw now."""


@dataclass(frozen=True)
class TextArenaExtras(GameKit):
    """A TextArena game's module: the ``GameKit`` parts plus hooks into the live env.

    The hooks read the unwrapped env's ``state.game_state``; each must hold only what its
    docstring allows (the board: nothing hidden from any seat).
    """

    legal_moves: StateMoves | None = None
    """Legal moves from the game state, when the observation text lists them badly or not
    at all (templates like ``[bet X]``, lists printed once)."""
    board: StateBoard | None = None
    """The public board for the browser."""
    full_board: StateBoard | None = None
    """The all-seeing board (hidden cards face up), for after the match
    (``Game.full_board``)."""
    redraw_hidden: HiddenRedraw | None = None
    """Redraws what is hidden from a seat (for ``Game.resample_hidden``)."""
    free_text: bool = False
    """The bracketed lists in its text are rules or templates (``[Propose]`` needs an
    offer after it), not the moves legal now: the game lists no legal moves."""


NO_EXTRAS = TextArenaExtras()
"""The extras of a TextArena game that has no module of its own."""

_KIND = {
    ta.ObservationType.PROMPT: MessageKind.PROMPT,
    ta.ObservationType.PLAYER_ACTION: MessageKind.ACTION,
    ta.ObservationType.GAME_ACTION_DESCRIPTION: MessageKind.DESCRIPTION,
    ta.ObservationType.GAME_MESSAGE: MessageKind.INFO,
    ta.ObservationType.GAME_BOARD: MessageKind.BOARD,
    ta.ObservationType.GAME_ADMIN: MessageKind.ADMIN,
}

_active = threading.local()


def _current() -> TextArenaGame | None:
    return getattr(_active, "game", None)


def _wrap_add_observation(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def add_observation(
        self: Any,
        message: str,
        observation_type: Any,
        from_id: int = GAME,
        to_id: int = -1,
    ) -> Any:
        result = original(
            self, message=message, observation_type=observation_type, from_id=from_id, to_id=to_id
        )
        game = _current()
        if game is not None:
            game._record(message, observation_type, from_id, to_id)
        return result

    return add_observation


def _invalid_reason(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """The reason text of a ``set_invalid_move`` call, whichever argument carries it."""
    reason = kwargs.get("reason", args[0] if args else None)
    if isinstance(reason, str):
        return reason
    for value in (*args, *kwargs.values()):  # swapped arguments: (progress, reason)
        if isinstance(value, str):
            return value
    return "invalid move" if reason is None else str(reason)


def _wrap_set_invalid_move(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def set_invalid_move(self: Any, *args: Any, **kwargs: Any) -> Any:
        game = _current()
        if game is not None:
            game._invalid_reason = _invalid_reason(args, kwargs)
            game._invalid_seat = self.current_player_id
        return original(self, *args, **kwargs)

    return set_invalid_move


def _reward(value: Any) -> float:
    """A TextArena reward as a float; anything that is not a finite number counts as 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    number = float(value)
    return number if math.isfinite(number) else 0.0


def _sender(value: Any) -> int:
    """A message's sender id as an int (``GAME`` when it is not one)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return GAME


def _install_hooks() -> None:
    if getattr(ta.State, "_arena_hooked", False):
        return
    state_cls: Any = ta.State
    state_cls.add_observation = _wrap_add_observation(state_cls.add_observation)
    for _, cls in inspect.getmembers(ta_state, inspect.isclass):
        if issubclass(cls, ta.State) and "set_invalid_move" in cls.__dict__:
            hooked = _wrap_set_invalid_move(cls.__dict__["set_invalid_move"])
            cls.set_invalid_move = hooked  # type: ignore[attr-defined]
    state_cls._arena_hooked = True


_install_hooks()


class TextArenaGame(Game):
    """One TextArena game, exposed through the registry's game API."""

    def __init__(
        self, ta_id: str, game_id: str | None = None, extras: TextArenaExtras = NO_EXTRAS
    ) -> None:
        self.ta_id = ta_id
        self.game_id = game_id or ta_id
        self.extras = extras
        self._env: Any = None
        self._messages: list[GameMessage] = []
        self._allowance = 1
        self._invalid_reason: str | None = None
        self._invalid_seat: int | None = None
        self._num_players = 0
        self._last_moves: dict[int, list[str]] = {}
        self._unread: dict[int, list[str]] = {}
        self._public_board: str | None = None
        self._final_rewards: dict[int, float] | None = None

    # -- hooks called from the wrapped TextArena methods ------------------------------
    def _record(self, message: str, observation_type: Any, from_id: int, to_id: int) -> None:
        kind = _KIND.get(observation_type, MessageKind.INFO)
        to = None if to_id == -1 else to_id if type(to_id) is int else _sender(to_id)
        if type(from_id) is not int:
            from_id = _sender(from_id)
        text = message if isinstance(message, str) else str(message)
        self._messages.append(GameMessage(sender=from_id, text=text, kind=kind, to=to))
        if kind is MessageKind.BOARD and to is None:
            self._public_board = text
        if from_id == GAME and kind is not MessageKind.ACTION and self.extras.legal_moves is None:
            # Legal moves are read lazily, from the newest message that lists them.
            for seat in range(self._num_players) if to is None else (to,):
                self._unread[seat].append(text)

    def _call(self, fn: Callable[[], Any]) -> Any:
        _active.game = self
        try:
            return fn()
        finally:
            _active.game = None
            # Arena keeps the transcript; TextArena's own per-seat queues would only grow.
            state = getattr(self._env, "state", None)
            if state is not None:
                for queue in getattr(state, "observations", {}).values():
                    queue.clear()

    # -- Game API ----------------------------------------------------------------------
    def reset(self, num_players: int, seed: int) -> None:
        self._env = ta.make(self.ta_id)
        self._num_players = num_players
        self._unread = {seat: [] for seat in range(num_players)}
        try:
            self._call(lambda: self._env.reset(num_players=num_players, seed=seed))
        except AssertionError as exc:
            raise ValueError(f"{self.ta_id} does not support {num_players} players: {exc}") from exc
        self._env.state.error_allowance = self._allowance

    def set_invalid_move_allowance(self, allowance: int) -> None:
        self._allowance = allowance
        if self._env is not None:
            self._env.state.error_allowance = allowance

    def current_player(self) -> int:
        return int(self._env.state.current_player_id)

    def step(self, action: str) -> MoveResult:
        self._invalid_reason = None
        self._invalid_seat = None
        seat = self.current_player()
        self._last_moves.pop(seat, None)
        self._unread[seat].clear()
        self._call(lambda: self._env.step(action))
        if self._invalid_reason is not None and self._invalid_seat == seat:
            return MoveResult(valid=False, reason=self._invalid_reason)
        return MoveResult(valid=True)

    def is_done(self) -> bool:
        return bool(self._env.state.done)

    def rewards(self) -> dict[int, float]:
        if self._final_rewards is None:
            rewards, _info = self._call(self._env.close)
            rewards = rewards or {}
            self._final_rewards = {
                seat: _reward(rewards.get(seat, 0.0)) for seat in range(self._num_players)
            }
        return dict(self._final_rewards)

    def forfeited(self) -> set[int]:
        info = getattr(self._env.state, "game_info", {}) or {}
        return {
            int(pid) for pid, d in info.items() if isinstance(d, dict) and d.get("invalid_move")
        }

    def drain_messages(self) -> list[GameMessage]:
        out, self._messages = self._messages, []
        return out

    def legal_moves(self, seat: int) -> list[str] | None:
        if self.extras.free_text:
            return None
        if self.extras.legal_moves is not None:
            if self._env is None or self.is_done() or seat != self.current_player():
                return None
            return self.extras.legal_moves(self._env, seat)
        unread = self._unread.get(seat)
        if unread:
            for text in reversed(unread):
                moves = extract_legal_moves(text, self.extras.read_legal_moves)
                if moves is not None:
                    self._last_moves[seat] = moves
                    break
            unread.clear()
        return self._last_moves.get(seat)

    def public_state(self) -> str | None:
        return self._public_board

    def public_board(self) -> PublicBoard | None:
        if self.extras.board is None or self._env is None:
            return None
        return self.extras.board(self._env)

    def full_board(self) -> PublicBoard | None:
        if self.extras.full_board is None or self._env is None:
            return None
        return self.extras.full_board(self._env)

    def resample_hidden(self, seat: int, rng: random.Random) -> TextArenaGame | None:
        if self.extras.redraw_hidden is None or self._env is None:
            return None
        twin = copy.deepcopy(self)
        if not twin.extras.redraw_hidden(twin._env, seat, rng):  # type: ignore[misc]
            return None
        return twin

    def full_state(self) -> str | None:
        board = getattr(self._env, "get_board_str", None)
        if board is not None:
            try:
                return str(self._call(board))
            except Exception:  # a broken renderer must not break the end of a match
                return self._public_board
        return self._public_board
