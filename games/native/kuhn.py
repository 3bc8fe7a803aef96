"""Kuhn poker as defined: one hand, a called bet doubles the stakes, chips as reward.

TextArena's ``KuhnPoker-v0`` (0.7.4) never adds a bet or a call to the pot and scores a
3-hand match +1/-1, so in it betting and calling cost nothing: always bet, always call is
its best play, and that policy's Kuhn exploitability is 1/3. A model trained there learns
exactly that (``bench.learn`` measured 0.333 from step 25 on). This game is the one the
solver (``games.textarena_games.kuhn_solver``) and OpenSpiel measure, so its exploitability
yardstick is also what training optimises.

A deck of J, Q, K; both seats ante 1 and get one card, private. Seat 0 acts first: check or
bet 1; facing a check seat 1 checks (showdown for 2) or bets; facing a bet a seat folds
(the bettor takes the antes) or calls (showdown for 4). The winner's reward is what it won
(+1 or +2), the loser's the opposite; an invalid move past the allowance forfeits the hand
as a fold would (-1) and the other seat gets +1.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import random
import re
from collections.abc import Sequence

from games.api import (
    GAME,
    Game,
    GameKit,
    GameMessage,
    MessageKind,
    MoveResult,
    Probe,
    PublicBoard,
)
from games.native.state import GameBookkeeping
from games.registration import register_game
from games.session import GameSession
from games.textarena_games import kuhn_yardstick
from games.textarena_games.kuhn_poker import NashBot as TextArenaNashBot
from games.textarena_games.kuhn_solver import CARDS, DECISIONS
from games.textarena_games.kuhn_text import move_text

GAME_ID = "Kuhn-v0"
_WORD = {"check": "p", "fold": "p", "bet": "b", "call": "b"}
_MOVE = re.compile(r"\[\s*(check|bet|fold|call)\s*\]", re.IGNORECASE)
_VIEW = re.compile(r"Your card: ([JQK])\. Actions so far: ([pb]*|none)\.")


def moves_at(history: str) -> list[str]:
    """The legal moves after ``history`` (``p``/``b`` letters)."""
    return ["[fold]", "[call]"] if history.endswith("b") else ["[check]", "[bet]"]


class KuhnGame(GameBookkeeping, Game):
    """The game; see the module docstring for the rules."""

    def __init__(self) -> None:
        self._messages: list[GameMessage] = []
        self._allowance = 1
        self.num_players = 2

    def reset(self, num_players: int, seed: int) -> None:
        if num_players != 2:
            raise ValueError(f"{GAME_ID} takes 2 players, not {num_players}")
        rng = random.Random(seed)
        self._cards = tuple(rng.sample(CARDS, 2))
        self._history = ""
        self._errors = 0
        self._done = False
        self._out: set[int] = set()
        self._rewards: dict[int, float] = {}
        for seat in range(2):
            self._say(
                f"You are Player {seat} in one hand of Kuhn poker. The deck is J, Q, K (K "
                "highest); each player antes 1 chip and gets one card. Player 0 acts first: "
                "[check] or [bet] (1 chip). Facing a check, [check] (showdown for the antes) "
                "or [bet]; facing a bet, [fold] (lose your ante) or [call] (showdown for 2 "
                f"chips each). Your card is {self._cards[seat]}.",
                MessageKind.PROMPT,
                to=seat,
            )
        self._prompt_turn()

    @property
    def _turn(self) -> int:
        return len(self._history) % 2

    def _prompt_turn(self) -> None:
        seat = self._turn
        self._say(
            f"Your card: {self._cards[seat]}. Actions so far: {self._history or 'none'}.\n"
            f"Available moves: {', '.join(moves_at(self._history))}",
            MessageKind.BOARD,
            to=seat,
        )

    def current_player(self) -> int:
        return self._turn

    def legal_moves(self, seat: int) -> list[str] | None:
        if self._done or seat != self._turn:
            return None
        return moves_at(self._history)

    def public_state(self) -> str:
        pot = 2 + self._history.count("b")
        return f"Actions: {self._history or 'none'}. Pot: {pot}."

    def public_board(self) -> PublicBoard:
        """The pot, the actions so far; the cards face down."""
        return PublicBoard(
            kind="cards",
            pot=float(2 + self._history.count("b")),
            face_down={0: 1, 1: 1},
            to_move=None if self._done else self._turn,
            history=tuple(self._history),
        )

    def full_board(self) -> PublicBoard:
        return PublicBoard(
            kind="cards",
            pot=float(2 + self._history.count("b")),
            cards={f"seat {s}": (self._cards[s],) for s in range(2)},
            history=tuple(self._history),
        )

    def full_state(self) -> str:
        return f"{self.public_state()} Cards: P0 {self._cards[0]}, P1 {self._cards[1]}."

    def resample_hidden(self, seat: int, rng: random.Random) -> KuhnGame:
        """A copy in which the other seat's card is redrawn from the two left."""
        twin = copy.deepcopy(self)
        other = rng.choice([c for c in CARDS if c != self._cards[seat]])
        cards = list(twin._cards)
        cards[1 - seat] = other
        twin._cards = (cards[0], cards[1])
        return twin

    def step(self, action: str) -> MoveResult:
        seat = self._turn
        found = _MOVE.findall(action)
        legal = [m[1:-1] for m in moves_at(self._history)]
        word = found[0].lower() if len(found) == 1 else None
        if word not in legal:
            reason = (
                f"{word} is not legal now: {' or '.join(legal)}"
                if word
                else f"give one of {', '.join(moves_at(self._history))}"
            )
            self._errors += 1
            self._say(action, MessageKind.ACTION, to=seat, sender=seat)
            if self._errors > self._allowance:
                self._out.add(seat)
                self._say(f"Player {seat} forfeits after invalid moves.", MessageKind.ADMIN)
                self._end({seat: -1.0, 1 - seat: 1.0})
            else:
                self._say(f"Invalid move: {reason}. Try again.", MessageKind.ADMIN, to=seat)
                self._prompt_turn()
            return MoveResult(valid=False, reason=reason)
        self._errors = 0
        self._say(action, MessageKind.ACTION, sender=seat)
        self._say(f"Player {seat}: {word}.", MessageKind.DESCRIPTION)
        self._history += _WORD[word]
        history = self._history
        if history in ("bp", "pbp"):  # a fold: the bettor takes the antes
            bettor = 1 - seat
            self._end({bettor: 1.0, seat: -1.0})
        elif history in ("pp", "bb", "pbb"):
            stake = 2.0 if "b" in history else 1.0
            winner = 0 if CARDS.index(self._cards[0]) > CARDS.index(self._cards[1]) else 1
            self._say(
                f"Showdown: P0 {self._cards[0]}, P1 {self._cards[1]}.", MessageKind.DESCRIPTION
            )
            self._end({winner: stake, 1 - winner: -stake})
        else:
            self._prompt_turn()
        return MoveResult(valid=True)

    def _end(self, rewards: dict[int, float]) -> None:
        self._done = True
        self._rewards = rewards
        winner = max(rewards, key=lambda s: rewards[s])
        self._say(f"Player {winner} wins {rewards[winner]:g} chips.", MessageKind.ADMIN)


# -- what else Arena asks the game's module ---------------------------------------------------
def seat_infoset(messages: Sequence[GameMessage]) -> str | None:
    """The seat's information set (``Kpb``) from its newest prompt, or None."""
    for message in reversed(messages):
        if message.sender == GAME and (found := _VIEW.search(message.text)):
            card, history = found.groups()
            return card + ("" if history == "none" else history)
    return None


def compact_view(messages: Sequence[GameMessage], seat: int) -> str | None:
    """``Kpb fold/call``: the seat's card, the actions so far, its moves."""
    infoset = seat_infoset(messages)
    if infoset is None:
        return None
    moves = "/".join(m[1:-1] for m in moves_at(infoset[1:]))
    return f"{infoset} {moves}"


def _hand(game_id: str, seed: int) -> GameSession:
    """A started hand of this game dealt by ``seed``, under ``game_id``'s name."""
    session = GameSession(KuhnGame(), game_id, 2, seed)
    session.start()
    return session


@functools.cache
def probes(game_id: str = GAME_ID) -> dict[str, Probe]:
    """The yardstick's positions: a hand of this game played to each of the 12
    information sets (the other card the next one up, the actions as named)."""
    out: dict[str, Probe] = {}
    for history in DECISIONS:
        seat = len(history) % 2
        for card in CARDS:
            for seed in range(200):  # a deal that gives ``seat`` the card
                session = _hand(game_id, seed)
                first = session.seat_messages(seat)
                if f"Your card is {card}." not in " ".join(m.text for m in first):
                    session.close()
                    continue
                for i, letter in enumerate(history):
                    session.step(i % 2, move_text(history[:i], letter))
                moves = tuple(session.legal_moves(seat) or ())
                out[card + history] = Probe(
                    card + history, seat, tuple(session.seat_messages(seat)), moves
                )
                session.close()
                break
            else:
                raise ValueError(f"no seed below 200 deals {card} to seat {seat}")
    return out


class NashBot(TextArenaNashBot):
    """Plays the Nash equilibrium (``nash_policy`` with ``alpha`` = 1/6) at this game's
    information sets."""

    def infoset(self, messages: Sequence[GameMessage]) -> str | None:
        return seat_infoset(messages)


YARDSTICK = dataclasses.replace(kuhn_yardstick.YARDSTICK, probes=probes)
"""TextArena Kuhn poker's yardstick (the same solver and sampling), asked at this game's
own hands."""

register_game(
    GAME_ID,
    min_players=2,
    max_players=2,
    hidden_information=True,
    description="One hand of Kuhn poker as defined: a called bet doubles the stakes.",
    reward_range=(-2.0, 2.0),
    reward_sum=0.0,
    kit=GameKit(
        compact_view=compact_view, bots={"nash": NashBot}, public_moves=True, yardstick=YARDSTICK
    ),
)(KuhnGame)
