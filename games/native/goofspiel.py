"""Goofspiel: a bidding game of simultaneous moves for 2 to 4 players.

Every player holds the cards 1 to ``cards`` (13 by default). A prize deck of the same cards
is shuffled (by the seed) and laid face down. Each round its top card is turned up, every
player bids one card of its hand at once and in secret, and the highest bid takes the
prize: its value is added to the bidder's points. When several players tie for the highest
bid, nobody takes it (the prize is discarded). Bids are spent, and shown to everyone once
the round is over. After ``cards`` rounds the points decide: each player scores, against
every other player, +1 for more points, -1 for fewer, 0 for as many, and its reward is the
mean of those (+1/-1 with two players; 0 for everyone when all tie).

A player that exceeds the invalid-move allowance forfeits: it bids no more and scores -1;
if fewer than two players remain, the game ends.

The hands are public knowledge (every bid is revealed), so the public board shows them; the
order of the prize deck is hidden from everyone until the match ends (``full_board``).
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence

from games.api import (
    GAME,
    Bot,
    BotView,
    GameKit,
    GameMessage,
    MessageKind,
    MoveResult,
    PublicBoard,
    SimultaneousGame,
)
from games.native.state import GameBookkeeping
from games.registration import register_game

GAME_ID = "Goofspiel-v0"
CARDS = 13
"""Cards per hand and in the prize deck (the values 1 to ``CARDS``)."""
MAX_CARDS = 30
"""The largest hand a ``GoofspielGame`` takes."""
HISTORY_ROUNDS = 5
"""Rounds kept in the public board's history (the most recent)."""

_MOVE = re.compile(r"\[\s*(\d{1,3})\s*\]")
_PRIZE = re.compile(r"the prize is (\d+)")
_HAND = re.compile(r"Your cards: ([\d ]+)\.")
_POINTS = re.compile(r"Points: ([^\n]*)")


class GoofspielGame(GameBookkeeping, SimultaneousGame):
    """The game; see the module docstring for the rules."""

    def __init__(self, cards: int = CARDS) -> None:
        if not 1 <= cards <= MAX_CARDS:
            raise ValueError(f"cards must be between 1 and {MAX_CARDS}")
        self.cards = cards
        self._messages: list[GameMessage] = []
        self._allowance = 1
        self.num_players = 0

    def _alive(self) -> list[int]:
        return [s for s in range(self.num_players) if s not in self._out]

    def _points_text(self) -> str:
        return ", ".join(f"P{s} {p}" for s, p in enumerate(self._points))

    def _turn_up(self) -> None:
        """Turn up the next prize and ask every player still in for a bid."""
        self._prize = self._deck.pop(0)
        self._say(
            f"Round {self._round} of {self.cards}: the prize is {self._prize}.\n"
            f"Points: {self._points_text()}",
            MessageKind.BOARD,
        )
        self._ask(self._alive())

    def _ask(self, seats: list[int]) -> None:
        for seat in seats:
            hand = sorted(self._hands[seat])
            moves = ", ".join(f"[{card}]" for card in hand)
            self._say(
                f"Your cards: {' '.join(map(str, hand))}. Bid one for the prize "
                f"{self._prize}.\nAvailable moves: {moves}",
                MessageKind.BOARD,
                to=seat,
            )

    # -- the Game API ----------------------------------------------------------------------
    def reset(self, num_players: int, seed: int) -> None:
        if not 2 <= num_players <= 4:
            raise ValueError(f"{GAME_ID} takes 2 to 4 players, not {num_players}")
        self.num_players = num_players
        rng = random.Random(seed)
        self._deck = list(range(1, self.cards + 1))
        rng.shuffle(self._deck)
        self._hands = {seat: set(range(1, self.cards + 1)) for seat in range(num_players)}
        self._points = [0] * num_players
        self._bids: dict[int, int] = {}
        self._errors = [0] * num_players
        self._out: set[int] = set()
        self._round = 1
        self._prize = 0
        self._history: list[str] = []
        self._done = False
        self._rewards: dict[int, float] = {}
        for seat in range(num_players):
            self._say(
                f"You are Player {seat} of {num_players} in Goofspiel. Everyone holds the "
                f"cards 1 to {self.cards}. Each round a prize card is turned up and every "
                "player bids one card of its hand at once, in secret; the highest bid takes "
                "the prize's value in points (a tie for the highest: nobody does). Bids are "
                f"spent and shown once the round is over. After {self.cards} rounds the "
                "most points wins. Answer with the card you bid in brackets, e.g. '[5]'.",
                MessageKind.PROMPT,
                to=seat,
            )
        self._turn_up()

    def movers(self) -> list[int]:
        if self._done:
            return []
        return [seat for seat in self._alive() if seat not in self._bids]

    def step_round(self, actions: Mapping[int, str]) -> dict[int, MoveResult]:
        results: dict[int, MoveResult] = {}
        retry = []
        for seat, text in sorted(actions.items()):
            self._say(text, MessageKind.ACTION, to=seat, sender=seat)  # to this seat only
            found = _MOVE.search(text)
            card = int(found.group(1)) if found else None
            if card is None or card not in self._hands[seat]:
                held = " ".join(map(str, sorted(self._hands[seat])))
                reason = (
                    "no card in brackets"
                    if card is None
                    else f"{card} is not in your hand ({held})"
                )
                results[seat] = MoveResult(valid=False, reason=reason)
                self._errors[seat] += 1
                if self._errors[seat] > self._allowance:
                    self._out.add(seat)
                    self._say(
                        f"Player {seat} forfeits after invalid moves ({reason}).",
                        MessageKind.ADMIN,
                    )
                else:
                    self._say(f"Invalid move: {reason}. Try again.", MessageKind.ADMIN, to=seat)
                    retry.append(seat)
                continue
            self._errors[seat] = 0
            self._bids[seat] = card
            self._say(f"You bid {card}.", MessageKind.DESCRIPTION, to=seat)
            results[seat] = MoveResult(valid=True)
        for seat in self._out:
            self._bids.pop(seat, None)
        if len(self._alive()) < 2:
            self._end()
        elif self.movers():
            self._ask([s for s in retry if s not in self._out])
        else:
            self._score_round()
        return results

    def legal_moves(self, seat: int) -> list[str] | None:
        if self._done or seat not in self.movers():
            return None
        return [f"[{card}]" for card in sorted(self._hands[seat])]

    def public_state(self) -> str:
        last = f" Last round: {self._history[-1]}." if self._history else ""
        prize = "" if self._done else f" Prize: {self._prize}."
        return f"Round {self._round}/{self.cards}.{prize} Points: {self._points_text()}.{last}"

    def public_board(self) -> PublicBoard:
        """The prize, every hand (public knowledge), the points and the last rounds; the
        prize deck face down. Never a bid of the round being played."""
        return self._board(show_deck=False)

    def full_board(self) -> PublicBoard:
        """The public board with the prize deck face up, in order (after the match)."""
        return self._board(show_deck=True)

    def _board(self, show_deck: bool) -> PublicBoard:
        cards: dict[str, tuple[str, ...]] = {}
        if not self._done:
            cards["prize"] = (str(self._prize),)
        for seat in range(self.num_players):
            cards[f"seat {seat}"] = tuple(str(c) for c in sorted(self._hands[seat]))
        if show_deck and self._deck:
            cards["deck"] = tuple(str(c) for c in self._deck)
        return PublicBoard(
            kind="cards",
            cards=cards,
            scores={seat: float(p) for seat, p in enumerate(self._points)},
            round=self._round,
            history=tuple(self._history[-HISTORY_ROUNDS:]),
            extra={"deck": len(self._deck), "out": sorted(self._out)},
        )

    def full_state(self) -> str:
        deck = " ".join(map(str, self._deck)) or "empty"
        return f"{self.public_state()} Prize deck: {deck}."

    # -- rules -----------------------------------------------------------------------------
    def _score_round(self) -> None:
        bids = dict(sorted(self._bids.items()))
        for seat, card in bids.items():
            self._hands[seat].discard(card)
        best = max(bids.values())
        top = [seat for seat, card in bids.items() if card == best]
        shown = ", ".join(f"P{seat} {card}" for seat, card in bids.items())
        if len(top) == 1:
            self._points[top[0]] += self._prize
            result = f"Player {top[0]} takes the {self._prize}"
        else:
            result = f"a tie for the highest bid: nobody takes the {self._prize}"
        self._history.append(f"R{self._round} prize {self._prize}: {shown}; {result}")
        self._say(
            f"Round {self._round}: "
            + ", ".join(f"Player {seat} bid {card}" for seat, card in bids.items())
            + f". {result[0].upper()}{result[1:]}.",
            MessageKind.DESCRIPTION,
        )
        self._bids = {}
        if not self._deck:
            self._end()
            return
        self._round += 1
        self._turn_up()

    def _end(self) -> None:
        self._done = True
        n = self.num_players
        for seat in range(n):
            if seat in self._out:
                self._rewards[seat] = -1.0
                continue
            total = 0
            for other in range(n):
                if other == seat:
                    continue
                if other in self._out:
                    total += 1
                else:
                    diff = self._points[seat] - self._points[other]
                    total += (diff > 0) - (diff < 0)
            self._rewards[seat] = total / (n - 1)
        self._say(f"Game over. Points: {self._points_text()}.", MessageKind.ADMIN)


# -- what else Arena asks the game's module ---------------------------------------------------
def read_view(messages: Sequence[GameMessage]) -> tuple[int, list[int], str] | None:
    """(prize, own hand, points) from the newest prompt a seat received, or None."""
    prize = hand = points = None
    for message in reversed(messages):
        if message.sender != GAME:
            continue
        if hand is None and (found := _HAND.search(message.text)):
            hand = [int(c) for c in found.group(1).split()]
        if prize is None and (found := _PRIZE.search(message.text)):
            prize = int(found.group(1))
            points_found = _POINTS.search(message.text)
            points = points_found.group(1) if points_found else ""
        if prize is not None and hand is not None:
            return prize, hand, points or ""
    return None


def compact_view(messages: Sequence[GameMessage], seat: int) -> str | None:
    """``prize 7 | hand 1 3 5 | P0 12, P1 9``: the prize, the seat's cards, the points."""
    view = read_view(messages)
    if view is None:
        return None
    prize, hand, points = view
    return f"prize {prize} | hand {' '.join(map(str, hand))} | {points}"


class MatchBot(Bot):
    """Bids the card equal to the prize; when it has spent it, the lowest card above the
    prize, else its lowest card (a classic heuristic, much stronger than random)."""

    name = "match"

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def act(self, view: BotView) -> str:
        read = read_view(view.messages)
        if read is None:
            return self._rng.choice(view.legal_moves or ["[1]"])
        prize, hand, _points = read
        higher = [card for card in hand if card >= prize]
        return f"[{min(higher) if higher else min(hand)}]"


register_game(
    GAME_ID,
    min_players=2,
    max_players=4,
    description=f"Bid one of your {CARDS} cards at once for each prize; most points wins.",
    kit=GameKit(compact_view=compact_view, bots={"match": MatchBot}),
)(GoofspielGame)
