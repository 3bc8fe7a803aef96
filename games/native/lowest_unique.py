"""Lowest Unique Number: a hidden-information game for 2 to 15 players.

Each round, every seat in turn secretly picks a number from 1 to ``num_players + 1``.
When all have picked, the picks are revealed and the seat with the lowest number that
nobody else picked wins the round. After ``rounds`` rounds the seats with the most round
wins win the game (+1), the others lose (-1); when every seat ties, it is a draw (0).

Picks are private until the round ends: each seat is told its own pick, the others only
that it has picked. A seat that exceeds the invalid-move allowance forfeits: it plays no
more and scores -1; if fewer than two seats remain, the game ends.
"""

from __future__ import annotations

import copy
import random
import re

from games.api import Game, GameMessage, MessageKind, MoveResult, PublicBoard
from games.native.state import GameBookkeeping

_MOVE = re.compile(r"\[\s*(\d{1,3})\s*\]")


class LowestUniqueGame(GameBookkeeping, Game):
    """The game; see the module docstring for the rules."""

    def __init__(self, rounds: int = 3) -> None:
        if rounds < 1:
            raise ValueError("rounds must be at least 1")
        self.rounds = rounds
        self._messages: list[GameMessage] = []
        self._allowance = 1
        self.num_players = 0

    # -- helpers -------------------------------------------------------------------------
    @property
    def high(self) -> int:
        """The largest number a seat may pick."""
        return self.num_players + 1

    def _alive(self) -> list[int]:
        return [s for s in range(self.num_players) if s not in self._out]

    def _prompt_turn(self) -> None:
        seat = self._turn
        moves = ", ".join(f"[{n}]" for n in range(1, self.high + 1))
        self._say(
            f"Round {self._round} of {self.rounds}. Your round wins so far: {self._wins[seat]}.\n"
            f"Pick a number. Available moves: {moves}",
            MessageKind.BOARD,
            to=seat,
        )

    # -- Game API ------------------------------------------------------------------------
    def reset(self, num_players: int, seed: int) -> None:
        if not 2 <= num_players <= 15:
            raise ValueError(f"LowestUnique-v0 takes 2 to 15 players, not {num_players}")
        self.num_players = num_players
        self._rng = random.Random(seed)
        self._round = 1
        self._picks: dict[int, int] = {}
        self._wins = [0] * num_players
        self._out: set[int] = set()
        self._errors = 0
        self._done = False
        self._rewards: dict[int, float] = {}
        # A seeded rotation of who starts, so seat 0 is not always first.
        self._first = self._rng.randrange(num_players)
        self._order = [(self._first + i) % num_players for i in range(num_players)]
        self._turn = self._order[0]
        for seat in range(num_players):
            self._say(
                f"You are Player {seat} of {num_players} in Lowest Unique Number.\n"
                f"Each round every player secretly picks a number from 1 to {self.high}; "
                "the lowest number that nobody else picked wins the round. "
                f"The most round wins after {self.rounds} rounds wins the game.\n"
                "Answer with your number in brackets, for example '[2]'.",
                MessageKind.PROMPT,
                to=seat,
            )
        self._prompt_turn()

    def current_player(self) -> int:
        return self._turn

    def legal_moves(self, seat: int) -> list[str] | None:
        if self._done or seat != self._turn:
            return None
        return [f"[{n}]" for n in range(1, self.high + 1)]

    def public_state(self) -> str:
        picked = ", ".join(f"Player {s}" for s in sorted(self._picks)) or "nobody yet"
        wins = ", ".join(f"P{s}: {w}" for s, w in enumerate(self._wins))
        return (
            f"Round {min(self._round, self.rounds)}/{self.rounds}. Picked: {picked}. Wins: {wins}"
        )

    def public_board(self) -> PublicBoard:
        """Round, round wins, who has picked this round, who has forfeited."""
        return PublicBoard(
            kind="scores",
            round=min(self._round, self.rounds),
            scores={seat: float(wins) for seat, wins in enumerate(self._wins)},
            to_move=None if self._done else self._turn,
            extra={"picked": sorted(self._picks), "out": sorted(self._out)},
        )

    def resample_hidden(self, seat: int, rng: random.Random) -> LowestUniqueGame | None:
        """A copy in which the other seats' picks of this round are redrawn."""
        others = [s for s in self._picks if s != seat]
        if not others:
            return None
        twin = copy.deepcopy(self)
        for other in others:
            twin._picks[other] = rng.randint(1, self.high)
        return twin

    def full_state(self) -> str:
        picks = ", ".join(f"P{s}={n}" for s, n in sorted(self._picks.items())) or "none"
        return f"{self.public_state()}. Current picks: {picks}"

    def step(self, action: str) -> MoveResult:
        seat = self._turn
        self._say(action, MessageKind.ACTION, to=seat, sender=seat)
        match = _MOVE.search(action)
        number = int(match.group(1)) if match else None
        if number is None or not 1 <= number <= self.high:
            reason = (
                "no number in brackets" if number is None else f"{number} is not in 1..{self.high}"
            )
            self._errors += 1
            if self._errors > self._allowance:
                self._forfeit(seat, reason)
            else:
                self._say(f"Invalid move: {reason}. Try again.", MessageKind.ADMIN, to=seat)
                self._prompt_turn()
            return MoveResult(valid=False, reason=reason)
        self._errors = 0
        self._picks[seat] = number
        self._say(f"You picked {number}.", MessageKind.DESCRIPTION, to=seat)
        self._say(f"Player {seat} has picked.", MessageKind.DESCRIPTION)
        self._advance()
        return MoveResult(valid=True)

    # -- rules ---------------------------------------------------------------------------
    def _forfeit(self, seat: int, reason: str) -> None:
        self._out.add(seat)
        self._picks.pop(seat, None)
        self._errors = 0
        self._say(f"Player {seat} forfeits after invalid moves ({reason}).", MessageKind.ADMIN)
        if len(self._alive()) < 2:
            self._end()
        else:
            self._advance()

    def _advance(self) -> None:
        waiting = [s for s in self._order if s not in self._out and s not in self._picks]
        if waiting:
            self._turn = waiting[0]
            self._prompt_turn()
            return
        self._score_round()
        if self._round >= self.rounds:
            self._end()
            return
        self._round += 1
        self._picks = {}
        self._order = self._order[1:] + self._order[:1]  # rotate who picks first
        self._turn = next(s for s in self._order if s not in self._out)
        self._prompt_turn()

    def _score_round(self) -> None:
        counts: dict[int, int] = {}
        for n in self._picks.values():
            counts[n] = counts.get(n, 0) + 1
        unique = sorted(n for n, c in counts.items() if c == 1)
        revealed = ", ".join(f"Player {s} picked {n}" for s, n in sorted(self._picks.items()))
        if unique:
            winner = next(s for s, n in self._picks.items() if n == unique[0])
            self._wins[winner] += 1
            result = f"Player {winner} wins round {self._round} with {unique[0]}."
        else:
            result = f"No unique number: nobody wins round {self._round}."
        self._say(f"{revealed}. {result}", MessageKind.BOARD)

    def _end(self) -> None:
        self._done = True
        alive = self._alive()
        best = max((self._wins[s] for s in alive), default=0)
        winners = [s for s in alive if self._wins[s] == best]
        if len(winners) == len(alive) and not self._out:
            self._rewards = {s: 0.0 for s in range(self.num_players)}
            self._say("The game is a draw.", MessageKind.ADMIN)
            return
        self._rewards = {s: (1.0 if s in winners else -1.0) for s in range(self.num_players)}
        names = ", ".join(f"Player {s}" for s in winners)
        self._say(f"Game over. Winner(s): {names}.", MessageKind.ADMIN)
