"""Game of Pure Strategy (TextArena ``GameOfPureStrategy-v0``): moves, board, hidden bids.

Thirteen rounds; each reveals a prize card and both seats bid one card of their own A-K
in secret; the higher bid takes the prize (ties carry it over). The observation lists
each seat's hand once per round, privately; the legal moves are read from the game state
(the seat's remaining cards), so the second bidder of a round gets them too.
"""

from __future__ import annotations

import random
from typing import Any

from games.api import PublicBoard
from games.textarena_game import TextArenaExtras

ROUNDS = 13


def _face(value: int) -> str:
    return {1: "A", 11: "J", 12: "Q", 13: "K"}.get(value, str(value))


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
    legal_moves=legal_moves, board=board, redraw_hidden=redraw_hidden, reward_sum=0.0
)
