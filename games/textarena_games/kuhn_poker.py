"""Kuhn poker (TextArena ``KuhnPoker-v0`` and its longer variants): moves, board, solver.

The game: a deck of J, Q, K; each player antes 1 and gets one card; the first player may
check or bet 1; facing a check the second player may check (showdown) or bet; facing a bet
a player folds or calls (showdown). TextArena plays ``max_rounds`` such hands (3 for
``KuhnPoker-v0``), alternating who acts first (player 1 starts round 1), and scores the
match +1/-1 by total chips. The cards are private; every bet is public. TextArena 0.7.4
never adds a bet or a call to the pot, so each of its hands is won or lost for the antes
alone (+1/-1 chips) whatever was bet; the solver below is for Kuhn poker as defined (a
called bet doubles the stakes), the yardstick the literature and OpenSpiel use, so it
measures a policy as a Kuhn poker strategy, not its TextArena results.

Solver (one hand, chips as payoff): an *information set* is a card and the hand's action
history, written ``"<card><history>"`` with ``p`` for pass (check or fold) and ``b`` for
bet (bet or call). The first player acts at ``J``, ``Q``, ``K`` and ``Jpb``, ``Qpb``,
``Kpb``; the second at ``Jp``, ``Jb``, ``Qp``, ``Qb``, ``Kp``, ``Kb``: 12 in all. A policy
maps each information set to its action probabilities (``{"p": 0.7, "b": 0.3}``; the words
``check``/``fold`` and ``bet``/``call`` are accepted for ``p`` and ``b``).

* :func:`exploitability`: exactly how much a best response gains against a policy,
  averaged over the two positions (OpenSpiel's ``exploitability``: NashConv / 2).
  0 exactly for the Nash equilibria, :func:`nash_policy` (``alpha`` in [0, 1/3]).
* :func:`policy_value`: the first player's expected chips (-1/18 at any equilibrium).
* :func:`infoset_views` and :func:`measure_policy`: play real TextArena hands up to each
  information set and sample a text policy there, to measure a model's probabilities.
* the ``nash`` bot plays :func:`nash_policy`.
* :func:`compact_view`: ``Kpb r2 +1 fold/call`` (the seat's card and the hand's actions,
  the round and the seat's chip lead, the moves), for small models; the generic compact
  view would show only the moves, not the card.
* ``YARDSTICK``: the game's yardstick, exploitability (lower is better) from
  ``YARDSTICK_SAMPLES`` answers at each information set's probe (:func:`probes`), or
  exactly from a model's probability of each move there (:func:`probability_figures`).
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from games.api import GAME, Bot, BotView, GameMessage, Probe, PublicBoard, Yardstick
from games.textarena_game import TextArenaExtras

CARDS = ("J", "Q", "K")
"""Lowest to highest."""
ACTIONS = ("p", "b")
"""Pass (check or fold) and bet (bet or call)."""
DECISIONS = ("", "p", "b", "pb")
"""The action histories at which someone must act; the first player acts at even lengths."""
INFOSETS = tuple(card + history for history in DECISIONS for card in CARDS)
"""The 12 information sets, ``J Q K Jp Qp Kp Jb Qb Kb Jpb Qpb Kpb``."""
GAME_VALUE = Fraction(-1, 18)
"""The first player's expected chips per hand under any Nash equilibrium."""
PROBABILITY_TOLERANCE = 1e-6
"""How far a policy's probabilities at an information set may sum from 1."""

_TERMINAL = ("pp", "bp", "bb", "pbp", "pbb")
_WORDS = {"p": "p", "b": "b", "check": "p", "fold": "p", "bet": "b", "call": "b"}

Policy = Mapping[str, Mapping[str, float]]
"""Information set -> action (``p``/``b`` or a TextArena word) -> probability."""


# -- the solver ---------------------------------------------------------------------------
def _normalise(policy: Policy) -> dict[str, dict[str, float]]:
    """``policy`` with ``p``/``b`` keys at all 12 information sets; raises ValueError."""
    missing = [infoset for infoset in INFOSETS if infoset not in policy]
    if missing:
        raise ValueError(f"the policy has no probabilities at {', '.join(missing)}")
    unknown = [key for key in policy if key not in INFOSETS]
    if unknown:
        raise ValueError(
            f"unknown information sets {', '.join(map(repr, unknown))}; "
            f"they are {' '.join(INFOSETS)}"
        )
    out: dict[str, dict[str, float]] = {}
    for infoset in INFOSETS:
        probs = {"p": 0.0, "b": 0.0}
        for action, probability in policy[infoset].items():
            key = _WORDS.get(str(action).lower())
            if key is None:
                raise ValueError(f"{infoset}: unknown action {action!r}; use p/b")
            value = float(probability)
            if not value >= 0.0:  # also refuses NaN
                raise ValueError(f"{infoset}: probability of {action!r} is {value}, not >= 0")
            probs[key] += value
        if abs(probs["p"] + probs["b"] - 1.0) > PROBABILITY_TOLERANCE:
            raise ValueError(f"{infoset}: probabilities sum to {probs['p'] + probs['b']}, not 1")
        out[infoset] = probs
    return out


def _payoff(cards: tuple[int, int], history: str) -> int:
    """Chips the first player wins at a terminal ``history``."""
    if history == "bp":
        return 1
    if history == "pbp":
        return -1
    stake = 1 if history == "pp" else 2
    return stake if cards[0] > cards[1] else -stake


def _value(
    player: int,
    cards: tuple[int, int],
    history: str,
    policy: dict[str, dict[str, float]],
    response: Mapping[str, str],
) -> float:
    """``player``'s expected chips below ``history``, it playing ``response`` (pure
    actions at its information sets), the other seat playing ``policy``."""
    if history in _TERMINAL:
        payoff = _payoff(cards, history)
        return float(payoff if player == 0 else -payoff)
    mover = len(history) % 2
    infoset = CARDS[cards[mover]] + history
    if mover == player:
        return _value(player, cards, history + response[infoset], policy, response)
    return sum(
        policy[infoset][a] * _value(player, cards, history + a, policy, response)
        for a in ACTIONS
        if policy[infoset][a] > 0.0
    )


def _reach(other: int, other_card: int, history: str, policy: dict[str, dict[str, float]]) -> float:
    """Probability that seat ``other`` holding ``other_card`` played its part of ``history``."""
    probability = 1.0
    for i, action in enumerate(history):
        if i % 2 == other:
            probability *= policy[CARDS[other_card] + history[:i]][action]
    return probability


def best_response(policy: Policy, player: int) -> tuple[dict[str, str], float]:
    """A best response of ``player`` (0: first to act, 1: second) to ``policy``, as the pure
    action at each of its information sets, and its expected chips per hand.

    Raises ValueError for an incomplete or malformed policy.
    """
    if player not in (0, 1):
        raise ValueError(f"player is 0 (first to act) or 1, not {player}")
    probs = _normalise(policy)
    mine = [h for h in DECISIONS if len(h) % 2 == player]
    response: dict[str, str] = {}
    # Deepest first: a choice's value depends on the choices below it.
    for history in sorted(mine, key=len, reverse=True):
        for card in range(3):
            values = {}
            for action in ACTIONS:
                total = 0.0
                for other_card in range(3):
                    if other_card == card:
                        continue
                    cards = (card, other_card) if player == 0 else (other_card, card)
                    weight = _reach(1 - player, other_card, history, probs)
                    if weight:
                        total += weight * _value(player, cards, history + action, probs, response)
                values[action] = total
            # Ties go to pass, so the response is deterministic.
            response[CARDS[card] + history] = "b" if values["b"] > values["p"] else "p"
    deals = [(a, b) for a in range(3) for b in range(3) if a != b]
    value = sum(_value(player, cards, "", probs, response) for cards in deals) / len(deals)
    return response, value


def policy_value(policy: Policy) -> float:
    """The first player's expected chips per hand when both positions play ``policy``."""
    probs = _normalise(policy)

    def value(cards: tuple[int, int], history: str) -> float:
        if history in _TERMINAL:
            return float(_payoff(cards, history))
        infoset = CARDS[cards[len(history) % 2]] + history
        return sum(probs[infoset][a] * value(cards, history + a) for a in ACTIONS)

    deals = [(a, b) for a in range(3) for b in range(3) if a != b]
    return sum(value(cards, "") for cards in deals) / len(deals)


def exploitability(policy: Policy) -> float:
    """How much a best response gains against ``policy``, averaged over the two positions:
    ``(BR_first + BR_second) / 2`` in chips per hand (the game is zero-sum, so this is
    NashConv / 2). 0 exactly at a Nash equilibrium; 1 for always-pass; 1/3 for always-bet.

    Raises ValueError for an incomplete or malformed policy.
    """
    _, first = best_response(policy, 0)
    _, second = best_response(policy, 1)
    return (first + second) / 2


def nash_policy(alpha: float = 0.0) -> dict[str, dict[str, float]]:
    """A Nash equilibrium (Kuhn 1950): the first player bets J with ``alpha``, K with
    ``3 * alpha``, never Q, and calls a bet with Q with ``alpha + 1/3``; the second player
    bets J after a check with 1/3, calls with Q with 1/3, always bets and calls with K.

    Raises ValueError unless 0 <= alpha <= 1/3.
    """
    if not 0.0 <= alpha <= 1.0 / 3.0:
        raise ValueError(f"alpha must be in [0, 1/3], not {alpha}")
    bet = {
        "J": alpha,
        "Q": 0.0,
        "K": 3 * alpha,
        "Jp": 1 / 3,
        "Qp": 0.0,
        "Kp": 1.0,
        "Jb": 0.0,
        "Qb": 1 / 3,
        "Kb": 1.0,
        "Jpb": 0.0,
        "Qpb": alpha + 1 / 3,
        "Kpb": 1.0,
    }
    return {infoset: {"p": 1.0 - b, "b": b} for infoset, b in bet.items()}


def constant_policy(bet: float) -> dict[str, dict[str, float]]:
    """Bet (or call) with probability ``bet`` everywhere: 0 always passes, 1 always bets,
    0.5 is uniform random."""
    if not 0.0 <= bet <= 1.0:
        raise ValueError(f"bet must be a probability, not {bet}")
    return {infoset: {"p": 1.0 - bet, "b": bet} for infoset in INFOSETS}


# -- reading a seat's hand from its messages ---------------------------------------------
_CARD = re.compile(r"Your card is: '([JQK])'")
_MOVE = re.compile(r"Player (\d+), submitted move: '\[(check|bet|fold|call)\]'")
_TEXT_ACTION = re.compile(r"\[(check|bet|fold|call)\]", re.IGNORECASE)


def seat_infoset(messages: Sequence[GameMessage]) -> str | None:
    """The information set of the seat whose messages these are, in the current hand
    (its card and the hand's history so far), or None before its first card."""
    card: str | None = None
    history = ""
    for m in messages:
        if m.sender != GAME:
            continue
        found = _CARD.search(m.text)
        if found:
            card, history = found.group(1), ""
            continue
        move = _MOVE.search(m.text)
        if move and card is not None:
            history += _WORDS[move.group(2)]
    if card is None or history in _TERMINAL:
        return None
    return card + history


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


def move_text(history: str, action: str) -> str:
    """TextArena's move for ``action`` (``p``/``b``) after ``history``."""
    facing_bet = history.endswith("b")
    if action == "p":
        return "[fold]" if facing_bet else "[check]"
    return "[call]" if facing_bet else "[bet]"


def read_action(text: str, infoset: str) -> str | None:
    """``p`` or ``b`` for a move text that is legal at ``infoset``, else None."""
    found = _TEXT_ACTION.search(text)
    if not found:
        return None
    word = found.group(1).lower()
    facing_bet = infoset.endswith("b")
    if facing_bet != (word in ("fold", "call")):
        return None
    return _WORDS[word]


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


# -- measuring a text policy on real hands --------------------------------------------------
@dataclass(frozen=True)
class InfosetView:
    """What a seat is shown at one information set of a real TextArena hand."""

    infoset: str
    seat: int
    messages: tuple[GameMessage, ...]
    """Every message the seat received so far (its card included)."""
    legal_moves: tuple[str, ...]
    seed: int
    """The game seed that dealt this hand."""


MAX_SEED_SEARCH = 500
"""Seeds tried to find a deal for each information set."""


def infoset_views(game_id: str = "KuhnPoker-v0") -> dict[str, InfosetView]:
    """One real hand per information set, played in round 1 of ``game_id`` up to it.

    Raises ValueError when no seed below ``MAX_SEED_SEARCH`` deals some card (it cannot
    happen with TextArena's shuffle) or the game does not behave as Kuhn poker.
    """
    from games.registry import make

    found: dict[str, InfosetView] = {}
    for history in DECISIONS:
        for card in CARDS:
            infoset = card + history
            for seed in range(MAX_SEED_SEARCH):
                view = _play_to(game_id, seed, history, card, make)
                if view is not None:
                    found[infoset] = view
                    break
            else:
                raise ValueError(f"no seed below {MAX_SEED_SEARCH} reaches {infoset}")
    return found


def _play_to(
    game_id: str, seed: int, history: str, card: str, make: Callable[..., Any]
) -> InfosetView | None:
    session = make(game_id, 2, seed=seed)
    try:
        for i, action in enumerate(history):
            seat = session.current_player()
            session.step(seat, move_text(history[:i], action))
        seat = session.current_player()
        messages = session.seat_messages(seat)
        if seat_infoset(messages) != card + history:
            return None
        legal = tuple(session.legal_moves(seat) or ())
        return InfosetView(card + history, seat, tuple(messages), legal, seed)
    finally:
        session.close()


@dataclass(frozen=True)
class MeasuredPolicy:
    """A text policy's action frequencies at the 12 information sets."""

    probabilities: dict[str, dict[str, float]]
    """Information set -> ``{"p": ..., "b": ...}`` over the legal answers; uniform where
    every answer was illegal (see ``invalid``)."""
    invalid: dict[str, float]
    """Information set -> share of answers that were not a legal move there."""
    samples: int
    """Answers drawn at each information set."""


def measure_policy(
    policy: Callable[[InfosetView], str],
    samples: int = 32,
    game_id: str = "KuhnPoker-v0",
    views: Mapping[str, InfosetView] | None = None,
) -> MeasuredPolicy:
    """Ask ``policy`` for ``samples`` answers at each information set of a real hand and
    count them. ``policy`` gets what the seat is shown and returns its move text (a model
    behind a renderer and sampler, say); feed ``probabilities`` to :func:`exploitability`.

    Raises ValueError when ``samples`` < 1.
    """
    if samples < 1:
        raise ValueError("samples must be at least 1")
    views = views if views is not None else infoset_views(game_id)
    probabilities: dict[str, dict[str, float]] = {}
    invalid: dict[str, float] = {}
    for infoset in INFOSETS:
        counts = {"p": 0, "b": 0}
        bad = 0
        for _ in range(samples):
            action = read_action(policy(views[infoset]), infoset)
            if action is None:
                bad += 1
            else:
                counts[action] += 1
        valid = counts["p"] + counts["b"]
        probabilities[infoset] = (
            {a: counts[a] / valid for a in ACTIONS} if valid else {"p": 0.5, "b": 0.5}
        )
        invalid[infoset] = bad / samples
    return MeasuredPolicy(probabilities, invalid, samples)


YARDSTICK_SAMPLES = 1024
"""Answers drawn at each information set by the yardstick. Sampling noise of the measured
exploitability (its standard deviation over repeated measurements of a fixed policy, by
simulation): 0.062 at 32 samples, 0.022 at 256, 0.010 at 1,024 for uniform play (0.458);
0.003 at 1,024 near an equilibrium, where sampling also adds a bias of about +0.007 (a
measured mixed strategy is never exactly the equilibrium)."""


@functools.cache
def probes(game_id: str = "KuhnPoker-v0") -> dict[str, Probe]:
    """The yardstick's positions: one real hand per information set (``infoset_views``)."""
    return {
        infoset: Probe(infoset, view.seat, view.messages, view.legal_moves)
        for infoset, view in infoset_views(game_id).items()
    }


def yardstick_figures(answers: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """Exploitability of the policy whose move texts at each information set these are
    (answers that are no legal move there are left out of its frequencies and counted in
    ``invalid_rate``; an information set without a legal answer counts as uniform), and
    the policy: ``bet/<infoset>``, how often it bets or calls there."""
    counts: dict[str, dict[str, float]] = {}
    bad = total = 0
    for infoset in INFOSETS:
        texts = answers[infoset]
        read = [read_action(text, infoset) for text in texts]
        counts[infoset] = {a: float(read.count(a)) for a in ACTIONS}
        bad += len(texts) - sum(1 for action in read if action is not None)
        total += len(texts)
    return {
        **_policy_figures(counts),
        "invalid_rate": bad / total if total else 0.0,
    }


def probability_figures(moves: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """``yardstick_figures`` from a policy's exact probabilities: at each information set
    the probability it gives each legal move (move text -> probability; a model's
    probability of that move's answer), normalised over the legal moves (uniform where
    they have none); and ``legal_mass``, the probability on legal moves averaged over the
    information sets (the rest is answers that are no legal move)."""
    weights: dict[str, dict[str, float]] = {}
    mass = 0.0
    for infoset in INFOSETS:
        weights[infoset] = {a: 0.0 for a in ACTIONS}
        for text, probability in moves[infoset].items():
            action = read_action(text, infoset)
            if action is not None:
                weights[infoset][action] += float(probability)
        mass += sum(weights[infoset].values())
    return {**_policy_figures(weights), "legal_mass": mass / len(INFOSETS)}


def _policy_figures(weights: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Exploitability of the policy that plays each action in proportion to ``weights``
    (answer counts or probabilities; uniform at an information set without any), and
    ``bet/<infoset>``: how often it bets or calls there."""
    probabilities: dict[str, dict[str, float]] = {}
    for infoset in INFOSETS:
        total = sum(weights[infoset].values())
        probabilities[infoset] = (
            {a: weights[infoset][a] / total for a in ACTIONS}
            if total > 0.0
            else {a: 0.5 for a in ACTIONS}
        )
    return {
        "exploitability": exploitability(probabilities),
        # the policy itself: how often it bets or calls at each information set
        **{f"bet/{infoset}": probabilities[infoset]["b"] for infoset in INFOSETS},
    }


YARDSTICK = Yardstick(
    figure="exploitability",
    higher_is_better=False,
    probes=probes,
    from_answers=yardstick_figures,
    samples=YARDSTICK_SAMPLES,
    from_probabilities=probability_figures,
)


# -- live-game hooks ------------------------------------------------------------------------
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


def legal_moves(env: Any, seat: int) -> list[str] | None:
    """The moves of the current node of the hand, as ``[check]``, ``[bet]``, ..."""
    tree = env.state.game_state.get("current_legal_action_tree")
    if not isinstance(tree, dict):
        return None
    return [f"[{move}]" for move in tree]


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
