"""Connect Four (TextArena ``ConnectFour-v0``, ``-large``, ``-blind``): moves, board, bots.

TextArena shows ``Board state:`` after every move (column numbers, a rule, then the rows,
top row first, ``.`` for empty) but never lists the legal moves, so they are read off the
board: every column whose top cell is empty. Player 0 drops ``X`` and moves first. In the
``-blind`` variant nobody is shown the board, so it has no public board and no bot.

* ``read_legal_moves``: the open columns of the last board shown, as ``[c]``.
* ``compact_view``: ``......./......./..TM...`` (the rows top first, from the seat's side:
  ``M`` its discs, ``T`` the other's); the answer is a column number. As for
  tic-tac-toe, both seats see the same kind of board.
* ``board``: the grid for the browser, drawn as discs (a click in column ``c`` plays ``[c]``).
* ``alphabeta-N`` bots (N = 1 to ``MAX_DEPTH``): negamax with alpha-beta pruning, N plies
  deep, over a window-counting evaluation; a graded opponent (depth 2 already beats random
  play almost always).
* ``yardstick``: games against ``alphabeta-1`` and ``alphabeta-2``, half in each seat; the
  headline is the mean of the two scores (a win counts 1, a draw 1/2).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from games.api import (
    GAME,
    Bot,
    BotView,
    GameMessage,
    GridRows,
    MatchRecord,
    MessageKind,
    PublicBoard,
    Yardstick,
)
from games.textarena_game import TextArenaExtras

MAX_DEPTH = 5
"""Deepest search offered: depth 5 takes up to about 0.05 s per move on the 6x7 board in
CPython (bots run on the caller's thread, so deeper searches would stall it)."""
WIN_SCORE = 1_000_000
"""Score of a won position (minus the plies it took, so faster wins score higher)."""

Grid = list[list[str]]
"""Rows of cells, top row first: 'X', 'O' or '.'."""


_CELLS = frozenset(("X", "O", "."))


def parse_board(text: str) -> Grid | None:
    """The rows of the last ``Board state:`` in ``text`` (top first), or None."""
    at = text.rfind("Board state:")
    if at < 0:
        return None
    lines = [line.strip() for line in text[at:].splitlines()[1:]]
    if len(lines) < 3 or not lines[1].startswith("-"):
        return None
    width = len(lines[0].split())
    rows: Grid = []
    for line in lines[2:]:
        cells = line.split()
        if len(cells) != width or not _CELLS.issuperset(cells):
            break
        rows.append(cells)
    return rows or None


def read_legal_moves(text: str) -> list[str] | None:
    """Columns whose top cell is empty on the last board shown, as ``[c]``."""
    grid = parse_board(text)
    if grid is None:
        return None
    return [f"[{c}]" for c, cell in enumerate(grid[0]) if cell == "."] or None


def state_legal_moves(env: Any, seat: int) -> list[str] | None:
    """The open columns, read from the game state (what ``read_legal_moves`` reads off the
    board shown, without parsing text)."""
    top = env.state.game_state["board"][0]
    return [f"[{c}]" for c, cell in enumerate(top) if cell == "."] or None


def seat_view(messages: Sequence[GameMessage], seat: int) -> tuple[str, Grid | None]:
    """The seat's disc ('X' for player 0, 'O' for player 1) and the last board shown."""
    grid: Grid | None = None
    for m in messages:
        if m.sender == GAME and m.kind is not MessageKind.PROMPT and "Board state:" in m.text:
            grid = parse_board(m.text) or grid
    return ("X" if seat == 0 else "O"), grid


def compact_view(messages: Sequence[GameMessage], seat: int) -> str | None:
    """``rows/top/first`` from the seat's side: ``M`` its discs, ``T`` the other's, ``.``
    empty, the rows joined by ``/``."""
    disc, grid = seat_view(messages, seat)
    if grid is None:
        return None
    mine = {disc: "M", ".": "."}
    return "/".join("".join(mine.get(cell, "T") for cell in row) for row in grid)


# -- search -------------------------------------------------------------------------------
def _windows(rows: int, cols: int) -> list[tuple[tuple[int, int], ...]]:
    """Every line of four cells on a rows x cols board."""
    out = []
    for r in range(rows):
        for c in range(cols):
            for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
                cells = tuple((r + dr * k, c + dc * k) for k in range(4))
                if all(0 <= rr < rows and 0 <= cc < cols for rr, cc in cells):
                    out.append(cells)
    return out


_WINDOW_CACHE: dict[tuple[int, int], list[tuple[tuple[int, int], ...]]] = {}


def _lines(rows: int, cols: int) -> list[tuple[tuple[int, int], ...]]:
    key = (rows, cols)
    if key not in _WINDOW_CACHE:
        _WINDOW_CACHE[key] = _windows(rows, cols)
    return _WINDOW_CACHE[key]


def _drop(grid: Grid, col: int, disc: str) -> int:
    """Put ``disc`` in ``col``; return the row it landed in."""
    for r in range(len(grid) - 1, -1, -1):
        if grid[r][col] == ".":
            grid[r][col] = disc
            return r
    raise ValueError(f"column {col} is full")


def _wins_at(grid: Grid, row: int, col: int) -> bool:
    disc = grid[row][col]
    rows, cols = len(grid), len(grid[0])
    for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
        count = 1
        for sign in (1, -1):
            r, c = row + sign * dr, col + sign * dc
            while 0 <= r < rows and 0 <= c < cols and grid[r][c] == disc:
                count += 1
                r, c = r + sign * dr, c + sign * dc
        if count >= 4:
            return True
    return False


_WEIGHTS = {1: 1, 2: 4, 3: 16}


def evaluate(grid: Grid, me: str) -> int:
    """Heuristic score for ``me``: open lines of four weighted by how full they are, plus
    a small bonus for the centre column."""
    other = "O" if me == "X" else "X"
    score = 0
    for window in _lines(len(grid), len(grid[0])):
        mine = theirs = 0
        for r, c in window:
            cell = grid[r][c]
            if cell == me:
                mine += 1
            elif cell == other:
                theirs += 1
        if mine and not theirs:
            score += _WEIGHTS.get(mine, 0)
        elif theirs and not mine:
            score -= _WEIGHTS.get(theirs, 0)
    centre = len(grid[0]) // 2
    score += 2 * sum(1 for row in grid if row[centre] == me)
    return score


def _order(cols: int) -> list[int]:
    """Columns from the centre out: better moves first make alpha-beta cut more."""
    centre = cols // 2
    return sorted(range(cols), key=lambda c: (abs(c - centre), c))


def _negamax(grid: Grid, depth: int, alpha: int, beta: int, me: str, ply: int) -> int:
    other = "O" if me == "X" else "X"
    moves = [c for c in _order(len(grid[0])) if grid[0][c] == "."]
    if not moves:
        return 0
    if depth == 0:
        return evaluate(grid, me)
    best = -WIN_SCORE * 2
    for col in moves:
        row = _drop(grid, col, me)
        if _wins_at(grid, row, col):
            value = WIN_SCORE - ply
        else:
            value = -_negamax(grid, depth - 1, -beta, -alpha, other, ply + 1)
        grid[row][col] = "."
        if value > best:
            best = value
        alpha = max(alpha, value)
        if alpha >= beta:
            break
    return best


def best_columns(grid: Grid, me: str, depth: int) -> list[int]:
    """The columns with the best ``depth``-ply negamax score for ``me`` ('X' or 'O').

    Raises ValueError for a depth outside 1..MAX_DEPTH, a bad mark or a full board.
    """
    if not 1 <= depth <= MAX_DEPTH:
        raise ValueError(f"depth must be 1 to {MAX_DEPTH}, not {depth}")
    if me not in ("X", "O"):
        raise ValueError(f"a disc is 'X' or 'O', not {me!r}")
    work = [list(row) for row in grid]
    other = "O" if me == "X" else "X"
    scores: dict[int, int] = {}
    for col in _order(len(work[0])):
        if work[0][col] != ".":
            continue
        row = _drop(work, col, me)
        if _wins_at(work, row, col):
            scores[col] = WIN_SCORE
        else:
            scores[col] = -_negamax(work, depth - 1, -WIN_SCORE * 2, WIN_SCORE * 2, other, 1)
        work[row][col] = "."
    if not scores:
        raise ValueError("the board is full")
    top = max(scores.values())
    return [c for c, s in scores.items() if s == top]


class AlphaBetaBot(Bot):
    """Connect Four by ``depth``-ply alpha-beta search; ties broken at random."""

    def __init__(self, seed: int, depth: int) -> None:
        if not 1 <= depth <= MAX_DEPTH:
            raise ValueError(f"alphabeta depth must be 1 to {MAX_DEPTH}, not {depth}")
        self.depth = depth
        self.name = f"alphabeta-{depth}"
        self._rng = random.Random(seed)

    def act(self, view: BotView) -> str:
        disc, grid = seat_view(view.messages, view.seat)
        if grid is None or all(cell != "." for cell in grid[0]):
            return self._rng.choice(view.legal_moves or ["[0]"])
        return f"[{self._rng.choice(best_columns(grid, disc, self.depth))}]"


BOTS = {
    f"alphabeta-{depth}": partial(AlphaBetaBot, depth=depth) for depth in range(1, MAX_DEPTH + 1)
}


MARKS = {"X": 0, "O": 1}
"""The seat of each disc: player 0 drops X."""


_GRID_ROWS = GridRows(lambda cell: "" if cell == "." else str(cell))
"""TextArena's rows ('.' for an empty cell) as the board's."""


def board(env: Any) -> PublicBoard | None:
    """The grid ('X', 'O', '' for empty), drawn as discs, and the seat to move; a click in
    column ``c`` plays ``[c]``. None in the blind variant."""
    if not getattr(env, "is_open", True):
        return None
    state = env.state
    grid = _GRID_ROWS(state.game_state["board"])
    to_move = None if state.done else int(state.current_player_id)
    return PublicBoard(
        kind="grid", grid=grid, to_move=to_move, marks=MARKS, style="discs", cell_move="[{col}]"
    )


YARDSTICK_DEPTHS = (1, 2)
"""The alpha-beta depths the yardstick plays."""


def yardstick_figures(records: Mapping[str, MatchRecord]) -> dict[str, float]:
    """The score against each yardstick depth, and their mean (the headline)."""
    scores = {f"score_vs_alphabeta-{d}": records[f"alphabeta-{d}"].score for d in YARDSTICK_DEPTHS}
    return {"score_vs_alphabeta": sum(scores.values()) / len(scores), **scores}


YARDSTICK = Yardstick(
    figure="score_vs_alphabeta",
    opponents=tuple(f"alphabeta-{d}" for d in YARDSTICK_DEPTHS),
    from_matches=yardstick_figures,
)

EXTRAS = TextArenaExtras(
    read_legal_moves=read_legal_moves,
    legal_moves=state_legal_moves,
    compact_view=compact_view,
    bots=BOTS,
    board=board,
    yardstick=YARDSTICK,
    reward_sum=0.0,
)
LARGE_EXTRAS = TextArenaExtras(
    read_legal_moves=read_legal_moves,
    legal_moves=state_legal_moves,
    compact_view=compact_view,
    board=board,
    reward_sum=0.0,
)
"""``ConnectFour-v0-large`` (12 x 15): the same reader, view and board; no bot (the
search is tuned for the 6 x 7 board)."""
BLIND_EXTRAS = TextArenaExtras(reward_sum=0.0)
"""``ConnectFour-v0-blind``: no board is shown, so no reader, view or bot."""
