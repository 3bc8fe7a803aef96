"""The built-in model's training defaults by game family (``FAMILY_DEFAULTS``): which
family a game is in, and the settings measured for each. ``TrainConfig`` falls back on
them for a setting left unset. Cheap to import (the CLI's help reads it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from games.registry import get_spec

DEFAULT_LOCAL_KL = 0.1
"""The sampled KL penalty's coefficient for the built-in model where its game family does
not use the exact KL (see ``TrainConfig.kl_penalty_coef``)."""

GameFamily = Literal["imperfect", "perfect"]


@dataclass(frozen=True)
class FamilyDefaults:
    """The built-in model's settings for one family of games, chosen from what was
    measured (docs/benchmarks.md, "Self-play that settles")."""

    learning_rate: float
    kl_reverse_coef: float
    kl_forward_coef: float
    magnet_rate: float
    kl_penalty_coef: float
    ppo_epochs: int


FAMILY_DEFAULTS: dict[str, FamilyDefaults] = {
    # Hidden cards or simultaneous moves (Kuhn poker, Goofspiel): self-play circles around
    # the equilibrium unless pulled toward a slowly moving magnet.
    "imperfect": FamilyDefaults(
        learning_rate=3e-4,
        kl_reverse_coef=0.2,
        kl_forward_coef=0.1,
        magnet_rate=0.002,
        kl_penalty_coef=0.0,
        ppo_epochs=1,
    ),
    # Perfect information (tic-tac-toe, Connect Four): a weaker pull (the table screen
    # learned most with it); the network's step stays 3e-4 (at 1e-3 its play swung).
    "perfect": FamilyDefaults(
        learning_rate=3e-4,
        kl_reverse_coef=0.02,
        kl_forward_coef=0.02,
        magnet_rate=0.002,
        kl_penalty_coef=0.0,
        ppo_epochs=1,
    ),
}
"""The built-in model's defaults by game family (``game_family``); other models keep the
plain defaults (no exact KL, the learning rate 3e-4), not measured."""


def game_family(game_id: str) -> GameFamily:
    """``imperfect`` for a game with hidden information or simultaneous moves, else
    ``perfect``."""
    spec = get_spec(game_id)
    return "imperfect" if spec.hidden_information or spec.simultaneous else "perfect"
