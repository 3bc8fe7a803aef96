"""A match's limits and rules, every clock included: what the session enforces (action
length, moves, the game's own calls, invalid moves) and what the coordinator does (the
move clock, the join timeout). One frozen value, carried whole."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

DEFAULT_MOVE_TIMEOUT_S = 120.0
"""How long any seat may take to answer, by default."""
DEFAULT_JOIN_TIMEOUT_S = 10.0
"""How long a learner seat may take to join (ask for its first turn) once its game needs it,
by default. Every driver starts all envs of a group together, so a seat that has not joined
by then never will (for example the unused seats of a group that a retry strategy built
only to take one env from): the match is aborted instead of waiting for it."""


class InvalidMovePolicy(StrEnum):
    """What an invalid move costs."""

    FORFEIT = "forfeit"
    """The first invalid move loses the game (the default: a clean training signal)."""
    RETRY = "retry"
    """TextArena's rule: ``retry_allowance`` invalid moves in a row may be retried."""


@dataclass(frozen=True)
class SessionLimits:
    """Limits and rules a session enforces. Every field has a safe default."""

    max_action_chars: int = 2_000
    """Longer actions are cut to this many characters before the game sees them."""
    max_turns: int = 1_000
    """Moves applied (valid or not) before the game is stopped as a draw ("truncated")."""
    step_timeout_s: float | None = 5.0
    """Wall time one call into the game may take; past it the game is aborted."""
    reset_timeout_s: float | None = 30.0
    """Wall time the game's set-up may take (some puzzles take seconds to generate)."""
    invalid_move_policy: InvalidMovePolicy | str = InvalidMovePolicy.FORFEIT
    retry_allowance: int = 1
    """Invalid moves in a row a seat may retry under the ``retry`` policy."""
    invalid_move_penalty: float = -1.0
    """Final reward of a seat that lost by invalid moves (overrides the game's)."""
    move_timeout_s: float | None = DEFAULT_MOVE_TIMEOUT_S
    """How long any seat may take to answer before the match is aborted (the coordinator's
    move clock)."""
    join_timeout_s: float | None = DEFAULT_JOIN_TIMEOUT_S
    """How long a learner seat may take to start (``initial_observation()``) once its game
    needs it before the match is aborted: a seat no driver plays never blocks its game."""

    def __post_init__(self) -> None:
        if self.max_action_chars < 1:
            raise ValueError("max_action_chars must be at least 1")
        if self.max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        for name in ("step_timeout_s", "reset_timeout_s", "move_timeout_s", "join_timeout_s"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive (or None for no limit)")
        if self.retry_allowance < 0:
            raise ValueError("retry_allowance must be 0 or more")
        object.__setattr__(self, "invalid_move_policy", InvalidMovePolicy(self.invalid_move_policy))

    @property
    def allowance(self) -> int:
        """Invalid moves in a row a seat may retry under this policy."""
        if self.invalid_move_policy == InvalidMovePolicy.FORFEIT:
            return 0
        return self.retry_allowance
