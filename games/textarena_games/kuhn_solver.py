"""Kuhn poker's solver: exact best responses, exploitability and Nash equilibria of a
policy, for one hand of Kuhn poker as defined (a called bet doubles the stakes), the
yardstick the literature and OpenSpiel use. TextArena 0.7.4's ``KuhnPoker-v0`` never adds
a bet or a call to the pot (see ``games.textarena_games.kuhn_poker``), so this measures a
policy as a Kuhn poker strategy, not its TextArena results.

One hand, chips as payoff: an *information set* is a card and the hand's action history,
written ``"<card><history>"`` with ``p`` for pass (check or fold) and ``b`` for bet (bet or
call). The first player acts at ``J``, ``Q``, ``K`` and ``Jpb``, ``Qpb``, ``Kpb``; the
second at ``Jp``, ``Jb``, ``Qp``, ``Qb``, ``Kp``, ``Kb``: 12 in all. A policy maps each
information set to its action probabilities (``{"p": 0.7, "b": 0.3}``; the words
``check``/``fold`` and ``bet``/``call`` are accepted for ``p`` and ``b``).

* :func:`exploitability`: exactly how much a best response gains against a policy,
  averaged over the two positions (OpenSpiel's ``exploitability``: NashConv / 2).
  0 exactly for the Nash equilibria, :func:`nash_policy` (``alpha`` in [0, 1/3]).
* :func:`policy_value`: the first player's expected chips (-1/18 at any equilibrium).
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

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

TERMINAL = ("pp", "bp", "bb", "pbp", "pbb")
"""The action histories that end a hand."""
ACTION_WORDS = {"p": "p", "b": "b", "check": "p", "fold": "p", "bet": "b", "call": "b"}
"""A policy's action (``p``/``b``) or TextArena's word for it -> ``p`` or ``b``."""

Policy = Mapping[str, Mapping[str, float]]
"""Information set -> action (``p``/``b`` or a TextArena word) -> probability."""


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
            key = ACTION_WORDS.get(str(action).lower())
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
    if history in TERMINAL:
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
        if history in TERMINAL:
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
