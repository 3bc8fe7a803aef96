"""Rock-paper-scissors: the smallest simultaneous-move game (two seats, three rounds).

Each round both seats choose ``[rock]``, ``[paper]`` or ``[scissors]`` at once; rock beats
scissors, scissors beat paper, paper beats rock. After ``rounds`` rounds the seat with more
round wins wins the game (+1, the other -1); equal wins draw (0).

It shows the whole pattern of a ``SimultaneousGame`` in one file: ``movers()`` names the
seats asked now, each gets its own prompt (``to=seat``), ``step_round`` receives every
mover's move at once, judges each on its own and, once every seat has moved, ends the round
and says in public what was played. A seat that exceeds the invalid-move allowance
forfeits and loses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from games.api import (
    GameMessage,
    MessageKind,
    MoveResult,
    PublicBoard,
    SimultaneousGame,
)
from games.native.state import GameBookkeeping
from games.registration import register_game

GAME_ID = "RockPaperScissors-v0"
ROUNDS = 3
"""Rounds per game."""
CHOICES = ("rock", "paper", "scissors")
BEATS = {"rock": "scissors", "paper": "rock", "scissors": "paper"}
"""What each choice beats."""

_MOVE = re.compile(r"\[\s*(rock|paper|scissors)\s*\]", re.IGNORECASE)


class RockPaperScissorsGame(GameBookkeeping, SimultaneousGame):
    """The game; see the module docstring for the rules."""

    def __init__(self, rounds: int = ROUNDS) -> None:
        if rounds < 1:
            raise ValueError("rounds must be at least 1")
        self.rounds = rounds
        self._messages: list[GameMessage] = []
        self._allowance = 1

    def _ask(self, seats: list[int]) -> None:
        for seat in seats:
            self._say(
                f"Round {self._round} of {self.rounds}. Round wins: you {self._wins[seat]}, "
                f"your opponent {self._wins[1 - seat]}.\n"
                "Choose one. Available moves: [rock], [paper], [scissors]",
                MessageKind.BOARD,
                to=seat,
            )

    # -- the Game API ----------------------------------------------------------------------
    def reset(self, num_players: int, seed: int) -> None:
        if num_players != 2:
            raise ValueError(f"{GAME_ID} takes 2 players, not {num_players}")
        self._round = 1
        self._picks: dict[int, str] = {}
        self._wins = [0, 0]
        self._errors = [0, 0]
        self._out: set[int] = set()
        self._done = False
        self._rewards = {0: 0.0, 1: 0.0}
        self._history: list[str] = []
        for seat in range(2):
            self._say(
                f"You are Player {seat} in rock-paper-scissors, {self.rounds} rounds. Each "
                "round both players choose at once: rock beats scissors, scissors beat "
                "paper, paper beats rock. More round wins wins the game. Answer with your "
                "choice in brackets, for example '[rock]'.",
                MessageKind.PROMPT,
                to=seat,
            )
        self._ask([0, 1])

    def movers(self) -> list[int]:
        if self._done:
            return []
        return [seat for seat in (0, 1) if seat not in self._picks]

    def step_round(self, actions: Mapping[int, str]) -> dict[int, MoveResult]:
        results: dict[int, MoveResult] = {}
        retry = []
        for seat, text in sorted(actions.items()):
            self._say(text, MessageKind.ACTION, to=seat, sender=seat)  # to this seat only
            found = _MOVE.search(text)
            if found is None:
                reason = "no [rock], [paper] or [scissors] in the answer"
                results[seat] = MoveResult(valid=False, reason=reason)
                self._errors[seat] += 1
                if self._errors[seat] > self._allowance:
                    self._out.add(seat)
                else:
                    self._say(f"Invalid move: {reason}. Try again.", MessageKind.ADMIN, to=seat)
                    retry.append(seat)
                continue
            self._errors[seat] = 0
            self._picks[seat] = found.group(1).lower()
            results[seat] = MoveResult(valid=True)
        if self._out:
            self._forfeit()
        elif len(self._picks) == 2:
            self._score_round()
        else:
            self._ask(retry)
        return results

    def legal_moves(self, seat: int) -> list[str] | None:
        if self._done or seat not in self.movers():
            return None
        return [f"[{choice}]" for choice in CHOICES]

    def public_state(self) -> str:
        last = f" Last round: {self._history[-1]}." if self._history else ""
        return (
            f"Round {min(self._round, self.rounds)}/{self.rounds}. "
            f"Wins: P0 {self._wins[0]}, P1 {self._wins[1]}.{last}"
        )

    def public_board(self) -> PublicBoard:
        """The round, the round wins and the rounds played (never a choice of the round
        being played)."""
        return PublicBoard(
            kind="scores",
            round=min(self._round, self.rounds),
            scores={0: float(self._wins[0]), 1: float(self._wins[1])},
            history=tuple(self._history),
        )

    # -- rules -----------------------------------------------------------------------------
    def _score_round(self) -> None:
        a, b = self._picks[0], self._picks[1]
        if a == b:
            result = "a tie"
        else:
            winner = 0 if BEATS[a] == b else 1
            self._wins[winner] += 1
            result = f"Player {winner} wins it"
        self._history.append(f"P0 {a}, P1 {b}: {result}")
        self._say(
            f"Round {self._round}: Player 0 chose {a}, Player 1 chose {b}: {result}.",
            MessageKind.DESCRIPTION,
        )
        self._picks = {}
        if self._round >= self.rounds:
            self._end()
            return
        self._round += 1
        self._ask([0, 1])

    def _forfeit(self) -> None:
        self._done = True
        names = " and ".join(f"Player {seat}" for seat in sorted(self._out))
        self._say(f"{names} forfeit(s) after invalid moves.", MessageKind.ADMIN)
        if len(self._out) == 2:
            self._rewards = {0: -1.0, 1: -1.0}
        else:
            (loser,) = self._out
            self._rewards = {loser: -1.0, 1 - loser: 1.0}

    def _end(self) -> None:
        self._done = True
        if self._wins[0] == self._wins[1]:
            self._say("The game is a draw.", MessageKind.ADMIN)
            return
        winner = 0 if self._wins[0] > self._wins[1] else 1
        self._rewards = {winner: 1.0, 1 - winner: -1.0}
        self._say(f"Game over. Player {winner} wins.", MessageKind.ADMIN)


register_game(
    GAME_ID,
    min_players=2,
    max_players=2,
    description=f"Rock-paper-scissors, {ROUNDS} rounds, both seats choosing at once.",
)(RockPaperScissorsGame)
