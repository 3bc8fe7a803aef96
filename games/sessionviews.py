"""What a session shows without changing the game: each seat's transcript, the legal moves,
the text states and the boards (``SessionViews``, which ``GameSession`` extends), and what
spectators see after a move (``SpectatorViews``). A view that fails never stops a game: it
is logged once and replaced."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from games.api import Game, GameMessage, MessageKind
from games.boardjson import decode_board, encode_board
from games.sessionerrors import GameError, failure_text

T = TypeVar("T")

log = logging.getLogger("games.session")  # the session's log: a view belongs to its session
_view_failures_logged: set[tuple[str, str]] = set()
"""(game id, view) pairs whose failure was logged: a broken view is logged once per
process, not once per move."""


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
        return None if self.board_text is None else decode_board(self.board_text)

    @property
    def full_board(self) -> dict[str, Any] | None:
        """The all-seeing board as data, when it differs from ``board``."""
        return None if self.full_board_text is None else decode_board(self.full_board_text)


class SessionViews:
    """The reads of a session (``GameSession`` is one): each seat's transcript, the legal
    moves, and what spectators see (the text state and the boards). A view never changes
    the game: one that fails is logged once and replaced (see ``public_state``)."""

    game: Game
    game_id: str
    log_view_failures: bool
    view_failures: dict[str, str]
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

        @property
        def done(self) -> bool: ...

    def seat_messages(self, seat: int) -> list[GameMessage]:
        """Every message ``seat`` received, in order (its private ones included)."""
        return list(self._seat_messages[seat])

    def public_messages(self) -> list[GameMessage]:
        """The messages every seat received."""
        return list(self._public_messages)

    def legal_moves(self, seat: int) -> list[str] | None:
        """The moves the game lists for ``seat`` now, if it lists them."""
        if self.done:
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
        return None if text is None else decode_board(text)

    def full_board(self) -> dict[str, Any] | None:
        """The all-seeing board (hidden cards face up, ``Game.full_board``); show it only
        after the match. None when the game has none; failures as for ``public_board``."""
        text = self._board_text(self.game.full_board, "full_board")
        return None if text is None else decode_board(text)

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
            board = encode_board(self.game.public_board(), "public_board")
            return state, board, encode_board(self.game.full_board(), "full_board")

        try:
            state, board, full = self._guard(read, "views", fatal=False)
        except GameError:
            state = self.public_state()
            board = self._board_text(self.game.public_board, "public_board")
            full = self._board_text(self.game.full_board, "full_board")
        return SpectatorViews(state, board, full if full != board else None)

    def _board_text(self, read: Callable[[], Any], what: str) -> str | None:
        try:
            return self._guard(lambda: encode_board(read(), what), what, fatal=False)
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
        self.view_failures.setdefault(view, failure_text(cause) if cause is not None else str(exc))
        if not self.log_view_failures:
            return
        key = (self.game_id, view)
        if key not in _view_failures_logged:
            _view_failures_logged.add(key)
            fallback = "the text view" if view.endswith("board") else "a plain-text view"
            log.warning("%s; spectators get %s instead (logged once)", exc, fallback)
