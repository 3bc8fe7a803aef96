"""What the checks of one game share as they run: the episodes played, the endings seen,
what copies of the game turned up, and each check's result."""

from __future__ import annotations

from collections.abc import Callable

from games.api import Game, GameSpec
from games.conformance.episodes import Episode, EpisodeRunner
from games.conformance.report import CheckResult, CheckStatus
from games.session import GameSession, Status


class KitState:
    """The state every concern of the kit reads and adds to (the base of the kit's parts:
    ``games.conformance.kit.Kit``)."""

    def __init__(self, spec: GameSpec, factory: Callable[[], Game], runner: EpisodeRunner) -> None:
        self.spec = spec
        self.factory = factory
        self.runner = runner
        self.results: dict[str, CheckResult] = {}
        self.episodes: list[Episode] = []
        self.endings: list[tuple[str, Status, dict[int, float]]] = []
        self.forks: dict[str, list[str]] = {
            "legal": [],
            "invalid": [],
            "raised": [],
            "hidden": [],
            "resample": [],
        }
        self.fork_checks = {"legal": 0, "invalid": 0, "illegal": 0, "hidden": 0, "compared": 0}
        self.spectators_see_moves = spec.public_moves or not spec.hidden_information
        """What the game is registered with: spectators of a live match see its moves (as
        soon as they are played, or once their simultaneous round is over)."""
        self.private_echoes: list[str] = []
        """Moves the game echoed to single seats only (where spectators would see them)."""

    def result(self, name: str, status: CheckStatus, detail: str = "") -> None:
        """Set the result of check ``name``."""
        self.results[name] = CheckResult(name, status, detail)

    def note_ending(self, session: GameSession, what: str) -> None:
        """Keep how ``session`` ended (unless aborted), for the rewards check."""
        outcome = session.outcome
        if outcome is not None and outcome.status is not Status.ABORTED:
            self.endings.append((what, outcome.status, dict(outcome.rewards)))
