"""High Society, two-player (TextArena ``HighSociety-v0``): moves, board, hidden bids.

Ten prestige cards are auctioned; each auction both seats bid one money card (1-11) in
secret; the higher bid wins the card and spends the money card; a tie re-auctions it.
After a tie the observation lists no moves, so they are read from the game state (the
seat's money cards). Money cards are public knowledge: every spent bid is announced.
"""

from __future__ import annotations

import random
from typing import Any

from games.api import PublicBoard
from games.textarena_game import TextArenaExtras

AUCTIONS = 10


def legal_moves(env: Any, seat: int) -> list[str] | None:
    """The seat's money cards, as ``[1]`` ... ``[11]``."""
    gs = env.state.game_state
    if seat in gs.get("pending_bids", {}):
        return None
    return [f"[{card}]" for card in sorted(gs["player_money"][seat])]


def board(env: Any) -> PublicBoard:
    """Auction number, the prestige card on offer, prestige totals and money cards."""
    gs = env.state.game_state
    prize = gs.get("current_prize")
    return PublicBoard(
        kind="cards",
        round=min(int(gs["round"]), AUCTIONS),
        scores={seat: float(points) for seat, points in gs["player_prestige"].items()},
        cards={"prize": (str(prize),)} if prize is not None else None,
        to_move=None if env.state.done else int(env.state.current_player_id),
        extra={
            "money": {str(seat): sorted(cards) for seat, cards in gs["player_money"].items()},
            "bid": sorted(gs.get("pending_bids", {})),
        },
    )


def redraw_hidden(env: Any, seat: int, rng: random.Random) -> bool:
    """Redraw the other seat's pending bid from its money cards, and the order of the
    prestige cards still to come."""
    gs = env.state.game_state
    other = 1 - seat
    changed = False
    bids = gs.get("pending_bids", {})
    if other in bids:
        bids[other] = rng.choice(gs["player_money"][other])
        changed = True
    deck = gs["prestige_deck"]
    if len(deck) > 1:
        rng.shuffle(deck)
        changed = True
    return changed


EXTRAS = TextArenaExtras(
    legal_moves=legal_moves, board=board, redraw_hidden=redraw_hidden, reward_sum=0.0
)
