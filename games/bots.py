"""Bots: scripted players that see exactly what their seat sees and answer with text.

* ``random``: a uniformly random legal move, for any game whose legal moves can be read.
* ``optimal``: perfect tic-tac-toe (minimax over the board it is shown), TicTacToe-v0 only.

Bots are cheap, picklable configuration until ``make_bot`` builds one for a match.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from games.api import GameMessage, GameSpec, MessageKind


@dataclass(frozen=True)
class BotView:
    """What a bot is shown when it must move."""

    game_id: str
    seat: int
    messages: Sequence[GameMessage]
    """Every message the seat received, in order."""
    legal_moves: list[str] | None
    """The moves the game lists now, when it lists them."""


class Bot:
    """A scripted player. Subclasses implement ``act``."""

    name = "bot"

    def act(self, view: BotView) -> str:
        """The move to make, as text."""
        raise NotImplementedError


class UnknownBot(ValueError):
    """No bot has this name, or it cannot play this game."""


class RandomBot(Bot):
    """Plays a uniformly random legal move."""

    name = "random"

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def act(self, view: BotView) -> str:
        if not view.legal_moves:
            # The game listed no moves this turn: answer something well-formed rather than
            # nothing, and let the game judge it.
            return "[0]"
        return self._rng.choice(view.legal_moves)


_CELL = re.compile(r"^\s*(\S)\s*$")
_LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))


def parse_tictactoe_board(text: str) -> list[str] | None:
    """The 9 cells ('X', 'O' or '') of the last board in ``text``, or None."""
    rows: list[list[str]] = []
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != 3:
            continue
        cells = []
        for part in parts:
            match = _CELL.match(part)
            if not match:
                break
            cells.append(match.group(1))
        if len(cells) == 3:
            rows.append(cells)
    if len(rows) < 3:
        return None
    flat = [c for row in rows[-3:] for c in row]
    return [c if c in ("X", "O") else "" for c in flat]


def _winner(board: tuple[str, ...]) -> str:
    for a, b, c in _LINES:
        if board[a] and board[a] == board[b] == board[c]:
            return board[a]
    return ""


@functools.cache
def _value(board: tuple[str, ...], to_move: str) -> int:
    """Minimax value for the side to move: +(10 - plies) win, 0 draw, -(10 - plies) loss."""
    win = _winner(board)
    empty = [i for i, c in enumerate(board) if not c]
    if win:
        return -(len(empty) + 1)  # the previous mover won; sooner is worse for us
    if not empty:
        return 0
    other = "O" if to_move == "X" else "X"
    best = -100
    for i in empty:
        child = (*board[:i], to_move, *board[i + 1 :])
        best = max(best, -_value(child, other))
    return best


def best_tictactoe_moves(cells: Sequence[str], me: str) -> list[int]:
    """Every optimal cell for ``me`` ('X' or 'O') on ``cells``."""
    board = tuple(cells)
    other = "O" if me == "X" else "X"
    empty = [i for i, c in enumerate(board) if not c]
    scores = {i: -_value((*board[:i], me, *board[i + 1 :]), other) for i in empty}
    top = max(scores.values())
    return [i for i, s in scores.items() if s == top]


class TicTacToeBot(Bot):
    """Perfect tic-tac-toe: never loses; picks at random among optimal moves."""

    name = "optimal"

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def act(self, view: BotView) -> str:
        mark = ""
        board: list[str] | None = None
        for message in view.messages:
            if message.kind is MessageKind.PROMPT:
                found = re.search(r"you will be '([XO])'", message.text)
                if found:
                    mark = found.group(1)
            if message.sender < 0 and "|" in message.text:
                parsed = parse_tictactoe_board(message.text)
                if parsed is not None:
                    board = parsed
        if not mark or board is None:
            legal = view.legal_moves or ["[4]"]
            return self._rng.choice(legal)
        moves = best_tictactoe_moves(board, mark)
        return f"[{self._rng.choice(moves)}]"


BotFactory = Callable[[int], Bot]

_BOTS: dict[str, tuple[BotFactory, Callable[[GameSpec], str | None]]] = {
    "random": (
        RandomBot,
        lambda spec: (
            None
            if spec.legal_moves
            else f"{spec.game_id} does not list its legal moves, so 'random' cannot play it"
        ),
    ),
    "optimal": (
        TicTacToeBot,
        lambda spec: (
            None
            if spec.game_id == "TicTacToe-v0"
            else f"'optimal' plays only TicTacToe-v0, not {spec.game_id}"
        ),
    ),
}


def bot_names() -> list[str]:
    """Names accepted by ``make_bot``."""
    return sorted(_BOTS)


def check_bot(name: str, spec: GameSpec) -> None:
    """Raise UnknownBot when ``name`` is not a bot or cannot play ``spec``'s game."""
    if name not in _BOTS:
        raise UnknownBot(f"unknown bot {name!r}; choose from: {', '.join(bot_names())}")
    problem = _BOTS[name][1](spec)
    if problem:
        raise UnknownBot(problem)


def make_bot(name: str, seed: int) -> Bot:
    """Build the bot called ``name``. Raises UnknownBot."""
    if name not in _BOTS:
        raise UnknownBot(f"unknown bot {name!r}; choose from: {', '.join(bot_names())}")
    return _BOTS[name][0](seed)
