"""The registry's game API: what every game, native or adapted from TextArena, provides.

A game is a synchronous, I/O-free state machine for N seats that take turns
(``Game``) or move at once in rounds (``SimultaneousGame``). It never sleeps, prints
(prints are swallowed anyway) or reads a clock, so tests drive it directly.
The ``GameSession`` in ``games.session`` wraps a game with the limits; the async turn
coordination lives in ``arena``.
"""

from __future__ import annotations

import random
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

GAME = -1
"""Sender id of messages from the game itself."""


class MessageKind(StrEnum):
    """What a message is, so renderers can pick what to show."""

    PROMPT = "prompt"
    """The rules and the seat's role, sent once at the start."""
    ACTION = "action"
    """A seat's raw move text."""
    DESCRIPTION = "description"
    """The game describing a move."""
    BOARD = "board"
    """The current state of the game as this seat may see it."""
    INFO = "info"
    """Other game messages."""
    ADMIN = "admin"
    """Invalid moves, wins and losses."""


@dataclass(frozen=True)
class GameMessage:
    """One message of a game's transcript."""

    sender: int
    """The seat that wrote it, or ``GAME``."""
    text: str
    kind: MessageKind
    to: int | None = None
    """The only seat that receives it, or None when every seat does (public)."""

    @property
    def public(self) -> bool:
        """True when every seat received it."""
        return self.to is None


@dataclass(frozen=True)
class MoveResult:
    """What applying one move did."""

    valid: bool
    reason: str | None = None
    """Why the move was invalid (None when valid)."""


@dataclass(frozen=True)
class GameSpec:
    """A catalogue entry: a game id and what it needs."""

    game_id: str
    min_players: int
    max_players: int
    source: str
    """``native`` (arena's own), ``textarena`` or ``plugin`` (an installed package)."""
    available: bool
    reason: str | None = None
    """Why the game is unavailable here, or a caveat."""
    hidden_information: bool = False
    """True when seats receive private messages (cards, roles)."""
    legal_moves: bool = False
    """True when the random bot can read the legal moves."""
    description: str = ""
    player_counts: tuple[int, ...] = field(default=())
    """The supported player counts, when not every count in [min, max] is."""
    public_moves: bool = False
    """True when every seat receives every move as it is played (Kuhn poker's bets), so
    spectators may see the moves live even in a hidden-information game."""
    reward_range: tuple[float, float] = (-1.0, 1.0)
    """The lowest and highest final reward a seat can get, on any ending."""
    reward_sum: float | None = None
    """The constant sum of the seats' final rewards (0.0 for zero-sum games), or None when
    the sum varies."""
    package: str | None = None
    """The distribution that provides the game (``arena-selfplay`` for built-in games)."""
    version: str | None = None
    """That distribution's version."""
    simultaneous: bool = False
    """True when its seats move at once, in rounds (``SimultaneousGame``)."""

    def supports(self, num_players: int) -> bool:
        """Whether the game can be played by ``num_players`` seats."""
        if self.player_counts:
            return num_players in self.player_counts
        return self.min_players <= num_players <= self.max_players

    @property
    def players_text(self) -> str:
        """The player counts for a table: ``2``, ``2-4`` or ``2,4``."""
        if self.player_counts:
            return ",".join(str(n) for n in self.player_counts)
        if not self.max_players:
            return "?"
        if self.min_players == self.max_players:
            return str(self.min_players)
        return f"{self.min_players}-{self.max_players}"


class Game(ABC):
    """A turn-based text game for N seats.

    Lifecycle: ``reset()`` once, then ``step()`` with the text of ``current_player()``
    until ``is_done()``; read ``rewards()`` at the end. Messages accumulate and are
    collected with ``drain_messages()``.

    Invalid moves: after ``set_invalid_move_allowance(n)``, a seat may make ``n`` invalid
    moves in a row and retry; the next one loses it the game under the game's own rules
    (``n = 0``: the first invalid move forfeits).
    """

    @abstractmethod
    def reset(self, num_players: int, seed: int) -> None:
        """Start a game; raise ValueError when ``num_players`` is not supported."""

    @abstractmethod
    def current_player(self) -> int:
        """The seat that must move next."""

    @abstractmethod
    def step(self, action: str) -> MoveResult:
        """Apply ``action`` for the current player."""

    @abstractmethod
    def is_done(self) -> bool:
        """True once the game is over."""

    @abstractmethod
    def rewards(self) -> dict[int, float]:
        """The final reward of each seat; valid once ``is_done()``."""

    @abstractmethod
    def drain_messages(self) -> list[GameMessage]:
        """Messages produced since the last call, in order."""

    @abstractmethod
    def set_invalid_move_allowance(self, allowance: int) -> None:
        """How many invalid moves in a row a seat may retry before it loses."""

    def legal_moves(self, seat: int) -> list[str] | None:
        """The moves ``seat`` may make now, or None when the game cannot list them."""
        return None

    def public_state(self) -> str | None:
        """The state as any spectator may see it during play (no hidden information)."""
        return None

    def public_board(self) -> PublicBoard | None:
        """The public state as structured data for the browser (grid, cards, pot, scores),
        or None when the game offers none. Never holds hidden information."""
        return None

    def full_board(self) -> PublicBoard | None:
        """The all-seeing board (every seat's cards face up), shown only once the match has
        ended; None when nothing is hidden beyond ``public_board`` (the default)."""
        return None

    def resample_hidden(self, seat: int, rng: random.Random) -> Game | None:
        """A copy of this game in which everything hidden from ``seat`` (the other seats'
        cards, picks or roles) is redrawn with ``rng``, consistently with what ``seat`` knows;
        None when the game cannot do this. The conformance kit checks that what ``seat`` is
        shown (public state, public board, its legal moves) is the same in the copy."""
        return None

    def full_state(self) -> str | None:
        """The all-seeing state (hidden information included), for after the match."""
        return self.public_state()

    def forfeited(self) -> set[int]:
        """Seats that lost by exceeding the invalid-move allowance."""
        return set()

    def parse_move(self, action: str, legal_moves: list[str] | None) -> str | None:
        """The move this game reads from ``action`` (given the moves it listed before it),
        as spectators of a live match may see it; None when there is none. The default
        (``parse_move``): the listed move found first, else the first bracketed token. A
        game whose moves are not bracketed overrides it."""
        return parse_move(action, legal_moves)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; the default does nothing."""


class SimultaneousGame(Game):
    """A game whose seats move at once, in rounds (rock-paper-scissors, Goofspiel's bids,
    a vote).

    ``movers()`` names the seats asked now; each is sent its own prompt (``to=seat``) and
    none sees another's move before the round is over. Arena collects every mover's move
    (each under its own clock) and hands them over together to ``step_round``, which
    applies them and ends the round: it scores it and says in public what was played.
    Spectators of a live match see who has moved, never what, until the round is over;
    then they see the round's moves, unless the game is registered with
    ``hidden_information=True`` (then only once the match has ended).

    Invalid moves: each seat's move is judged on its own (``MoveResult`` per seat). With an
    allowance left, the seat is asked again: ``movers()`` then names only the seats that
    retry, and the round is over once they have moved (the valid moves stay unapplied and
    unseen until then). Past the allowance the seat forfeits (``forfeited()``; with more
    than two seats the game may go on without it).

    ``current_player()`` is the first of ``movers()`` and ``step(action)`` plays a round in
    which that seat is the only mover, so a driver that knows only turns still works while
    one seat is asked.
    """

    @abstractmethod
    def movers(self) -> list[int]:
        """The seats that must move now, in seat order (never empty while the game is
        live)."""

    @abstractmethod
    def step_round(self, actions: Mapping[int, str]) -> Mapping[int, MoveResult]:
        """Apply one move of each seat of ``movers()`` (``actions`` has exactly those
        seats), together; what each move did."""

    def current_player(self) -> int:
        """The first seat of ``movers()``."""
        return self.movers()[0]

    def step(self, action: str) -> MoveResult:
        """Play ``action`` for the only seat asked now. Raises RuntimeError when several
        seats move in this round (use ``step_round``)."""
        seats = self.movers()
        if len(seats) != 1:
            raise RuntimeError(f"seats {seats} move together: give their moves to step_round")
        return self.step_round({seats[0]: action})[seats[0]]


@dataclass(frozen=True)
class PublicBoard:
    """A game's public state as structured data, for boards drawn in a browser.

    Immutable (a frozen dataclass: build a new one with ``dataclasses.replace``). Every
    field but ``kind`` is optional; a game fills the ones it has. Seat keys are ``int``
    (``scores={0: 3.0, 1: 1.0}``); ``as_dict`` writes them as strings for JSON. Nothing
    here may be hidden from any seat while the match is live: not another seat's cards, not
    a move that is not revealed yet (the conformance kit checks it).
    """

    kind: str
    """What to draw: ``grid`` (a board of cells), ``cards`` (a card or betting game),
    ``scores`` (a game of points), or a game's own name."""
    grid: tuple[tuple[str, ...], ...] | None = None
    """Rows of cells, top row first; ``""`` is an empty cell."""
    to_move: int | None = None
    """The seat that moves next, when the game is live."""
    pot: float | None = None
    """Chips in the middle."""
    chips: Mapping[int, float] | None = None
    """Each seat's chips or bank, as everybody knows it."""
    scores: Mapping[int, float] | None = None
    """Each seat's points so far."""
    cards: Mapping[str, tuple[str, ...]] | None = None
    """Face-up cards by where they lie (``"table"``, ``"prize"``, ``"seat 1"``: a seat's
    own cards are keyed ``"seat N"``)."""
    face_down: Mapping[int, int] | None = None
    """How many face-down cards each seat holds: spectators see their backs while the
    match is live; ``Game.full_board`` shows their faces (as ``cards["seat N"]``)."""
    marks: Mapping[str, int] | None = None
    """The seat each grid value belongs to (tic-tac-toe: ``{"O": 0, "X": 1}``), so that a
    browser colours a seat's pieces alike and names them."""
    style: str | None = None
    """How grid cells are drawn: ``marks`` (the cell's text; the default) or ``discs``
    (a coloured disc per seat, Connect Four)."""
    cell_move: str | None = None
    """The move a person plays by clicking a grid cell, as a template of ``{row}``,
    ``{col}`` and ``{index}`` (``row * width + col``): ``"[{index}]"`` for tic-tac-toe,
    ``"[{col}]"`` for Connect Four (a click anywhere in a column drops a disc there).
    None: cells are not clickable."""
    history: tuple[str, ...] = ()
    """The public moves of the current round or hand, oldest first."""
    round: int | None = None
    """The current round, 1-based."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Anything else the game's board needs (JSON-encodable values only)."""

    def as_dict(self) -> dict[str, Any]:
        """The board as JSON-encodable data (seat keys as strings), without empty fields."""
        out: dict[str, Any] = {"kind": self.kind}
        if self.grid is not None:
            out["grid"] = [list(row) for row in self.grid]
        for name in ("to_move", "pot", "round", "style", "cell_move"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        for name in ("chips", "scores", "face_down"):
            mapping = getattr(self, name)
            if mapping is not None:
                out[name] = {str(seat): value for seat, value in mapping.items()}
        if self.cards is not None:
            out["cards"] = {where: list(cards) for where, cards in self.cards.items()}
        if self.marks is not None:
            out["marks"] = dict(self.marks)
        if self.history:
            out["history"] = list(self.history)
        if self.extra:
            out["extra"] = dict(self.extra)
        return out


class GridRows:
    """Turns a game's rows of cells into ``PublicBoard.grid`` rows (``cell`` turns one
    cell into its text), remembering each row it has turned: a board is read at every move
    someone watches or records, and a row of a grid game seldom changes from one move to
    the next (Connect Four: 5.5 us a board, 3 of them building rows, without the memory).
    At most ``max_rows`` rows are remembered (later ones are turned every time); a row
    whose cells cannot be keys of a dict is turned every time."""

    MAX_ROWS = 4096

    def __init__(self, cell: Callable[[Any], str], max_rows: int = MAX_ROWS) -> None:
        self._cell = cell
        self._max_rows = max_rows
        self._rows: dict[tuple[Any, ...], tuple[str, ...]] = {}

    def __call__(self, rows: Sequence[Sequence[Any]]) -> tuple[tuple[str, ...], ...]:
        known = self._rows
        out = []
        for row in rows:
            key = tuple(row)
            try:
                turned = known.get(key)
            except TypeError:  # an unhashable cell
                out.append(tuple(map(self._cell, key)))
                continue
            if turned is None:
                turned = tuple(map(self._cell, key))
                if len(known) < self._max_rows:
                    known[key] = turned
            out.append(turned)
        return tuple(out)


@dataclass(frozen=True)
class MatchRecord:
    """A policy's results against one opponent: its seats' wins, draws and losses (the
    games that were played out; aborted ones are not counted)."""

    wins: int = 0
    draws: int = 0
    losses: int = 0

    @property
    def games(self) -> int:
        """Games counted."""
        return self.wins + self.draws + self.losses

    def rate(self, count: int) -> float:
        """``count`` as a share of the games (0.0 when there are none)."""
        return count / self.games if self.games else 0.0

    @property
    def score(self) -> float:
        """Wins count 1, draws 1/2: the share of the points the policy took."""
        return self.rate(self.wins) + self.rate(self.draws) / 2


@dataclass(frozen=True)
class Probe:
    """A position at which a policy is asked for its move, as its seat is shown it."""

    key: str
    """What the game calls the position (Kuhn poker: the information set, ``Kpb``)."""
    seat: int
    messages: tuple[GameMessage, ...]
    """Every message the seat received up to this position."""
    legal_moves: tuple[str, ...] = ()


MatchFigures = Callable[[Mapping[str, MatchRecord]], Mapping[str, float]]
"""``(record against each of the yardstick's opponents) -> figures``."""
ProbePositions = Callable[[str], Mapping[str, Probe]]
"""``(game id) -> the positions to ask, by key``."""
AnswerFigures = Callable[[Mapping[str, Sequence[str]]], Mapping[str, float]]
"""``(the move texts answered at each position, by key) -> figures``."""
ProbabilityFigures = Callable[[Mapping[str, Mapping[str, float]]], Mapping[str, float]]
"""``(the probability of each legal move at each position, by key, then by move text) ->
figures``. At a position the probabilities sum to at most 1: the rest is the probability
of answers that are no legal move."""


@dataclass(frozen=True)
class Yardstick:
    """The game's own absolute measure of a policy (a solver, a perfect or graded bot),
    which evaluation reports and a training run keeps its best checkpoint by.

    Two ways to measure, either or both: play the ``opponents`` and read figures off the
    records (``from_matches``); or ask the policy for ``samples`` answers at each of the
    ``probes`` positions and read figures off the answers (``from_answers``). A policy
    whose answers can be scored (a model: the probability it gives each legal move's
    answer) is measured exactly at the same positions where the yardstick reads those
    probabilities (``from_probabilities``: the same figures, from no sample). Each
    function returns figures by name, the headline one under ``figure``. The functions are
    module-level (the kit pickles) and know nothing of models: a policy is only the move
    texts it answered, the probabilities it gave them, and the games it won.
    """

    figure: str
    """The headline figure's name (``non_loss_vs_optimal``, ``exploitability``)."""
    higher_is_better: bool = True
    opponents: tuple[str, ...] = ()
    """Bots to play for ``from_matches`` (half the games in each seat)."""
    from_matches: MatchFigures | None = None
    probes: ProbePositions | None = None
    from_answers: AnswerFigures | None = None
    samples: int = 0
    """Answers asked at each probe position."""
    from_probabilities: ProbabilityFigures | None = None
    """``from_answers``'s figures from the policy's exact probabilities at the probe
    positions, for a policy that can score its answers (the others are sampled)."""

    def __post_init__(self) -> None:
        if self.from_matches is None and self.from_answers is None:
            raise ValueError("a yardstick needs from_matches, from_answers, or both")
        if self.from_matches is not None and not self.opponents:
            raise ValueError("from_matches needs the opponents it reads")
        if self.from_answers is not None and (self.probes is None or self.samples < 1):
            raise ValueError("from_answers needs probes and at least one sample per probe")
        if self.from_probabilities is not None and self.from_answers is None:
            raise ValueError(
                "from_probabilities needs from_answers too (a policy that only samples text "
                "is measured by its answers)"
            )

    def better(self, value: float, than: float | None) -> bool:
        """True when headline ``value`` beats ``than`` (None: nothing yet)."""
        if than is None:
            return True
        return value > than if self.higher_is_better else value < than


MAX_MOVE_CHARS = 60
"""Longest bracketed token read as a move (brackets included)."""
BRACKETED_MOVE = re.compile(rf"\[[^\[\]\n]{{1,{MAX_MOVE_CHARS - 2}}}\]")
"""A bracketed move such as ``[4]`` or ``[check]``, on one line."""


def parse_move(action: str, legal_moves: list[str] | None) -> str | None:
    """The move a game reads from ``action``: what spectators of a live match may see of
    it, never the seat's free text around it (a model's reasoning can name its hidden card:
    ``Thinking: my card is J so [check]`` is shown as ``[check]``).

    With ``legal_moves``: the one that occurs first in ``action`` (ignoring case), as the
    game lists it. Without: the first bracketed token (``[4]``, at most 40 characters
    inside). None when there is none.
    """
    if legal_moves:
        text = action.lower()
        best: tuple[int, str] | None = None
        for move in legal_moves:
            at = text.find(move.lower())
            if at >= 0 and (best is None or at < best[0]):
                best = (at, move)
        return best[1] if best is not None else None
    found = BRACKETED_MOVE.search(action)
    return found.group(0) if found else None


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
    """A scripted player that sees exactly what its seat sees. Subclasses implement
    ``act``; a game's module offers its own in its ``GameKit.bots`` (``games.bots`` builds
    them by name)."""

    name = "bot"

    def act(self, view: BotView) -> str:
        """The move to make, as text."""
        raise NotImplementedError


CompactView = Callable[[Sequence[GameMessage], int], "str | None"]
"""``(seat's messages, seat) -> one short line`` for small models, or None."""
TextMoveReader = Callable[[str], "list[str] | None"]
"""``(observation text) -> legal moves`` (bracketed), or None when the text lists none."""
BotFactory = Callable[[int], Bot]
"""``(seed) -> Bot``."""


@dataclass(frozen=True)
class GameKit:
    """What a game's own module knows beyond its rules, looked up by game id.

    Everything is optional. The functions are module-level (so a kit pickles) and see only
    what they are given: a seat's messages, an observation's text.
    """

    compact_view: CompactView | None = None
    """The seat's compact observation (tic-tac-toe: ``O:X1O3456X8``); None falls back to
    the generic one (role, last board, legal moves)."""
    read_legal_moves: TextMoveReader | None = None
    """Reads the legal moves from an observation's text where the generic reader cannot
    (Connect Four's moves are read off the board); used before the generic reader."""
    bots: Mapping[str, BotFactory] = field(default_factory=dict)
    """Strong or exact bots for this game, by name (``optimal``, ``alphabeta-4``)."""
    public_moves: bool = False
    """Every seat receives every move as it is played (see ``GameSpec.public_moves``)."""
    reward_range: tuple[float, float] | None = None
    """Overrides the default declared reward range, when set."""
    yardstick: Yardstick | None = None
    """The game's absolute measure of a policy (see ``Yardstick``); None: the game has
    none, and a run is judged by its score against the evaluation bots."""
    reward_sum: float | None = None
    """The declared constant sum of rewards (0.0: zero-sum). None declares nothing: native
    and plugin games then have no constant sum unless ``register_game`` says so, and
    TextArena games with exactly two seats are declared zero-sum (TextArena scores their
    endings +1/-1 or 0/0)."""


NO_KIT = GameKit()
"""The kit of a game whose module offers nothing beyond the rules."""
