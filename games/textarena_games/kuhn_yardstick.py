"""Measuring a text policy on real Kuhn poker hands, and the game's yardstick.

:func:`infoset_views` plays real TextArena hands up to each information set and
:func:`measure_policy` samples a text policy there, to measure a model's probabilities.
``YARDSTICK`` is exploitability (lower is better, ``games.textarena_games.kuhn_solver``)
from ``YARDSTICK_SAMPLES`` answers at each information set's probe (:func:`probes`), or
exactly from a model's probability of each move there (:func:`probability_figures`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from games.api import GameMessage, Probe, Yardstick
from games.session import GameSession
from games.textarena_game import TextArenaExtras, TextArenaGame
from games.textarena_games.kuhn_solver import ACTIONS, CARDS, DECISIONS, INFOSETS, exploitability
from games.textarena_games.kuhn_text import legal_moves, move_text, read_action, seat_infoset
from games.textarena_specs import textarena_id


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
    happen with TextArena's shuffle), the game is not a listed TextArena game, or it does
    not behave as Kuhn poker.
    """
    found: dict[str, InfosetView] = {}
    for history in DECISIONS:
        for card in CARDS:
            infoset = card + history
            for seed in range(MAX_SEED_SEARCH):
                view = _play_to(game_id, seed, history, card)
                if view is not None:
                    found[infoset] = view
                    break
            else:
                raise ValueError(f"no seed below {MAX_SEED_SEARCH} reaches {infoset}")
    return found


_HAND_EXTRAS = TextArenaExtras(legal_moves=legal_moves)
"""What a probe hand needs beyond TextArena's rules: the moves legal now, as the game's
own extras (``kuhn_poker.EXTRAS``) read them."""


def _hand(game_id: str, seed: int) -> GameSession:
    """A started two-seat hand of TextArena's ``game_id`` dealt by ``seed``."""
    game = TextArenaGame(textarena_id(game_id), game_id, _HAND_EXTRAS)
    session = GameSession(game, game_id, 2, seed)
    session.start()
    return session


def _play_to(game_id: str, seed: int, history: str, card: str) -> InfosetView | None:
    session = _hand(game_id, seed)
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
