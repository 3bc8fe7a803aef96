"""Indian poker (TextArena ``IndianPoker-v0`` and its ``-short`` ... ``-extreme`` variants).

Each round both seats ante 1 and get a card from a 52-card deck; a seat sees only its
opponent's card. The observation lists templates (``'[bet X]'``, ``'[raise X]'``), which
are not moves, so the legal moves are read from the game state instead, with the bet and
raise sizes of ``BET_SIZES`` that the seat can afford.
"""

from __future__ import annotations

import random
from typing import Any

from games.api import PublicBoard
from games.textarena_game import TextArenaExtras

BET_SIZES = (1, 2, 5, 10)
"""The bet and raise amounts offered as legal moves (any positive amount the seat can
afford is legal; these keep the list short)."""
DECK_SIZE = 52


def legal_moves(env: Any, seat: int) -> list[str]:
    """``[check]`` and affordable ``[bet N]``, or ``[call]`` and ``[raise N]`` when facing a
    bet, and ``[fold]`` (TextArena takes a fold at any time); none for a seat that is bust
    (see the module docstring)."""
    gs = env.state.game_state
    to_call = int(gs["highest_bet"]) - int(gs["current_bets"][seat])
    chips = int(gs["player_chips"][seat])
    if chips < 0:
        return []
    if to_call == 0:
        return ["[check]", *(f"[bet {n}]" for n in BET_SIZES if n <= chips), "[fold]"]
    moves = ["[call]"] if to_call <= chips else []
    moves += [f"[raise {n}]" for n in BET_SIZES if to_call + n <= chips]
    return [*moves, "[fold]"]


def board(env: Any) -> PublicBoard:
    """Pot, bankrolls, round, the seat to move and what it must pay to call."""
    gs = env.state.game_state
    to_move = None if env.state.done else int(env.state.current_player_id)
    extra: dict[str, Any] = {"max_rounds": int(env.max_rounds)}
    if to_move is not None:
        extra["to_call"] = int(gs["highest_bet"]) - int(gs["current_bets"][to_move])
    return PublicBoard(
        kind="cards",
        pot=float(gs["pot"]),
        chips={seat: float(chips) for seat, chips in gs["player_chips"].items()},
        round=min(int(gs["current_round"]), int(env.max_rounds)),
        to_move=to_move,
        extra=extra,
    )


def redraw_hidden(env: Any, seat: int, rng: random.Random) -> bool:
    """Deal ``seat`` another card of its own (the one card hidden from it)."""
    cards = env.state.game_state.get("player_cards")
    if not cards:
        return False
    seen = cards[1 - seat]
    cards[seat] = rng.choice([c for c in range(DECK_SIZE) if c != seen])
    return True


EXTRAS = TextArenaExtras(
    legal_moves=legal_moves, board=board, redraw_hidden=redraw_hidden, reward_sum=0.0
)
