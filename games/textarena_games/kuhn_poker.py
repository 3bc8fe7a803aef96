"""Kuhn poker (TextArena ``KuhnPoker-v0`` and its longer variants): what arena knows of the
game (its ``EXTRAS``: moves, boards, hidden-card redraw, compact view, the ``nash`` bot).

The game: a deck of J, Q, K; each player antes 1 and gets one card; the first player may
check or bet 1; facing a check the second player may check (showdown) or bet; facing a bet
a player folds or calls (showdown). TextArena plays ``max_rounds`` such hands (3 for
``KuhnPoker-v0``), alternating who acts first (player 1 starts round 1), and scores the
match +1/-1 by total chips. The cards are private; every bet is public. TextArena 0.7.4
never adds a bet or a call to the pot, so each of its hands is won or lost for the antes
alone (+1/-1 chips) whatever was bet; the solver (``kuhn_solver``) is for Kuhn poker as
defined (a called bet doubles the stakes), the yardstick the literature and OpenSpiel use,
so it measures a policy as a Kuhn poker strategy, not its TextArena results.

* the ``nash`` bot plays ``kuhn_solver.nash_policy``.
* :func:`compact_view`: ``Kpb r2 +1 fold/call`` (the seat's card and the hand's actions,
  the round and the seat's chip lead, the moves), for small models; the generic compact
  view would show only the moves, not the card.
* the yardstick is ``kuhn_yardstick.YARDSTICK``: exploitability measured on real hands.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from games.api import GAME, Bot, BotView, GameMessage, PublicBoard
from games.textarena_game import TextArenaExtras
from games.textarena_games.kuhn_solver import CARDS, nash_policy
from games.textarena_games.kuhn_text import legal_moves, move_text, seat_infoset
from games.textarena_games.kuhn_yardstick import YARDSTICK

_ROUND = re.compile(r"Starting round (\d+) out of")
_SCORES = re.compile(r"Current scores: Player 0: '(-?\d+)'; Player 1: '(-?\d+)'")


def compact_view(messages: Sequence[GameMessage], seat: int) -> str | None:
    """``Kpb r2 +1 fold/call``: the seat's card and the hand's actions so far (``p`` pass,
    ``b`` bet), the round, the seat's chip lead, and the moves it may answer (bare); None
    before its first card."""
    infoset = seat_infoset(messages)
    if infoset is None:
        return None
    round_number = 1
    lead = 0
    for m in messages:
        if m.sender != GAME:
            continue
        found = _ROUND.search(m.text)
        if found:
            round_number = int(found.group(1))
        scores = _SCORES.search(m.text)
        if scores and seat in (0, 1):
            chips = (int(scores.group(1)), int(scores.group(2)))
            lead = chips[seat] - chips[1 - seat]
    moves = "fold/call" if infoset.endswith("b") else "check/bet"
    return f"{infoset} r{round_number} {lead:+d} {moves}"


class NashBot(Bot):
    """Plays :func:`nash_policy` (``alpha`` = 1/6) at the information set it is shown."""

    name = "nash"

    def __init__(self, seed: int, alpha: float = 1 / 6) -> None:
        self._rng = random.Random(seed)
        self._policy = nash_policy(alpha)

    def infoset(self, messages: Sequence[GameMessage]) -> str | None:
        """The information set the seat is at, from its messages (None: unknown)."""
        return seat_infoset(messages)

    def act(self, view: BotView) -> str:
        infoset = self.infoset(view.messages)
        if infoset is None:
            return self._rng.choice(view.legal_moves or ["[check]"])
        bet = self._policy[infoset]["b"]
        action = "b" if self._rng.random() < bet else "p"
        return move_text(infoset[1:], action)


def _history(env: Any) -> str:
    """The current hand's actions, found by where the legal-action tree now points."""
    tree = env.state.game_state.get("current_legal_action_tree")
    root = env.legal_action_tree
    for history, node in (
        ("p", root["check"]),
        ("b", root["bet"]),
        ("pb", root["check"]["bet"]),
    ):
        if tree is node:
            return history
    return ""


def _over(env: Any) -> bool:
    """True once every hand is played. TextArena then deals one more hand it never plays
    (and takes its antes), so the boards leave that hand out."""
    return int(env.state.game_state["current_round"]) > int(env.max_rounds)


def board(env: Any) -> PublicBoard:
    """Pot, chips, round, who acts first this hand, the hand's public bets, and one
    face-down card per seat while a hand is being played."""
    gs = env.state.game_state
    over = _over(env)
    # The unplayed hand swapped who acts first: the last hand's first player is the other.
    first = int(gs["starting_player"]) if not over else 1 - int(gs["starting_player"])
    chips = {seat: float(value) for seat, value in gs["player_chips"].items()}
    history = "" if over else _history(env)
    named = []
    for i, action in enumerate(history):
        seat = first if i % 2 == 0 else 1 - first
        named.append(f"Player {seat}: {move_text(history[:i], action)[1:-1]}")
    if over:  # give back the antes of the hand that is never played
        chips = {seat: value + float(env.ante) for seat, value in chips.items()}
    return PublicBoard(
        kind="cards",
        pot=0.0 if over else float(gs["pot"]),
        chips=chips,
        round=min(int(gs["current_round"]), int(env.max_rounds)),
        to_move=None if env.state.done else int(env.state.current_player_id),
        history=tuple(named),
        face_down=None if over else dict.fromkeys(chips, 1),
        extra={"first_to_act": first, "max_rounds": int(env.max_rounds)},
    )


def full_board(env: Any) -> PublicBoard:
    """``board`` with both cards of the hand being played face up (``seat 0``, ``seat 1``):
    for after the match."""
    public = board(env)
    cards = env.state.game_state.get("player_cards")
    if _over(env) or not cards:
        return public
    faces = {f"seat {seat}": (CARDS[int(card)],) for seat, card in sorted(cards.items())}
    return replace(public, cards=faces, face_down=None)


def redraw_hidden(env: Any, seat: int, rng: random.Random) -> bool:
    """Deal the other seat another card that ``seat`` does not hold."""
    gs = env.state.game_state
    cards = gs.get("player_cards")
    if not cards:
        return False
    other = 1 - seat
    choices = [c for c in range(3) if c != cards[seat]]
    cards[other] = rng.choice(choices)
    env.deck = [cards[0], cards[1], next(c for c in range(3) if c not in (cards[0], cards[1]))]
    return True


EXTRAS = TextArenaExtras(
    bots={"nash": NashBot},
    legal_moves=legal_moves,
    board=board,
    full_board=full_board,
    redraw_hidden=redraw_hidden,
    public_moves=True,
    yardstick=YARDSTICK,
    compact_view=compact_view,
    reward_sum=0.0,
)
