"""Haggle: a two-seat negotiation in free text, with private values.

Seat 0 sells one item and seat 1 wants to buy it. Each knows only its own value: the
seller's cost (10 to 50) and the buyer's worth (50 to 95), drawn from the seed, so a deal
always exists. They take turns, the seller first, at most ``MAX_MESSAGES`` messages in
all. A message is free text (a sentence, an argument, a bluff) that holds exactly one
action: ``[offer N]`` (a price from ``PRICE_STEP`` to ``MAX_PRICE`` in steps of
``PRICE_STEP``) or ``[accept]`` (the other seat's latest offer). Everything said is heard
by both seats; only the values are private.

A deal at price P pays the seller (P - cost) / 50 and the buyer (worth - P) / 50, each
clipped to [-1, 1]; without a deal when the messages run out both get 0. The seat that got
more from the deal wins it (``games.outcome``: the higher reward). A message without
exactly one action, with a price off the list, or accepting when there is no offer is
invalid; past the allowance the seat forfeits (-1, the other 0).
"""

from __future__ import annotations

import copy
import random
import re
from collections.abc import Sequence

from games.api import (
    GAME,
    Bot,
    BotView,
    Game,
    GameKit,
    GameMessage,
    MessageKind,
    MoveResult,
    PublicBoard,
)
from games.native.state import GameBookkeeping
from games.registration import register_game

GAME_ID = "Haggle-v0"
MAX_MESSAGES = 8
"""Messages in all (four each) before the game ends without a deal."""
PRICE_STEP = 5
MAX_PRICE = 100
SCALE = 50.0
"""A deal's surplus is divided by this (and clipped to [-1, 1]) to make the rewards."""
ROLES = ("seller", "buyer")

_ACTION = re.compile(r"\[\s*(offer\s+(\d{1,4})|accept)\s*\]", re.IGNORECASE)
_VIEW = re.compile(
    r"You are the (seller|buyer); your (?:cost|worth) is (\d+)\. Their offer: (\w+)\. "
    r"Your offer: (\w+)\. Messages left: (\d+)\."
)


def prices() -> list[int]:
    """Every price a seat may offer."""
    return list(range(PRICE_STEP, MAX_PRICE + 1, PRICE_STEP))


class HaggleGame(GameBookkeeping, Game):
    """The game; see the module docstring for the rules."""

    def __init__(self) -> None:
        self._messages: list[GameMessage] = []
        self._allowance = 1
        self.num_players = 2

    # -- Game API ------------------------------------------------------------------------
    def reset(self, num_players: int, seed: int) -> None:
        if num_players != 2:
            raise ValueError(f"{GAME_ID} takes 2 players, not {num_players}")
        rng = random.Random(seed)
        self._values = (rng.randint(10, 50), rng.randint(50, 95))
        self._offers: list[int | None] = [None, None]
        self._said = 0
        self._turn = 0
        self._errors = 0
        self._done = False
        self._out: set[int] = set()
        self._rewards: dict[int, float] = {}
        self._price: int | None = None
        self._history: list[str] = []
        for seat in range(2):
            what = "cost" if seat == 0 else "worth"
            self._say(
                f"You are Player {seat}, the {ROLES[seat]}, in a haggle over one item. Your "
                f"{what} is {self._values[seat]} (the other side does not know it; you do "
                "not know theirs). Take turns; say what you like, with exactly one action: "
                f"[offer N] for a price N from {PRICE_STEP} to {MAX_PRICE} in steps of "
                f"{PRICE_STEP}, or [accept] to take their latest offer. A deal at price P "
                "pays the seller P minus its cost and the buyer its worth minus P; after "
                f"{MAX_MESSAGES} messages without a deal, nobody gets anything.",
                MessageKind.PROMPT,
                to=seat,
            )
        self._prompt_turn()

    def _prompt_turn(self) -> None:
        seat = self._turn
        theirs, mine = self._offers[1 - seat], self._offers[seat]
        what = "cost" if seat == 0 else "worth"
        moves = ", ".join(self.legal_moves(seat) or [])
        self._say(
            f"You are the {ROLES[seat]}; your {what} is {self._values[seat]}. "
            f"Their offer: {theirs if theirs is not None else 'none'}. "
            f"Your offer: {mine if mine is not None else 'none'}. "
            f"Messages left: {MAX_MESSAGES - self._said}.\nAvailable moves: {moves}",
            MessageKind.BOARD,
            to=seat,
        )

    def current_player(self) -> int:
        return self._turn

    def legal_moves(self, seat: int) -> list[str] | None:
        if self._done or seat != self._turn:
            return None
        offers = [f"[offer {p}]" for p in prices()]
        return [*offers, "[accept]"] if self._offers[1 - seat] is not None else offers

    def public_state(self) -> str:
        offers = ", ".join(
            f"{ROLES[s]} {o if o is not None else 'none'}" for s, o in enumerate(self._offers)
        )
        state = f"Messages {self._said}/{MAX_MESSAGES}. Offers: {offers}."
        if self._price is not None:
            state += f" Deal at {self._price}."
        return state

    def public_board(self) -> PublicBoard:
        """The offers on the table, the messages left and the deal, if any."""
        return PublicBoard(
            kind="scores",
            to_move=None if self._done else self._turn,
            history=tuple(self._history[-MAX_MESSAGES:]),
            extra={
                "offers": {ROLES[s]: o for s, o in enumerate(self._offers)},
                "messages_left": MAX_MESSAGES - self._said,
                "deal": self._price,
            },
        )

    def full_state(self) -> str:
        return (
            f"{self.public_state()} Seller's cost {self._values[0]}, "
            f"buyer's worth {self._values[1]}."
        )

    def resample_hidden(self, seat: int, rng: random.Random) -> HaggleGame:
        """A copy in which the other seat's value is redrawn."""
        twin = copy.deepcopy(self)
        values = list(twin._values)
        values[1 - seat] = rng.randint(10, 50) if seat == 1 else rng.randint(50, 95)
        twin._values = (values[0], values[1])
        return twin

    def step(self, action: str) -> MoveResult:
        seat = self._turn
        found = _ACTION.findall(action)
        reason = None
        if len(found) != 1:
            reason = "no action in brackets" if not found else "more than one action"
        else:
            whole, number = found[0]
            if whole.lower() == "accept":
                if self._offers[1 - seat] is None:
                    reason = "there is no offer to accept"
            elif int(number) not in prices():
                reason = f"{number} is not a price from {PRICE_STEP} to {MAX_PRICE} in steps of 5"
        if reason is not None:
            self._errors += 1
            self._say(action, MessageKind.ACTION, to=seat, sender=seat)
            if self._errors > self._allowance:
                self._forfeit(seat, reason)
            else:
                self._say(f"Invalid move: {reason}. Try again.", MessageKind.ADMIN, to=seat)
                self._prompt_turn()
            return MoveResult(valid=False, reason=reason)
        self._errors = 0
        self._said += 1
        self._say(action, MessageKind.ACTION, sender=seat)  # everything said is heard by both
        whole, number = found[0]
        if whole.lower() == "accept":
            price = self._offers[1 - seat]
            assert price is not None
            self._history.append(f"{ROLES[seat]} accepts {price}")
            self._deal(price)
            return MoveResult(valid=True)
        self._offers[seat] = int(number)
        self._history.append(f"{ROLES[seat]} offers {number}")
        if self._said >= MAX_MESSAGES:
            self._end({0: 0.0, 1: 0.0}, "No deal: the messages ran out. Nobody gets anything.")
            return MoveResult(valid=True)
        self._turn = 1 - seat
        self._prompt_turn()
        return MoveResult(valid=True)

    # -- rules ---------------------------------------------------------------------------
    def _deal(self, price: int) -> None:
        self._price = price
        seller = max(-1.0, min(1.0, (price - self._values[0]) / SCALE))
        buyer = max(-1.0, min(1.0, (self._values[1] - price) / SCALE))
        self._end(
            {0: seller, 1: buyer},
            f"Deal at {price}. The seller's cost was {self._values[0]}, the buyer's worth "
            f"{self._values[1]}.",
        )

    def _forfeit(self, seat: int, reason: str) -> None:
        self._out.add(seat)
        self._say(f"Player {seat} forfeits after invalid moves ({reason}).", MessageKind.ADMIN)
        self._end({seat: -1.0, 1 - seat: 0.0}, "Game over.")

    def _end(self, rewards: dict[int, float], text: str) -> None:
        self._done = True
        self._rewards = rewards
        self._say(text, MessageKind.ADMIN)


# -- what else Arena asks the game's module ---------------------------------------------------
def read_view(messages: Sequence[GameMessage]) -> tuple[str, int, int | None, int | None, int]:
    """(role, own value, their offer, own offer, messages left) from the newest prompt a
    seat received. Raises ValueError when it has none."""
    for message in reversed(messages):
        if message.sender == GAME and (found := _VIEW.search(message.text)):
            role, value, theirs, mine, left = found.groups()
            as_price = lambda text: int(text) if text.isdigit() else None  # noqa: E731
            return role, int(value), as_price(theirs), as_price(mine), int(left)
    raise ValueError("no Haggle prompt among the messages")


def compact_view(messages: Sequence[GameMessage], seat: int) -> str | None:
    """``seller 35 | theirs 60 | mine 75 | left 3``: the seat's role and value, the offers
    on the table, the messages left."""
    try:
        role, value, theirs, mine, left = read_view(messages)
    except ValueError:
        return None
    shown = lambda price: "-" if price is None else str(price)  # noqa: E731
    return f"{role} {value} | theirs {shown(theirs)} | mine {shown(mine)} | left {left}"


class HaggleBot(Bot):
    """Opens far from its value and concedes a step a message; accepts an offer that
    leaves it at least its margin, or any gain on the last messages (a simple, sensible
    haggler, much stronger than random)."""

    name = "haggler"
    OPEN = 40
    """How far from its value it opens."""
    CONCEDE = 10
    """How much it gives up with each of its messages."""
    MARGIN = 15
    """The gain it holds out for until the last messages."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def act(self, view: BotView) -> str:
        try:
            role, value, theirs, mine, left = read_view(view.messages)
        except ValueError:
            return self._rng.choice(view.legal_moves or ["[offer 50]"])
        seller = role == "seller"
        gain = None if theirs is None else (theirs - value if seller else value - theirs)
        if gain is not None and (gain >= self.MARGIN or (left <= 2 and gain > 0)):
            return "That works for me. [accept]"
        if mine is None:
            ask = value + self.OPEN if seller else value - self.OPEN
        else:
            ask = mine - self.CONCEDE if seller else mine + self.CONCEDE
        floor = value + PRICE_STEP if seller else value - PRICE_STEP
        ask = max(ask, floor) if seller else min(ask, floor)
        price = min(MAX_PRICE, max(PRICE_STEP, PRICE_STEP * round(ask / PRICE_STEP)))
        return f"I can do {price}. [offer {price}]"


register_game(
    GAME_ID,
    min_players=2,
    max_players=2,
    hidden_information=True,
    description="Haggle over one item in free text; each side knows only its own value.",
    kit=GameKit(compact_view=compact_view, bots={"haggler": HaggleBot}, public_moves=True),
)(HaggleGame)
