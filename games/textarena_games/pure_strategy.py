"""Game of Pure Strategy (TextArena ``GameOfPureStrategy-v0``): moves, board, hidden bids.

Thirteen rounds; each reveals a prize card and both seats bid one card of their own A-K
in secret; the higher bid takes the prize (ties carry it over). The observation lists
each seat's hand once per round, privately; the legal moves are read from the game state
(the seat's remaining cards), so the second bidder of a round gets them too.

* ``compact_view``: ``7 w9 +4: A 2 3 5 6 7 8 9 J Q K``: the prize card, what the round is worth
  (the prize plus what ties carried over), the seat's lead in points, and its hand; the
  answer is a card. The generic compact view would show the hand but not the prize.
* ``prize`` bot: bids the card of the prize's own value (always still in its hand: each
  prize comes up once), the classic heuristic for the game.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any

from games.api import GAME, Bot, BotView, GameMessage, PublicBoard
from games.textarena_game import TextArenaExtras

ROUNDS = 13


def _face(value: int) -> str:
    return {1: "A", 11: "J", 12: "Q", 13: "K"}.get(value, str(value))


_PRIZE = re.compile(r"Round (\d+)/13 - Prize: (\w+)\s+\(worth (\d+)\)")
_HAND = re.compile(r"Your remaining hand: (.*)")
_SCORES = re.compile(r"Scores -> ((?:P\d+:-?\d+\s*)+)")
_CARD = re.compile(r"\[(\w+)\]")


Round = tuple[str, int, int, list[str]]
"""The prize card, what the round is worth, the seat's lead, its hand."""


def seat_round(messages: Sequence[GameMessage], seat: int) -> Round | None:
    """The current round as ``seat`` sees it: the prize card, what it is worth, the seat's
    lead in points over the best other seat, and its hand; None before the first prize."""
    prize: tuple[str, int] | None = None
    hand: list[str] = []
    scores: dict[int, int] = {}
    for m in messages:
        if m.sender != GAME:
            continue
        found = _PRIZE.search(m.text)
        if found:
            prize = (found.group(2), int(found.group(3)))
        held = _HAND.search(m.text)
        if held:
            hand = _CARD.findall(held.group(1))
        points = _SCORES.search(m.text)
        if points:
            for part in points.group(1).split():
                who, _, value = part.partition(":")
                scores[int(who[1:])] = int(value)
    if prize is None:
        return None
    others = [v for s, v in scores.items() if s != seat]
    lead = scores.get(seat, 0) - (max(others) if others else 0)
    return prize[0], prize[1], lead, hand


def compact_view(messages: Sequence[GameMessage], seat: int) -> str | None:
    """``7 w9 +4: A 2 3 5 6 7 8 9 J Q K``: prize, worth, the seat's lead, its hand."""
    current = seat_round(messages, seat)
    if current is None:
        return None
    prize, worth, lead, hand = current
    return f"{prize} w{worth} {lead:+d}: {' '.join(hand)}"


class PrizeBot(Bot):
    """Bids the card of the prize's own value (falls back to a random card)."""

    name = "prize"

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def act(self, view: BotView) -> str:
        current = seat_round(view.messages, view.seat)
        legal = view.legal_moves or []
        if current is not None and f"[{current[0]}]" in legal:
            return f"[{current[0]}]"
        return self._rng.choice(legal or ["[A]"])


def legal_moves(env: Any, seat: int) -> list[str] | None:
    """The seat's remaining cards, as ``[A]``, ``[2]``, ..., ``[K]``."""
    gs = env.state.game_state
    if seat in gs.get("pending_bids", {}):
        return None
    return [f"[{_face(card)}]" for card in sorted(gs["player_hands"][seat])]


def board(env: Any) -> PublicBoard:
    """Round, prize card, carried-over pot, scores, and who has bid this round."""
    gs = env.state.game_state
    prize = gs.get("current_prize")
    return PublicBoard(
        kind="cards",
        round=min(int(gs["round"]), ROUNDS),
        scores={seat: float(score) for seat, score in gs["player_scores"].items()},
        cards={"prize": (_face(prize),)} if prize else None,
        to_move=None if env.state.done else int(env.state.current_player_id),
        extra={"carry_pot": int(gs["carry_pot"]), "bid": sorted(gs.get("pending_bids", {}))},
    )


def redraw_hidden(env: Any, seat: int, rng: random.Random) -> bool:
    """Redraw the other seat's pending bid from its hand, and the order of the prizes
    still to come."""
    gs = env.state.game_state
    other = 1 - seat
    changed = False
    bids = gs.get("pending_bids", {})
    if other in bids:
        hand = gs["player_hands"][other]
        hand.append(bids[other])
        bids[other] = hand.pop(rng.randrange(len(hand)))
        changed = True
    upcoming = gs["prize_deck"][int(gs["round"]) :]
    if len(upcoming) > 1:
        rng.shuffle(upcoming)
        gs["prize_deck"][int(gs["round"]) :] = upcoming
        changed = True
    return changed


EXTRAS = TextArenaExtras(
    legal_moves=legal_moves,
    board=board,
    redraw_hidden=redraw_hidden,
    compact_view=compact_view,
    bots={"prize": PrizeBot},
    reward_sum=0.0,
)
